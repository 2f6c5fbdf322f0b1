// Calling a whole StableHLO module from the program being built: the custom
// kernels' route (a JAX function's lowering, hand-written MLIR). The module's
// functions are copied textually into ours as private functions under unique
// names, and @main calls the entry; XLA inlines the call, so the kernel is part
// of the one fused program. A textual splice (not an MLIR parse) keeps this
// layer free of an MLIR dependency: it needs only the function headers, and the
// bodies are copied with their symbol references renamed.
#include <cctype>
#include <map>
#include <mutex>
#include <stdexcept>

#include "hlo/call_module.h"

namespace tpu::hlo {
namespace {

// Renamed function text of every module called so far, by prefix "k_<hash>_".
// Shared by all builders: the prefix is a hash of the module's text.
std::mutex g_mu;
std::map<std::string, std::string>& called_modules() {
  static auto* m = new std::map<std::string, std::string>();
  return *m;
}
const char kCalleeMark[] = "callee = @k_";

[[noreturn]] void bad_module(const std::string& what) {
  throw std::invalid_argument("call_module: " + what);
}

bool is_symbol_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '$' ||
         c == '-';
}

// Index just past the bracket that closes the one at `open` ('(', '{', '<' or
// '['), skipping string literals (attributes such as mhlo.sharding = "{...}").
size_t match_close(const std::string& s, size_t open) {
  std::vector<char> stack;
  bool in_str = false;
  for (size_t i = open; i < s.size(); ++i) {
    char c = s[i];
    if (in_str) {
      if (c == '\\') ++i;
      else if (c == '"') in_str = false;
      continue;
    }
    if (c == '"') {
      in_str = true;
    } else if (c == '(' || c == '{' || c == '[' || c == '<') {
      stack.push_back(c);
    } else if (c == ')' || c == '}' || c == ']' || c == '>') {
      // '->' is an arrow, not a closing bracket.
      if (c == '>' && i > 0 && s[i - 1] == '-') continue;
      if (stack.empty()) bad_module("unbalanced brackets");
      stack.pop_back();
      if (stack.empty()) return i + 1;
    }
  }
  bad_module("unbalanced brackets");
}

size_t skip_ws(const std::string& s, size_t i) {
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return i;
}

std::string trim(const std::string& s) {
  size_t a = skip_ws(s, 0), b = s.size();
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

// Splits at commas outside brackets and strings.
std::vector<std::string> split_top(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    char c = s[i];
    if (c == '(' || c == '{' || c == '[' || c == '<') {
      i = match_close(s, i);
    } else if (c == '"') {
      ++i;
      while (i < s.size() && s[i] != '"') i += s[i] == '\\' ? 2 : 1;
      ++i;
    } else if (c == ',') {
      out.push_back(trim(s.substr(start, i - start)));
      start = ++i;
    } else {
      ++i;
    }
  }
  std::string last = trim(s.substr(start));
  if (!last.empty()) out.push_back(last);
  return out;
}

// One parameter or result entry: "%arg0: tensor<4xf32> {attrs} loc(...)" or
// "tensor<4xf32> {attrs}": the type is the first bracket-balanced word after the
// optional "name:".
std::string entry_type(const std::string& e) {
  size_t i = 0;
  if (!e.empty() && e[0] == '%') {
    size_t colon = e.find(':');
    if (colon == std::string::npos) bad_module("parameter without a type: " + e);
    i = colon + 1;
  }
  i = skip_ws(e, i);
  size_t j = i;
  while (j < e.size() && !std::isspace(static_cast<unsigned char>(e[j]))) {
    if (e[j] == '<') j = match_close(e, j);
    else ++j;
  }
  return e.substr(i, j - i);
}

std::string entry_name(const std::string& e) {
  return e.substr(0, e.find(':'));
}

struct Func {
  std::string name;                 // without '@'
  std::vector<std::string> params;  // "%arg0"
  std::vector<std::string> param_types, result_types;
  std::string body;                 // between the braces
};

// The top-level functions of a module.
std::vector<Func> parse_funcs(const std::string& text) {
  std::vector<Func> funcs;
  size_t pos = 0;
  while ((pos = text.find("func.func", pos)) != std::string::npos) {
    Func f;
    size_t i = skip_ws(text, pos + 9);
    for (const char* vis : {"public", "private", "nested"}) {
      size_t n = std::string(vis).size();
      if (text.compare(i, n, vis) == 0) i = skip_ws(text, i + n);
    }
    if (i >= text.size() || text[i] != '@') bad_module("func.func without a @name");
    size_t j = i + 1;
    while (j < text.size() && is_symbol_char(text[j])) ++j;
    f.name = text.substr(i + 1, j - i - 1);
    i = skip_ws(text, j);
    if (i >= text.size() || text[i] != '(') bad_module("@" + f.name + ": no parameter list");
    size_t close = match_close(text, i);
    for (const auto& p : split_top(text.substr(i + 1, close - i - 2))) {
      f.params.push_back(entry_name(p));
      f.param_types.push_back(entry_type(p));
    }
    i = skip_ws(text, close);
    if (text.compare(i, 2, "->") == 0) {
      i = skip_ws(text, i + 2);
      if (text[i] == '(') {
        close = match_close(text, i);
        for (const auto& r : split_top(text.substr(i + 1, close - i - 2)))
          f.result_types.push_back(entry_type(r));
        i = close;
      } else {
        std::string rest = text.substr(i);
        std::string t = entry_type(rest);
        f.result_types.push_back(t);
        i += t.size();
      }
      i = skip_ws(text, i);
    }
    if (text.compare(i, 10, "attributes") == 0) {
      i = skip_ws(text, i + 10);
      if (text[i] != '{') bad_module("@" + f.name + ": malformed attributes");
      i = skip_ws(text, match_close(text, i));
    }
    if (i >= text.size() || text[i] != '{')
      bad_module("@" + f.name + " has no body (declarations are not supported)");
    close = match_close(text, i);
    f.body = text.substr(i + 1, close - i - 2);
    funcs.push_back(std::move(f));
    pos = close;
  }
  return funcs;
}

const Func& find_func(const std::vector<Func>& funcs, const std::string& entry) {
  for (const auto& f : funcs)
    if (f.name == entry) return f;
  bad_module("the module has no function @" + entry);
}

// Replaces each whole symbol reference @old with @new_name.
std::string rename_symbol(const std::string& s, const std::string& old_name,
                          const std::string& new_name) {
  std::string out;
  const std::string pat = "@" + old_name;
  size_t pos = 0, hit;
  while ((hit = s.find(pat, pos)) != std::string::npos) {
    size_t end = hit + pat.size();
    out += s.substr(pos, hit - pos);
    if (end < s.size() && is_symbol_char(s[end])) out += pat;  // a longer name
    else out += "@" + new_name;
    pos = end;
  }
  return out + s.substr(pos);
}

// Drops location annotations (`loc(...)`): they may name #loc aliases defined
// outside the function, which the copy does not carry.
std::string strip_locations(const std::string& s) {
  std::string out;
  size_t pos = 0, hit;
  while ((hit = s.find("loc(", pos)) != std::string::npos) {
    bool word = hit == 0 || !is_symbol_char(s[hit - 1]);
    if (!word) {
      out += s.substr(pos, hit + 4 - pos);
      pos = hit + 4;
      continue;
    }
    out += s.substr(pos, hit - pos);
    pos = match_close(s, hit + 3);
  }
  return out + s.substr(pos);
}

}  // namespace

