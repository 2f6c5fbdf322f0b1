// Capturing a compiled FX graph's fused program with its bindings, and calling
// it directly (see compiled_trace.h).
#include "aten/compiled_trace.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <unordered_map>

#include "aten/generator.h"
#include "aten/tpu_tensor.h"
#include "engine/device_checks.h"
#include "engine/executor.h"
#include "engine/metrics.h"
#include "engine/transfer.h"

namespace tpu::aten {

void register_checks(const std::shared_ptr<CheckSites>& cs, std::shared_ptr<pjrt::Buffer> flags,
                     int device);

namespace {

bool on_tpu(const at::Tensor& t) { return t.defined() && t.device().type() == kTpu; }

// The element type an uninitialised storage gets when a program first reads it.
hlo::ElemType storage_elem(engine::Slot* s, c10::ScalarType dtype) {
  return s->has_buffer() ? s->elem() : lower::to_elem(dtype);
}

at::Tensor view_of(c10::Storage st, c10::ScalarType dtype, const std::vector<int64_t>& sizes,
                   const std::vector<int64_t>& strides, int64_t offset) {
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(st), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      caffe2::TypeMeta::fromScalarType(dtype));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, offset);
  return t;
}

// CPU-fallback ops counted when this thread's capture began: an op that ran on
// the CPU inside the graph made a value the program would not recompute.
thread_local uint64_t t_fallbacks_before = 0;

}  // namespace

uint64_t begin_capture() {
  Trace& t = *this_thread_trace();
  std::lock_guard<std::mutex> lock(t.mu);
  t.flush_locked("before compiled graph");
  t.unbounded = true;
  t_fallbacks_before = engine::metrics().cpu_fallback_ops.load();
  return t.runs;
}

void end_capture(RunInfo& info) {
  Trace& t = *this_thread_trace();
  std::lock_guard<std::mutex> lock(t.mu);
  t.unbounded = false;
  t.flush_locked("compiled graph", &info);
}

