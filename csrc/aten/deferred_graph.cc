// The pending graph of Defer & Fuse.
//
// Recording an op appends a node that holds no tensor: its argument
// descriptors, the Entry of its signature (result dtypes and shapes, known from
// PyTorch's meta kernels before anything runs), and where each input comes from
// -- a graph parameter (a storage's buffer as it was when read, a host scalar,
// an RNG state) or the current pending value of a storage written earlier in
// the graph. Results are new storages marked pending.
//
// Flushing builds one program: every node is emitted through the same emit()
// as Strict Eager, and the outputs are the final values of the storages the
// graph wrote *that are still alive*; intermediates nobody holds any more are
// never materialised, so XLA fuses them away. Fused programs are cached by the
// graph's structure (the nodes' keys and how their inputs connect), so a
// training loop whose steps record the same ops reaches a steady state with
// no new compiles.
#include "aten/deferred_graph.h"

#include <c10/util/Exception.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "aten/op_kernel.h"
#include "aten/python_stack.h"
#include "aten/tpu_tensor.h"
#include "engine/device_checks.h"
#include "engine/executor.h"
#include "engine/metrics.h"
#include "engine/program_cache.h"
#include "engine/transfer.h"

namespace tpu::aten {

using hlo::ElemType;

namespace {

struct Param {
  hlo::TensorType type;
  std::shared_ptr<pjrt::Buffer> buffer;  // a storage's contents when first read
  Input host;                            // otherwise: a host value or RNG state
};

struct NodeInput {
  bool internal = false;  // true: a storage's pending value (id = graph slot)
  int id = -1;            // false: a parameter
};

struct Node {
  OpRecord rec;
  std::shared_ptr<Entry> entry;
  std::vector<NodeInput> ins;  // one per call input
  std::vector<int> outs;       // graph slot defined by each non-kNone OutSpec
  PyStack stack;               // where the user's code recorded it
};

struct GraphSlot {
  std::shared_ptr<engine::Slot> slot;
  int param = -1;        // parameter holding its value as read before any write
  bool written = false;  // produced or rewritten by the graph
};

struct FusedProgram {
  std::shared_ptr<pjrt::Executable> exe;
  // The node of each device-side check; with any, the last output is their flags.
  std::vector<size_t> check_nodes;
};

struct Graph {
  std::recursive_mutex mu;
  std::vector<Node> nodes;
  std::vector<GraphSlot> slots;
  std::unordered_map<engine::Slot*, int> slot_ids;
  std::vector<Param> params;
  std::string key;
  int device = -1;
  size_t max_nodes = 4000;
  DeferredStats stats;
};

Graph& graph() {
  static auto* g = new Graph();
  return *g;
}

engine::ProgramCache<FusedProgram>& fused_cache() {
  static auto* c = new engine::ProgramCache<FusedProgram>(1024);
  return *c;
}

thread_local const char* t_reason = nullptr;

template <typename T>
void put(std::string& key, const T& v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

int slot_id(Graph& g, const std::shared_ptr<engine::Slot>& s) {
  auto it = g.slot_ids.find(s.get());
  if (it != g.slot_ids.end()) return it->second;
  g.slots.push_back(GraphSlot{s});
  int id = static_cast<int>(g.slots.size()) - 1;
  g.slot_ids.emplace(s.get(), id);
  return id;
}

void clear(Graph& g) {
  g.nodes.clear();
  g.slots.clear();
  g.slot_ids.clear();
  g.params.clear();
  g.key.clear();
  g.device = -1;
}

// "node 17 of 214 (aten::mm), recorded at:\n  File ..." for error messages.
std::string describe_node(const Graph& g, size_t i) {
  const Node& n = g.nodes[i];
  std::string s = "node " + std::to_string(i + 1) + " of " + std::to_string(g.nodes.size()) +
                  " (" + n.rec.info->name + "), ";
  if (n.stack.empty())
    return s + "recorded without a Python frame (by autograd's backward, or with "
               "TORCH_TPU_DEFER_STACKS=0)";
  return s + "recorded at (most recent call last):\n" + n.stack.format();
}

// Emits the first `upto` nodes; returns the program's MLIR text. `outputs` are
// graph slots, each written by one of those nodes. With `check_nodes`, the
// nodes' device-side checks become a last output (their nodes listed there) and
// storages the graph rewrites keep their contents when one fails.
std::string build(Graph& g, const std::vector<int>& outputs, size_t upto,
                  std::vector<size_t>* check_nodes = nullptr) {
  std::vector<lower::Ctx::Check> checks;
  hlo::Builder b;
  std::vector<hlo::Value> pvals;
  for (const auto& p : g.params) pvals.push_back(b.parameter(p.type));
  std::vector<hlo::Value> cur(g.slots.size());
  for (size_t id = 0; id < g.slots.size(); ++id)
    if (g.slots[id].param >= 0) cur[id] = pvals[g.slots[id].param];
  // Every slot's value before the first node that declares checks: what the
  // outputs fall back to when a check fails (that op and later ones leave no
  // partial writes visible; storages made before it keep their values).
  std::vector<hlo::Value> before;
  for (size_t k = 0; k < upto; ++k) {
    Node& n = g.nodes[k];
    if (check_nodes && before.empty() && !n.entry->checks.empty()) before = cur;
    std::vector<hlo::Value> in;
    in.reserve(n.ins.size());
    for (const auto& i : n.ins) in.push_back(i.internal ? cur[i.id] : pvals[i.id]);
    std::vector<hlo::Value> vals;
    size_t had = checks.size();
    try {
      vals = emit(n.rec, b, in, *n.entry, false, check_nodes ? &checks : nullptr);
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "Defer & Fuse: lowering ", describe_node(g, k), "\nfailed: ", e.what());
    }
    if (check_nodes) check_nodes->insert(check_nodes->end(), checks.size() - had, k);
    for (size_t j = 0; j < vals.size(); ++j) cur[n.outs[j]] = vals[j];
  }
  std::vector<hlo::Value> rets;
  hlo::Value failed;
  if (!checks.empty()) failed = any_failed(b, checks);
  for (int id : outputs)
    rets.push_back(checks.empty() ? cur[id] : unless_failed(b, failed, before.empty() ? hlo::Value{} : before[id], cur[id]));
  if (!checks.empty()) rets.push_back(check_flags(b, checks));
  b.ret(rets);
  return b.module_text();
}

// A fused program failed to compile: finds the first node whose prefix of the
// graph fails (a binary search over prefixes, each compiled with every value it
// writes as an output so that nothing is dead), to name it and where it was
// recorded. Only runs on the error path.
std::string locate_compile_failure(Graph& g) {
  auto fails = [&](size_t upto) {
    std::vector<int> outs;
    std::vector<bool> seen(g.slots.size(), false);
    for (size_t k = 0; k < upto; ++k)
      for (int id : g.nodes[k].outs)
        if (!seen[id]) seen[id] = true, outs.push_back(id);
    try {
      engine::compile_program(build(g, outs, upto), "a prefix of a failed fused graph");
      return false;
    } catch (const std::exception&) {
      return true;
    }
  };
  size_t lo = 0, hi = g.nodes.size();  // prefix lo compiles; prefix hi fails
  if (!fails(hi)) return "";
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    (fails(mid) ? hi : lo) = mid;
  }
  return describe_node(g, hi - 1);
}

// Where each node of a graph being run came from (moved out of the nodes,
// which are cleared after the launch): for the messages of its device-side
// checks and of a run-time failure, both reported later.
struct NodeSite {
  const OpInfo* info;
  PyStack stack;
};
using NodeSites = std::shared_ptr<std::vector<NodeSite>>;

// "recorded at" text of a fused graph that failed at run time: each distinct
// Python line and the ops recorded there, in recording order.
std::string describe_sites(const std::vector<NodeSite>& sites) {
  std::vector<std::pair<std::string, std::string>> lines;  // (stack text, ops)
  std::unordered_map<std::string, size_t> at;
  for (const auto& s : sites) {
    std::string text = s.stack.empty() ? "  (no Python frame: autograd's backward, or "
                                         "TORCH_TPU_DEFER_STACKS=0)\n"
                                       : s.stack.format();
    auto it = at.find(text);
    if (it == at.end()) {
      at.emplace(text, lines.size());
      lines.emplace_back(text, s.info->name);
    } else if (lines[it->second].second.size() < 200) {
      lines[it->second].second += ", " + s.info->name;
    }
  }
  std::string out = "Defer & Fuse: the graph's " + std::to_string(sites.size()) +
                    " ops were recorded at (most recent call last):";
  const size_t shown = std::min<size_t>(lines.size(), 20);
  for (size_t i = 0; i < shown; ++i) out += "\n" + lines[i].second + ":\n" + lines[i].first;
  if (shown < lines.size()) out += "\n... and " + std::to_string(lines.size() - shown) + " more lines";
  return out;
}

// Hands a launched fused program's check flags to engine/device_checks.h, with
// what names each check's node and the Python line that recorded it.
void register_checks(const Graph& g, const FusedProgram& prog, std::shared_ptr<pjrt::Buffer> flags,
                     int device, const NodeSites& nodes) {
  auto entries = std::make_shared<std::vector<std::shared_ptr<Entry>>>();
  auto check_nodes = std::make_shared<std::vector<size_t>>(prog.check_nodes);
  engine::PendingChecks p;
  size_t prev = SIZE_MAX, j = 0;
  for (size_t node : prog.check_nodes) {
    j = node == prev ? j + 1 : 0;
    prev = node;
    const Node& n = g.nodes[node];
    entries->push_back(n.entry);
    p.specs.push_back(&n.entry->checks.at(j));
  }
  const size_t total = g.nodes.size();
  p.flags = std::move(flags);
  p.keep = entries;
  p.where = [nodes, check_nodes, total](size_t i) {
    const size_t node = (*check_nodes)[i];
    const NodeSite& s = (*nodes)[node];
    std::string d = "node " + std::to_string(node + 1) + " of " + std::to_string(total) + " (" +
                    s.info->name + ") of a fused graph, ";
    if (s.stack.empty()) return d + "recorded without a Python frame (by autograd's backward, or with TORCH_TPU_DEFER_STACKS=0)";
    return d + "recorded at (most recent call last):\n" + s.stack.format();
  };
  p.device = device;
  engine::add_pending_checks(std::move(p));
}

void run_graph(Graph& g, const std::string& reason) {
  std::vector<int> outputs;  // written storages someone can still read
  for (size_t id = 0; id < g.slots.size(); ++id)
    if (g.slots[id].written && g.slots[id].slot->alive()) outputs.push_back(static_cast<int>(id));
  std::string key = g.key;
  key.push_back('|');
  for (int id : outputs) put(key, id);
  int device = g.device < 0 ? 0 : g.device;
  std::string what = "a fused graph of " + std::to_string(g.nodes.size()) + " ops (" +
                     g.nodes.front().rec.info->name + " ... " + g.nodes.back().rec.info->name + ")";

  std::shared_ptr<FusedProgram> prog = fused_cache().find(key);
  if (prog) {
    g.stats.fused_cache_hits++;
  } else {
    g.stats.fused_cache_misses++;
    prog = std::make_shared<FusedProgram>();
    std::string mlir = build(g, outputs, g.nodes.size(), &prog->check_nodes);
    try {
      prog->exe = engine::compile_program(mlir, what);
    } catch (const std::exception& e) {
      std::string where = locate_compile_failure(g);
      if (where.empty()) throw;
      TORCH_CHECK(false, "Defer & Fuse: ", what, " failed to compile; the first failing op is ",
                  where, "\n", e.what());
    }
    fused_cache().insert(key, prog);
  }
  std::vector<std::shared_ptr<pjrt::Buffer>> bufs;
  bufs.reserve(g.params.size());
  for (auto& p : g.params) bufs.push_back(p.buffer ? p.buffer : host_input_buffer(p.host, device));
  std::vector<pjrt::Buffer*> raw;
  raw.reserve(bufs.size());
  for (auto& b : bufs) raw.push_back(b.get());
  auto sites = std::make_shared<std::vector<NodeSite>>();
  sites->reserve(g.nodes.size());
  for (auto& n : g.nodes) sites->push_back(NodeSite{n.rec.info, std::move(n.stack)});
  auto outs = engine::launch(*prog->exe, raw, device, what,
                             [sites] { return describe_sites(*sites); });
  if (!prog->check_nodes.empty()) register_checks(g, *prog, outs.back(), device, sites);
  for (size_t j = 0; j < outputs.size(); ++j) {
    auto& s = g.slots[outputs[j]].slot;
    s->fulfil(outs[j], s->raw_elem());
  }
  g.stats.graphs_run++;
  g.stats.graph_nodes_total += g.nodes.size();
  if (g.nodes.size() > g.stats.largest_graph) g.stats.largest_graph = g.nodes.size();
  g.stats.materializations[reason]++;
}

void flush_locked(Graph& g, const std::string& reason) {
  if (g.nodes.empty()) return;
  try {
    run_graph(g, reason);
  } catch (...) {
    // The values cannot be computed: leave the storages readable (as they
    // were before) rather than pending forever, then report.
    for (auto& s : g.slots)
      if (s.written) s.slot->drop_pending();
    clear(g);
    throw;
  }
  for (auto& s : g.slots)
    if (s.written) s.slot->drop_pending();  // dead ones were never output
  clear(g);
}

void flush_hook(engine::Slot*) { flush_pending(t_reason ? t_reason : "storage read"); }

}  // namespace

