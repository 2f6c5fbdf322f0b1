// Runs a shape-volatile trace node by node (see trace_by_node.h).
#include "aten/trace_by_node.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "aten/deferred_graph.h"
#include "aten/host_tier.h"
#include "aten/op_kernel.h"
#include "aten/shape_sightings.h"
#include "engine/executor.h"
#include "engine/metrics.h"
#include "engine/transfer.h"

namespace tpu::aten {

namespace {

using Buffers = std::vector<std::shared_ptr<pjrt::Buffer>>;

template <typename T>
void put(std::string& s, const T& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void put_ref(std::string& s, const TensorRef& r) {
  put(s, r.defined);
  put(s, static_cast<int8_t>(r.dtype));
  put(s, r.host_scalar);
  put(s, r.input);
  put(s, r.layout.sizes.size());
}

// One node without its sizes: the op, its arguments' kinds, dtypes, ranks and
// structural values (an int list by its length: usually a shape).
void put_node(std::string& s, const Node& n) {
  put(s, static_cast<const void*>(&n.rec.op.schema()));
  for (const ArgDesc& d : n.rec.descs) {
    s.push_back(static_cast<char>('a' + d.kind));
    if (d.kind == lower::Arg::kTensor) {
      put_ref(s, d.t);
    } else if (d.kind == lower::Arg::kTensorList) {
      put(s, d.list.size());
      for (const TensorRef& r : d.list) put_ref(s, r);
    } else if (d.kind == lower::Arg::kOther) {
      if (d.value.isIntList()) {
        s.push_back('l');
        put(s, d.value.toIntList().size());
      } else {
        std::ostringstream os;
        os << d.value;
        s.append(os.str());
        s.push_back('\0');
      }
    }
  }
}

// The trace without its sizes: every node as put_node writes it, where each
// input comes from and each output goes; then the outputs.
std::string structure(const Trace& g, const std::vector<int>& outputs) {
  std::string s;
  for (const Node& n : g.nodes) {
    put_node(s, n);
    for (const NodeInput& i : n.ins) put(s, i.internal ? i.id : -1 - i.id);
    s.push_back('>');
    for (int id : n.outs) put(s, id);
  }
  s.push_back('|');
  for (int id : outputs) put(s, id);
  return s;
}

constexpr size_t kMaxSightings = 1024;

// Trace structures (structure()) by the hash of their fused keys.
ShapeSightings& trace_sightings() {
  static auto* s = new ShapeSightings(kMaxSightings);
  return *s;
}

// A host-exact node's shape-free form (put_node), by its single-op Entry:
// evidence, at a trace's first sighting, that it holds a volatile node. The
// cat that grows input_ids was seen in the prefill's trace with one column
// less, so the decoding loop's trace runs node by node from its first flush.
ShapeSightings& node_sightings() {
  static auto* s = new ShapeSightings(4 * kMaxSightings);
  return *s;
}

// Host time of the nodes the host ran, per Entry (a key that keeps running
// there buys its single-op program).
struct HostTime {
  std::mutex mu;
  std::unordered_map<const Entry*, uint64_t> ns;
};
HostTime& host_time() {
  static auto* h = new HostTime();
  return *h;
}

bool exact(c10::ScalarType t) { return c10::isIntegralType(t, /*includeBool=*/true); }

// Ops whose CPU kernel gives our lowering's bits on floating tensors as well:
// they copy, select or compare values and do no arithmetic, so there is no
// rounding to differ (argmax/argmin follow PyTorch on NaN and ties in both).
// Only when every non-bool tensor they touch has one dtype (no conversion,
// which would round), checked in host_exact. The generate loop's argmax over
// the last logits and its copy_ are such nodes: on the host they need no
// single-op program either.
bool moves_values_only(const Node& n) {
  static const std::unordered_set<std::string> ops = {
      "aten::copy_", "aten::clone", "aten::cat", "aten::where", "aten::argmax", "aten::argmin",
      "aten::eq",    "aten::ne",    "aten::lt",  "aten::le",    "aten::gt",     "aten::ge"};
  return ops.count(n.rec.op.schema().name()) > 0;
}

constexpr int64_t kMoverMaxBytes = int64_t{4} << 20;

bool is_arg_reduction(const Node& n) {
  const std::string& name = n.rec.op.schema().name();
  return name == "aten::argmax" || name == "aten::argmin";
}

// The dtypes a node's tensors may have on the host: integer and bool always;
// for a value-moving op also one floating dtype shared by all its non-bool
// tensors (an arg-reduction's int64 result aside).
struct DtypeRule {
  bool movers = false;
  bool arg_reduction = false;
  std::optional<c10::ScalarType> one;  // the non-bool dtype seen, when movers
  bool ok = true;
  void see(c10::ScalarType t, bool result = false) {
    if (t == c10::ScalarType::Bool) return;
    if (!movers) {
      ok &= exact(t);
      return;
    }
    if (result && t == c10::ScalarType::Long && arg_reduction) return;
    if (!one) one = t;
    ok &= *one == t;
  }
};

bool exact_ref(const Node& n, const TensorRef& r, DtypeRule& rule) {
  if (!r.defined) return true;
  rule.see(r.dtype);
  // A dtype view of its storage: the host copy would be of the wrong type.
  return r.host_scalar || n.rec.input_types[r.input].elem == lower::to_elem(r.dtype);
}

// Whether node `n` may run on the host as far as its record tells (the host
// tier's conditions; its results are checked after the CPU kernel ran), and on
// which tensors.
enum class Exact { kNo, kIntegers, kFloats };
Exact host_exact(const Node& n) {
  const OpInfo& info = *n.rec.info;
  if (info.lowering->needs_rng) return Exact::kNo;
  DtypeRule rule;
  rule.movers = moves_values_only(n);
  rule.arg_reduction = is_arg_reduction(n);
  for (const auto& r : n.rec.op.schema().returns())
    if (r.alias_info() && !r.alias_info()->isWrite()) return Exact::kNo;  // a view
  int64_t bytes = 0;
  for (const OutSpec& s : n.entry->outs) {
    if (s.kind != OutSpec::kNew) continue;
    rule.see(s.dtype, /*result=*/true);
    int64_t numel = 1;
    for (int64_t d : s.sizes) numel *= d;
    bytes += numel * static_cast<int64_t>(c10::elementSize(s.dtype));
  }
  for (const auto& t : n.rec.input_types)
    if (!t.dims.empty()) bytes += t.dims[0] * static_cast<int64_t>(engine::elem_size(t.elem));
  for (const ArgDesc& d : n.rec.descs) {
    switch (d.kind) {
      case lower::Arg::kTensor:
        if (!exact_ref(n, d.t, rule)) return Exact::kNo;
        break;
      case lower::Arg::kTensorList:
        for (const TensorRef& r : d.list)
          if (!exact_ref(n, r, rule)) return Exact::kNo;
        break;
      case lower::Arg::kScalar:
        if (!exact_scalar(d.value)) return Exact::kNo;
        break;
      case lower::Arg::kScalarList:
        if (!exact_scalar_list(d.value)) return Exact::kNo;
        break;
      case lower::Arg::kOther:
        // A factory's device (its CPU kernel would allocate on tpu), a generator.
        if (d.value.isDevice() || d.value.isGenerator()) return Exact::kNo;
        break;
      default:
        break;
    }
  }
  if (!rule.ok) return Exact::kNo;
  // A value-moving float node may be larger: generate()'s argmax reads the last
  // logits (8 prompts x a 128k vocabulary in float32 is 4 MiB), and compiling
  // its single-op program at the second token would be that token's compile.
  // A copy each way of a few MiB costs about a millisecond here, and a node
  // that keeps running on the host is compiled once its host time reaches a
  // compile's (host_candidate).
  const bool floats = rule.one && c10::isFloatingType(*rule.one);
  if (bytes > (floats ? kMoverMaxBytes : kHostTierMaxBytes)) return Exact::kNo;
  return floats ? Exact::kFloats : Exact::kIntegers;
}

// A host-exact node (`exact`) not compiled already, and not yet past its
// host-time budget.
bool host_candidate(const Node& n, Exact exact) {
  if (exact == Exact::kNo || n.entry->has_executable()) return false;
  HostTime& h = host_time();
  std::lock_guard<std::mutex> g(h.mu);
  auto it = h.ns.find(n.entry.get());
  return it == h.ns.end() || it->second < compile_price_ns();
}

// Notes the shape-free form of each integer/bool host-exact node of `g`
// (`exact` per node); true when one of them has been seen before under another
// key (node_sightings). Only those count as evidence: token bookkeeping is what
// grows by a column a step; a float copy_ seen with other sizes is everyday code.
bool has_volatile_node(const Trace& g, const std::vector<Exact>& exact) {
  bool any = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (exact[i] != Exact::kIntegers) continue;
    const Node& n = g.nodes[i];
    std::string sig;
    put_node(sig, n);
    any |= node_sightings().note(sig, reinterpret_cast<size_t>(n.entry.get())).changed;
  }
  return any;
}

// Node `n` with PyTorch's CPU kernel on host copies of its input buffers `in`;
// its program outputs (new results, then rewritten storages, as the single-op
// program gives them) into `outs`. False, having changed nothing, when the CPU
// kernel raises or its results are not what the Entry says.
bool run_on_host(const Trace& g, const Node& n, const Buffers& in, int device, Buffers* outs) {
  const auto& schema = n.rec.op.schema();
  std::vector<at::Tensor> flats(in.size());
  std::vector<bool> written(in.size(), false);
  struct Written {
    at::Tensor view;
    const TensorRef* ref;
  };
  std::vector<Written> views;  // the CPU kernel must write them in place
  auto host_tensor = [&](const TensorRef& r, bool write) -> at::Tensor {
    if (!r.defined) return at::Tensor();
    if (r.host_scalar) {
      at::Tensor t = at::empty({}, at::TensorOptions().dtype(r.dtype));
      std::memcpy(t.data_ptr(), g.params[n.ins[r.input].id].host.bytes, t.element_size());
      if (r.wrapped) t.unsafeGetTensorImpl()->set_wrapped_number(true);
      return t;
    }
    at::Tensor& flat = flats[r.input];
    if (!flat.defined()) flat = host_copy(*in[r.input], r.dtype, n.rec.input_types[r.input].dims[0]);
    at::Tensor v = flat.as_strided(r.layout.sizes, r.layout.strides, r.layout.offset);
    if (write) written[r.input] = true, views.push_back(Written{v, &r});
    return v;
  };
  torch::jit::Stack cpu;
  cpu.reserve(n.rec.descs.size());
  for (size_t i = 0; i < n.rec.descs.size(); ++i) {
    const ArgDesc& d = n.rec.descs[i];
    const c10::AliasInfo* ai = schema.arguments()[i].alias_info();
    bool write = ai && ai->isWrite();
    if (d.kind == lower::Arg::kTensor) {
      cpu.emplace_back(host_tensor(d.t, write));
    } else if (d.kind == lower::Arg::kTensorList &&
               n.rec.info->arg_class[i] == ArgClass::kOptTensorList) {
      c10::List<std::optional<at::Tensor>> l;
      for (const TensorRef& r : d.list)
        l.push_back(r.defined ? std::optional<at::Tensor>(host_tensor(r, write)) : std::nullopt);
      cpu.emplace_back(l);
    } else if (d.kind == lower::Arg::kTensorList) {
      c10::List<at::Tensor> l;
      for (const TensorRef& r : d.list) l.push_back(host_tensor(r, write));
      cpu.emplace_back(l);
    } else {
      cpu.push_back(d.value);  // None, the scalar as recorded, structural values
    }
  }
  try {
    n.rec.op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &cpu);
  } catch (const std::exception&) {
    return false;  // its single-op program runs it and reports as it always has
  }
  for (const Written& w : views) {
    const engine::ViewLayout& l = w.ref->layout;
    if (w.view.sizes() != c10::IntArrayRef(l.sizes) || w.view.strides() != c10::IntArrayRef(l.strides) ||
        w.view.storage_offset() != l.offset || !w.view.storage().is_alias_of(flats[w.ref->input].storage()))
      return false;
  }
  // New results, flattened in return order, against the Entry's kNew/kNone specs.
  std::vector<at::Tensor> fresh;
  const auto& returns = schema.returns();
  if (cpu.size() != returns.size()) return false;
  for (size_t r = 0; r < returns.size(); ++r) {
    if (returns[r].alias_info()) continue;
    if (cpu[r].isTensor()) fresh.push_back(cpu[r].toTensor());
    else if (cpu[r].isTensorList())
      for (const at::Tensor& t : cpu[r].toTensorList().vec()) fresh.push_back(t);
    else return false;
  }
  Buffers res;
  size_t f = 0;
  for (const OutSpec& s : n.entry->outs) {
    if (s.kind == OutSpec::kWrite) {
      if (!written[s.input] || flats[s.input].scalar_type() == c10::ScalarType::Undefined ||
          lower::to_elem(flats[s.input].scalar_type()) != s.elem)
        return false;
      res.push_back(upload_host(flats[s.input], device));
      continue;
    }
    if (f >= fresh.size()) return false;
    const at::Tensor& t = fresh[f++];
    if (s.kind == OutSpec::kNone) continue;
    if (!t.defined() || t.scalar_type() != s.dtype || t.sizes() != c10::IntArrayRef(s.sizes))
      return false;
    res.push_back(upload_host(in_layout(t, s.strides), device));
  }
  if (f != fresh.size()) return false;
  *outs = std::move(res);
  return true;
}

// Launches node `n`'s single-op program (compiling it on first use), as Strict Eager does.
Buffers launch_node(const Node& n, const Buffers& in, int device) {
  const pjrt::Executable& exe = n.entry->executable(n.rec.info->name);
  std::vector<pjrt::Buffer*> raw;
  raw.reserve(in.size());
  for (const auto& b : in) raw.push_back(b.get());
  Buffers outs = engine::launch(exe, raw, device, n.entry->origin);
  if (!n.entry->checks.empty())
    add_entry_checks(n.entry, outs.back(), device,
                     n.rec.info->name + " (a node of a Defer & Fuse graph run node by node)");
  return outs;
}

uint64_t ns_since(std::chrono::steady_clock::time_point t0) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now() - t0).count());
}

