// The tpu kernels of fbgemm's fused table-batched-embedding (TBE) lookups: the
// `split_embedding_codegen_lookup_{sgd,rowwise_adagrad}_function_pt2` ops behind
// fbgemm's SplitTableBatchedEmbeddingBagsCodegen, which TorchRec's sharded
// EmbeddingBagCollection uses (compute kernel FUSED: the optimizer runs inside the
// backward and updates the tables in place; there is no .grad).
//
// TorchRec builds these modules for any device but CUDA/MTIA with fbgemm's CPU layout
// (EmbeddingLocation.HOST: one flat `weights_host` table buffer) on the module's
// device, as it does for MTIA; `weights` is then [host_weights, placements, offsets].
// The kernel is fbgemm's autograd for tpu tensors (AutogradPrivateUse1; fbgemm's own
// Autograd kernel accepts CPU/CUDA/MTIA only):
// - forward: the lowered pooled lookup, fbgemm::dense_embedding_codegen_lookup_function
//   (csrc/lower/tbe.cc) on host_weights, which has the same flat layout;
// - backward: the lowered tpu::tbe_dense_backward (the tables' summed gradient, as
//   fbgemm's "exact" optimizers use it), then the optimizer's update written with
//   in-place ATen ops on the device. Rows the batch does not touch have a zero
//   gradient, which leaves them (and their optimizer state) unchanged, as fbgemm's
//   sparse update does.
// Nothing here leaves the device except the small per-table layout tensors that the
// row-wise optimizer reads to split the flat buffers into tables.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <string>

#include "aten/tbe_dense_backward.h"

