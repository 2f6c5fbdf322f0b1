// Glue between at::Tensor and the engine's Slots: where a tpu tensor's device
// buffer lives and how a fresh tpu tensor is made around a program output.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include "engine/slot.h"
#include "engine/view_io.h"

namespace tpu::aten {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

// The allocator behind every tpu storage (DataPtr context = engine::Slot).
c10::Allocator* tpu_allocator();

// The Slot of a tpu tensor's storage (never null for a tensor with storage).
engine::Slot* slot_of(const at::Tensor& t);
const std::shared_ptr<engine::Slot>& slot_ref(const at::Tensor& t);
const std::shared_ptr<engine::Slot>& slot_of_storage(const c10::StorageImpl& st);
engine::ViewLayout layout_of(const at::Tensor& t);

// A new contiguous tpu tensor of `sizes`/`dtype` on `device` whose storage holds `buf`.
at::Tensor wrap_buffer(std::shared_ptr<pjrt::Buffer> buf, c10::ScalarType dtype,
                       c10::IntArrayRef sizes, int device);

// An uninitialised contiguous tpu tensor (storage without a buffer yet).
at::Tensor empty_tpu(c10::IntArrayRef sizes, c10::ScalarType dtype, int device);

// The tensor for an op's new result: laid out by `strides` (a dense permutation,
// see OutSpec), row-major when they are empty.
at::Tensor empty_result(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                        int device);

// Ensures the slot has a buffer, zero-filling it (as elements of `dtype`) if not.
void materialize_zeros(engine::Slot* slot, c10::ScalarType dtype);

int current_device();
void set_current_device(int d);

}  // namespace tpu::aten