// What running a trace node by node needs, whichever way each node runs: the
// trace's inputs as buffers, each node's inputs, its outputs kept by slot id, and
// the trace's outputs handed to the tensors waiting for them.
Buffers trace_params(const Trace& g, int device) {
  Buffers params;
  params.reserve(g.params.size());
  for (auto& p : g.params) params.push_back(p.buffer ? p.buffer : host_input_buffer(p.host, device));
  return params;
}

Buffers node_inputs(const Node& n, const Buffers& cur, const Buffers& params) {
  Buffers in;
  in.reserve(n.ins.size());
  for (const NodeInput& ni : n.ins) in.push_back(ni.internal ? cur[ni.id] : params[ni.id]);
  return in;
}

void keep_outputs(const Node& n, const Buffers& outs, Buffers& cur) {
  TORCH_CHECK(outs.size() >= n.outs.size(), "internal error: node ", n.rec.info->name,
              " gave ", outs.size(), " values for ", n.outs.size(), " outputs");
  for (size_t j = 0; j < n.outs.size(); ++j) cur[n.outs[j]] = outs[j];
}

void fulfil_outputs(Trace& g, const std::vector<int>& outputs, const Buffers& cur) {
  for (int id : outputs) {
    auto& slot = g.slots[id].slot;
    slot->fulfil(cur[id], slot->raw_elem());
  }
}

}  // namespace