FlushReason::FlushReason(const char* reason) : prev_(t_reason) { t_reason = reason; }
FlushReason::~FlushReason() { t_reason = prev_; }

void record_deferred(Call& c, std::shared_ptr<Entry> e) {
  // Before the graph's lock: capturing takes the GIL, and a thread holding the
  // GIL may be waiting for that lock.
  PyStack stack = PyStack::capture();
  Graph& g = graph();
  std::lock_guard<std::recursive_mutex> lock(g.mu);
  if (g.device >= 0 && g.device != c.device) flush_locked(g, "device change");
  g.device = c.device;
  draw_rng(c, *e);

  Node n{c.take_record(), e, {}, {}, std::move(stack)};
  put(g.key, c.key.size());
  g.key.append(c.key);
  for (auto& in : c.inputs) {
    NodeInput ni;
    if (in.kind == Input::kSlot) {
      int id = slot_id(g, in.slot);
      GraphSlot& gs = g.slots[id];
      if (gs.written) {
        ni = {true, id};
      } else {
        if (gs.param < 0) {
          TORCH_CHECK(!in.slot->pending(), "internal error: a pending storage outside the graph");
          g.params.push_back(Param{in.type, in.slot->raw_buffer(), {}});
          gs.param = static_cast<int>(g.params.size()) - 1;
        }
        ni = {false, gs.param};
      }
      g.key.push_back(ni.internal ? 'i' : 'e');
      put(g.key, id);
    } else {
      Param p;
      p.type = in.type;
      p.host = in;
      g.params.push_back(std::move(p));
      ni = {false, static_cast<int>(g.params.size()) - 1};
    }
    n.ins.push_back(ni);
  }

  std::vector<at::Tensor> fresh;
  for (const OutSpec& s : e->outs) {
    if (s.kind == OutSpec::kNone) {
      fresh.push_back(at::Tensor());
      continue;
    }
    std::shared_ptr<engine::Slot> slot;
    ElemType elem;
    if (s.kind == OutSpec::kNew) {
      at::Tensor t = empty_tpu(s.sizes, s.dtype, c.device);
      slot = slot_ref(t);
      elem = lower::to_elem(s.dtype);
      fresh.push_back(std::move(t));
    } else {
      slot = c.inputs[s.input].slot;
      elem = s.elem;
    }
    int id = slot_id(g, slot);
    g.slots[id].written = true;
    slot->set_pending(elem);
    n.outs.push_back(id);
    put(g.key, id);
  }
  g.nodes.push_back(std::move(n));
  g.stats.ops_recorded++;
  engine::metrics().ops_executed++;
  push_results(c, *e, fresh);
  if (g.nodes.size() >= g.max_nodes) flush_locked(g, "graph size limit");
}

