// Captures what a plugin writes to the process's stderr (file descriptor 2) while
// it starts. The PJRT plugins log through absl, which prints "All log messages
// before absl::InitializeLog()..." and INFO lines on first use; the plugins export
// nothing that sets absl's log level, so the only switch we have is the descriptor.
// The text is kept: a start-up that fails reports it in its error.
#pragma once

#include <string>

namespace tpu::pjrt {

class StderrCapture {
 public:
  // `active == false` captures nothing (the user asked to see the plugin's logs).
  explicit StderrCapture(bool active);
  ~StderrCapture();
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  // Restores stderr and returns what was written meanwhile (idempotent).
  std::string release();

 private:
  int saved_fd_ = -1;  // the original stderr, while capturing
  int file_fd_ = -1;   // the temporary file that stands in for it
  std::string text_;
};

}  // namespace tpu::pjrt
