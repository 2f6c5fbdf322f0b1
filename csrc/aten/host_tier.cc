// The host tier (see host_tier.h): a qualifying call runs PyTorch's CPU kernel
// on host copies of the whole storages it reads and writes, viewed as the call
// views them, and the written storages and new results go back as device
// buffers. Whole storages, not the views: a view's dense copy would be a device
// program of its own, keyed by the view's (changing) offset.
#include "aten/host_tier.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "aten/deferred_graph.h"
#include "aten/op_kernel.h"
#include "aten/shape_sightings.h"
#include "aten/trace.h"
#include "aten/tpu_tensor.h"
#include "engine/host_alias.h"
#include "engine/metrics.h"
#include "engine/transfer.h"
#include "engine/view_io.h"

namespace tpu::aten {

namespace {

std::atomic<bool> g_enabled{true};

bool exact_dtype(c10::ScalarType t) { return c10::isIntegralType(t, /*includeBool=*/true); }

bool writes(const c10::Argument& a) { return a.alias_info() && a.alias_info()->isWrite(); }

template <typename T>
void put(std::string& s, const T& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// Every tensor of argument value `v` (Tensor, Tensor[], Tensor?[]), undefined ones skipped.
template <typename F>
void for_each_tensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    if (v.toTensor().defined()) f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec())
      if (t.defined()) f(t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef())
      if (e.isTensor() && e.toTensor().defined()) f(e.toTensor());
  }
}

// What the call is, without its sizes: the op, then per argument its tensors'
// dtypes and ranks, scalar kinds, and structural values (an int list by its
// length alone: it is usually a shape).
std::string signature(Call& c) {
  std::string s;
  put(s, static_cast<const void*>(&c.op.schema()));
  for (size_t i = 0; i < c.nargs; ++i) {
    const c10::IValue& v = c.arg(i);
    switch (c.info.arg_class[i]) {
      case ArgClass::kTensor:
      case ArgClass::kTensorList:
      case ArgClass::kOptTensorList:
        s.push_back('t');
        if (v.isList()) put(s, v.toListRef().size());
        for_each_tensor(v, [&](const at::Tensor& t) {
          put(s, static_cast<int8_t>(t.scalar_type()));
          put(s, static_cast<int8_t>(t.device().is_cpu()));
          put(s, t.dim());
        });
        break;
      case ArgClass::kScalar:
      case ArgClass::kScalarList:
        s.push_back(v.isNone() ? 'n' : 'S');  // runtime values: not structural
        break;
      default:
        if (v.isIntList()) {
          s.push_back('l');
          put(s, v.toIntList().size());
        } else {
          std::ostringstream os;
          os << v;
          s.push_back('o');
          s.append(os.str());
          s.push_back('\0');
        }
    }
  }
  return s;
}

// Bounded: past it a forgotten signature compiles its next shape once.
ShapeSightings& sightings() {
  static auto* s = new ShapeSightings(4096);
  return *s;
}

struct Decision {
  bool host = false;
  std::string sig;
  size_t key = 0;
};

// Whether `c` runs on the host: its signature has missed before with another
// key, and the host time its key has cost is below a compile's (a key that
// keeps coming back -- a fixed shape, after all -- then buys its program: at
// most twice what compiling at once would have cost). Notes this miss.
Decision decide(Call& c) {
  Decision d;
  d.sig = signature(c);
  d.key = std::hash<std::string>()(c.key);
  ShapeSightings::Note n = sightings().note(d.sig, d.key);
  // A first sighting, or the one key missed again (evicted, cleared): compile it.
  if (n.first || !n.changed) return d;
  d.host = n.spent_ns < compile_price_ns();
  return d;
}

void charge(const Decision& d, uint64_t ns) { sightings().charge(d.sig, d.key, ns); }

// Whether the call may run on the host as far as its arguments tell
// (the results are checked after the CPU kernel ran).
bool arguments_qualify(Call& c) {
  if (c.info.lowering->needs_rng) return false;
  const auto& schema = c.op.schema();
  // ATen's CPU kernels check their input as our lowerings do (an index out of range
  // raises). Other libraries' CPU kernels need not: fbgemm's bucketize/permute
  // kernels read negative ids or lengths past the values without a word, where the
  // lowering raises. Only ATen ops run here.
  if (schema.name().rfind("aten::", 0) != 0) return false;
  for (const auto& r : schema.returns())
    if (r.alias_info() && !r.alias_info()->isWrite()) return false;  // a view
  int64_t bytes = 0;
  std::vector<const engine::Slot*> counted;
  bool ok = true;
  for (size_t i = 0; i < c.nargs && ok; ++i) {
    const c10::IValue& v = c.arg(i);
    switch (c.info.arg_class[i]) {
      case ArgClass::kTensor:
      case ArgClass::kTensorList:
      case ArgClass::kOptTensorList:
        for_each_tensor(v, [&](const at::Tensor& t) {
          if (!ok || !exact_dtype(t.scalar_type())) {
            ok = false;
            return;
          }
          if (t.device().is_cpu()) return;  // a 0-dim CPU scalar
          engine::Slot* slot = slot_of(t);
          if (slot->raw_elem() != lower::to_elem(t.scalar_type())) {  // a dtype view
            ok = false;
            return;
          }
          bool again = false;
          for (const engine::Slot* s : counted) again |= s == slot;
          if (!again) counted.push_back(slot), bytes += slot->nbytes();
        });
        break;
      case ArgClass::kScalar:
        if (!v.isNone() && !exact_scalar(v)) ok = false;
        break;
      case ArgClass::kScalarList:
        ok &= exact_scalar_list(v);
        break;
      case ArgClass::kGenerator:
        ok = false;
        break;
      case ArgClass::kOther:
        // A factory's device: its CPU kernel would allocate on tpu.
        if (v.isDevice()) ok = false;
        break;
    }
  }
  return ok && bytes <= kHostTierMaxBytes;
}

