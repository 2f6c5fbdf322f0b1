#include "aten/python_site.h"

#include <Python.h>
#include <frameobject.h>

namespace tpu::aten {

namespace {

std::string str_attr(PyObject* obj, const char* name) {
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

// Directory of an imported package ("" when not imported), to tell library
// frames from the user's.
std::string package_dir(const char* name) {
  PyObject* mod = PyDict_GetItemString(PyImport_GetModuleDict(), name);  // borrowed
  if (mod == nullptr) return "";
  std::string file = str_attr(mod, "__file__");
  auto slash = file.rfind('/');
  return slash == std::string::npos ? "" : file.substr(0, slash + 1);
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return !prefix.empty() && s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

std::string python_site() {
  if (!Py_IsInitialized()) return "";
  if (PyGILState_GetThisThreadState() == nullptr)
    return "<no Python frame: called from a C++ thread>";
  PyGILState_STATE gil = PyGILState_Ensure();
  static const std::string torch_dir = package_dir("torch");
  static const std::string ours_dir = package_dir("torch_tpu");
  std::string innermost, user;
  PyFrameObject* f = PyEval_GetFrame();  // borrowed
  Py_XINCREF(f);
  while (f != nullptr && user.empty()) {
    PyCodeObject* code = PyFrame_GetCode(f);  // new reference
    std::string file = str_attr(reinterpret_cast<PyObject*>(code), "co_filename");
    std::string site = file + ":" + std::to_string(PyFrame_GetLineNumber(f)) + " in " +
                       str_attr(reinterpret_cast<PyObject*>(code), "co_name");
    Py_DECREF(code);
    if (innermost.empty()) innermost = site;
    if (!starts_with(file, torch_dir) && !starts_with(file, ours_dir)) user = site;
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

}  // namespace tpu::aten