TensorType parse_tensor_type(const std::string& text) {
  std::string t = trim(text);
  if (t.rfind("tensor<", 0) != 0 || t.back() != '>')
    throw std::invalid_argument("not a tensor type: '" + t + "'");
  std::string inner = t.substr(7, t.size() - 8);
  TensorType out;
  size_t i = 0;
  while (i < inner.size() && (std::isdigit(static_cast<unsigned char>(inner[i])) || inner[i] == '?')) {
    size_t j = i;
    while (j < inner.size() && inner[j] != 'x') ++j;
    if (j >= inner.size()) break;  // no 'x': this is the element type
    std::string d = inner.substr(i, j - i);
    if (d.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument("'" + t + "': dynamic shapes are not supported");
    out.dims.push_back(std::stoll(d));
    i = j + 1;
  }
  std::string elem = inner.substr(i);
  for (int e = 0; e <= static_cast<int>(ElemType::F8E5M2FNUZ); ++e) {
    if (elem == mlir_name(static_cast<ElemType>(e))) {
      out.elem = static_cast<ElemType>(e);
      return out;
    }
  }
  throw std::invalid_argument("'" + t + "': unsupported element type '" + elem + "'");
}

FuncSignature module_signature(const std::string& module_text, const std::string& entry) {
  std::vector<Func> funcs = parse_funcs(module_text);
  const Func& f = find_func(funcs, entry);
  FuncSignature sig;
  for (const auto& t : f.param_types) sig.params.push_back(parse_tensor_type(t));
  for (const auto& t : f.result_types) sig.results.push_back(parse_tensor_type(t));
  return sig;
}

std::vector<Value> call_module(Builder& b, const std::string& module_text,
                               const std::vector<Value>& args, const std::string& entry) {
  std::vector<Func> funcs = parse_funcs(module_text);
  const Func& f = find_func(funcs, entry);
  if (f.param_types.size() != args.size())
    bad_module("@" + entry + " takes " + std::to_string(f.param_types.size()) +
               " arguments, got " + std::to_string(args.size()));
  for (size_t i = 0; i < args.size(); ++i) {
    TensorType want = parse_tensor_type(f.param_types[i]);
    if (args[i].type != want)
      bad_module("argument " + std::to_string(i) + " of @" + entry + " has type " + want.str() +
                 ", got " + args[i].type.str());
  }
  std::vector<TensorType> results;
  for (const auto& t : f.result_types) results.push_back(parse_tensor_type(t));

  const std::string prefix = "k_" + hash128(module_text).substr(0, 16) + "_";
  {
    std::lock_guard<std::mutex> g(g_mu);
    if (!called_modules().count(prefix)) {
      std::string text;
      for (const auto& fn : funcs) {
        std::string body = strip_locations(fn.body);
        for (const auto& h : funcs) body = rename_symbol(body, h.name, prefix + h.name);
        text += "  func.func private @" + prefix + fn.name + "(";
        for (size_t i = 0; i < fn.params.size(); ++i)
          text += (i ? ", " : "") + fn.params[i] + ": " + fn.param_types[i];
        text += ") -> (";
        for (size_t i = 0; i < fn.result_types.size(); ++i)
          text += (i ? ", " : "") + fn.result_types[i];
        text += ") {" + body + "}\n";
      }
      called_modules()[prefix] = text;
    }
  }
  return b.generic_multi("func.call", args, "callee = @" + prefix + entry, results);
}

std::string called_functions(const std::string& body) {
  std::string out;
  std::vector<std::string> seen;
  size_t pos = 0;
  while ((pos = body.find(kCalleeMark, pos)) != std::string::npos) {
    size_t start = pos + sizeof(kCalleeMark) - 3;  // at "k_" (sizeof counts the NUL)
    pos = start;
    std::string prefix = body.substr(start, 2 + 16 + 1);
    bool dup = false;
    for (const auto& p : seen) dup = dup || p == prefix;
    if (dup) continue;
    seen.push_back(prefix);
    std::lock_guard<std::mutex> g(g_mu);
    auto it = called_modules().find(prefix);
    if (it != called_modules().end()) out += it->second;
  }
  return out;
}

}  // namespace tpu::hlo
