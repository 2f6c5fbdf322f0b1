#include "aten/generator.h"

#include <ATen/Utils.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <c10/core/TensorImpl.h>
#include <ATen/ATen.h>

#include <cstring>
#include <mutex>
#include <vector>

namespace tpu::aten {

TpuGenerator::TpuGenerator(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void TpuGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}
void TpuGenerator::set_offset(uint64_t offset) { offset_ = offset; }
uint64_t TpuGenerator::get_offset() const { return offset_; }
uint64_t TpuGenerator::current_seed() const { return seed_; }

uint64_t TpuGenerator::seed() {
  uint64_t s = c10::detail::getNonDeterministicRandom(true);
  set_current_seed(s);
  return s;
}

void TpuGenerator::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK(new_state.numel() == 16 && new_state.dtype() == at::kByte,
              "tpu RNG state must be a uint8 tensor of 16 bytes (seed u64, offset u64), got ",
              new_state.numel(), " elements");
  const auto* p = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&seed_, p, 8);
  std::memcpy(&offset_, p + 8, 8);
}

c10::intrusive_ptr<c10::TensorImpl> TpuGenerator::get_state() const {
  at::Tensor t = at::empty({16}, at::kByte);
  auto* p = t.data_ptr<uint8_t>();
  std::memcpy(p, &seed_, 8);
  std::memcpy(p + 8, &offset_, 8);
  return t.getIntrusivePtr();
}

std::pair<uint64_t, uint64_t> TpuGenerator::take(uint64_t numbers) {
  std::lock_guard<std::mutex> g(mutex_);
  auto r = std::make_pair(seed_, offset_);
  offset_ += (numbers + 3) / 4 * 4;  // Philox draws come in blocks of four
  return r;
}

TpuGenerator* TpuGenerator::clone_impl() const {
  auto* g = new TpuGenerator(device().index(), seed_);
  g->offset_ = offset_;
  return g;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::mutex mu;
  static std::vector<at::Generator>* gens = new std::vector<at::Generator>();
  std::lock_guard<std::mutex> g(mu);
  if (device < 0) device = 0;
  while (static_cast<int>(gens->size()) <= device)
    gens->push_back(at::make_generator<TpuGenerator>(static_cast<c10::DeviceIndex>(gens->size())));
  return (*gens)[device];
}

TpuGenerator* generator_for(const std::optional<at::Generator>& gen, c10::DeviceIndex device) {
  if (gen.has_value() && gen->defined()) {
    TORCH_CHECK(gen->device().type() == c10::DeviceType::PrivateUse1,
                "expected a tpu generator for a tpu op, got a generator on ", gen->device());
    return gen->get<TpuGenerator>();
  }
  return default_generator(device).get<TpuGenerator>();
}

}  // namespace tpu::aten
