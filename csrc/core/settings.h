// The TORCH_TPU_* environment variables C++ reads, each declared once in
// torch_tpu/settings.py (name, type, default, meaning); settings_table.inc is
// generated from it (python -m torch_tpu.tools.settings_doc). Reading a name that
// is not declared there throws std::logic_error: a new variable is declared first.
// No PyTorch header: every layer may read settings.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tpu::settings {

// The variable's text, or nullptr when unset or empty.
const char* raw(std::string_view name);

// Typed reads with the declared default when unset. torch_tpu's import has already
// refused a malformed value (torch_tpu.settings.check), so one met here (a process
// that loads the extension without torch_tpu's __init__) falls back to the default.
bool flag(std::string_view name);
int64_t integer(std::string_view name);
double number(std::string_view name);  // NaN when unset and declared without a default
std::string text(std::string_view name);

}  // namespace tpu::settings