std::shared_ptr<CompiledTrace> CompiledTrace::capture(const std::vector<at::Tensor>& inputs,
                                                      const std::vector<at::Tensor>& results,
                                                      uint64_t runs_before, RunInfo& info,
                                                      std::string& why) {
  bool cut;
  {
    Trace& t = *this_thread_trace();
    std::lock_guard<std::mutex> lock(t.mu);
    t.unbounded = false;
    cut = t.runs != runs_before;
    info.capturing = true;
    t.flush_locked("compiled graph", &info);
  }
  if (!cut && engine::metrics().cpu_fallback_ops.load() != t_fallbacks_before) {
    why = "an op of the graph ran on the CPU (no lowering)";
    return nullptr;
  }
  if (cut) {
    why = "part of the graph ran on its own (an op without a lowering, a data-dependent op or a "
          "host-staged collective)";
    return nullptr;
  }
  if (!info.ran) {
    why = "the graph recorded no device op";
    return nullptr;
  }
  auto ct = std::make_shared<CompiledTrace>();
  ct->exe_ = info.prog->exe;
  ct->checks_ = info.checks;
  ct->where_ = info.where;
  ct->origin_ = std::make_shared<const engine::LaunchOrigin>(
      engine::LaunchOrigin{"a compiled graph", info.where});
  ct->device_ = info.device;

  std::unordered_map<engine::Slot*, int> input_of;
  ct->sig_.resize(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const at::Tensor& x = inputs[k];
    if (!on_tpu(x)) {
      why = "input " + std::to_string(k) + " is not a tpu tensor";
      return nullptr;
    }
    InputSig& s = ct->sig_[k];
    s.dtype = x.scalar_type();
    s.sizes = x.sizes().vec();
    s.strides = x.strides().vec();
    s.offset = x.storage_offset();
    engine::Slot* slot = slot_of(x);
    s.nbytes = slot->nbytes();
    auto [it, fresh] = input_of.emplace(slot, static_cast<int>(k));
    if (!fresh) s.same_as = it->second;
  }
  auto input_slot = [&](const std::shared_ptr<engine::Slot>& s) {
    auto it = input_of.find(s.get());
    return it == input_of.end() ? -1 : it->second;
  };

  for (size_t i = 0; i < info.params.size(); ++i) {
    TraceParam& p = info.params[i];
    ParamBind b;
    int id = info.param_slot[i];
    int k = id >= 0 ? input_slot(info.slots[id]) : -1;
    if (k >= 0) {
      b.kind = ParamBind::kInput;
      b.input = k;
      b.type = p.type;
    } else if (p.buffer) {
      // A storage made inside the graph (its contents as first read, e.g. zeros)
      // or a constant tensor of the graph: the same every call.
      b.kind = ParamBind::kConst;
      b.buffer = p.buffer;
    } else if (p.host.kind == Input::kRng) {
      b.kind = ParamBind::kRng;
      b.gen = p.gen;
      b.rng_numbers = p.rng_numbers;
    } else {
      b.kind = ParamBind::kConst;  // a scalar of the graph
      b.buffer = host_input_buffer(p.host, ct->device_);
    }
    ct->params_.push_back(std::move(b));
  }
  for (int p : info.prog->donated)
    if (ct->params_[p].kind == ParamBind::kInput) ct->donated_.push_back(p);

  std::unordered_map<engine::Slot*, int> storage_of;
  for (int id : info.outputs) {
    const auto& slot = info.slots[id];
    OutBind o;
    o.elem = slot->elem();
    int k = input_slot(slot);
    if (k >= 0) {
      o.kind = OutBind::kWriteInput;
      o.index = k;
      ct->sig_[k].written = true;
    } else {
      o.kind = OutBind::kStorage;
      o.index = static_cast<int>(ct->storage_bytes_.size());
      ct->storage_bytes_.push_back(slot->nbytes());
      storage_of.emplace(slot.get(), o.index);
    }
    ct->outs_.push_back(o);
  }

  std::vector<bool> returned(ct->storage_bytes_.size(), false);
  for (const at::Tensor& r : results) {
    Result res;
    if (!r.defined()) {
      ct->results_.push_back(std::move(res));
      continue;
    }
    if (!on_tpu(r)) {
      why = "the graph returns a tensor that is not on tpu";
      return nullptr;
    }
    res.dtype = r.scalar_type();
    res.sizes = r.sizes().vec();
    res.strides = r.strides().vec();
    res.offset = r.storage_offset();
    const auto& slot = slot_ref(r);
    int k = input_slot(slot);
    auto it = storage_of.find(slot.get());
    if (k >= 0) {
      res.kind = Result::kInputView;
      res.index = k;
    } else if (it != storage_of.end()) {
      res.kind = Result::kNew;
      res.index = it->second;
      returned[it->second] = true;
    } else {
      why = "the graph returns a storage its program does not write";
      return nullptr;
    }
    ct->results_.push_back(std::move(res));
  }
  for (bool r : returned)
    if (!r) {
      why = "a value the graph writes is held outside its inputs and results";
      return nullptr;
    }
  return ct;
}

bool CompiledTrace::matches(const std::vector<at::Tensor>& inputs) const {
  if (inputs.size() != sig_.size()) return false;
  // Each input's storage once (an optimizer graph has hundreds of inputs).
  std::vector<engine::Slot*> slots(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const at::Tensor& x = inputs[k];
    const InputSig& s = sig_[k];
    if (!on_tpu(x) || x.scalar_type() != s.dtype || x.storage_offset() != s.offset ||
        x.sizes() != c10::IntArrayRef(s.sizes) || x.strides() != c10::IntArrayRef(s.strides))
      return false;
    engine::Slot* slot = slot_of(x);
    if (slot->nbytes() != s.nbytes) return false;
    if (s.same_as >= 0 && slots[s.same_as] != slot) return false;
    slots[k] = slot;
  }
  // A storage the program rewrites must not be shared with another input it was
  // not shared with at capture (the program treats them as separate values):
  // every input on a written storage must have the same representative (the
  // first input of its storage at capture). One pass over a map of the written
  // storages instead of comparing every pair.
  std::unordered_map<engine::Slot*, int> rep_of;
  for (size_t k = 0; k < inputs.size(); ++k)
    if (sig_[k].written)
      rep_of.emplace(slots[k], sig_[k].same_as >= 0 ? sig_[k].same_as : static_cast<int>(k));
  if (!rep_of.empty())
    for (size_t j = 0; j < inputs.size(); ++j) {
      auto it = rep_of.find(slots[j]);
      if (it == rep_of.end()) continue;
      int rj = sig_[j].same_as >= 0 ? sig_[j].same_as : static_cast<int>(j);
      if (rj != it->second) return false;
    }
  for (const ParamBind& p : params_) {
    if (p.kind != ParamBind::kInput) continue;
    engine::Slot* slot = slots[p.input];
    const int64_t n = slot->nbytes() / static_cast<int64_t>(engine::elem_size(p.type.elem));
    if (storage_elem(slot, sig_[p.input].dtype) != p.type.elem || p.type.dims.at(0) != n)
      return false;
  }
  return true;
}

