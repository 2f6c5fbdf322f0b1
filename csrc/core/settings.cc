#include "core/settings.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

namespace tpu::settings {

namespace {

struct Declared {
  const char* name;
  const char* type;
  const char* default_text;
};

constexpr Declared kDeclared[] = {
#include "core/settings_table.inc"
};

const Declared& declared(std::string_view name) {
  for (const Declared& d : kDeclared)
    if (name == d.name) return d;
  throw std::logic_error(std::string(name) + " is not declared in torch_tpu/settings.py");
}

std::string lower(const char* s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The environment's text, else the declared default ("" when neither).
const char* value_or_default(std::string_view name) {
  const char* v = raw(name);
  return v != nullptr ? v : declared(name).default_text;
}

}  // namespace

const char* raw(std::string_view name) {
  const Declared& d = declared(name);
  const char* v = std::getenv(d.name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

bool flag(std::string_view name) {
  std::string v = lower(value_or_default(name));
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  return lower(declared(name).default_text) == "1";
}

int64_t integer(std::string_view name) {
  const char* v = value_or_default(name);
  char* end = nullptr;
  long long n = std::strtoll(v, &end, 10);
  if (end != v && *end == '\0') return n;
  return std::strtoll(declared(name).default_text, nullptr, 10);
}

double number(std::string_view name) {
  const char* v = value_or_default(name);
  char* end = nullptr;
  double x = std::strtod(v, &end);
  if (end != v && *end == '\0') return x;
  const char* d = declared(name).default_text;
  return *d != '\0' ? std::strtod(d, nullptr) : std::nan("");
}

std::string text(std::string_view name) { return value_or_default(name); }

}  // namespace tpu::settings
