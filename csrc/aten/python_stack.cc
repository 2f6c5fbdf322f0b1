#include "aten/python_stack.h"

#include "aten/python_site.h"

#include <Python.h>
#include <frameobject.h>

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
const CodeSite* site_of(PyCodeObject* code) {
  static std::unordered_map<PyCodeObject*, CodeSite> sites;  // guarded by the GIL
  auto it = sites.find(code);
  if (it != sites.end()) return &it->second;
  static const std::string torch_dir = package_dir("torch");
  static const std::string ours_dir = package_dir("torch_tpu");
  CodeSite s;
  s.code = code;
  s.file = utf8_attr(reinterpret_cast<PyObject*>(code), "co_filename");
  s.name = utf8_attr(reinterpret_cast<PyObject*>(code), "co_name");
  s.user = !under(s.file, torch_dir) && !under(s.file, ours_dir);
  Py_INCREF(code);
  return &sites.emplace(code, std::move(s)).first->second;
}

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TORCH_TPU_DEFER_STACKS");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

}  // namespace

PyStack PyStack::capture() {
  PyStack out;
  if (!enabled() || !Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr)
    return out;
  // Ops are called from Python, which holds the GIL already: then no round
  // trip through PyGILState (a tenth of the capture's cost).
  const bool held = PyGILState_Check();
  PyGILState_STATE gil{};
  if (!held) gil = PyGILState_Ensure();
  PyFrameObject* f = PyEval_GetFrame();  // borrowed
  Py_XINCREF(f);
  while (f != nullptr && out.count_ < kMaxFrames) {
    PyCodeObject* code = PyFrame_GetCode(f);  // new reference
    const CodeSite* site = site_of(code);
    Py_DECREF(code);
    // The instruction offset, not the line: finding the line scans the code's
    // line table, which only an error message needs (format()).
    if (site->user) out.frames_[out.count_++] = {site, PyFrame_GetLasti(f)};
    PyFrameObject* back = PyFrame_GetBack(f);  // new reference
    Py_DECREF(f);
    f = back;
  }
  Py_XDECREF(f);
  if (!held) PyGILState_Release(gil);
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