namespace tpu::aten {
namespace {

// aux_bool's gradient_clipping entry (fbgemm 1.8's lookup invoker template). Its
// stochastic_rounding entry only matters for half-precision tables, refused below.
enum { kAuxGradientClipping = 4 };

c10::IValue& arg(const c10::FunctionSchema& schema, torch::jit::Stack& args,
                 const char* name) {
  auto i = schema.argumentIndexWithName(name);
  TORCH_INTERNAL_ASSERT(i.has_value(), schema.name(), " has no argument ", name);
  return args[*i];
}

std::optional<at::Tensor> opt_tensor(const c10::IValue& v) {
  if (v.isNone()) return std::nullopt;
  return v.toTensor();
}

// The device copy of a small index tensor fbgemm may keep on the CPU.
at::Tensor on(const at::Tensor& t, const c10::Device& d) {
  return t.device() == d ? t : t.to(d);
}

struct Update {
  enum Kind { kSgd, kRowwiseAdagrad } kind;
  at::Tensor weights;          // host_weights: every table, flat
  at::Tensor weights_offsets;  // per feature: its table's first element in `weights`
  at::Tensor D_offsets;        // per feature: cumulative embedding dims
  at::Tensor hash_size_cumsum; // per feature: cumulative table rows
  at::Tensor momentum;         // row-wise Adagrad: one value per row, flat
  at::Tensor momentum_offsets; // per feature: its table's first row in `momentum`
  double lr = 0, eps = 0;
};

void apply_update(const Update& u, const at::Tensor& grad) {
  at::NoGradGuard no_grad;
  if (u.kind == Update::kSgd) {
    u.weights.add_(grad, -u.lr);
    return;
  }
  // Row-wise Adagrad: per row, m += mean(g^2); w -= lr * g / (sqrt(m) + eps).
  at::Tensor wo = u.weights_offsets.cpu().to(at::kLong), dof = u.D_offsets.cpu().to(at::kLong),
             hs = u.hash_size_cumsum.cpu().to(at::kLong), mo = u.momentum_offsets.cpu().to(at::kLong);
  int64_t features = wo.numel();
  std::vector<int64_t> done;  // tables (by first element) already updated: several
                              // features may share one table
  for (int64_t f = 0; f < features; ++f) {
    int64_t off = wo[f].item<int64_t>();
    if (std::find(done.begin(), done.end(), off) != done.end()) continue;
    done.push_back(off);
    int64_t D = dof[f + 1].item<int64_t>() - dof[f].item<int64_t>();
    int64_t rows = hs[f + 1].item<int64_t>() - hs[f].item<int64_t>();
    if (rows == 0 || D == 0) continue;
    at::Tensor g = grad.narrow(0, off, rows * D).view({rows, D});
    at::Tensor w = u.weights.narrow(0, off, rows * D).view({rows, D});
    at::Tensor m = u.momentum.narrow(0, mo[f].item<int64_t>(), rows);
    m.add_(g.square().mean(1));  // fbgemm: sum of squares / D, per row
    w.sub_(g * (u.lr / (m.sqrt() + u.eps)).unsqueeze(1));
  }
}

class TbeFusedLookup : public torch::autograd::Function<TbeFusedLookup> {
 public:
  // `placeholder` is fbgemm's placeholder_autograd_tensor: the only autograd input
  // (the tables are updated by the backward, never differentiated).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor placeholder,
                            torch::jit::Stack dense_args, Update update) {
    static auto dense = c10::Dispatcher::singleton().findSchemaOrThrow(
        "fbgemm::dense_embedding_codegen_lookup_function", "");
    at::AutoDispatchBelowADInplaceOrView below;
    torch::jit::Stack s = dense_args;
    dense.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), &s);
    c10::impl::GenericList saved(c10::AnyType::get());
    for (auto& v : dense_args) saved.push_back(std::move(v));
    ctx->saved_data["args"] = saved;
    ctx->saved_data["kind"] = static_cast<int64_t>(update.kind);
    ctx->saved_data["w"] = update.weights;
    ctx->saved_data["wo"] = update.weights_offsets;
    ctx->saved_data["do"] = update.D_offsets;
    ctx->saved_data["hs"] = update.hash_size_cumsum;
    ctx->saved_data["m"] = update.momentum;
    ctx->saved_data["mo"] = update.momentum_offsets;
    ctx->saved_data["lr"] = update.lr;
    ctx->saved_data["eps"] = update.eps;
    return s.at(0).toTensor();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const std::vector<c10::IValue> a = ctx->saved_data["args"].toList().vec();
    at::Tensor g = tbe_dense_lookup_weights_grad(grads[0], a);
    Update u;
    u.kind = static_cast<Update::Kind>(ctx->saved_data["kind"].toInt());
    u.weights = ctx->saved_data["w"].toTensor();
    u.weights_offsets = ctx->saved_data["wo"].toTensor();
    u.D_offsets = ctx->saved_data["do"].toTensor();
    u.hash_size_cumsum = ctx->saved_data["hs"].toTensor();
    u.momentum = ctx->saved_data["m"].toTensor();
    u.momentum_offsets = ctx->saved_data["mo"].toTensor();
    u.lr = ctx->saved_data["lr"].toDouble();
    u.eps = ctx->saved_data["eps"].toDouble();
    apply_update(u, g);
    return {at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

void tbe_fused_autograd_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const std::string name = schema.name();
  size_t n = schema.arguments().size();
  torch::jit::Stack args(stack->end() - n, stack->end());
  torch::jit::drop(*stack, n);

  auto weights = arg(schema, args, "weights").toTensorVector();
  TORCH_CHECK(weights.size() == 3, name,
              " on tpu: the tables must use fbgemm's host layout (EmbeddingLocation.HOST, "
              "ComputeDevice.CPU), as TorchRec builds them for tpu; got ", weights.size(),
              " weight tensors (a CUDA/UVM layout)");
  const at::Tensor& w = weights[0];
  c10::Device dev = w.device();
  TORCH_CHECK(w.dim() == 1 && w.scalar_type() == at::kFloat, name,
              " on tpu: only float32 tables are supported, got ", w.scalar_type());
  auto aux_tensor = arg(schema, args, "aux_tensor").toOptionalTensorList();
  TORCH_CHECK(!aux_tensor.get(0).has_value(), name,
              " on tpu: variable batch sizes per feature (VBE) are not supported");
  auto aux_bool = arg(schema, args, "aux_bool").toBoolList();
  TORCH_CHECK(!aux_bool.get(kAuxGradientClipping), name,
              " on tpu: gradient_clipping is not supported");
  auto pw = opt_tensor(arg(schema, args, "indice_weights"));
  TORCH_CHECK(!pw || !pw->requires_grad(), name,
              ": gradients for per-sample weights are not supported on tpu");

  Update u;
  u.weights = w;
  u.weights_offsets = on(weights[2], dev);
  u.D_offsets = on(arg(schema, args, "D_offsets").toTensor(), dev);
  u.hash_size_cumsum = on(arg(schema, args, "hash_size_cumsum").toTensor(), dev);
  u.lr = arg(schema, args, "learning_rate_tensor").toTensor().item<double>();
  if (name == "fbgemm::split_embedding_codegen_lookup_sgd_function_pt2") {
    u.kind = Update::kSgd;
  } else {
    u.kind = Update::kRowwiseAdagrad;
    auto m = arg(schema, args, "momentum1").toTensorVector();
    TORCH_CHECK(m.size() == 3 && m[0].device() == dev, name,
                " on tpu: momentum1 must use the host layout on the tables' device");
    u.momentum = m[0];
    u.momentum_offsets = m[2];
    auto optim_int = arg(schema, args, "optim_int").toIntList();
    auto optim_float = arg(schema, args, "optim_float").toDoubleList();
    // optim_int = [weight_decay_mode], optim_float = [eps, weight_decay, max_norm]
    TORCH_CHECK(optim_int.get(0) == 0 && optim_float.get(1) == 0.0 && optim_float.get(2) == 0.0,
                name, " on tpu: weight decay and max_norm are not supported");
    u.eps = optim_float.get(0);
  }

  // The dense lookup's arguments (its schema, defaults included).
  torch::jit::Stack dense_args{
      w, u.weights_offsets, u.D_offsets, arg(schema, args, "total_D"),
      arg(schema, args, "max_D"), u.hash_size_cumsum, arg(schema, args, "total_hash_size_bits"),
      arg(schema, args, "indices"), arg(schema, args, "offsets"),
      arg(schema, args, "pooling_mode"), arg(schema, args, "indice_weights"),
      arg(schema, args, "feature_requires_grad"), arg(schema, args, "output_dtype"),
      c10::IValue(), c10::IValue(), c10::IValue(), int64_t{-1}, int64_t{-1}, int64_t{-1},
      true};
  for (size_t i : {kIndices, kOffsets})
    dense_args[i] = on(dense_args[i].toTensor(), dev);
  at::Tensor placeholder = arg(schema, args, "placeholder_autograd_tensor").toTensor();
  stack->push_back(TbeFusedLookup::apply(placeholder, std::move(dense_args), std::move(u)));
}

// fbgemm's TBE modules call bounds_check_indices before every lookup; in its default
// WARNING mode it clamps out-of-range ids to row 0 and counts them. On tpu the lowered
// lookup itself checks every id, offset and table address (csrc/lower/tbe.cc) and
// raises IndexError/RuntimeError, whatever the mode: the project's rule is that bad
// input raises instead of reading a clamped row. So this kernel has nothing left to
// do; it exists so that the call stays on the device instead of copying the batch
// to the CPU and back.
void bounds_check_indices_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  torch::jit::drop(*stack, op.schema().arguments().size());
}