bool run_trace_by_node(Trace& g, const std::string& key, const std::vector<int>& outputs, int device) {
  if (g.unbounded || !host_tier_enabled() || g.nodes.size() > kMaxNodes) return false;
  // A fused program undoes the in-place writes at or after a failing
  // device-side check; one node at a time could not, so a trace with such a
  // write fuses. (Its checks are still checked node by node: an error all the
  // same, as in Strict Eager.)
  bool checked = false;
  for (const Node& n : g.nodes) {
    checked |= !n.entry->checks.empty();
    if (!checked) continue;
    for (const OutSpec& o : n.entry->outs)
      if (o.kind == OutSpec::kWrite) return false;
  }
  const size_t k = std::hash<std::string>()(key);
  std::string sig = structure(g, outputs);
  std::vector<Exact> exact(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) exact[i] = host_exact(g.nodes[i]);
  const bool volatile_node = has_volatile_node(g, exact);
  ShapeSightings::Note note = trace_sightings().note(sig, k, volatile_node);
  // A first sighting compiles as always, unless a node of it is known to change
  // shape: then its fused program would not run again either.
  if (note.first && !volatile_node) return false;
  if (!note.changed) return false;  // the one key missed again (evicted, cleared)
  if (note.spent_ns >= compile_price_ns()) return false;  // it keeps coming back: fuse it
  std::vector<bool> host(g.nodes.size());
  size_t new_programs = 0, for_host = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    host[i] = host_candidate(g.nodes[i], exact[i]);
    for_host += host[i];
    new_programs += !host[i] && !g.nodes[i].entry->has_executable();
  }
  // With no node for the host the single-op programs change key with the trace
  // (or the key changed for another reason than shapes, e.g. the matmul
  // precision): going node by node would buy nothing, so fuse.
  if (for_host == 0 || new_programs > kMaxNewPrograms) return false;

  auto t0 = std::chrono::steady_clock::now();
  Buffers params = trace_params(g, device);
  Buffers cur(g.slots.size());
  uint64_t host_nodes = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    Buffers in = node_inputs(n, cur, params);
    Buffers outs;
    auto h0 = std::chrono::steady_clock::now();
    if (host[i] && run_on_host(g, n, in, device, &outs)) {
      ++host_nodes;
      HostTime& h = host_time();
      std::lock_guard<std::mutex> lock(h.mu);
      if (h.ns.size() >= 4 * kMaxSightings) h.ns.clear();
      h.ns[n.entry.get()] += ns_since(h0);
    } else {
      outs = launch_node(n, in, device);
    }
    keep_outputs(n, outs, cur);
  }
  fulfil_outputs(g, outputs, cur);
  engine::metrics().host_tier_ops += host_nodes;
  trace_sightings().charge(sig, k, ns_since(t0));
  return true;
}

void run_trace_nodes(Trace& g, const std::vector<int>& outputs, int device) {
  Buffers params = trace_params(g, device);
  Buffers cur(g.slots.size());
  Buffers flags;  // device-side check flags of the nodes that have checks
  for (const Node& n : g.nodes) {
    Buffers outs = launch_node(n, node_inputs(n, cur, params), device);
    if (!n.entry->checks.empty()) flags.push_back(outs.back());
    keep_outputs(n, outs, cur);
  }
  fulfil_outputs(g, outputs, cur);
  // Run at their calls, these ops' checks would have finished long before this
  // sync point, which then reports them all: wait for them here, so that the
  // pipeline reports a failed check where Strict Eager without it does.
  for (auto& f : flags) {
    try {
      f->await_ready();
    } catch (const pjrt::Error&) {
      // A failed launch: reported at the sync point from its completion event.
    }
  }
}

void clear_trace_sightings() {
  trace_sightings().clear();
  node_sightings().clear();
  HostTime& h = host_time();
  std::lock_guard<std::mutex> lock(h.mu);
  h.ns.clear();
}

}  // namespace tpu::aten