// A host copy of one storage: its whole buffer as a flat CPU tensor.
struct HostStorage {
  std::shared_ptr<engine::Slot> slot;
  at::Tensor flat;
  bool written = false;
};

struct HostCall {
  std::vector<HostStorage> storages;
  // Written tensor arguments and their CPU views: the CPU kernel must write
  // them in place (same storage, same view), else the call is not ours.
  std::vector<std::pair<at::Tensor, at::Tensor>> written;

  HostStorage& storage_of(const at::Tensor& t) {
    const std::shared_ptr<engine::Slot>& slot = slot_ref(t);
    for (auto& h : storages)
      if (h.slot == slot) return h;
    HostStorage h;
    h.slot = slot;
    int64_t length = slot->length();
    h.flat = length > 0 ? host_copy(*slot->buffer(), t.scalar_type(), length)
                        : at::empty({0}, at::TensorOptions().dtype(t.scalar_type()));
    storages.push_back(std::move(h));
    return storages.back();
  }

  at::Tensor host_view(const at::Tensor& t, bool write) {
    if (t.device().is_cpu()) return t;
    HostStorage& h = storage_of(t);
    at::Tensor v = h.flat.as_strided(t.sizes(), t.strides(), t.storage_offset());
    if (write) {
      h.written = true;
      written.emplace_back(t, v);
    }
    return v;
  }

  c10::IValue host_value(const c10::IValue& v, bool write) {
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      return t.defined() ? c10::IValue(host_view(t, write)) : v;
    }
    if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : v.toTensorList().vec()) out.push_back(t.defined() ? host_view(t, write) : t);
      return out;
    }
    if (v.isList() && v.toList().elementType()->kind() == c10::TypeKind::OptionalType) {
      c10::List<std::optional<at::Tensor>> out;
      for (const c10::IValue& e : v.toListRef())
        out.push_back(e.isTensor() && e.toTensor().defined()
                          ? std::optional<at::Tensor>(host_view(e.toTensor(), write))
                          : std::nullopt);
      return out;
    }
    return v;
  }
};

bool same_view(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.strides() == b.strides() &&
         a.storage_offset() == b.storage_offset();
}

}  // namespace

void set_host_tier_enabled(bool on) { g_enabled = on; }
bool host_tier_enabled() { return g_enabled.load(); }

void clear_host_tier_signatures() { sightings().clear(); }

bool exact_scalar(const c10::IValue& v) {
  return v.isInt() || v.isBool() ||
         (v.isScalar() && (v.toScalar().isIntegral(false) || v.toScalar().isBoolean()));
}

bool exact_scalar_list(const c10::IValue& v) {
  for (const c10::IValue& e : v.toListRef())
    if (!e.isInt() && !e.isBool()) return false;
  return true;
}

uint64_t compile_price_ns() {
  uint64_t n = engine::metrics().programs_compiled.load();
  return n ? engine::metrics().compile_ns.load() / n : 100'000'000;
}

at::Tensor host_copy(const pjrt::Buffer& buf, c10::ScalarType dtype, int64_t length) {
  at::Tensor flat = at::empty({length}, at::TensorOptions().dtype(dtype));
  if (flat.numel() == 0) return flat;
  // In place where the plugin keeps device memory in host memory: no transfer
  // and its thread hop. Both wait for the program writing it.
  pjrt::HostView view = engine::readable_host_view(buf, flat.nbytes());
  if (view.data) std::memcpy(flat.data_ptr(), view.data, flat.nbytes());
  else engine::download(buf, flat.data_ptr(), flat.nbytes());
  return flat;
}

std::shared_ptr<pjrt::Buffer> upload_host(const at::Tensor& t, int device) {
  return engine::upload_aliasing(t.const_data_ptr(), lower::to_elem(t.scalar_type()), {t.numel()},
                                 device, std::make_shared<c10::Storage>(t.storage()));
}

