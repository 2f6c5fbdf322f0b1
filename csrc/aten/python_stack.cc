#include "aten/python_stack.h"

#include "aten/python_site.h"
#include "core/settings.h"

// On CPython 3.11 the thread's interpreter frames are read directly (internal
// API, as PyTorch's Dynamo does): PyTorch's bindings release the GIL around
// every ATen call, and the public frame API would take it back per recorded op
// and allocate a frame object per level. Other versions use the public API.
#include <patchlevel.h>
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define TPU_READ_INTERPRETER_FRAMES 1
#define Py_BUILD_CORE
#include <Python.h>
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#else
#include <Python.h>
#endif
#include <frameobject.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace tpu::aten {

struct CodeSite {
  PyCodeObject* code = nullptr;  // kept alive by the reference site_of holds
  std::string file, name;
  bool user = false;
};

namespace {

std::string utf8_attr(PyObject* obj, const char* name) {
  PyObject* v = PyObject_GetAttrString(obj, name);
  std::string out;
  if (v != nullptr && PyUnicode_Check(v)) {
    const char* s = PyUnicode_AsUTF8(v);
    if (s != nullptr) out = s;
  }
  Py_XDECREF(v);
  if (PyErr_Occurred()) PyErr_Clear();
  return out;
}

std::string package_dir(const char* name) {
  PyObject* mod = PyDict_GetItemString(PyImport_GetModuleDict(), name);  // borrowed
  if (mod == nullptr) return "";
  std::string file = utf8_attr(mod, "__file__");
  auto slash = file.rfind('/');
  return slash == std::string::npos ? "" : file.substr(0, slash + 1);
}

bool under(const std::string& file, const std::string& dir) {
  return !dir.empty() && file.compare(0, dir.size(), dir) == 0;
}

// Code objects live as long as their functions, which for the frames that
// record ops is the program's life; the interned site keeps a reference so
// that an address is never reused for another code object while we map it.
// The map has its own lock, never held while waiting for the GIL (a thread
// holding the GIL may be waiting for the map).
struct Sites {
  std::mutex mu;
  std::unordered_map<PyCodeObject*, CodeSite> map;
};
Sites& sites() {
  static auto* s = new Sites();
  return *s;
}

const CodeSite* find_site(PyCodeObject* code) {
  // A thread's own small direct-mapped memory of the map (sites are never
  // removed): the few code objects of a model's forward hit it without a lock.
  thread_local std::array<std::pair<PyCodeObject*, const CodeSite*>, 64> near{};
  auto& e = near[(reinterpret_cast<uintptr_t>(code) >> 4) % near.size()];
  if (e.first == code) return e.second;
  Sites& s = sites();
  std::lock_guard<std::mutex> g(s.mu);
  auto it = s.map.find(code);
  if (it == s.map.end()) return nullptr;
  e = {code, &it->second};
  return e.second;
}

// A code object seen for the first time; needs the GIL (reads its attributes).
const CodeSite* add_site(PyCodeObject* code) {
  static const std::string torch_dir = package_dir("torch");
  static const std::string ours_dir = package_dir("torch_tpu");
  CodeSite c;
  c.code = code;
  c.file = utf8_attr(reinterpret_cast<PyObject*>(code), "co_filename");
  c.name = utf8_attr(reinterpret_cast<PyObject*>(code), "co_name");
  c.user = !under(c.file, torch_dir) && !under(c.file, ours_dir);
  Sites& s = sites();
  std::lock_guard<std::mutex> g(s.mu);
  auto [it, added] = s.map.emplace(code, std::move(c));
  if (added) Py_INCREF(code);
  return &it->second;
}

// With the GIL held.
const CodeSite* site_of(PyCodeObject* code) {
  const CodeSite* s = find_site(code);
  return s != nullptr ? s : add_site(code);
}

bool enabled() {
  static const bool on = settings::flag("TORCH_TPU_DEFER_STACKS");
  return on;
}

}  // namespace

