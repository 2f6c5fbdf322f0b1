// Ops of our own namespace, `torch.ops.tpu.*`: their schemas and meta kernels
// (which give FakeTensor and torch.compile their shapes). The tpu kernels come
// from the one generic kernel like any lowered op (registration.cc); the
// lowerings live in csrc/lower (paged_attention.cc).
#include <ATen/ATen.h>
#include <torch/library.h>

namespace tpu::aten {
namespace {

// The serving ops' contract is written out in csrc/lower/paged_attention.cc.
at::Tensor paged_attention_meta(const at::Tensor& query, const at::Tensor& kv_cache,
                                const at::Tensor&, const at::Tensor&, const at::Tensor&, double,
                                int64_t, double) {
  TORCH_CHECK(kv_cache.dim() == 5, "tpu::paged_attention: kv_cache must be 5-D");
  return at::empty_like(query, query.options().device(c10::kMeta));
}

at::Tensor write_kv_cache_meta(const at::Tensor& kv_cache, const at::Tensor&, const at::Tensor&,
                               const at::Tensor&) {
  return at::empty_like(kv_cache, kv_cache.options().device(c10::kMeta));
}

void write_kv_cache_inplace_meta(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                 const at::Tensor&) {}

}  // namespace
}  // namespace tpu::aten

TORCH_LIBRARY(tpu, m) {
  m.def(
      "paged_attention(Tensor query, Tensor kv_cache, Tensor block_tables, Tensor seq_lens, "
      "Tensor query_start_loc, float scale, int sliding_window=-1, float soft_cap=0.0) -> Tensor");
  m.def("write_kv_cache(Tensor kv_cache, Tensor key, Tensor value, Tensor slot_mapping) -> Tensor");
  // Returns nothing: functionalization (torch.compile) refuses a custom op whose
  // result aliases an input.
  m.def("write_kv_cache_(Tensor(a!) kv_cache, Tensor key, Tensor value, Tensor slot_mapping) -> ()");
}

TORCH_LIBRARY_IMPL(tpu, Meta, m) {
  m.impl("paged_attention", &tpu::aten::paged_attention_meta);
  m.impl("write_kv_cache", &tpu::aten::write_kv_cache_meta);
  m.impl("write_kv_cache_", &tpu::aten::write_kv_cache_inplace_meta);
}
