// Emitting an op into a program: meta-kernel shape inference, reading input
// views, the lowering itself, and writing mutated views back.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <cstring>
#include <mutex>

#include "aten/generator.h"
#include "aten/op_call.h"
#include "aten/tpu_tensor.h"
#include "engine/view_io.h"
#include "lower/checks.h"
#include "lower/helpers.h"

namespace tpu::aten {

using hlo::ElemType;

namespace {

// The tensors an op writes, flattened in argument order.
std::vector<at::Tensor> mutated_tensors(Call& c) {
  std::vector<at::Tensor> out;
  for (int i : c.info.mutated) {
    c10::IValue& v = c.arg(i);
    if (v.isTensor()) out.push_back(v.toTensor());
    else if (v.isTensorList())
      for (const auto& t : v.toTensorList()) out.push_back(t);
  }
  return out;
}

at::Tensor to_meta(const at::Tensor& t) {
  // Wrapped Python numbers stay CPU scalars, as PyTorch's meta functions expect.
  if (!t.defined() || t.unsafeGetTensorImpl()->is_wrapped_number()) return t;
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

c10::IValue ivalue_to_meta(const c10::IValue& v) {
  if (v.isTensor()) return to_meta(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> l;
    for (const auto& t : v.toTensorList()) l.push_back(to_meta(t));
    return l;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> l;
    for (size_t k = 0; k < v.toOptionalTensorList().size(); ++k) {
      std::optional<at::Tensor> t = v.toOptionalTensorList().get(k);
      l.push_back(t.has_value() ? std::optional<at::Tensor>(to_meta(*t)) : std::nullopt);
    }
    return l;
  }
  if (v.isDevice() && v.toDevice().type() == kTpu) return c10::Device(c10::kMeta);
  // Meta kernels infer shapes only; the generator is drawn from the call itself
  // (draw_rng). PyTorch's Python metas of the samplers (torch._refs.exponential)
  // refuse an explicit generator, which vLLM passes for seeded requests.
  if (v.isGenerator()) return c10::IValue();
  return v;
}

void flatten_meta(const c10::IValue& v, std::vector<lower::OutMeta>& out,
                  std::vector<int64_t>* counts) {
  // An optional result the meta kernel leaves out (None) is not computed either.
  if (v.isNone() || (v.isTensor() && !v.toTensor().defined())) {
    out.push_back({c10::ScalarType::Undefined, {}});
    if (counts) counts->push_back(1);
  } else if (v.isTensor()) {
    out.push_back({v.toTensor().scalar_type(), v.toTensor().sizes().vec(), v.toTensor().strides().vec()});
    if (counts) counts->push_back(1);
  } else if (v.isTensorList()) {
    auto l = v.toTensorList();
    for (size_t k = 0; k < l.size(); ++k) {
      at::Tensor t = l.get(k);
      out.push_back({t.scalar_type(), t.sizes().vec(), t.strides().vec()});
    }
    if (counts) counts->push_back(static_cast<int64_t>(l.size()));
  } else if (counts) {
    counts->push_back(0);
  }
}

// Runs the op on meta tensors: PyTorch's own shape/dtype inference and checks.
// Returns false when the op has no meta kernel.
}  // namespace

bool run_meta(Call& c, std::vector<lower::OutMeta>& out, std::vector<int64_t>& return_counts) {
  if (!c.info.has_meta) return false;
  torch::jit::Stack ms;
  for (size_t i = 0; i < c.nargs; ++i) ms.push_back(ivalue_to_meta(c.arg(i)));
  std::vector<c10::IValue> meta_args(ms.begin(), ms.end());
  try {
    c.op.callBoxed(&ms);
  } catch (const c10::NotImplementedError&) {
    c.info.has_meta = false;
    return false;
  }
  out.clear();
  return_counts.clear();
  if (c.info.form == OpInfo::kOwn) {
    for (const auto& r : ms) flatten_meta(r, out, &return_counts);
  }
  for (int i : c.info.mutated) flatten_meta(meta_args[i], out, nullptr);
  return true;
}

// Resizes out= tensors to the shapes PyTorch's meta kernel gave; true if any changed.
bool resize_outs(Call& c, const std::vector<lower::OutMeta>& meta) {
  std::vector<at::Tensor> outs = mutated_tensors(c);
  size_t base = meta.size() - outs.size();
  bool changed = false;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (outs[k].sizes().vec() != meta[base + k].sizes) {
      outs[k].resize_(meta[base + k].sizes);
      changed = true;
    }
  }
  return changed;
}

// The bytes of a flat storage buffer `p` seen as elements of type `want`: a
// storage written as one dtype may be read through a view of another
// (Tensor.view(dtype), UntypedStorage.cpu() reads any storage as bytes).
static hlo::Value reinterpret(hlo::Builder& b, hlo::Value p, ElemType want, const std::string& op) {
  // bool has no bit layout in StableHLO; its byte is 0 or 1, which convert gives.
  if (p.elem() == ElemType::PRED) p = b.convert(p, ElemType::U8);
  if (want == ElemType::PRED) return b.convert(reinterpret(b, p, ElemType::U8, op), want);
  if (p.elem() == want) return p;
  // Complex elements have no bitcast in StableHLO: a complex storage is its
  // (real, imag) pairs of the component float type, which view_as_real reads
  // and view_as_complex (of a float storage) pairs up again.
  if (hlo::is_complex(p.elem())) {
    const int64_t n = p.dims()[0];
    hlo::Value re = b.reshape(b.unary("real", p), {n, 1});
    hlo::Value im = b.reshape(b.unary("imag", p), {n, 1});
    hlo::Value pairs = b.reshape(b.concatenate({re, im}, 1), {2 * n});
    return reinterpret(b, pairs, want, op);
  }
  if (hlo::is_complex(want)) {
    ElemType part = want == ElemType::C64 ? ElemType::F32 : ElemType::F64;
    hlo::Value f = reinterpret(b, p, part, op);
    const int64_t m = f.dims()[0] / 2;  // a trailing partial element is dropped
    if (2 * m != f.dims()[0]) f = b.slice(f, {0}, {2 * m}, {1});
    f = b.reshape(f, {m, 2});
    hlo::Value re = b.reshape(b.slice(f, {0, 0}, {m, 1}, {1, 1}), {m});
    hlo::Value im = b.reshape(b.slice(f, {0, 1}, {m, 2}, {1, 1}), {m});
    return b.binary("complex", re, im);
  }
  const int64_t from = hlo::bit_width(p.elem()), to = hlo::bit_width(want);
  const int64_t n = p.dims()[0];
  if (from == to) return b.bitcast_convert(p, hlo::TensorType{want, {n}});
  if (from > to) {  // each element splits into from/to narrower ones
    hlo::Value v = b.bitcast_convert(p, hlo::TensorType{want, {n, from / to}});
    return b.reshape(v, {n * (from / to)});
  }
  const int64_t k = to / from, m = n / k;  // a trailing partial element is dropped
  if (m * k != n) p = b.slice(p, {0}, {m * k}, {1});
  return b.bitcast_convert(b.reshape(p, {m, k}), hlo::TensorType{want, {m}});
}

namespace {

hlo::Value read_tensor(hlo::Builder& b, const std::vector<hlo::Value>& in, const std::string& op,
                       const TensorRef& r) {
  if (!r.defined) return hlo::Value{};
  hlo::Value p = in[r.input];
  if (r.host_scalar) return p;
  ElemType want = lower::to_elem(r.dtype);
  if (p.elem() != want) p = reinterpret(b, p, want, op);
  return engine::read_view(b, p, r.layout);
}

// A new result in the layout PyTorch's meta kernel gives it (an elementwise op on
// transposed or channels-last inputs keeps their layout): the value transposed to
// that memory order, and `s` given the strides. torch.compile relies on it: AOTAutograd
// traces views (`view`, `as_strided`) against the fake tensors' strides, which are the
// meta kernels', so a contiguous result where the meta one is permuted breaks a
// recorded `view` or, worse, reads other elements through an `as_strided`. Layouts
// that are not a dense permutation stay contiguous.
hlo::Value to_meta_layout(hlo::Builder& b, hlo::Value v, const lower::OutMeta& m, OutSpec& s) {
  std::vector<int64_t> order;
  if (m.sizes != s.sizes || !engine::permuted_dense_order(m.sizes, m.strides, &order)) return v;
  s.strides = m.strides;
  return b.transpose(v, order);
}

}  // namespace

Emitted emit(const OpRecord& r, hlo::Builder& b, const std::vector<hlo::Value>& params,
             const Entry& e, std::vector<lower::Ctx::Check>* checks) {
  Emitted em;
  const OpInfo& info = *r.info;
  const bool have_meta = e.have_meta;
  const std::vector<lower::OutMeta>& meta = e.meta;
  const size_t nargs = r.descs.size();
  std::vector<lower::Arg> args(nargs);
  for (size_t i = 0; i < nargs; ++i) {
    const ArgDesc& d = r.descs[i];
    lower::Arg& a = args[i];
    a.kind = d.kind;
    a.value = d.value;
    switch (d.kind) {
      case lower::Arg::kTensor:
        a.tensor = read_tensor(b, params, info.name, d.t);
        a.dtype = d.t.dtype;
        a.wrapped_number = d.t.wrapped;
        break;
      case lower::Arg::kTensorList:
        for (const auto& ref : d.list) {
          a.tensors.push_back(read_tensor(b, params, info.name, ref));
          a.dtypes.push_back(ref.dtype);
        }
        break;
      case lower::Arg::kScalar:
        a.scalar = params[d.input];
        break;
      case lower::Arg::kScalarList: {  // one rank-0 parameter per element (op_call.cc)
        const size_t n = d.value.toListRef().size();
        for (size_t k = 0; k < n; ++k) a.scalars.push_back(params[d.input + k]);
        break;
      }
      default: break;
    }
  }

  b.set_float32_precision(r.precision);
  lower::Ctx ctx(b, r.op.schema(), std::move(args), have_meta ? meta : std::vector<lower::OutMeta>{});
  if (info.lowering->needs_rng) ctx.set_rng_param(params.back());
  std::vector<hlo::Value> results = info.lowering->fn(ctx);
  em.rng_numbers = ctx.rng_numbers();
  for (const auto& ch : ctx.checks()) em.checks.push_back(ch.spec);
  if (checks) checks->insert(checks->end(), ctx.checks().begin(), ctx.checks().end());

  // The tensors the op writes, flattened in argument order.
  std::vector<const TensorRef*> targets;
  for (int i : info.mutated) {
    const ArgDesc& d = r.descs[i];
    if (d.kind == lower::Arg::kTensor) targets.push_back(&d.t);
    else if (d.kind == lower::Arg::kTensorList)
      for (const auto& ref : d.list) targets.push_back(&ref);
  }
  size_t n_returns = results.size() >= targets.size() ? results.size() - targets.size() : 0;
  if (info.form != OpInfo::kOwn) n_returns = 0;
  TORCH_CHECK(results.size() == n_returns + targets.size(), "internal error: lowering of ",
              info.name, " returned ", results.size(), " values, expected ",
              n_returns + targets.size());
  if (!have_meta || e.return_counts.empty()) {
    const auto& rets = r.op.schema().returns();
    size_t left = n_returns;
    for (const auto& r : rets) {
      if (r.alias_info() && r.alias_info()->isWrite()) {
        em.return_counts.push_back(0);
      } else if (r.real_type()->kind() == c10::TypeKind::ListType) {
        em.return_counts.push_back(static_cast<int64_t>(left));
        left = 0;
      } else {
        em.return_counts.push_back(1);
        left = left > 0 ? left - 1 : 0;
      }
    }
  }

  std::vector<hlo::Value>& outputs = em.values;
  for (size_t k = 0; k < n_returns; ++k) {
    hlo::Value v = results[k];
    OutSpec s;
    if (have_meta && meta[k].dtype == c10::ScalarType::Undefined) {
      s.kind = OutSpec::kNone;  // the program does not compute it
      em.outs.push_back(std::move(s));
      continue;
    }
    s.kind = OutSpec::kNew;
    s.dtype = have_meta ? meta[k].dtype : lower::to_scalar_type(v.elem());
    s.sizes = have_meta ? meta[k].sizes : v.dims();
    v = lower::cast_result(b, v, lower::to_elem(s.dtype));
    if (v.dims() != s.sizes) v = b.broadcast_to(v, s.sizes);
    if (have_meta) v = to_meta_layout(b, v, meta[k], s);
    int64_t n = 1;
    for (int64_t d : s.sizes) n *= d;
    outputs.push_back(b.reshape(v, {n}));
    em.outs.push_back(std::move(s));
  }
  // Writes: several targets may share a storage, so chain them per input.
  std::vector<std::pair<int, hlo::Value>> written;  // input -> new base
  for (size_t m = 0; m < targets.size(); ++m) {
    const TensorRef& t = *targets[m];
    int input = t.input;
    TORCH_CHECK(input >= 0 && !t.host_scalar, "internal error: write target of ", info.name,
                " is not a tpu storage");
    ElemType elem = lower::to_elem(t.dtype);
    hlo::Value base;
    for (auto& w : written)
      if (w.first == input) base = w.second;
    if (!base.valid()) {
      base = params[input];
      if (base.elem() != elem) base = reinterpret(b, base, elem, info.name);
    }
    hlo::Value v = lower::cast_result(b, results[n_returns + m], elem);
    if (v.dims() != t.layout.sizes) v = b.broadcast_to(v, t.layout.sizes);
    base = engine::write_view(b, base, t.layout, v);
    bool found = false;
    for (auto& w : written)
      if (w.first == input) {
        w.second = base;
        found = true;
      }
    if (!found) written.emplace_back(input, base);
  }
  for (auto& w : written) {
    OutSpec s;
    s.kind = OutSpec::kWrite;
    s.input = w.first;
    s.elem = w.second.elem();
    outputs.push_back(w.second);
    em.outs.push_back(std::move(s));
  }
  return em;
}

hlo::Value any_failed(hlo::Builder& b, const std::vector<lower::Ctx::Check>& checks) {
  hlo::Value f = checks.at(0).failed;
  for (size_t i = 1; i < checks.size(); ++i) f = b.binary("or", f, checks[i].failed);
  return f;
}

hlo::Value check_flags(hlo::Builder& b, const std::vector<lower::Ctx::Check>& checks) {
  std::vector<hlo::Value> parts;
  // One s64 per check, its worst value: INT64_MIN when it passed (Ctx::check),
  // so the flag itself costs no extra element or conversion.
  for (const auto& ch : checks) parts.push_back(b.reshape(ch.value, {1}));
  return b.concatenate(parts, 0);
}

hlo::Value unless_failed(hlo::Builder& b, hlo::Value failed, hlo::Value before, hlo::Value written) {
  if (!before.valid() || before.type.elem != written.type.elem ||
      before.dims() != written.dims())
    return written;
  return b.select(failed, before, written);
}

// Programs built with device checks and without are kept apart, so switching
// the checks (_set_device_checks) recompiles nothing, and check_cost.py can
// alternate steps with and without them in one process.
engine::ProgramCache<Entry>& entry_cache(bool checks) {
  static auto* with = new engine::ProgramCache<Entry>(8192);
  static auto* without = new engine::ProgramCache<Entry>(8192);
  return checks ? *with : *without;
}

engine::ProgramCache<Entry>& entry_cache() { return entry_cache(lower::checks_enabled()); }

std::shared_ptr<Entry> entry_for(Call& c) {
  auto& cache = entry_cache();
  std::shared_ptr<Entry> e = cache.find(c.key);
  if (e) return e;
  e = std::make_shared<Entry>();
  e->origin = std::make_shared<const engine::LaunchOrigin>(engine::LaunchOrigin{c.info.name, {}});
  e->have_meta = run_meta(c, e->meta, e->return_counts);
  hlo::Builder b;
  std::vector<hlo::Value> params;
  for (const auto& in : c.inputs) params.push_back(b.parameter(in.type));
  std::vector<lower::Ctx::Check> checks;
  Emitted em = emit(c.record(), b, params, *e, &checks);
  e->outs = std::move(em.outs);
  e->rng_numbers = em.rng_numbers;
  e->checks = std::move(em.checks);
  if (!e->have_meta || e->return_counts.empty()) e->return_counts = std::move(em.return_counts);
  std::vector<hlo::Value>& outs = em.values;
  const bool in_place = c.info.lowering->in_place;
  if (!checks.empty() && !in_place) {
    // Written storages keep their contents when a check fails; the flags go last.
    hlo::Value failed = any_failed(b, checks);
    size_t o = 0;
    for (const OutSpec& s : e->outs) {
      if (s.kind == OutSpec::kNone) continue;
      if (s.kind == OutSpec::kWrite) outs[o] = unless_failed(b, failed, params[s.input], outs[o]);
      ++o;
    }
  } else if (in_place) {
    // Whole-storage writes overwrite their input when the buffer can be donated
    // (run_strict decides per launch).
    size_t o = 0;
    for (const OutSpec& s : e->outs) {
      if (s.kind == OutSpec::kNone) continue;
      if (s.kind == OutSpec::kWrite && c.inputs[s.input].kind == Input::kSlot &&
          outs[o].type == params[s.input].type) {
        b.donate(params[s.input], static_cast<int>(o));
        e->donatable.push_back(static_cast<int64_t>(s.input));
      }
      ++o;
    }
  }
  if (!checks.empty()) outs.push_back(check_flags(b, checks));
  b.ret(outs);
  e->mlir = b.module_text();
  if (!c.precision_keyed && e->mlir.find("precision_config") != std::string::npos) {
    // The first program of this op that depends on the matmul precision, built
    // without reading it: from now on the op's keys carry the setting; this
    // call is keyed and emitted again under it. Programs cached before this
    // have no such dependence, so nothing cached is wrong.
    c.info.reads_precision.store(true, std::memory_order_relaxed);
    c.walk();
    return entry_for(c);
  }
  // Threads that missed the same key at once built equal entries: the first one
  // in wins, so they share its lock and compile its program once (Entry::executable).
  static std::mutex insert_mu;
  std::lock_guard<std::mutex> g(insert_mu);
  if (std::shared_ptr<Entry> first = cache.find(c.key)) return first;
  cache.insert(c.key, e);
  return e;
}

void draw_rng(Call& c, const Entry& e) {
  for (auto& in : c.inputs) {
    if (in.kind != Input::kRng) continue;
    std::optional<at::Generator> gen;
    for (size_t i = 0; i < c.nargs; ++i)
      if (c.info.arg_class[i] == ArgClass::kGenerator && !c.arg(i).isNone())
        gen = c.arg(i).toGenerator();
    TpuGenerator* g = generator_for(gen, static_cast<c10::DeviceIndex>(c.device));
    auto [seed, offset] = g->take(e.rng_numbers);
    std::memcpy(in.bytes, &seed, 8);
    std::memcpy(in.bytes + 8, &offset, 8);
  }
}

void push_results(Call& c, const Entry& e, c10::ArrayRef<at::Tensor> fresh) {
  // Results onto the stack: new tensors, or the arguments that returns alias.
  const auto& schema = c.op.schema();
  c10::SmallVector<c10::IValue, 4> rets;
  size_t next = 0;
  const auto& returns = schema.returns();
  for (size_t r = 0; r < returns.size(); ++r) {
    const c10::AliasInfo* ai = returns[r].alias_info();
    if (ai && ai->isWrite()) {
      c10::IValue aliased;
      for (size_t i = 0; i < c.nargs; ++i) {
        const c10::AliasInfo* ia = schema.arguments()[i].alias_info();
        if (ia && ia->beforeSets() == ai->beforeSets()) aliased = c.arg(i);
      }
      rets.push_back(aliased);
      continue;
    }
    int64_t count = r < e.return_counts.size() ? e.return_counts[r] : 1;
    if (returns[r].real_type()->kind() == c10::TypeKind::ListType) {
      c10::List<at::Tensor> l;
      for (int64_t k = 0; k < count; ++k) l.push_back(fresh.at(next++));
      rets.push_back(l);
    } else {
      rets.push_back(fresh.at(next++));
    }
  }
  torch::jit::drop(*c.stack, c.nargs);
  for (auto& r : rets) c.stack->push_back(std::move(r));
}

}  // namespace tpu::aten
