// In-program collectives: all_reduce, all_gather, reduce_scatter, all_to_all,
// collective_permute over replica groups. For PJRT clients that address every
// device of a job (TPU slices, multi-GPU; the CPU plugin with several devices
// in one process), a program compiled with num_replicas = N exchanges data
// between its replicas without leaving the device.
#include <algorithm>
#include <set>

#include "hlo/builder_impl.h"

namespace tpu::hlo {
namespace {

using Groups = std::vector<std::vector<int64_t>>;

// Validates the groups; returns their common size.
int64_t group_size(const std::string& op, const Groups& groups) {
  if (groups.empty() || groups[0].empty()) fail(op, "needs at least one non-empty replica group");
  std::set<int64_t> seen;
  for (const auto& g : groups) {
    if (g.size() != groups[0].size())
      fail(op, "replica groups must all have one size, got " + dims_str(groups[0]) + " and " +
                   dims_str(g));
    for (int64_t r : g) {
      if (r < 0) fail(op, "replica ids must be >= 0, got " + std::to_string(r));
      if (!seen.insert(r).second) fail(op, "replica " + std::to_string(r) + " is in two groups");
    }
  }
  return static_cast<int64_t>(groups[0].size());
}

// dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>
std::string dense_2d(const Groups& rows) {
  std::string s = "dense<[";
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i) s += ", ";
    s += "[";
    for (size_t j = 0; j < rows[i].size(); ++j) s += (j ? ", " : "") + std::to_string(rows[i][j]);
    s += "]";
  }
  return s + "]> : tensor<" + std::to_string(rows.size()) + "x" +
         std::to_string(rows.empty() ? 0 : rows[0].size()) + "xi64>";
}

// ", channel_handle = ..." for a cross-program channel; empty for channel 0 (none).
std::string channel_attr(int64_t channel_id) {
  if (channel_id <= 0) return "";
  return ", channel_handle = #stablehlo.channel_handle<handle = " + std::to_string(channel_id) +
         ", type = 1>";
}

std::string group_attrs(const Groups& groups, int64_t channel_id) {
  return "replica_groups = " + dense_2d(groups) + channel_attr(channel_id);
}

void check_dim(const std::string& op, int64_t dim, const Value& x, const char* what) {
  if (dim < 0 || dim >= x.rank())
    fail(op, std::string(what) + " " + std::to_string(dim) + " is out of range for " + x.type.str());
}

// reduce_scatter and all_to_all hand each of the n replicas an equal slice of `dim`.
void check_splits(const std::string& op, int64_t dim, const Value& x, int64_t n, const char* what) {
  if (x.dims()[dim] % n != 0)
    fail(op, std::string(what) + " of size " + std::to_string(x.dims()[dim]) +
                 " does not split into " + std::to_string(n) + " replicas");
}

}  // namespace

Value Builder::all_reduce(Value x, ReduceOp op, const Groups& groups, int64_t channel_id) {
  const std::string name = "all_reduce";
  check_reduce_op(name, op, x.elem());
  group_size(name, groups);
  const TensorType s = scalar_of(x.elem());
  std::string reg = impl_->region(*this, name, {s, s}, binary_body(op), {s});
  return impl_->emit(name, {x}, {reg}, group_attrs(groups, channel_id), {x.type})[0];
}

Value Builder::all_gather(Value x, int64_t dim, const Groups& groups, int64_t channel_id) {
  const std::string name = "all_gather";
  check_dim(name, dim, x, "all_gather_dim");
  TensorType rt = x.type;
  rt.dims[dim] *= group_size(name, groups);
  return impl_->emit(name, {x}, {},
                     "all_gather_dim = " + std::to_string(dim) + " : i64, " +
                         group_attrs(groups, channel_id),
                     {rt})[0];
}

Value Builder::reduce_scatter(Value x, int64_t dim, ReduceOp op, const Groups& groups,
                              int64_t channel_id) {
  const std::string name = "reduce_scatter";
  check_reduce_op(name, op, x.elem());
  check_dim(name, dim, x, "scatter_dimension");
  int64_t n = group_size(name, groups);
  check_splits(name, dim, x, n, "scatter dimension");
  TensorType rt = x.type;
  rt.dims[dim] /= n;
  const TensorType s = scalar_of(x.elem());
  std::string reg = impl_->region(*this, name, {s, s}, binary_body(op), {s});
  return impl_->emit(name, {x}, {reg},
                     "scatter_dimension = " + std::to_string(dim) + " : i64, " +
                         group_attrs(groups, channel_id),
                     {rt})[0];
}

Value Builder::all_to_all(Value x, int64_t split_dim, int64_t concat_dim, const Groups& groups,
                          int64_t channel_id) {
  const std::string name = "all_to_all";
  check_dim(name, split_dim, x, "split_dimension");
  check_dim(name, concat_dim, x, "concat_dimension");
  int64_t n = group_size(name, groups);
  check_splits(name, split_dim, x, n, "split dimension");
  TensorType rt = x.type;
  rt.dims[split_dim] /= n;
  rt.dims[concat_dim] *= n;
  return impl_->emit(name, {x}, {},
                     "split_dimension = " + std::to_string(split_dim) +
                         " : i64, concat_dimension = " + std::to_string(concat_dim) +
                         " : i64, split_count = " + std::to_string(n) + " : i64, " +
                         group_attrs(groups, channel_id),
                     {rt})[0];
}

Value Builder::collective_permute(Value x, const std::vector<std::pair<int64_t, int64_t>>& pairs,
                                  int64_t channel_id) {
  const std::string name = "collective_permute";
  if (pairs.empty()) fail(name, "needs at least one source-target pair");
  std::set<int64_t> sources, targets;
  Groups rows;
  for (const auto& [src, dst] : pairs) {
    if (src < 0 || dst < 0) fail(name, "replica ids must be >= 0");
    if (!sources.insert(src).second) fail(name, "replica " + std::to_string(src) + " sends twice");
    if (!targets.insert(dst).second)
      fail(name, "replica " + std::to_string(dst) + " receives twice");
    rows.push_back({src, dst});
  }
  return impl_->emit(name, {x}, {}, "source_target_pairs = " + dense_2d(rows) + channel_attr(channel_id),
                     {x.type})[0];
}

}  // namespace tpu::hlo
