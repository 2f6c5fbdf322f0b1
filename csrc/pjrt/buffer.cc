// PJRT_Buffer wrapper: metadata queries, readiness and device->host copies.
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
  const PJRT_Api* api = client_->api();
  // First ask for the size the host copy needs (dst == nullptr): a mismatch
  // would otherwise be a silent overrun or a partial copy.
  TPU_PJRT_ARGS(PJRT_Buffer_ToHostBuffer_Args, query);
  query.src = buf_;
  query.host_layout = nullptr;
  query.dst = nullptr;
  TPU_PJRT_CALL(api, PJRT_Buffer_ToHostBuffer, query, "PJRT_Buffer_ToHostBuffer (size query)");
  if (query.event != nullptr) {
    Event unused(client_, query.event);  // not expected for a size query; just free it
  }
  if (query.dst_size != nbytes) {
    throw Error(PJRT_Error_Code_INVALID_ARGUMENT,
                "to_host: destination holds " + std::to_string(nbytes) +
                    " bytes but the buffer needs " + std::to_string(query.dst_size));
  }
  if (nbytes == 0) return;

  TPU_PJRT_ARGS(PJRT_Buffer_ToHostBuffer_Args, args);
  args.src = buf_;
  args.host_layout = nullptr;  // the buffer's own (dense row-major) layout
  args.dst = dst;
  args.dst_size = nbytes;
  TPU_PJRT_CALL(api, PJRT_Buffer_ToHostBuffer, args, "copying buffer to host");
  // The copy is asynchronous; its event also carries the failure of whatever
  // program produced this buffer.
  Event done(client_, args.event);
  done.await();
}

}  // namespace tpu::pjrt
