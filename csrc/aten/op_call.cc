// The argument walk of one call: program key, inputs, argument descriptors.
#include "aten/op_call.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "aten/kernels.h"
#include "aten/tpu_tensor.h"

namespace tpu::aten {

using engine::ViewLayout;
using hlo::ElemType;

// Writes a program key into a std::string without a library call per field:
// the string is grown ahead and written through a pointer, then trimmed by
// done(). A key is some tens of fields; appending each cost ~30 instructions.
class KeySink {
 public:
  // Writes from the start of `s`, grown to `ahead` bytes first.
  KeySink(std::string& s, size_t ahead) : s_(s), n_(0) { s_.resize(ahead); }
  // Inline by force: out of line, the call costs what the append does.
  __attribute__((always_inline)) void push_back(char c) { *room(1) = c; }
  __attribute__((always_inline)) void append(const char* p, size_t len) {
    std::memcpy(room(len), p, len);
  }
  void append(const std::string& x) { append(x.data(), x.size()); }
  void done() { s_.resize(n_); }

 private:
  __attribute__((always_inline)) char* room(size_t len) {
    if (__builtin_expect(n_ + len > s_.size(), 0)) grow(len);
    char* p = &s_[n_];
    n_ += len;
    return p;
  }
  __attribute__((noinline)) void grow(size_t len) {
    s_.resize(std::max(n_ + len, 2 * s_.size() + 64));
  }
  std::string& s_;
  size_t n_;
};

namespace {

// Appends the bytes of `v` to the key (a std::string or a KeySink).
template <typename K, typename T>
void put(K& key, const T& v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <typename K>
void put_ints(K& key, c10::IntArrayRef v) {
  put(key, static_cast<int64_t>(v.size()));
  key.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
}

template <typename K>
void put_ivalue(K& key, const c10::IValue& v) {
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

// The key and input vector of the thread's outermost call, kept between calls
// so that a warm call allocates neither (a nested call, e.g. from a kernel
// that runs other ops, makes its own).
struct SpareCapacity {
  std::string key;
  std::vector<Input> inputs;
  bool lent = false;
};
thread_local SpareCapacity tls_spare;

}  // namespace

Call::Call(const c10::OperatorHandle& op, OpInfo& info, torch::jit::Stack* stack)
    : op(op), info(info), stack(stack), nargs(op.schema().arguments().size()) {
  if (!tls_spare.lent) {
    tls_spare.lent = borrowed_ = true;
    key.swap(tls_spare.key);
    inputs.swap(tls_spare.inputs);
  }
}

Call::~Call() {
  if (!borrowed_) return;
  key.clear();
  inputs.clear();  // releases the slots now, as a fresh Call's destruction would
  tls_spare.key.swap(key);
  tls_spare.inputs.swap(inputs);
  tls_spare.lent = false;
}

int Call::slot_input(const std::shared_ptr<engine::Slot>& slot) {
  // A scan for the usual few inputs; an index once there are many (a _foreach
  // op over a model's parameters reads hundreds: scanning would be quadratic).
  constexpr size_t kScan = 16;
  if (!slot_indexed_ && inputs.size() > kScan) {
    slot_index_.reserve(4 * kScan);
    for (size_t k = 0; k < inputs.size(); ++k)
      if (inputs[k].kind == Input::kSlot) slot_index_.emplace(inputs[k].slot.get(), static_cast<int>(k));
    slot_indexed_ = true;
  }
  if (slot_indexed_) {
    auto it = slot_index_.find(slot.get());
    if (it != slot_index_.end()) return it->second;
  } else {
    for (size_t k = 0; k < inputs.size(); ++k)
      if (inputs[k].kind == Input::kSlot && inputs[k].slot == slot) return static_cast<int>(k);
  }
  if (slot_indexed_) slot_index_.emplace(slot.get(), static_cast<int>(inputs.size()));
  Input in;
  in.kind = Input::kSlot;
  in.slot = slot;
  // Deferred calls may read pending storages: their type is known without running them.
  in.type = deferred ? hlo::TensorType{slot->raw_elem(), {slot->raw_length()}}
                     : hlo::TensorType{slot->elem(), {slot->length()}};
  inputs.push_back(std::move(in));
  return static_cast<int>(inputs.size()) - 1;
}

TensorRef Call::tensor_ref(const at::Tensor& t, size_t i) {
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
    const std::shared_ptr<engine::Slot>& slot = slot_ref(t);
    // Strict Eager: the accessors run pending work first. Deferred: a pending
    // storage stays pending; only uninitialised memory becomes zeros.
    if (deferred ? !slot->pending() && !slot->raw_has_buffer() : !slot->has_buffer())
      materialize_zeros(slot.get(), t.scalar_type());
    if (want_descs) r.layout = layout_of(t);
    r.input = slot_input(slot);
    sink_->push_back('t');
    put(*sink_, static_cast<int8_t>(r.dtype));
    put_ints(*sink_, t.sizes());
    put_ints(*sink_, t.strides());
    put(*sink_, t.storage_offset());
    put(*sink_, r.input);
    put(*sink_, static_cast<int8_t>(inputs[r.input].type.elem));
    put(*sink_, inputs[r.input].type.dims[0]);
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
    sink_->push_back(r.wrapped ? 'w' : 'h');
    put(*sink_, static_cast<int8_t>(r.dtype));
    return r;
  }
  c10::Device ours(kTpu, static_cast<c10::DeviceIndex>(device < 0 ? current_device() : device));
  TORCH_CHECK(false, device_mismatch(info, op.schema(), i, ours, dev));
}

// A Lowering::scalars_as_self op's value as self's dtype: PyTorch's kernels take it
// through c10::checked_convert, so a value the dtype cannot hold (70000 into
// float16, 300 into int8) is an error there, where XLA's convert would give an
// infinity or wrap around.
static void check_value_fits(const c10::Scalar& s, at::ScalarType t) {
  switch (t) {
    case at::kHalf: (void)s.to<at::Half>(); break;
    case at::kBFloat16: (void)s.to<at::BFloat16>(); break;
    case at::kFloat: (void)s.to<float>(); break;
    case at::kChar: (void)s.to<int8_t>(); break;
    case at::kByte: (void)s.to<uint8_t>(); break;
    case at::kShort: (void)s.to<int16_t>(); break;
    case at::kInt: (void)s.to<int32_t>(); break;
    default: break;  // double, int64 and the rest: as PyTorch's kernels, no range to leave
  }
}

// An int Scalar whose value a double holds exactly (|v| <= 2^53): converted to a
// floating type from either, it rounds the same.
static bool integral_exact_as_double(const c10::IValue& v) {
  if (!v.isInt()) return false;
  const int64_t x = v.toInt();
  return x >= -(int64_t(1) << 53) && x <= (int64_t(1) << 53);
}

int Call::scalar_input(const c10::Scalar& s) {
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
  sink_->push_back('S');
  put(*sink_, static_cast<int8_t>(inputs.back().type.elem));
  return static_cast<int>(inputs.size()) - 1;
}

// torch.set_float32_matmul_precision as XLA's precision config: "highest"
// (PyTorch's default) keeps float32 accuracy, as on the CPU; "high" allows
// three bfloat16 passes per product and "medium" one, TPU's cheaper modes.
static hlo::Precision matmul_precision() {
  switch (at::globalContext().float32MatmulPrecision()) {
    case at::Float32MatmulPrecision::HIGH: return hlo::Precision::HIGH;
    case at::Float32MatmulPrecision::MEDIUM: return hlo::Precision::DEFAULT;
    default: return hlo::Precision::HIGHEST;
  }
}

void Call::walk() {
  key.clear();
  // One allocation (none once the thread's key is reused): a key is tens to a
  // few hundred bytes.
  KeySink sink(key, 256);
  sink_ = &sink;
  struct Done {  // the key trimmed to what was written, also when the walk throws
    KeySink& k;
    Call& c;
    ~Done() { k.done(); c.sink_ = nullptr; }
  } done{sink, *this};
  KeySink& key = sink;  // every field below goes through the sink
  inputs.clear();
  inputs.reserve(nargs + 1);
  slot_index_.clear();
  slot_indexed_ = false;
  // Built in place: assign() would copy-construct every descriptor from a temporary.
  descs.clear();
  if (want_descs) descs.resize(nargs);
  put(key, static_cast<const void*>(&op.schema()));
  precision_keyed = info.reads_precision.load(std::memory_order_relaxed);
  precision = precision_keyed ? matmul_precision() : hlo::Precision::HIGHEST;
  put(key, static_cast<int8_t>(precision_keyed ? static_cast<int>(precision) : -1));
  // Type promotion reads the default dtype (int tensor * 1.5, torch.tensor(1.0)):
  // a program made under float32 must not serve a call under float64.
  put(key, static_cast<int8_t>(c10::get_default_dtype_as_scalartype()));
  for (size_t i = 0; i < nargs; ++i) {
    c10::IValue& v = arg(i);
    if (!want_descs) scratch_.list.clear();
    ArgDesc& d = want_descs ? descs[i] : scratch_;
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
        d.list.reserve(list.size());
        for (size_t k = 0; k < list.size(); ++k) d.list.push_back(tensor_ref(list.get(k), i));
        break;
      }
      case ArgClass::kOptTensorList: {
        d.kind = lower::Arg::kTensorList;
        auto list = v.toOptionalTensorList();
        key.push_back('O');
        put(key, list.size());
        d.list.reserve(list.size());
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
          if (info.lowering && info.lowering->scalars_as_self && arg(0).isTensor()) {
            const at::ScalarType self_type = arg(0).toTensor().scalar_type();
            check_value_fits(v.toScalar(), self_type);
            // An int that only becomes self's floating dtype enters as the double
            // it equals (the op's own argument untouched).
            if (integral_exact_as_double(v) && at::isFloatingType(self_type))
              d.value = c10::IValue(static_cast<double>(v.toInt()));
          }
          d.input = scalar_input(d.value.isDouble() ? c10::Scalar(d.value.toDouble()) : d.value.toScalar());
        }
        break;
      case ArgClass::kScalarList: {
        // One rank-0 input per element, not one rank-1 list: a lowering that
        // slices element i out of a list fuses a different constant index into
        // each tensor's kernel, so XLA compiles one kernel per tensor. With a
        // parameter per element, the tensors of one shape share one kernel
        // (AdamW's foreach div/addcdiv over the GPT's 52 parameters: 8 kernels,
        // not 52, and 5x less compile time). Equal values share one buffer
        // (scalar_buffer's cache): AdamW's bias corrections are one value.
        d.kind = lower::Arg::kScalarList;
        d.value = v;
        bool floating = false;
        std::vector<c10::Scalar> vals;
        for (const auto& e : v.toListRef()) {
          c10::Scalar s = e.isDouble() ? c10::Scalar(e.toDouble()) : e.toScalar();
          floating |= s.isFloatingPoint() || s.isComplex();
          vals.push_back(s);
        }
        d.input = static_cast<int>(inputs.size());
        for (const auto& s : vals) {
          Input in;
          in.kind = Input::kHost;
          if (floating) {
            in.type = {ElemType::F64, {}};
            double x = s.toDouble();
            std::memcpy(in.bytes, &x, 8);
          } else {
            in.type = {ElemType::S64, {}};
            int64_t x = s.toLong();
            std::memcpy(in.bytes, &x, 8);
          }
          inputs.push_back(std::move(in));
        }
        key.push_back('Q');
        put(key, floating);
        put(key, static_cast<int64_t>(vals.size()));
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

OpRecord Call::take_record() {
  OpRecord r{op, &info, std::move(descs), {}, precision};
  r.input_types.reserve(inputs.size());
  for (const auto& in : inputs) r.input_types.push_back(in.type);
  return r;
}

OpRecord Call::record() const {
  OpRecord r{op, &info, descs, {}, precision};
  r.input_types.reserve(inputs.size());
  for (const auto& in : inputs) r.input_types.push_back(in.type);
  return r;
}

// Boolean-mask and CPU index tensors (Tensor?[] of index, index_put_ ...)
// become long indices on the device first: their count depends on the data.
static void expand_indices(Call& c) {
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

namespace {

// The meta key of an out= call: everything its meta kernel can read -- the op,
// every tensor's dtype, sizes, strides and device kind (and a CPU scalar's
// value), and every other argument *by value*, runtime scalars included (an
// arange's end decides its length). Unlike the program key, two calls with the
// same meta key get the same result shapes.
void put_meta_tensor(std::string& key, const at::Tensor& t) {
  if (!t.defined()) {
    key.push_back('n');
    return;
  }
  key.push_back(t.device().type() == kTpu ? 't' : 'c');
  put(key, static_cast<int8_t>(t.scalar_type()));
  put_ints(key, t.sizes());
  put_ints(key, t.strides());
  if (t.device().is_cpu() && t.dim() == 0)  // a wrapped number: its value may shape the result
    key.append(static_cast<const char*>(t.const_data_ptr()), t.element_size());
}

std::string meta_key(Call& c) {
  std::string key;
  key.reserve(128);
  put(key, static_cast<const void*>(&c.op.schema()));
  put(key, static_cast<int8_t>(c10::get_default_dtype_as_scalartype()));
  for (size_t i = 0; i < c.nargs; ++i) {
    const c10::IValue& v = c.arg(i);
    if (v.isTensor()) {
      put_meta_tensor(key, v.toTensor());
    } else if (v.isTensorList()) {
      key.push_back('L');
      for (const at::Tensor& t : v.toTensorList().vec()) put_meta_tensor(key, t);
    } else if (c.info.arg_class[i] == ArgClass::kOptTensorList) {
      key.push_back('O');
      auto list = v.toOptionalTensorList();
      for (size_t k = 0; k < list.size(); ++k) {
        std::optional<at::Tensor> t = list.get(k);
        put_meta_tensor(key, t.has_value() ? *t : at::Tensor());
      }
    } else if (v.isGenerator()) {
      key.push_back('G');
    } else {
      put_ivalue(key, v);
    }
  }
  return key;
}

// Out= result shapes by meta key, so that a repeated out= call (arange.start_out
// every forward) runs no meta kernel: PyTorch's Python meta kernels cost tens of
// microseconds, ten times the rest of recording an op. Only successful meta runs
// are kept: a call whose arguments PyTorch rejects runs (and raises) every time.
struct MetaCache {
  std::mutex mu;
  std::unordered_map<std::string, std::vector<lower::OutMeta>> map;
};
MetaCache& meta_cache() {
  static auto* m = new MetaCache();
  return *m;
}

}  // namespace

void prepare(Call& c) {
  expand_indices(c);
  // out= tensors first take the shapes PyTorch's meta kernel gives (also for
  // lowerings registered under an out= name, such as arange.start_out). This
  // must precede the cache lookup: the shape may depend on runtime scalars that
  // are not in the key (arange's end), so a cached entry cannot tell it.
  if (c.info.has_out) {
    std::string mk = meta_key(c);
    MetaCache& mc = meta_cache();
    std::vector<lower::OutMeta> meta;
    bool hit = false;
    {
      std::lock_guard<std::mutex> g(mc.mu);
      auto it = mc.map.find(mk);
      if (it != mc.map.end()) meta = it->second, hit = true;
    }
    std::vector<int64_t> counts;
    if (hit || run_meta(c, meta, counts)) {
      if (!hit) {
        std::lock_guard<std::mutex> g(mc.mu);
        if (mc.map.size() >= 4096) mc.map.clear();
        mc.map.emplace(std::move(mk), meta);
      }
      resize_outs(c, meta);
    }
  }
  c.walk();
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

}  // namespace tpu::aten
