// PJRT_Buffer wrapper: metadata queries, readiness and device->host copies.
#include "pjrt/host_transfer.h"
#include "pjrt/internal.h"

namespace tpu::pjrt {

Buffer::Buffer(std::shared_ptr<const Client> client, PJRT_Buffer* buf)
    : client_(std::move(client)), buf_(buf) {}

Buffer::~Buffer() {
  if (buf_ == nullptr || client_->api()->PJRT_Buffer_Destroy == nullptr) return;
  TPU_PJRT_ARGS(PJRT_Buffer_Destroy_Args, args);
  args.buffer = buf_;
  detail::destroy_error(client_->api(), client_->api()->PJRT_Buffer_Destroy(&args));
}

PJRT_Buffer_Type Buffer::element_type() const {
  TPU_PJRT_ARGS(PJRT_Buffer_ElementType_Args, args);
  args.buffer = buf_;
  TPU_PJRT_CALL(client_->api(), PJRT_Buffer_ElementType, args, "PJRT_Buffer_ElementType");
  return args.type;
}

std::vector<int64_t> Buffer::dims() const {
  TPU_PJRT_ARGS(PJRT_Buffer_Dimensions_Args, args);
  args.buffer = buf_;
  TPU_PJRT_CALL(client_->api(), PJRT_Buffer_Dimensions, args, "PJRT_Buffer_Dimensions");
  if (args.num_dims == 0) return {};
  return std::vector<int64_t>(args.dims, args.dims + args.num_dims);
}

size_t Buffer::on_device_size() const {
  TPU_PJRT_ARGS(PJRT_Buffer_OnDeviceSizeInBytes_Args, args);
  args.buffer = buf_;
  TPU_PJRT_CALL(client_->api(), PJRT_Buffer_OnDeviceSizeInBytes, args,
                "PJRT_Buffer_OnDeviceSizeInBytes");
  return args.on_device_size_in_bytes;
}

int Buffer::device_id() const {
  TPU_PJRT_ARGS(PJRT_Buffer_Device_Args, args);
  args.buffer = buf_;
  TPU_PJRT_CALL(client_->api(), PJRT_Buffer_Device, args, "PJRT_Buffer_Device");
  // Callers address devices by local index, not by PJRT handle or global id.
  for (size_t i = 0; i < client_->device_count(); ++i) {
    if (client_->raw_device(static_cast<int>(i)) == args.device) return static_cast<int>(i);
  }
  throw Error(PJRT_Error_Code_INTERNAL, "buffer lives on a device that is not addressable");
}

bool Buffer::is_deleted() const {
  TPU_PJRT_ARGS(PJRT_Buffer_IsDeleted_Args, args);
  args.buffer = buf_;
  TPU_PJRT_CALL(client_->api(), PJRT_Buffer_IsDeleted, args, "PJRT_Buffer_IsDeleted");
  return args.is_deleted;
}

void Buffer::delete_contents() {
  TPU_PJRT_ARGS(PJRT_Buffer_Delete_Args, args);
  args.buffer = buf_;
  TPU_PJRT_CALL(client_->api(), PJRT_Buffer_Delete, args, "PJRT_Buffer_Delete");
}

std::unique_ptr<Event> Buffer::ready_event() const {
  TPU_PJRT_ARGS(PJRT_Buffer_ReadyEvent_Args, args);
  args.buffer = buf_;
  TPU_PJRT_CALL(client_->api(), PJRT_Buffer_ReadyEvent, args, "PJRT_Buffer_ReadyEvent");
  return std::make_unique<Event>(client_, args.event);
}

void Buffer::await_ready() const { ready_event()->await(); }

void Buffer::to_host(void* dst, size_t nbytes) const {
  // The copy is asynchronous; its event also carries the failure of whatever
  // program produced this buffer.
  if (auto done = start_copy_to_host(*client_, *this, dst, nbytes)) done->await();
}

}  // namespace tpu::pjrt