std::vector<at::Tensor> CompiledTrace::run(const std::vector<at::Tensor>& inputs) {
  {
    // Work recorded before the call runs on its own, as in the first call.
    Trace& t = *this_thread_trace();
    std::lock_guard<std::mutex> lock(t.mu);
    t.flush_locked("before compiled graph");
  }
  std::vector<std::shared_ptr<pjrt::Buffer>> bufs;
  bufs.reserve(params_.size());
  for (const ParamBind& p : params_) {
    switch (p.kind) {
      case ParamBind::kInput: {
        engine::Slot* slot = slot_of(inputs[p.input]);
        if (!slot->has_buffer()) materialize_zeros(slot, sig_[p.input].dtype);
        bufs.push_back(slot->buffer());
        break;
      }
      case ParamBind::kRng: {
        auto [seed, offset] = generator_for(p.gen, static_cast<c10::DeviceIndex>(device_))
                                  ->take(p.rng_numbers);
        uint64_t state[2] = {seed, offset};
        bufs.push_back(engine::upload(state, hlo::ElemType::U64, {2}, device_));
        break;
      }
      default: bufs.push_back(p.buffer);
    }
  }
  std::vector<pjrt::Buffer*> raw;
  raw.reserve(bufs.size());
  for (auto& b : bufs) raw.push_back(b.get());
  // A storage the program updates in place (a KV cache) is donated when its slot
  // and `bufs` hold the only references to its buffer (no clone shares it).
  std::vector<int64_t> donate;
  for (int p : donated_)
    if (bufs[p].use_count() == 2) donate.push_back(p);
  engine::metrics().donated_inputs += donate.size();
  auto outs = engine::launch(*exe_, raw.data(), raw.size(), device_, origin_, donate);
  bufs.clear();
  if (checks_) register_checks(checks_, outs.back(), device_);
  calls_++;

  c10::DeviceGuard guard(c10::Device(kTpu, static_cast<c10::DeviceIndex>(device_)));
  std::vector<c10::Storage> made(storage_bytes_.size());
  for (size_t j = 0; j < outs_.size(); ++j) {
    const OutBind& o = outs_[j];
    if (o.kind == OutBind::kWriteInput) {
      slot_of(inputs[o.index])->set_buffer(outs[j], o.elem);
    } else {
      c10::Storage st(c10::Storage::use_byte_size_t(), storage_bytes_[o.index], tpu_allocator(),
                      /*resizable=*/true);
      slot_of_storage(*st.unsafeGetStorageImpl())->set_buffer(outs[j], o.elem);
      made[o.index] = std::move(st);
    }
  }
  std::vector<at::Tensor> res;
  res.reserve(results_.size());
  for (const Result& r : results_) {
    switch (r.kind) {
      case Result::kNew:
        res.push_back(view_of(made[r.index], r.dtype, r.sizes, r.strides, r.offset));
        break;
      case Result::kInputView:
        res.push_back(view_of(inputs[r.index].storage(), r.dtype, r.sizes, r.strides, r.offset));
        break;
      default: res.push_back(at::Tensor());
    }
  }
  return res;
}

}  // namespace tpu::aten