void flush_pending(const std::string& reason) {
  Graph& g = graph();
  std::lock_guard<std::recursive_mutex> lock(g.mu);
  flush_locked(g, reason);
}

void flush_if_uses(engine::Slot* slot, const std::string& reason) {
  Graph& g = graph();
  std::lock_guard<std::recursive_mutex> lock(g.mu);
  if (g.slot_ids.count(slot)) flush_locked(g, reason);
}

DeferredStats deferred_stats() {
  Graph& g = graph();
  std::lock_guard<std::recursive_mutex> lock(g.mu);
  return g.stats;
}

void reset_deferred_stats() {
  Graph& g = graph();
  std::lock_guard<std::recursive_mutex> lock(g.mu);
  g.stats = DeferredStats{};
}

size_t pending_nodes() {
  Graph& g = graph();
  std::lock_guard<std::recursive_mutex> lock(g.mu);
  return g.nodes.size();
}

void set_max_graph_nodes(size_t n) {
  Graph& g = graph();
  std::lock_guard<std::recursive_mutex> lock(g.mu);
  g.max_nodes = n < 1 ? 1 : n;
}

size_t max_graph_nodes() {
  Graph& g = graph();
  std::lock_guard<std::recursive_mutex> lock(g.mu);
  return g.max_nodes;
}

void clear_fused_cache() { fused_cache().clear(); }

void install_flush_hook() { engine::set_flush_hook(&flush_hook); }

}  // namespace tpu::aten