// get_infos_metadata(Tensor unused, int B, int T) -> (int, int): bit widths for the
// variable-batch encoding, from B and T alone; TBE modules call it once when they are
// built, with a tensor of theirs only to pick the kernel. Host arithmetic: the CPU
// kernel with an empty CPU tensor (no data moves).
void get_infos_metadata_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  (*stack)[stack->size() - 3] = at::empty({0}, at::kLong);
  op.callBoxed(stack);
}

}  // namespace

void register_tbe_fused_kernels() {
  static auto* lib = new torch::Library(torch::Library::IMPL, "fbgemm",
                                        c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  lib->impl("get_infos_metadata",
            torch::CppFunction::makeFromBoxedFunction<&get_infos_metadata_kernel>());
  lib->impl("bounds_check_indices",
            torch::CppFunction::makeFromBoxedFunction<&bounds_check_indices_kernel>());
  static auto* ad = new torch::Library(torch::Library::IMPL, "fbgemm",
                                       c10::DispatchKey::AutogradPrivateUse1, __FILE__, __LINE__);
  for (const char* op : {"split_embedding_codegen_lookup_sgd_function_pt2",
                         "split_embedding_codegen_lookup_rowwise_adagrad_function_pt2"})
    ad->impl(op, torch::CppFunction::makeFromBoxedFunction<&tbe_fused_autograd_kernel>());
}

}  // namespace tpu::aten
