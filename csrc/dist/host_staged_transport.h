// The host-staged transport: flush pending work, copy every input to the host,
// run the collective through a Gloo process group built on the same store
// (PyTorch's own, handed over from Python), copy the results back.
#pragma once

#include "dist/transport.h"

namespace tpu::dist {

std::unique_ptr<Transport> make_host_staged_transport(c10::intrusive_ptr<c10d::Backend> gloo,
                                                      std::string group);

}  // namespace tpu::dist
