// The one generic boxed kernel (Strict Eager).
//
// For every op served by a lowering, the kernel:
//  1. walks the arguments once, building the program key (op, tensor view
//     layouts and dtypes, structural arguments; runtime scalars by kind only)
//     and the list of program inputs (storage buffers, host scalars, RNG state);
//  2. on a cache miss, asks PyTorch's meta kernel for the results' dtypes and
//     shapes (and its error checks), lowers the op into a program that reads the
//     input views, runs the lowering and writes mutated views back, and compiles it;
//  3. launches the program asynchronously and binds the outputs: new storages
//     for functional results, buffer swaps for in-place and out= targets.
#include "aten/op_kernel.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstring>
#include <sstream>

#include "aten/generator.h"
#include "aten/kernels.h"
#include "aten/op_info.h"
#include "aten/tpu_tensor.h"
#include "engine/executor.h"
#include "engine/metrics.h"
#include "engine/program_cache.h"
#include "engine/runtime.h"
#include "engine/transfer.h"
#include "engine/view_io.h"

namespace tpu::aten {

using engine::ViewLayout;
using hlo::ElemType;

namespace {

// ---- program inputs ---------------------------------------------------------

struct Input {
  enum Kind { kSlot, kHost, kRng } kind = kSlot;
  engine::Slot* slot = nullptr;        // kSlot
  hlo::TensorType type;                // parameter type
  char bytes[16] = {0};                // kHost: value (rank 0) ...
  std::vector<double> list;            // kHost rank 1 (scalar lists, as f64)
  std::vector<int64_t> ilist;          // kHost rank 1 (scalar lists, as s64)
};

struct TensorRef {
  bool defined = false;
  int input = -1;
  ViewLayout layout;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool host_scalar = false;  // a CPU 0-dim tensor (e.g. a wrapped Python number)
  bool wrapped = false;
};

struct ArgDesc {
  lower::Arg::Kind kind = lower::Arg::kOther;
  TensorRef t;
  std::vector<TensorRef> list;
  int input = -1;  // kScalar / kScalarList
  c10::IValue value;
};

// Appends the bytes of `v` to the key.
template <typename T>
void put(std::string& key, const T& v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void put_ints(std::string& key, c10::IntArrayRef v) {
  put(key, static_cast<int64_t>(v.size()));
  key.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
}

void put_ivalue(std::string& key, const c10::IValue& v) {
  if (v.isNone()) {
    key.push_back('n');
  } else if (v.isInt()) {
    key.push_back('i');
    put(key, v.toInt());
  } else if (v.isBool()) {
    key.push_back(v.toBool() ? 'T' : 'F');
  } else if (v.isDouble()) {
    key.push_back('d');
    put(key, v.toDouble());
  } else if (v.isIntList()) {
    key.push_back('l');
    put_ints(key, v.toIntList().vec());
  } else if (v.isString()) {
    key.push_back('s');
    const auto& s = v.toStringRef();
    put(key, s.size());
    key.append(s);
  } else if (v.isDevice()) {
    key.push_back('D');  // programs run on any device: the index is not structural
  } else if (v.isScalar()) {
    key.push_back('c');
    c10::Scalar s = v.toScalar();
    if (s.isFloatingPoint()) put(key, s.toDouble());
    else if (s.isBoolean()) put(key, s.toBool());
    else put(key, s.toLong());
  } else if (v.isList()) {
    key.push_back('L');
    auto list = v.toListRef();
    put(key, list.size());
    for (const auto& e : list) put_ivalue(key, e);
  } else {
    std::ostringstream os;
    os << v;
    key.push_back('?');
    key.append(os.str());
  }
}

std::string device_mismatch(const OpInfo& info, const c10::FunctionSchema& s, size_t i,
                            c10::Device a, c10::Device b) {
  std::ostringstream os;
  os << "Expected all tensors to be on the same device, but found at least two devices, " << a
     << " and " << b << "! (argument '" << s.arguments()[i].name() << "' of " << info.name
     << "). Move the tensor with .to('" << a << "') first.";
  return os.str();
}

// ---- one call -----------------------------------------------------------------

struct Call {
  const c10::OperatorHandle& op;
  OpInfo& info;
  torch::jit::Stack* stack;
  size_t nargs;
  int device = -1;
  std::string key;
  std::vector<Input> inputs;
  std::vector<ArgDesc> descs;
  bool needs_rng = false;

  Call(const c10::OperatorHandle& op, OpInfo& info, torch::jit::Stack* stack)
      : op(op), info(info), stack(stack), nargs(op.schema().arguments().size()) {}

  c10::IValue& arg(size_t i) { return (*stack)[stack->size() - nargs + i]; }

  int slot_input(engine::Slot* slot) {
    for (size_t k = 0; k < inputs.size(); ++k)
      if (inputs[k].kind == Input::kSlot && inputs[k].slot == slot) return static_cast<int>(k);
    Input in;
    in.kind = Input::kSlot;
    in.slot = slot;
    in.type = hlo::TensorType{slot->elem(), {slot->length()}};
    inputs.push_back(std::move(in));
    return static_cast<int>(inputs.size()) - 1;
  }

  TensorRef tensor_ref(const at::Tensor& t, size_t i) {
    TensorRef r;
    if (!t.defined()) return r;
    r.defined = true;
    r.dtype = t.scalar_type();
    c10::Device dev = t.device();
    if (dev.type() == kTpu) {
      int d = dev.index() < 0 ? current_device() : dev.index();
      if (device < 0) device = d;
      TORCH_CHECK(d == device,
                  device_mismatch(info, op.schema(), i, c10::Device(kTpu, device), dev));
      engine::Slot* slot = slot_of(t);
      if (!slot->has_buffer()) materialize_zeros(slot, t.scalar_type());
      r.layout = layout_of(t);
      r.input = slot_input(slot);
      key.push_back('t');
      put(key, static_cast<int8_t>(r.dtype));
      put_ints(key, t.sizes());
      put_ints(key, t.strides());
      put(key, t.storage_offset());
      put(key, r.input);
      put(key, static_cast<int8_t>(slot->elem()));
      put(key, slot->length());
      return r;
    }
    if (dev.is_cpu() && t.dim() == 0) {
      // A CPU scalar tensor (Python numbers arrive as these): a runtime input.
      r.host_scalar = true;
      r.wrapped = t.unsafeGetTensorImpl()->is_wrapped_number();
      Input in;
      in.kind = Input::kHost;
      in.type = hlo::TensorType{lower::to_elem(r.dtype), {}};
      std::memcpy(in.bytes, t.const_data_ptr(), t.element_size());
      inputs.push_back(std::move(in));
      r.input = static_cast<int>(inputs.size()) - 1;
      key.push_back(r.wrapped ? 'w' : 'h');
      put(key, static_cast<int8_t>(r.dtype));
      return r;
    }
    c10::Device ours(kTpu, static_cast<c10::DeviceIndex>(device < 0 ? current_device() : device));
    TORCH_CHECK(false, device_mismatch(info, op.schema(), i, ours, dev));
  }

  int scalar_input(const c10::Scalar& s) {
    Input in;
    in.kind = Input::kHost;
    if (s.isBoolean()) {
      in.type = {ElemType::PRED, {}};
      bool b = s.toBool();
      std::memcpy(in.bytes, &b, 1);
    } else if (s.isIntegral(false)) {
      in.type = {ElemType::S64, {}};
      int64_t v = s.toLong();
      std::memcpy(in.bytes, &v, 8);
    } else if (s.isComplex()) {
      in.type = {ElemType::C128, {}};
      c10::complex<double> v = s.toComplexDouble();
      std::memcpy(in.bytes, &v, 16);
    } else {
      in.type = {ElemType::F64, {}};
      double v = s.toDouble();
      std::memcpy(in.bytes, &v, 8);
    }
    inputs.push_back(std::move(in));
    key.push_back('S');
    put(key, static_cast<int8_t>(inputs.back().type.elem));
    return static_cast<int>(inputs.size()) - 1;
  }

  // Step 1: key and inputs.
  void walk() {
    key.clear();
    inputs.clear();
    descs.assign(nargs, ArgDesc{});
    put(key, static_cast<const void*>(&op.schema()));
    for (size_t i = 0; i < nargs; ++i) {
      c10::IValue& v = arg(i);
      ArgDesc& d = descs[i];
      switch (info.arg_class[i]) {
        case ArgClass::kTensor:
          // Unboxed callers pass an absent Tensor? as an undefined tensor.
          if (v.isNone() || (v.isTensor() && !v.toTensor().defined())) {
            d.kind = lower::Arg::kNone;
            key.push_back('n');
          } else {
            d.kind = lower::Arg::kTensor;
            d.t = tensor_ref(v.toTensor(), i);
          }
          break;
        case ArgClass::kTensorList: {
          d.kind = lower::Arg::kTensorList;
          auto list = v.toTensorList();
          key.push_back('L');
          put(key, list.size());
          for (size_t k = 0; k < list.size(); ++k) d.list.push_back(tensor_ref(list.get(k), i));
          break;
        }
        case ArgClass::kOptTensorList: {
          d.kind = lower::Arg::kTensorList;
          auto list = v.toOptionalTensorList();
          key.push_back('O');
          put(key, list.size());
          for (size_t k = 0; k < list.size(); ++k) {
            std::optional<at::Tensor> t = list.get(k);
            if (t.has_value() && t->defined()) {
              d.list.push_back(tensor_ref(*t, i));
            } else {
              d.list.push_back(TensorRef{});
              key.push_back('n');
            }
          }
          break;
        }
        case ArgClass::kScalar:
          if (v.isNone()) {
            d.kind = lower::Arg::kNone;
            key.push_back('n');
          } else {
            d.kind = lower::Arg::kScalar;
            d.value = v;
            d.input = scalar_input(v.isDouble() ? c10::Scalar(v.toDouble()) : v.toScalar());
          }
          break;
        case ArgClass::kScalarList: {
          d.kind = lower::Arg::kScalarList;
          d.value = v;
          Input in;
          in.kind = Input::kHost;
          bool floating = false;
          std::vector<c10::Scalar> vals;
          for (const auto& e : v.toListRef()) {
            c10::Scalar s = e.isDouble() ? c10::Scalar(e.toDouble()) : e.toScalar();
            floating |= s.isFloatingPoint() || s.isComplex();
            vals.push_back(s);
          }
          for (const auto& s : vals) {
            if (floating) in.list.push_back(s.toDouble());
            else in.ilist.push_back(s.toLong());
          }
          int64_t n = static_cast<int64_t>(vals.size());
          in.type = {floating ? ElemType::F64 : ElemType::S64, {n}};
          inputs.push_back(std::move(in));
          d.input = static_cast<int>(inputs.size()) - 1;
          key.push_back('Q');
          put(key, floating);
          put(key, n);
          break;
        }
        case ArgClass::kGenerator:
          d.kind = lower::Arg::kOther;
          d.value = v;
          key.push_back('G');
          break;
        case ArgClass::kOther:
          d.kind = v.isNone() ? lower::Arg::kNone : lower::Arg::kOther;
          d.value = v;
          put_ivalue(key, v);
          break;
      }
    }
    if (device < 0) {
      for (size_t i = 0; i < nargs; ++i) {
        const c10::IValue& v = arg(i);
        if (v.isDevice() && v.toDevice().type() == kTpu) {
          device = v.toDevice().has_index() ? v.toDevice().index() : current_device();
        }
      }
      if (device < 0) device = current_device();
    }
    if (info.lowering->needs_rng) {
      Input in;
      in.kind = Input::kRng;
      in.type = {ElemType::U64, {2}};
      inputs.push_back(std::move(in));
      key.push_back('R');
    }
  }
};

// ---- compiled entries ------------------------------------------------------------

struct OutSpec {
  // kNone: an undefined result (e.g. a gradient output_mask did not ask for).
  enum Kind { kNew, kWrite, kNone } kind = kNew;
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // kNew
  std::vector<int64_t> sizes;                          // kNew
  int input = -1;                                      // kWrite: the slot input rewritten
  ElemType elem = ElemType::F32;                       // kWrite: element type written
};

struct Entry {
  std::shared_ptr<pjrt::Executable> exe;
  std::vector<OutSpec> outs;
  std::vector<int64_t> return_counts;  // per schema return: tensors it carries (list returns)
  uint64_t rng_numbers = 0;
};

engine::ProgramCache<Entry>& cache() {
  static auto* c = new engine::ProgramCache<Entry>(8192);
  return *c;
}

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
  return v;
}

void flatten_meta(const c10::IValue& v, std::vector<lower::OutMeta>& out,
                  std::vector<int64_t>* counts) {
  if (v.isTensor() && !v.toTensor().defined()) {
    out.push_back({c10::ScalarType::Undefined, {}});
    if (counts) counts->push_back(1);
  } else if (v.isTensor()) {
    out.push_back({v.toTensor().scalar_type(), v.toTensor().sizes().vec()});
    if (counts) counts->push_back(1);
  } else if (v.isTensorList()) {
    auto l = v.toTensorList();
    for (size_t k = 0; k < l.size(); ++k) {
      at::Tensor t = l.get(k);
      out.push_back({t.scalar_type(), t.sizes().vec()});
    }
    if (counts) counts->push_back(static_cast<int64_t>(l.size()));
  } else if (counts) {
    counts->push_back(0);
  }
}

// Runs the op on meta tensors: PyTorch's own shape/dtype inference and checks.
// Returns false when the op has no meta kernel.
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
hlo::Value reinterpret(hlo::Builder& b, hlo::Value p, ElemType want, const std::string& op) {
  // bool has no bit layout in StableHLO; its byte is 0 or 1, which convert gives.
  if (p.elem() == ElemType::PRED) p = b.convert(p, ElemType::U8);
  if (want == ElemType::PRED) return b.convert(reinterpret(b, p, ElemType::U8, op), want);
  if (p.elem() == want) return p;
  const int64_t from = hlo::bit_width(p.elem()), to = hlo::bit_width(want);
  const int64_t n = p.dims()[0];
  TORCH_CHECK(!hlo::is_complex(p.elem()) && !hlo::is_complex(want), op,
              ": reinterpreting a complex tpu storage as another dtype is not supported");
  if (from == to) return b.bitcast_convert(p, hlo::TensorType{want, {n}});
  if (from > to) {  // each element splits into from/to narrower ones
    hlo::Value v = b.bitcast_convert(p, hlo::TensorType{want, {n, from / to}});
    return b.reshape(v, {n * (from / to)});
  }
  const int64_t k = to / from, m = n / k;  // a trailing partial element is dropped
  if (m * k != n) p = b.slice(p, {0}, {m * k}, {1});
  return b.bitcast_convert(b.reshape(p, {m, k}), hlo::TensorType{want, {m}});
}

hlo::Value read_tensor(hlo::Builder& b, const std::vector<hlo::Value>& params, const Call& c,
                       const TensorRef& r) {
  if (!r.defined) return hlo::Value{};
  hlo::Value p = params[r.input];
  if (r.host_scalar) return p;
  ElemType want = lower::to_elem(r.dtype);
  if (p.elem() != want) p = reinterpret(b, p, want, c.info.name);
  return engine::read_view(b, p, r.layout);
}

std::shared_ptr<Entry> build(Call& c) {
  auto entry = std::make_shared<Entry>();
  std::vector<lower::OutMeta> meta;
  bool have_meta = run_meta(c, meta, entry->return_counts);

  hlo::Builder b;
  std::vector<hlo::Value> params;
  for (const auto& in : c.inputs) params.push_back(b.parameter(in.type));

  std::vector<lower::Arg> args(c.nargs);
  for (size_t i = 0; i < c.nargs; ++i) {
    const ArgDesc& d = c.descs[i];
    lower::Arg& a = args[i];
    a.kind = d.kind;
    a.value = d.value;
    switch (d.kind) {
      case lower::Arg::kTensor:
        a.tensor = read_tensor(b, params, c, d.t);
        a.dtype = d.t.dtype;
        a.wrapped_number = d.t.wrapped;
        break;
      case lower::Arg::kTensorList:
        for (const auto& r : d.list) {
          a.tensors.push_back(read_tensor(b, params, c, r));
          a.dtypes.push_back(r.dtype);
        }
        break;
      case lower::Arg::kScalar:
        a.scalar = params[d.input];
        break;
      case lower::Arg::kScalarList: {
        hlo::Value l = params[d.input];
        for (int64_t k = 0; k < l.dims()[0]; ++k)
          a.scalars.push_back(b.reshape(b.slice(l, {k}, {k + 1}, {1}), {}));
        break;
      }
      default: break;
    }
  }

  lower::Ctx ctx(b, c.op.schema(), std::move(args), have_meta ? meta : std::vector<lower::OutMeta>{});
  if (c.info.lowering->needs_rng) ctx.set_rng_param(params.back());
  std::vector<hlo::Value> results = c.info.lowering->fn(ctx);
  entry->rng_numbers = ctx.rng_numbers();

  std::vector<at::Tensor> targets = mutated_tensors(c);
  size_t n_returns = results.size() >= targets.size() ? results.size() - targets.size() : 0;
  if (c.info.form != OpInfo::kOwn) n_returns = 0;
  TORCH_CHECK(results.size() == n_returns + targets.size(), "internal error: lowering of ",
              c.info.name, " returned ", results.size(), " values, expected ",
              n_returns + targets.size());
  if (!have_meta || entry->return_counts.empty()) {
    entry->return_counts.clear();
    const auto& rets = c.op.schema().returns();
    size_t left = n_returns;
    for (const auto& r : rets) {
      if (r.alias_info() && r.alias_info()->isWrite()) {
        entry->return_counts.push_back(0);
      } else if (r.real_type()->kind() == c10::TypeKind::ListType) {
        entry->return_counts.push_back(static_cast<int64_t>(left));
        left = 0;
      } else {
        entry->return_counts.push_back(1);
        left = left > 0 ? left - 1 : 0;
      }
    }
  }

  std::vector<hlo::Value> outputs;
  for (size_t k = 0; k < n_returns; ++k) {
    hlo::Value v = results[k];
    OutSpec s;
    if (have_meta && meta[k].dtype == c10::ScalarType::Undefined) {
      s.kind = OutSpec::kNone;  // the program does not compute it
      entry->outs.push_back(std::move(s));
      continue;
    }
    s.kind = OutSpec::kNew;
    s.dtype = have_meta ? meta[k].dtype : lower::to_scalar_type(v.elem());
    s.sizes = have_meta ? meta[k].sizes : v.dims();
    v = b.convert(v, lower::to_elem(s.dtype));
    if (v.dims() != s.sizes) v = b.broadcast_to(v, s.sizes);
    int64_t n = 1;
    for (int64_t d : s.sizes) n *= d;
    outputs.push_back(b.reshape(v, {n}));
    entry->outs.push_back(std::move(s));
  }
  // Writes: several targets may share a storage, so chain them per input.
  std::vector<std::pair<int, hlo::Value>> written;  // input -> new base
  for (size_t m = 0; m < targets.size(); ++m) {
    const at::Tensor& t = targets[m];
    TensorRef ref;
    // Find the target's TensorRef (its storage input and view layout).
    engine::Slot* slot = slot_of(t);
    int input = -1;
    for (size_t k = 0; k < c.inputs.size(); ++k)
      if (c.inputs[k].kind == Input::kSlot && c.inputs[k].slot == slot) input = static_cast<int>(k);
    TORCH_CHECK(input >= 0, "internal error: write target of ", c.info.name, " is not an input");
    ElemType elem = lower::to_elem(t.scalar_type());
    hlo::Value base;
    for (auto& w : written)
      if (w.first == input) base = w.second;
    if (!base.valid()) {
      base = params[input];
      if (base.elem() != elem) base = reinterpret(b, base, elem, c.info.name);
    }
    hlo::Value v = b.convert(results[n_returns + m], elem);
    if (v.dims() != t.sizes().vec()) v = b.broadcast_to(v, t.sizes().vec());
    base = engine::write_view(b, base, layout_of(t), v);
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
    entry->outs.push_back(std::move(s));
  }
  b.ret(outputs);
  entry->exe = engine::compile_program(b.module_text(), c.info.name);
  return entry;
}

// Buffers for the inputs (uploads host scalars, fills in the RNG state).
std::vector<std::shared_ptr<pjrt::Buffer>> input_buffers(Call& c, const Entry& e) {
  std::vector<std::shared_ptr<pjrt::Buffer>> bufs;
  bufs.reserve(c.inputs.size());
  for (auto& in : c.inputs) {
    switch (in.kind) {
      case Input::kSlot: bufs.push_back(in.slot->buffer()); break;
      case Input::kHost:
        if (!in.list.empty())
          bufs.push_back(engine::upload(in.list.data(), in.type.elem, in.type.dims, c.device));
        else if (!in.ilist.empty() || !in.type.dims.empty())
          bufs.push_back(engine::upload(in.ilist.data(), in.type.elem, in.type.dims, c.device));
        else
          bufs.push_back(scalar_buffer(in.bytes, in.type.elem, c.device));
        break;
      case Input::kRng: {
        std::optional<at::Generator> gen;
        for (size_t i = 0; i < c.nargs; ++i)
          if (c.info.arg_class[i] == ArgClass::kGenerator && !c.arg(i).isNone())
            gen = c.arg(i).toGenerator();
        TpuGenerator* g = generator_for(gen, static_cast<c10::DeviceIndex>(c.device));
        auto [seed, offset] = g->take(e.rng_numbers);
        uint64_t state[2] = {seed, offset};
        bufs.push_back(engine::upload(state, ElemType::U64, {2}, c.device));
        break;
      }
    }
  }
  return bufs;
}

// Boolean-mask and CPU index tensors (Tensor?[] of index, index_put_ ...)
// become long indices on the device first: their count depends on the data.
void expand_indices(Call& c) {
  for (size_t i = 0; i < c.nargs; ++i) {
    if (c.info.arg_class[i] != ArgClass::kOptTensorList) continue;
    c10::Device dev(kTpu, static_cast<c10::DeviceIndex>(current_device()));
    for (size_t j = 0; j < c.nargs; ++j)
      if (c.arg(j).isTensor() && c.arg(j).toTensor().defined() &&
          c.arg(j).toTensor().device().type() == kTpu) {
        dev = c.arg(j).toTensor().device();
        break;
      }
    c.arg(i) = expand_index_masks(c.arg(i).toOptionalTensorList(), dev);
  }
}

void run(Call& c) {
  expand_indices(c);
  std::shared_ptr<Entry> e;
  // out= tensors first take the shapes PyTorch's meta kernel gives (also for
  // lowerings registered under an out= name, such as arange.start_out). This
  // must precede the cache lookup: the shape may depend on runtime scalars that
  // are not in the key (arange's end), so a cached entry cannot tell it.
  if (c.info.has_out) {
    std::vector<lower::OutMeta> meta;
    std::vector<int64_t> counts;
    if (run_meta(c, meta, counts)) resize_outs(c, meta);
  }
  c.walk();
  e = cache().find(c.key);
  if (e) {
    engine::metrics().cache_hits++;
  } else {
    engine::metrics().cache_misses++;
    e = build(c);
    cache().insert(c.key, e);
  }
  engine::metrics().ops_executed++;

  auto bufs = input_buffers(c, *e);
  std::vector<pjrt::Buffer*> raw;
  raw.reserve(bufs.size());
  for (auto& b : bufs) raw.push_back(b.get());
  auto outs = engine::launch(*e->exe, raw, c.device, c.info.name);

  std::vector<at::Tensor> fresh;
  size_t o = 0;  // program outputs skip kNone results
  for (size_t k = 0; k < e->outs.size(); ++k) {
    const OutSpec& s = e->outs[k];
    if (s.kind == OutSpec::kNone) {
      fresh.push_back(at::Tensor());
    } else if (s.kind == OutSpec::kNew) {
      fresh.push_back(wrap_buffer(outs[o++], s.dtype, s.sizes, c.device));
    } else {
      c.inputs[s.input].slot->set_buffer(outs[o++], s.elem);
    }
  }

  // Results onto the stack: new tensors, or the arguments that returns alias.
  const auto& schema = c.op.schema();
  std::vector<c10::IValue> rets;
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
    int64_t count = r < e->return_counts.size() ? e->return_counts[r] : 1;
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

}  // namespace

std::shared_ptr<pjrt::Buffer> scalar_buffer(const void* bytes, ElemType elem, int device) {
  // Small cache: a learning rate or an alpha repeats every step.
  struct K {
    char b[16];
    ElemType e;
    int d;
    bool operator==(const K& o) const {
      return e == o.e && d == o.d && std::memcmp(b, o.b, 16) == 0;
    }
  };
  struct H {
    size_t operator()(const K& k) const {
      uint64_t a, c;
      std::memcpy(&a, k.b, 8);
      std::memcpy(&c, k.b + 8, 8);
      return std::hash<uint64_t>()(a * 31 + c) ^ (static_cast<size_t>(k.e) << 4) ^ k.d;
    }
  };
  static std::mutex mu;
  static auto* cache = new std::unordered_map<K, std::shared_ptr<pjrt::Buffer>, H>();
  K k{};
  std::memcpy(k.b, bytes, std::min<size_t>(16, engine::elem_size(elem)));
  k.e = elem;
  k.d = device;
  {
    std::lock_guard<std::mutex> g(mu);
    auto it = cache->find(k);
    if (it != cache->end()) return it->second;
  }
  auto buf = engine::upload(k.b, elem, {}, device);
  std::lock_guard<std::mutex> g(mu);
  if (cache->size() > 4096) cache->clear();
  (*cache)[k] = buf;
  return buf;
}

// "float[32, 4], int64[32], None, 1" -- for error messages.
std::string describe(Call& c) {
  std::ostringstream os;
  for (size_t i = 0; i < c.nargs; ++i) {
    if (i) os << ", ";
    const c10::IValue& v = c.arg(i);
    if (v.isTensor() && !v.toTensor().defined()) {
      os << "None";
    } else if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      os << t.scalar_type() << t.sizes() << (t.device().is_cpu() ? "@cpu" : "");
    } else {
      os << v;
    }
  }
  return os.str();
}

void op_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  OpInfo* info = op_info(op);
  TORCH_CHECK(info, "internal error: no lowering for ", full_name(op.schema().operator_name()));
  Call c(op, *info, stack);
  try {
    run(c);
  } catch (const pjrt::Error& e) {
    if (e.is_out_of_memory())
      TORCH_CHECK_WITH(OutOfMemoryError, false, "tpu out of memory in ", info->name, ": ", e.what());
    TORCH_CHECK(false, e.what());
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "internal error lowering ", info->name, " (arguments: ", describe(c),
                "): ", e.what());
  }
}

void clear_program_cache() { cache().clear(); }
size_t program_cache_size() { return cache().size(); }

}  // namespace tpu::aten