PyStack PyStack::capture() {
  PyStack out;
  if (!enabled() || !Py_IsInitialized()) return out;
  PyThreadState* ts = PyGILState_GetThisThreadState();
  if (ts == nullptr) return out;
  // Ops are called from Python, which holds the GIL already: then no round
  // trip through PyGILState (a tenth of the capture's cost).
  const bool held = PyGILState_Check();
  PyGILState_STATE gil{};
  bool taken = false;
#ifdef TPU_READ_INTERPRETER_FRAMES
  // This thread's own frames: nothing else pushes or pops them while it is in
  // C++, and the code objects live as long as their frames. The GIL is taken
  // only for a code object seen for the first time.
  for (_PyInterpreterFrame* f = ts->cframe == nullptr ? nullptr : ts->cframe->current_frame;
       f != nullptr && out.count_ < kMaxFrames; f = f->previous) {
    if (_PyFrame_IsIncomplete(f)) continue;
    const CodeSite* site = find_site(f->f_code);
    if (site == nullptr) {
      if (!held && !taken) gil = PyGILState_Ensure(), taken = true;
      site = add_site(f->f_code);
    }
    // The instruction offset in bytes (as PyFrame_GetLasti), not the line:
    // finding the line scans the code's line table, which only an error
    // message needs (format()).
    const int lasti = _PyInterpreterFrame_LASTI(f);
    if (site->user)
      out.frames_[out.count_++] = {site, lasti < 0 ? -1 : lasti * int(sizeof(_Py_CODEUNIT))};
  }
#else
  if (!held) gil = PyGILState_Ensure(), taken = true;
  PyFrameObject* f = PyEval_GetFrame();  // borrowed
  Py_XINCREF(f);
  while (f != nullptr && out.count_ < kMaxFrames) {
    PyCodeObject* code = PyFrame_GetCode(f);  // new reference
    const CodeSite* site = site_of(code);
    Py_DECREF(code);
    if (site->user) out.frames_[out.count_++] = {site, PyFrame_GetLasti(f)};
    PyFrameObject* back = PyFrame_GetBack(f);  // new reference
    Py_DECREF(f);
    f = back;
  }
  Py_XDECREF(f);
#endif
  if (taken) PyGILState_Release(gil);
  return out;
}

// python_site.h: the innermost user frame, or else the innermost frame at all.
std::string python_site() {
  if (!Py_IsInitialized()) return "";
  if (PyGILState_GetThisThreadState() == nullptr)
    return "<no Python frame: called from a C++ thread>";
  PyGILState_STATE gil = PyGILState_Ensure();
  std::string innermost, user;
  PyFrameObject* f = PyEval_GetFrame();  // borrowed
  Py_XINCREF(f);
  while (f != nullptr && user.empty()) {
    PyCodeObject* code = PyFrame_GetCode(f);  // new reference
    const CodeSite* site = site_of(code);
    Py_DECREF(code);
    std::string where =
        site->file + ":" + std::to_string(PyFrame_GetLineNumber(f)) + " in " + site->name;
    if (innermost.empty()) innermost = where;
    if (site->user) user = where;
    PyFrameObject* back = PyFrame_GetBack(f);  // new reference
    Py_DECREF(f);
    f = back;
  }
  Py_XDECREF(f);
  PyGILState_Release(gil);
  if (!user.empty()) return user;
  return innermost.empty() ? "<no Python frame: called from C++ (e.g. autograd backward)>"
                           : innermost;
}

std::string PyStack::format() const {
  std::string s;
  // PyCode_Addr2Line only reads the code object's immutable line table, and the
  // interned site keeps the code alive: no GIL needed, so any thread may format.
  for (size_t k = count_; k-- > 0;) {
    const auto* it = &frames_[k];
    int line = it->second < 0 ? -1 : PyCode_Addr2Line(it->first->code, it->second);
    s += "  File \"" + it->first->file + "\", line " + std::to_string(line) + ", in " +
         it->first->name + "\n";
  }
  return s;
}

}  // namespace tpu::aten
