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

#include <Python.h>

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/graph_task.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "aten/deferred_buckets.h"
#include "aten/op_kernel.h"
#include "aten/python_stack.h"
#include "aten/trace.h"
#include "aten/trace_by_node.h"
#include "aten/tpu_tensor.h"
#include "engine/device_checks.h"
#include "engine/executor.h"
#include "engine/metrics.h"
#include "engine/program_cache.h"
#include "engine/transfer.h"

namespace tpu::aten {

using hlo::ElemType;

namespace {

// Process-wide statistics of every thread's traces.
struct Stats {
  std::mutex mu;
  DeferredStats s;
};

Stats& stats() {
  static auto* st = new Stats();
  return *st;
}

std::atomic<uint64_t> g_ops_recorded{0};
std::atomic<size_t> g_max_nodes{4000};

// Every live thread's trace, for synchronize() (which waits for all of them).
std::mutex g_traces_mu;
std::vector<std::weak_ptr<Trace>>& all_traces() {
  static auto* v = new std::vector<std::weak_ptr<Trace>>();
  return *v;
}

std::thread::id main_thread_id = std::this_thread::get_id();

// This thread's own trace while its thread lives (the bucket hook runs only for
// the owner's flushes, never at thread exit).
thread_local Trace* t_own_trace = nullptr;

// Owns the thread's trace: at thread exit its pending work runs (nobody else
// may ever read it, and its slots and the trace would keep each other alive).
// The main thread's is left alone: at process exit the runtime may be gone.
struct ThreadTrace {
  std::shared_ptr<Trace> t = std::make_shared<Trace>();
  ThreadTrace() {
    std::lock_guard<std::mutex> g(g_traces_mu);
    auto& v = all_traces();
    v.erase(std::remove_if(v.begin(), v.end(), [](auto& w) { return w.expired(); }), v.end());
    v.push_back(t);
    t_own_trace = t.get();
  }
  ~ThreadTrace() {
    t_own_trace = nullptr;
    if (std::this_thread::get_id() == main_thread_id) return;
    try {
      std::lock_guard<std::mutex> g(t->mu);
      t->flush_locked("thread exit");
    } catch (...) {
    }
  }
};

// With and without device checks apart (see entry_cache).
engine::ProgramCache<FusedProgram>& fused_cache(bool checks) {
  static auto* with = new engine::ProgramCache<FusedProgram>(1024);
  static auto* without = new engine::ProgramCache<FusedProgram>(1024);
  return checks ? *with : *without;
}
engine::ProgramCache<FusedProgram>& fused_cache() { return fused_cache(lower::checks_enabled()); }

thread_local const char* t_reason = nullptr;

template <typename T>
void put(std::string& key, const T& v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

int slot_id(Trace& g, const std::shared_ptr<engine::Slot>& s) {
  auto it = g.slot_ids.find(s.get());
  if (it != g.slot_ids.end()) return it->second;
  g.slots.push_back(TraceSlot{s});
  int id = static_cast<int>(g.slots.size()) - 1;
  g.slot_ids.emplace(s.get(), id);
  return id;
}

void clear(Trace& g) {
  g.nodes.clear();
  g.slots.clear();
  g.slot_ids.clear();
  g.params.clear();
  g.key.clear();
  g.device = -1;
  g.in_backward = false;
  g.pipelined.store(false, std::memory_order_relaxed);
}

// "node 17 of 214 (aten::mm), recorded at:\n  File ..." for error messages.
std::string describe_node(const Trace& g, size_t i) {
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
// storages the graph rewrites keep their contents when one fails, except the
// targets of in-place ops (below). `donated` gets the parameters the program
// aliases to an output.
std::string build(Trace& g, const std::vector<int>& outputs, size_t upto,
                  std::vector<size_t>* check_nodes = nullptr,
                  std::vector<int>* donated = nullptr) {
  std::vector<lower::Ctx::Check> checks;
  hlo::Builder b;
  std::vector<hlo::Value> pvals;
  for (const auto& p : g.params) pvals.push_back(b.parameter(p.type));
  std::vector<hlo::Value> cur(g.slots.size());
  std::vector<int> slot_of_param(g.params.size(), -1);
  for (size_t id = 0; id < g.slots.size(); ++id)
    if (g.slots[id].param >= 0) {
      cur[id] = pvals[g.slots[id].param];
      slot_of_param[g.slots[id].param] = static_cast<int>(id);
    }
  // Storages an in-place op updates (Lowering::in_place, a KV-cache write: the
  // storage it reads whose type its result has, in its in-place form or its
  // functional form followed by copy_ in a compiled graph): updated in place by
  // the program (their parameter aliased to their output) and, as in Strict
  // Eager, never rolled back when a check fails (the op drops bad elements
  // itself). Rolling back would select between old and new contents, which
  // needs the old copy: the whole cache copied per step.
  std::vector<bool> in_place(g.slots.size(), false);
  // Every slot's value before the first node that declares checks: what the
  // outputs fall back to when a check fails (that op and later ones leave no
  // partial writes visible; storages made before it keep their values).
  std::vector<hlo::Value> before;
  // A value a node writes to such a storage is gated where it is written, on
  // the checks declared so far (`failed`): later nodes then read the gated value
  // and the output is that same value, as without checks. Gating only at the
  // outputs made each output a select over an ungated value that later nodes
  // also read, and XLA recomputed the shared producers in every consumer (the
  // minGPT step's AdamW update grew by a third). `gated[id]`: how many checks
  // the gate of the slot's current value covers; only a slot written before a
  // later check needs a second select at the output.
  hlo::Value failed;
  std::vector<size_t> gated(g.slots.size(), 0);
  for (size_t k = 0; k < upto; ++k) {
    Node& n = g.nodes[k];
    if (check_nodes && before.empty() && !n.entry->checks.empty()) before = cur;
    std::vector<hlo::Value> in;
    in.reserve(n.ins.size());
    for (const auto& i : n.ins) in.push_back(i.internal ? cur[i.id] : pvals[i.id]);
    std::vector<hlo::Value> vals;
    size_t had = checks.size();
    try {
      vals = emit(n.rec, b, in, *n.entry, check_nodes ? &checks : nullptr).values;
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "Defer & Fuse: lowering ", describe_node(g, k), "\nfailed: ", e.what());
    }
    if (n.rec.info->lowering && n.rec.info->lowering->in_place) {
      for (size_t i = 0; i < n.ins.size(); ++i) {
        int id = n.ins[i].internal ? n.ins[i].id : slot_of_param[n.ins[i].id];
        if (id < 0) continue;
        for (const hlo::Value& v : vals)
          if (v.type == in[i].type) in_place[id] = true;
      }
    } else if (n.rec.info->name == "aten::copy_") {
      // A compiled graph updates the clone (auto_functionalized) and copies it back.
      for (size_t i = 0; i < n.ins.size(); ++i)
        if (n.ins[i].internal && in_place[n.ins[i].id])
          for (size_t j = 0; j < vals.size(); ++j)
            if (vals[j].type == in[i].type) in_place[n.outs[j]] = true;
    }
    if (check_nodes) check_nodes->insert(check_nodes->end(), checks.size() - had, k);
    for (size_t c = had; c < checks.size(); ++c)
      failed = failed.valid() ? b.binary("or", failed, checks[c].failed) : checks[c].failed;
    for (size_t j = 0; j < vals.size(); ++j) {
      int id = n.outs[j];
      cur[id] = vals[j];
      gated[id] = 0;
      if (failed.valid() && !before.empty() && before[id].valid() && !in_place[id]) {
        cur[id] = unless_failed(b, failed, before[id], vals[j]);
        gated[id] = checks.size();
      }
    }
  }
  std::vector<hlo::Value> rets;
  for (int id : outputs) {
    bool covered =
        in_place[id] || gated[id] == checks.size() || before.empty() || !before[id].valid();
    rets.push_back(covered ? cur[id] : unless_failed(b, failed, before[id], cur[id]));
    int param = g.slots[id].param;
    if (donated && in_place[id] && param >= 0 && rets.back().type == pvals[param].type) {
      b.donate(pvals[param], static_cast<int>(rets.size()) - 1);
      donated->push_back(param);
    }
  }
  if (!checks.empty()) rets.push_back(check_flags(b, checks));
  b.ret(rets);
  return b.module_text();
}

// A fused program failed to compile: finds the first node whose prefix of the
// graph fails (a binary search over prefixes, each compiled with every value it
// writes as an output so that nothing is dead), to name it and where it was
// recorded. Only runs on the error path.
std::string locate_compile_failure(Trace& g) {
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

}  // namespace

std::shared_ptr<CheckSites> check_sites(const Trace& g, const FusedProgram& prog) {
  auto cs = std::make_shared<CheckSites>();
  size_t prev = SIZE_MAX, j = 0;
  for (size_t node : prog.check_nodes) {
    j = node == prev ? j + 1 : 0;
    prev = node;
    const Node& n = g.nodes[node];
    cs->entries.push_back(n.entry);
    cs->specs.push_back(&n.entry->checks.at(j));
    cs->sites.push_back(CheckSites::Site{n.rec.info->name, n.stack, node});
  }
  cs->total_nodes = g.nodes.size();
  return cs;
}

// Hands a launched fused program's check flags to engine/device_checks.h, with
// what names each check's node and the Python line that recorded it.
void register_checks(const std::shared_ptr<CheckSites>& cs, std::shared_ptr<pjrt::Buffer> flags,
                     int device) {
  engine::PendingChecks p;
  p.specs = cs->specs;
  p.flags = std::move(flags);
  p.keep = cs;
  p.where = [cs](size_t i) {
    const CheckSites::Site& s = cs->sites[i];
    std::string d = "node " + std::to_string(s.node + 1) + " of " + std::to_string(cs->total_nodes) +
                    " (" + s.op + ") of a fused graph, ";
    if (s.stack.empty()) return d + "recorded without a Python frame (by autograd's backward, or with TORCH_TPU_DEFER_STACKS=0)";
    return d + "recorded at (most recent call last):\n" + s.stack.format();
  };
  p.device = device;
  engine::add_pending_checks(std::move(p));
}

namespace {

void run_graph(Trace& g, const std::string& reason, RunInfo* info) {
  std::vector<int> outputs;  // written storages someone can still read
  for (size_t id = 0; id < g.slots.size(); ++id)
    if (g.slots[id].written && g.slots[id].slot->alive()) outputs.push_back(static_cast<int>(id));
  std::string key = g.key;
  key.push_back('|');
  for (int id : outputs) put(key, id);
  int device = g.device < 0 ? 0 : g.device;
  std::string what = "a fused graph of " + std::to_string(g.nodes.size()) + " ops (" +
                     g.nodes.front().rec.info->name + " ... " + g.nodes.back().rec.info->name + ")";

  bool compiled = false;
  double compile_seconds = 0;
  std::shared_ptr<FusedProgram> prog = fused_cache().find(key);
  // A miss whose shapes keep changing runs node by node instead of compiling a
  // program that would never run again (trace_by_node.h). Only on a miss: a hit
  // costs nothing more. A compiled trace's capture (info) must become a program.
  // Strict Eager's pipelined ops: each its own single-op program, as if run at
  // its call (trace_by_node.h, run_trace_nodes).
  if (g.pipelined.load(std::memory_order_relaxed) && !info) {
    run_trace_nodes(g, outputs, device);
    Stats& st = stats();
    std::lock_guard<std::mutex> lock(st.mu);
    st.s.graphs_pipelined++;
    st.s.nodes_pipelined += g.nodes.size();
    st.s.materializations[reason]++;
    g.runs++;
    return;
  }
  if (!prog && !info && run_trace_by_node(g, key, outputs, device)) {
    Stats& st = stats();
    std::lock_guard<std::mutex> lock(st.mu);
    st.s.graphs_run_by_node++;
    st.s.nodes_run_by_node += g.nodes.size();
    st.s.materializations[reason]++;
    g.runs++;
    return;
  }
  // Otherwise a trace whose sizes keep changing may run as its size's bucket
  // program (deferred_buckets.h), when it verifies against its template. After
  // the node-by-node rule: a small trace that runs with no compile at all (a
  // generate loop's growing cat) is better off there.
  if (!prog && !info && &g == t_own_trace && run_trace_bucketed(g, outputs, device)) {
    Stats& st = stats();
    std::lock_guard<std::mutex> lock(st.mu);
    st.s.graphs_run_bucketed++;
    st.s.materializations[reason]++;
    g.runs++;
    return;
  }
  if (!prog) {
    compiled = true;
    prog = std::make_shared<FusedProgram>();
    std::string mlir = build(g, outputs, g.nodes.size(), &prog->check_nodes, &prog->donated);
    auto t0 = std::chrono::steady_clock::now();
    try {
      prog->exe = engine::compile_program(mlir, what);
    } catch (const std::exception& e) {
      std::string where = locate_compile_failure(g);
      if (where.empty()) throw;
      TORCH_CHECK(false, "Defer & Fuse: ", what, " failed to compile; the first failing op is ",
                  where, "\n", e.what());
    }
    compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fused_cache().insert(key, prog);
  }
  std::vector<std::shared_ptr<pjrt::Buffer>> bufs;
  bufs.reserve(g.params.size());
  for (auto& p : g.params) bufs.push_back(p.buffer ? p.buffer : host_input_buffer(p.host, device));
  std::vector<pjrt::Buffer*> raw;
  raw.reserve(bufs.size());
  for (auto& b : bufs) raw.push_back(b.get());
  // An aliased parameter is donated (updated in place) when its storage's slot, the
  // trace's parameter and `bufs` hold the only references to its buffer. Not on a
  // compiled graph's capture: it may keep a parameter's buffer as a constant.
  std::vector<int64_t> donate;
  if (!info || !info->capturing)
    for (int p : prog->donated)
      if (bufs[p].use_count() == 3) donate.push_back(p);
  engine::metrics().donated_inputs += donate.size();
  // The check sites copy their nodes' stacks; then every node's stack moves into
  // the list a run-time failure of this launch is described from.
  std::shared_ptr<CheckSites> checks;
  if (!prog->check_nodes.empty()) checks = check_sites(g, *prog);
  auto sites = std::make_shared<std::vector<NodeSite>>();
  sites->reserve(g.nodes.size());
  for (auto& n : g.nodes) sites->push_back(NodeSite{n.rec.info, std::move(n.stack)});
  std::function<std::string()> where = [sites] { return describe_sites(*sites); };
  auto outs = engine::launch(*prog->exe, raw.data(), raw.size(), device,
                            std::make_shared<const engine::LaunchOrigin>(
                                engine::LaunchOrigin{what, where}),
                            donate);
  if (checks) register_checks(checks, outs.back(), device);
  for (size_t j = 0; j < outputs.size(); ++j) {
    auto& s = g.slots[outputs[j]].slot;
    s->fulfil(outs[j], s->raw_elem());
  }
  {
    Stats& st = stats();
    std::lock_guard<std::mutex> lock(st.mu);
    (compiled ? st.s.fused_cache_misses : st.s.fused_cache_hits)++;
    st.s.graphs_run++;
    st.s.graph_nodes_total += g.nodes.size();
    if (g.nodes.size() > st.s.largest_graph) st.s.largest_graph = g.nodes.size();
    st.s.materializations[reason]++;
  }
  g.runs++;
  if (info) {
    info->ran = true;
    info->compiled = compiled;
    info->compile_seconds = compile_seconds;
    info->prog = prog;
    info->outputs = std::move(outputs);
    info->slots.clear();
    info->param_slot.assign(g.params.size(), -1);
    for (size_t id = 0; id < g.slots.size(); ++id) {
      info->slots.push_back(g.slots[id].slot);
      if (g.slots[id].param >= 0) info->param_slot[g.slots[id].param] = static_cast<int>(id);
    }
    info->params = std::move(g.params);
    info->checks = checks;
    info->where = std::move(where);
    info->device = device;
  }
}

void flush_hook(engine::Slot* slot) {
  std::shared_ptr<void> owner = slot->pending_owner();
  if (!owner) return;  // flushed meanwhile by its owner
  auto* t = static_cast<Trace*>(owner.get());
  std::lock_guard<std::mutex> lock(t->mu);
  t->flush_locked(t_reason ? t_reason : "storage read");
}

// Runs the traces of other threads that hold a pending value `c` reads, so that
// this thread's trace reads it as a parameter. False when one is still pending
// elsewhere (another thread recorded a new write meanwhile: the caller retries).
bool no_foreign_pending(const Call& c, const Trace* mine) {
  for (const auto& in : c.inputs) {
    if (in.kind != Input::kSlot || !in.slot->pending()) continue;
    std::shared_ptr<void> owner = in.slot->pending_owner();
    if (owner && owner.get() != mine) return false;
  }
  return true;
}

void flush_foreign(const Call& c, const Trace* mine) {
  for (const auto& in : c.inputs) {
    if (in.kind != Input::kSlot || !in.slot->pending()) continue;
    std::shared_ptr<void> owner = in.slot->pending_owner();
    if (!owner || owner.get() == mine) continue;
    auto* t = static_cast<Trace*>(owner.get());
    std::lock_guard<std::mutex> lock(t->mu);
    t->flush_locked("read by another thread");
  }
}

// The trace a backward pass records into on this thread (autograd's device
// thread runs the backward of every thread that calls backward()): the trace of
// the thread whose pending values the graph task first reads, so that forward,
// backward and optimizer step stay one fused program as on one thread.
struct Adopted {
  std::weak_ptr<Trace> trace;
  int task = -1;
};
thread_local Adopted t_adopted;

std::shared_ptr<Trace> trace_for(const Call& c) {
  const std::shared_ptr<Trace>& own = this_thread_trace();
  int task = torch::autograd::get_current_graph_task_id();
  if (task < 0 || own->unbounded) return own;  // not in a backward; or capturing a compiled graph
  if (t_adopted.task == task)
    if (std::shared_ptr<Trace> t = t_adopted.trace.lock()) return t;
  for (const auto& in : c.inputs) {
    if (in.kind != Input::kSlot || !in.slot->pending()) continue;
    std::shared_ptr<void> owner = in.slot->pending_owner();
    if (!owner || owner == own) continue;
    auto t = std::static_pointer_cast<Trace>(owner);
    t_adopted = Adopted{t, task};
    return t;
  }
  return own;
}

// The generator a kRng input draws from (none: the device's default).
std::optional<at::Generator> rng_generator(Call& c) {
  std::optional<at::Generator> gen;
  for (size_t i = 0; i < c.nargs; ++i)
    if (c.info.arg_class[i] == ArgClass::kGenerator && !c.arg(i).isNone())
      gen = c.arg(i).toGenerator();
  return gen;
}

}  // namespace

void Trace::flush_locked(const std::string& reason, RunInfo* info) {
  Trace& g = *this;
  if (g.nodes.empty()) return;
  try {
    run_graph(g, reason, info);
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

const std::shared_ptr<Trace>& this_thread_trace() {
  if (const std::shared_ptr<Trace>* side = side_trace()) return *side;
  thread_local ThreadTrace t;
  return t.t;
}

FlushReason::FlushReason(const char* reason) : prev_(t_reason) { t_reason = reason; }
FlushReason::~FlushReason() { t_reason = prev_; }

bool pipelining_on_this_thread() {
  return this_thread_trace()->pipelined.load(std::memory_order_relaxed);
}

void record_deferred(Call& c, std::shared_ptr<Entry> e, bool pipelined) {
  // Before the trace's lock: capturing takes the GIL, and a thread holding the
  // GIL may be waiting for that lock (to flush this trace).
  PyStack stack = PyStack::capture();
  const std::shared_ptr<Trace> tp = trace_for(c);
  Trace& g = *tp;
  std::unique_lock<std::mutex> lock(g.mu, std::defer_lock);
  // Values pending in other threads' traces run there first, without holding
  // this trace's lock (two threads reading each other's values cannot deadlock).
  for (;;) {
    flush_foreign(c, tp.get());
    lock.lock();
    if (no_foreign_pending(c, tp.get())) break;
    lock.unlock();
  }
  if (g.device >= 0 && g.device != c.device) g.flush_locked("device change");
  g.device = c.device;
  if (pipelined && g.nodes.empty() && !g.unbounded) g.pipelined.store(true, std::memory_order_relaxed);
  draw_rng(c, *e);

  if (torch::autograd::get_current_graph_task_id() >= 0) g.in_backward = true;
  Node n{c.take_record(), e, {}, {}, std::move(stack)};
  put(g.key, c.key.size());
  g.key.append(c.key);
  n.ins.reserve(c.inputs.size());
  for (auto& in : c.inputs) {
    NodeInput ni;
    if (in.kind == Input::kSlot) {
      int id = slot_id(g, in.slot);
      TraceSlot& gs = g.slots[id];
      if (gs.written) {
        ni = {true, id};
      } else {
        if (gs.param < 0) {
          TORCH_CHECK(!in.slot->pending(), "internal error: a pending storage outside the trace");
          TraceParam p;
          p.type = in.type;
          p.buffer = in.slot->raw_buffer();
          g.params.push_back(std::move(p));
          gs.param = static_cast<int>(g.params.size()) - 1;
        }
        ni = {false, gs.param};
      }
      g.key.push_back(ni.internal ? 'i' : 'e');
      put(g.key, id);
    } else {
      TraceParam p;
      p.type = in.type;
      p.host = in;
      if (in.kind == Input::kRng) {
        p.gen = rng_generator(c);
        p.rng_numbers = e->rng_numbers;
      }
      g.params.push_back(std::move(p));
      ni = {false, static_cast<int>(g.params.size()) - 1};
    }
    n.ins.push_back(ni);
  }

  std::shared_ptr<void> owner = tp;
  std::vector<at::Tensor> fresh;
  fresh.reserve(e->outs.size());
  n.outs.reserve(e->outs.size());
  for (const OutSpec& s : e->outs) {
    if (s.kind == OutSpec::kNone) {
      fresh.push_back(at::Tensor());
      continue;
    }
    std::shared_ptr<engine::Slot> slot;
    ElemType elem;
    if (s.kind == OutSpec::kNew) {
      at::Tensor t = empty_result(s.sizes, s.strides, s.dtype, c.device);
      slot = slot_ref(t);
      elem = lower::to_elem(s.dtype);
      fresh.push_back(std::move(t));
    } else {
      slot = c.inputs[s.input].slot;
      elem = s.elem;
    }
    int id = slot_id(g, slot);
    g.slots[id].written = true;
    slot->set_pending(elem, owner);
    n.outs.push_back(id);
    put(g.key, id);
  }
  g.nodes.push_back(std::move(n));
  g_ops_recorded.fetch_add(1, std::memory_order_relaxed);
  engine::metrics().ops_executed++;
  push_results(c, *e, fresh);
  if (!g.unbounded && g.nodes.size() >= g_max_nodes.load(std::memory_order_relaxed))
    g.flush_locked("graph size limit");
}

void flush_pending(const std::string& reason) {
  Trace& g = *this_thread_trace();
  std::lock_guard<std::mutex> lock(g.mu);
  g.flush_locked(reason);
}

void settle_for_memory_query() {
  if (!pipelining_on_this_thread()) return;
  if (!Py_IsInitialized() || !PyGILState_Check()) {
    flush_pending("memory query");
    return;
  }
  // Other Python threads go on while the pipelined programs compile (and a
  // compile job's closure may need the GIL to be destroyed).
  struct NoGil {
    PyThreadState* saved = PyEval_SaveThread();
    ~NoGil() { PyEval_RestoreThread(saved); }
  } no_gil;
  flush_pending("memory query");
}

// Every thread's trace that is still alive (taken under the registry's lock; each
// is then flushed under its own).
static std::vector<std::shared_ptr<Trace>> live_traces() {
  std::vector<std::shared_ptr<Trace>> live;
  std::lock_guard<std::mutex> g(g_traces_mu);
  for (auto& w : all_traces())
    if (auto t = w.lock()) live.push_back(std::move(t));
  return live;
}

void flush_pipelined(const std::string& reason) {
  for (auto& t : live_traces()) {
    if (!t->pipelined.load(std::memory_order_relaxed)) continue;
    std::lock_guard<std::mutex> lock(t->mu);
    if (t->pipelined.load(std::memory_order_relaxed)) t->flush_locked(reason);
  }
}

void flush_all_pending(const std::string& reason) {
  for (auto& t : live_traces()) {
    std::lock_guard<std::mutex> lock(t->mu);
    t->flush_locked(reason);
  }
}

void flush_if_uses(engine::Slot* slot, const std::string& reason) {
  if (std::shared_ptr<void> owner = slot->pending_owner()) {
    auto* t = static_cast<Trace*>(owner.get());
    std::lock_guard<std::mutex> lock(t->mu);
    t->flush_locked(reason);
  }
  Trace& g = *this_thread_trace();
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.slot_ids.count(slot)) g.flush_locked(reason);
}

DeferredStats deferred_stats() {
  Stats& st = stats();
  std::lock_guard<std::mutex> lock(st.mu);
  DeferredStats s = st.s;
  s.ops_recorded = g_ops_recorded.load();
  return s;
}

void reset_deferred_stats() {
  Stats& st = stats();
  std::lock_guard<std::mutex> lock(st.mu);
  st.s = DeferredStats{};
  g_ops_recorded = 0;
}

size_t pending_nodes() {
  Trace& g = *this_thread_trace();
  std::lock_guard<std::mutex> lock(g.mu);
  return g.nodes.size();
}

void set_max_graph_nodes(size_t n) { g_max_nodes = n < 1 ? 1 : n; }

size_t max_graph_nodes() { return g_max_nodes.load(); }

void clear_fused_cache() {
  fused_cache(true).clear(), fused_cache(false).clear();
  clear_trace_sightings();  // a first sighting compiles again, as after any clear
}

void install_flush_hook() { engine::set_flush_hook(&flush_hook); }

}  // namespace tpu::aten
