// The C++ unit tests' shared check counting: CHECK records a pass or a failure
// (with file and line) and carries on, section() runs one named group whose
// unexpected exception fails it without stopping the rest, and report() prints
// the "N passed, M failed" line tests/test_cpp_units.py reads.
// Header-only and free of any project header, so each test binary stays
// dependent only on the layer it tests.
#pragma once

#include <cstdio>
#include <exception>
#include <functional>
#include <string>

namespace cpp_check {

inline int passed = 0;
inline int failed = 0;

inline void record(bool ok, const char* file, int line, const char* what) {
  if (ok) {
    ++passed;
    return;
  }
  ++failed;
  std::fprintf(stderr, "FAIL %s:%d: %s\n", file, line, what);
}

inline void section(const char* name, const std::function<void()>& body) {
  std::printf("-- %s\n", name);
  try {
    body();
  } catch (const std::exception& e) {
    ++failed;
    std::fprintf(stderr, "FAIL section '%s' threw: %s\n", name, e.what());
  }
}

// True when `body` throws an E whose message contains `part` (starts with it
// when `prefix`); any other outcome is printed, so a failed check says why.
template <class E>
bool throws(const std::function<void()>& body, const std::string& part, bool prefix = false) {
  try {
    body();
  } catch (const E& e) {
    const std::string msg = e.what();
    const bool ok = prefix ? msg.rfind(part, 0) == 0 : msg.find(part) != std::string::npos;
    if (!ok) std::fprintf(stderr, "  unexpected message: %s\n", msg.c_str());
    return ok;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "  wrong exception type: %s\n", e.what());
    return false;
  }
  std::fprintf(stderr, "  nothing was thrown\n");
  return false;
}

inline int report() {
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

}  // namespace cpp_check

#define CHECK(cond) ::cpp_check::record(static_cast<bool>(cond), __FILE__, __LINE__, #cond)
