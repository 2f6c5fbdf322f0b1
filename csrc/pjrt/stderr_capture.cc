#include "pjrt/stderr_capture.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

namespace tpu::pjrt {

StderrCapture::StderrCapture(bool active) {
  if (!active) return;
  FILE* f = tmpfile();
  if (f == nullptr) return;
  file_fd_ = dup(fileno(f));
  fclose(f);  // the dup keeps the (already unlinked) file open
  if (file_fd_ < 0) return;
  fflush(stderr);
  saved_fd_ = dup(STDERR_FILENO);
  if (saved_fd_ < 0 || dup2(file_fd_, STDERR_FILENO) < 0) {
    if (saved_fd_ >= 0) close(saved_fd_);
    close(file_fd_);
    saved_fd_ = file_fd_ = -1;
  }
}

std::string StderrCapture::release() {
  if (saved_fd_ < 0) return text_;
  fflush(stderr);
  dup2(saved_fd_, STDERR_FILENO);
  close(saved_fd_);
  saved_fd_ = -1;
  off_t size = lseek(file_fd_, 0, SEEK_END);
  if (size > 0) {
    text_.resize(static_cast<size_t>(size));
    ssize_t got = pread(file_fd_, text_.data(), text_.size(), 0);
    text_.resize(got > 0 ? static_cast<size_t>(got) : 0);
  }
  close(file_fd_);
  file_fd_ = -1;
  return text_;
}

StderrCapture::~StderrCapture() { release(); }

}  // namespace tpu::pjrt
