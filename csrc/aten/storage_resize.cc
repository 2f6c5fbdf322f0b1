// Resizing a tpu storage in place: UntypedStorage.resize_ (through the hooks'
// resizePrivateUse1Bytes) and Tensor.resize_ when it grows.
//
// FSDP2 frees an unsharded parameter with `untyped_storage().resize_(0)` and
// brings it back with `resize_(n)` before copying the gathered values in, while
// the parameter (a view of that storage) stays the same Python object. So the
// StorageImpl, and the Slot behind it, must stay; only the device buffer, the
// byte size and the (synthetic) address change. Contents are kept up to the
// smaller of the two sizes; bytes past the old end read as zeros.
#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>

#include <algorithm>

#include "aten/deferred_graph.h"
#include "aten/kernels.h"
#include "aten/tpu_tensor.h"
#include "engine/executor.h"
#include "engine/program_cache.h"
#include "engine/runtime.h"

namespace tpu::aten {

namespace {

using hlo::ElemType;

engine::ProgramCache<pjrt::Executable>& resize_programs() {
  static auto* c = new engine::ProgramCache<pjrt::Executable>(256);
  return *c;
}

// A program taking the storage's rank-1 buffer of `from` elements of `elem` to
// `to` elements of `out` (the same type, or bytes when the new size is not a
// whole number of elements): the first min(from, to) kept, the rest zeros.
std::shared_ptr<pjrt::Buffer> resized_copy(const std::shared_ptr<pjrt::Buffer>& buf, ElemType elem,
                                           int64_t from, ElemType out, int64_t to, int device) {
  std::string key = std::to_string(int(elem)) + ":" + std::to_string(from) + ":" +
                    std::to_string(int(out)) + ":" + std::to_string(to);
  std::shared_ptr<pjrt::Executable> exe = resize_programs().find(key);
  if (!exe) {
    hlo::Builder b;
    hlo::Value v = b.parameter({elem, {from}});
    int64_t n = from;
    if (out != elem) {  // reinterpret as bytes
      if (elem == ElemType::PRED) {
        v = b.convert(v, ElemType::U8);
      } else {
        int64_t w = hlo::bit_width(elem) / 8;
        v = b.reshape(b.bitcast_convert(v, hlo::TensorType{ElemType::U8, {from, w}}), {from * w});
        n = from * w;
      }
    }
    int64_t keep = std::min(n, to);
    if (keep < n) v = b.slice(v, {0}, {keep}, {1});
    if (keep < to) v = b.pad(v, b.constant_i(0, out), {0}, {to - keep}, {0});
    b.ret({v});
    exe = engine::compile_program(b.module_text(), "storage resize_");
    resize_programs().insert(key, exe);
  }
  return engine::launch(*exe, {buf.get()}, device, "storage resize_")[0];
}

}  // namespace

void resize_storage_bytes(c10::StorageImpl* st, int64_t new_nbytes) {
  TORCH_CHECK(new_nbytes >= 0, "storage resize_: the new size must be non-negative, got ", new_nbytes);
  TORCH_CHECK(st->resizable(), "Trying to resize storage that is not resizable");
  std::shared_ptr<engine::Slot> slot = slot_of_storage(*st);
  const int64_t old_nbytes = slot->nbytes();
  if (new_nbytes == old_nbytes) return;
  // Pending work that reads or writes this storage was recorded against its old
  // size; run it before the size changes under it.
  flush_if_uses(slot.get(), "storage resize");

  ElemType elem = slot->elem();
  const int64_t esz = static_cast<int64_t>(engine::elem_size(elem));
  const bool whole = new_nbytes % esz == 0 && old_nbytes % esz == 0;
  ElemType out = whole ? elem : ElemType::U8;
  TORCH_CHECK(whole || !hlo::is_complex(elem), "storage resize_: a complex tpu storage of ", old_nbytes,
              " bytes cannot be resized to ", new_nbytes, " bytes (not a whole number of elements)");
  std::shared_ptr<pjrt::Buffer> buf;
  if (new_nbytes > 0 && slot->has_buffer() && slot->length() > 0) {
    int64_t to = new_nbytes / static_cast<int64_t>(engine::elem_size(out));
    buf = resized_copy(slot->buffer(), elem, slot->length(), out, to, slot->device());
  }
  uint64_t addr = engine::reserve_address(new_nbytes);
  // An empty storage holds no buffer: the device memory goes back to PJRT now
  // (once the programs still reading the old buffer finish) and the accounting
  // drops at once.
  slot->reset(new_nbytes, addr, std::move(buf), out);
  // Keep the DataPtr's context (the Slot) and deleter; only the address moves.
  c10::DataPtr old = st->set_data_ptr(c10::DataPtr(nullptr, c10::Device(kTpu)));
  c10::DataPtr moved(reinterpret_cast<void*>(addr), old.release_context(), old.get_deleter(),
                     old.device());
  st->set_data_ptr_noswap(std::move(moved));
  st->set_nbytes(static_cast<size_t>(new_nbytes));
}

void resize_storage(const at::Tensor& self, int64_t new_nbytes) {
  c10::StorageImpl* st = self.storage().unsafeGetStorageImpl();
  if (new_nbytes <= static_cast<int64_t>(st->nbytes())) return;
  resize_storage_bytes(st, new_nbytes);
}

}  // namespace tpu::aten
