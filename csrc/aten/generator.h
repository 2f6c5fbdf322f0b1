// The tpu random generator: Philox (seed, offset), one per device.
// Random ops lower to stablehlo.rng_bit_generator with (seed, offset) passed as
// a runtime u64[2] input and advance the offset by the draws they consume, so
// the same seed gives the same numbers in every execution mode.
// get_state() layout: seed as u64, then offset as u64 (16 bytes).
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace tpu::aten {

class TpuGenerator : public c10::GeneratorImpl {
 public:
  explicit TpuGenerator(c10::DeviceIndex device, uint64_t seed = 67280421310721ULL);
  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // Returns the (seed, offset) to use now and advances the offset by `numbers`.
  std::pair<uint64_t, uint64_t> take(uint64_t numbers);

 private:
  TpuGenerator* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex device);
// The generator an op should draw from: `gen` if given (must be a tpu one), else the default.
TpuGenerator* generator_for(const std::optional<at::Generator>& gen, c10::DeviceIndex device);

}  // namespace tpu::aten
