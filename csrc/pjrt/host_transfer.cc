#include "pjrt/host_transfer.h"

#include "pjrt/internal.h"

namespace tpu::pjrt {

std::shared_ptr<Buffer> buffer_from_host_zero_copy(const Client& client, const void* data,
                                                   PJRT_Buffer_Type type,
                                                   const std::vector<int64_t>& dims, int device,
                                                   std::function<void()> done) {
  // The buffer may alias `data`; the runtime promises never to write it (no
  // donated output lands in it), so the memory is the caller's again exactly
  // when done_with_host_buffer fires.
  PJRT_Event* done_with_host = nullptr;
  auto buffer = detail::upload_host_buffer(client, data, type, dims, device,
                                           PJRT_HostBufferSemantics_kImmutableZeroCopy,
                                           &done_with_host);
  if (done_with_host == nullptr) {
    done();
  } else {
    Event(client.shared_from_this(), done_with_host).on_ready(std::move(done));
  }
  return buffer;
}

std::unique_ptr<Event> copy_raw_to_host(const Client& client, const Buffer& buf, void* dst,
                                        int64_t offset, int64_t size) {
  const PJRT_Api* api = client.api();
  if (api->PJRT_Buffer_CopyRawToHost == nullptr) return nullptr;
  TPU_PJRT_ARGS(PJRT_Buffer_CopyRawToHost_Args, args);
  args.buffer = buf.raw();
  args.dst = dst;
  args.offset = offset;
  args.transfer_size = size;
  PJRT_Error* err = api->PJRT_Buffer_CopyRawToHost(&args);
  if (err != nullptr) {
    TPU_PJRT_ARGS(PJRT_Error_GetCode_Args, code);
    code.error = err;
    bool unimplemented = api->PJRT_Error_GetCode != nullptr &&
                         api->PJRT_Error_GetCode(&code) == nullptr &&
                         code.code == PJRT_Error_Code_UNIMPLEMENTED;
    if (unimplemented) {
      detail::destroy_error(api, err);
      return nullptr;
    }
    check(api, err, "copying part of a buffer to host");
  }
  return std::make_unique<Event>(client.shared_from_this(), args.event);
}

HostView host_view(const Client& client, const Buffer& buf) {
  const PJRT_Api* api = client.api();
  if (client.platform_name() != "cpu" || api->PJRT_Buffer_IncreaseExternalReferenceCount == nullptr ||
      api->PJRT_Buffer_DecreaseExternalReferenceCount == nullptr ||
      api->PJRT_Buffer_OpaqueDeviceMemoryDataPointer == nullptr)
    return {};
  TPU_PJRT_ARGS(PJRT_Buffer_IncreaseExternalReferenceCount_Args, inc);
  inc.buffer = buf.raw();
  PJRT_Error* err = api->PJRT_Buffer_IncreaseExternalReferenceCount(&inc);
  if (err != nullptr) {
    detail::destroy_error(api, err);
    return {};
  }
  auto self = client.shared_from_this();
  PJRT_Buffer* raw = buf.raw();
  // Released with the view; the Client (and so the plugin) outlives it.
  std::shared_ptr<void> hold(raw, [self, api](void* b) {
    TPU_PJRT_ARGS(PJRT_Buffer_DecreaseExternalReferenceCount_Args, dec);
    dec.buffer = static_cast<PJRT_Buffer*>(b);
    PJRT_Error* e = api->PJRT_Buffer_DecreaseExternalReferenceCount(&dec);
    if (e != nullptr) detail::destroy_error(api, e);
  });
  TPU_PJRT_ARGS(PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args, ptr);
  ptr.buffer = raw;
  err = api->PJRT_Buffer_OpaqueDeviceMemoryDataPointer(&ptr);
  if (err != nullptr) {
    detail::destroy_error(api, err);
    return {};
  }
  return HostView{ptr.device_memory_ptr, std::move(hold)};
}

std::unique_ptr<Event> start_copy_to_host(const Client& client, const Buffer& buf, void* dst,
                                          size_t nbytes) {
  const PJRT_Api* api = client.api();
  // The size query first (dst == nullptr): a mismatch would otherwise be a
  // silent overrun or a partial copy.
  TPU_PJRT_ARGS(PJRT_Buffer_ToHostBuffer_Args, query);
  query.src = buf.raw();
  query.dst = nullptr;
  TPU_PJRT_CALL(api, PJRT_Buffer_ToHostBuffer, query, "PJRT_Buffer_ToHostBuffer (size query)");
  auto self = client.shared_from_this();
  if (query.event != nullptr) Event unused(self, query.event);  // not expected; just free it
  if (query.dst_size != nbytes)
    throw Error(PJRT_Error_Code_INVALID_ARGUMENT,
                "to_host: destination holds " + std::to_string(nbytes) +
                    " bytes but the buffer needs " + std::to_string(query.dst_size));
  if (nbytes == 0) return nullptr;  // nothing to copy
  TPU_PJRT_ARGS(PJRT_Buffer_ToHostBuffer_Args, args);
  args.src = buf.raw();
  args.dst = dst;
  args.dst_size = nbytes;
  TPU_PJRT_CALL(api, PJRT_Buffer_ToHostBuffer, args, "copying buffer to host");
  return std::make_unique<Event>(self, args.event);
}

}  // namespace tpu::pjrt
