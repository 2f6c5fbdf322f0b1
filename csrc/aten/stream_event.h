// Streams and events of the tpu device, with CUDA's semantics, for the device
// guard (c10::impl::DeviceGuardImplInterface) that torch.Stream, torch.Event,
// torch.accelerator and torch.tpu reach them through.
//
// PJRT runs a device's work in the order it is launched, as far as data
// dependencies go, and a tpu storage's contents change only by swapping its
// (immutable) buffer on the host thread, in program order. So every stream of a
// device is one ordered queue: work on stream B can never observe a state of a
// storage that program order on the host would not give it, whatever B waits
// for. What a stream or event must still get right is *completion*:
//  - recording an event snapshots the unfinished work of its device (every
//    program and transfer launched so far: a superset of the stream's own work,
//    which is never wrong, only conservative) plus the events its stream was
//    made to wait for (those may be on other devices);
//  - stream.wait_event(e) adds e's snapshot to the stream's waits, so events
//    recorded on that stream later complete only after e did;
//  - in Defer & Fuse, recording an event, querying or synchronising runs the
//    pending graph first, so the snapshot holds the work recorded before it.
// Timed events (enable_timing=True) take the time at which their snapshot
// completes (PJRT's on-ready callbacks), or the recording time when the device
// was idle: the moment a CUDA stream would reach the event.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

namespace tpu::aten::streams {

c10::Stream current(c10::DeviceIndex device);
c10::Stream default_stream(c10::DeviceIndex device);
c10::Stream fresh(c10::DeviceIndex device, int priority);
c10::Stream from_pool(c10::DeviceIndex device, bool high_priority);
c10::Stream exchange(c10::Stream s);  // sets the thread's current stream; returns the old one
bool query(const c10::Stream& s);
void synchronize(const c10::Stream& s);
void synchronize_device(c10::DeviceIndex device);  // -1: every device

void record(void** event, const c10::Stream& s, c10::DeviceIndex device, c10::EventFlag flag);
void block(void* event, const c10::Stream& s);
bool query_event(void* event);
void synchronize_event(void* event);
double elapsed_ms(void* start, void* end);
void destroy_event(void* event) noexcept;

}  // namespace tpu::aten::streams