std::vector<int64_t> result_strides(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  std::vector<int64_t> st = strides.vec(), order;
  if (engine::permuted_dense_order(sizes.vec(), st, &order)) return st;
  return {};  // row-major (size-1 dimensions aside), or not dense: row-major
}

at::Tensor in_layout(const at::Tensor& t, const std::vector<int64_t>& strides) {
  if (strides.empty()) return t.contiguous();
  if (t.strides() == c10::IntArrayRef(strides) && t.storage_offset() == 0 &&
      t.storage().nbytes() == t.nbytes())
    return t;
  at::Tensor d = at::empty_strided(t.sizes(), strides, t.options());
  d.copy_(t);
  return d;
}

bool run_on_host_tier(Call& c) {
  // A torch.compile graph being captured must stay one program that its later
  // calls replay: an op run here would be missing from it.
  if (!g_enabled.load(std::memory_order_relaxed) || this_thread_trace()->unbounded ||
      !arguments_qualify(c))
    return false;
  Decision d = decide(c);
  if (!d.host) return false;
  auto t0 = std::chrono::steady_clock::now();
  FlushReason reason("host tier");
  const auto& schema = c.op.schema();
  HostCall h;
  torch::jit::Stack cpu;
  cpu.reserve(c.nargs);
  for (size_t i = 0; i < c.nargs; ++i)
    cpu.push_back(h.host_value(c.arg(i), writes(schema.arguments()[i])));
  // The host waits for these values, as any host read does: device-side checks
  // of the work that made them report first.
  raise_device_check_failures(-1);
  try {
    c.op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &cpu);
  } catch (const std::exception&) {
    return false;  // the compiled path runs it and reports as it always has
  }
  for (const auto& [tpu, view] : h.written)
    if (!same_view(tpu, view) || !view.storage().is_alias_of(h.storage_of(tpu).flat.storage()))
      return false;
  // The results: new tensors must be exact and small too.
  const auto& returns = schema.returns();
  if (cpu.size() != returns.size()) return false;
  int64_t bytes = 0;
  for (const auto& s : h.storages) bytes += s.flat.nbytes();
  bool ok = true;
  for (size_t r = 0; r < returns.size(); ++r) {
    if (returns[r].alias_info()) continue;
    for_each_tensor(cpu[r], [&](const at::Tensor& t) {
      ok &= exact_dtype(t.scalar_type()) && t.device().is_cpu();
      bytes += t.nbytes();
    });
  }
  if (!ok || bytes > kHostTierMaxBytes) return false;

  // Committed: from here on the device sees the results.
  for (auto& s : h.storages) {
    if (!s.written) continue;
    // A pending trace that read this storage runs first: its later nodes must
    // not read the old buffer it took as a parameter.
    flush_if_uses(s.slot.get(), "host tier write");
    s.slot->set_buffer(upload_host(s.flat, c.device), lower::to_elem(s.flat.scalar_type()));
  }
  auto to_device = [&](const at::Tensor& t) {
    if (!t.defined()) return t;
    if (t.numel() == 0) return empty_tpu(t.sizes(), t.scalar_type(), c.device);
    // The layout a compiled program would give it: the CPU kernel's strides
    // are its meta kernel's, kept when they are a dense permutation.
    std::vector<int64_t> strides = result_strides(t.sizes(), t.strides());
    at::Tensor r = empty_result(t.sizes(), strides, t.scalar_type(), c.device);
    slot_of(r)->set_buffer(upload_host(in_layout(t, strides), c.device),
                           lower::to_elem(t.scalar_type()));
    return r;
  };
  std::vector<c10::IValue> rets;
  rets.reserve(returns.size());
  for (size_t r = 0; r < returns.size(); ++r) {
    const c10::AliasInfo* ai = returns[r].alias_info();
    if (ai) {  // an argument it wrote
      c10::IValue aliased;
      for (size_t i = 0; i < c.nargs; ++i) {
        const c10::AliasInfo* ia = schema.arguments()[i].alias_info();
        if (ia && ia->beforeSets() == ai->beforeSets()) aliased = c.arg(i);
      }
      rets.push_back(aliased);
    } else if (cpu[r].isTensor()) {
      rets.push_back(to_device(cpu[r].toTensor()));
    } else if (cpu[r].isTensorList()) {
      c10::List<at::Tensor> l;
      for (const at::Tensor& t : cpu[r].toTensorList().vec()) l.push_back(to_device(t));
      rets.push_back(l);
    } else {
      rets.push_back(cpu[r]);
    }
  }
  torch::jit::drop(*c.stack, c.nargs);
  for (auto& r : rets) c.stack->push_back(std::move(r));
  engine::metrics().host_tier_ops++;
  charge(d, static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::steady_clock::now() - t0).count()));
  return true;
}

}  // namespace tpu::aten
