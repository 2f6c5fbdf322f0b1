// Builder core: value bookkeeping, op emission, regions, the function
// signature, module text and fingerprint, and the generic escape hatch.
#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "hlo/builder_impl.h"
#include "hlo/call_module.h"

namespace tpu::hlo {

// ---- shared helpers ----------------------------------------------------------

void fail(const std::string& op, const std::string& what) {
  throw std::invalid_argument("stablehlo." + op + ": " + what);
}

std::string dims_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

std::string i64_array(const std::vector<int64_t>& v) {
  // The empty dense array has no colon: `array<i64>`.
  if (v.empty()) return "array<i64>";
  std::string s = "array<i64: ";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + ">";
}

std::string padding_attr(const std::vector<std::pair<int64_t, int64_t>>& p) {
  std::string s = "dense<[";
  for (size_t i = 0; i < p.size(); ++i) {
    if (i) s += ", ";
    s += "[" + std::to_string(p[i].first) + ", " + std::to_string(p[i].second) + "]";
  }
  return s + "]> : tensor<" + std::to_string(p.size()) + "x2xi64>";
}

void check_dim_list(const std::string& op, const std::vector<int64_t>& dims, int64_t rank,
                    const std::string& what) {
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t d : dims) {
    if (d < 0 || d >= rank)
      fail(op, what + " " + dims_str(dims) + " out of range for rank " + std::to_string(rank));
    if (seen[d]) fail(op, what + " " + dims_str(dims) + " repeats dimension " + std::to_string(d));
    seen[d] = true;
  }
}

TensorType scalar_of(ElemType t) { return TensorType{t, {}}; }

// ---- Impl -------------------------------------------------------------------

void Builder::Impl::ensure_open() const {
  if (finished) throw std::logic_error("hlo::Builder: no op may be added after ret()");
}

const std::string& Builder::Impl::use(const std::string& op, const Value& v) const {
  if (!v.valid() || static_cast<size_t>(v.id) >= names.size())
    fail(op, "operand is not a value of this builder");
  if (types[v.id] != v.type)
    fail(op, "operand " + names[v.id] + " has type " + types[v.id].str() + " but the Value says " +
                 v.type.str() + " (value from another builder?)");
  if (std::find(open_scopes.begin(), open_scopes.end(), scopes[v.id]) == open_scopes.end())
    fail(op, "operand " + names[v.id] + " was defined inside a region that is closed");
  return names[v.id];
}

Value Builder::Impl::def(const TensorType& t, const std::string& name) {
  Value v;
  v.id = static_cast<int>(names.size());
  v.type = t;
  names.push_back(name);
  types.push_back(t);
  scopes.push_back(open_scopes.back());
  return v;
}

std::vector<Value> Builder::Impl::def_results(const std::vector<TensorType>& ts) {
  std::vector<Value> out_values;
  const std::string base = "%v" + std::to_string(names.size());
  for (size_t i = 0; i < ts.size(); ++i)
    out_values.push_back(def(ts[i], ts.size() == 1 ? base : base + "#" + std::to_string(i)));
  return out_values;
}

std::string Builder::Impl::lhs(const std::vector<Value>& results) const {
  if (results.empty()) return "";
  if (results.size() == 1) return names[results[0].id];
  const std::string& n = names[results[0].id];
  return n.substr(0, n.find('#')) + ":" + std::to_string(results.size());
}

void Builder::Impl::line(const std::string& s) {
  out->append(static_cast<size_t>(depth) * 2, ' ');
  *out += s;
  *out += '\n';
}

static std::string type_list(const std::vector<TensorType>& ts) {
  std::string s;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (i) s += ", ";
    s += ts[i].str();
  }
  return s;
}

std::vector<Value> Builder::Impl::emit(const std::string& op, const std::vector<Value>& operands,
                                       const std::vector<std::string>& regions,
                                       const std::string& attrs,
                                       const std::vector<TensorType>& result_types) {
  ensure_open();
  std::string args;
  std::vector<TensorType> arg_types;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (i) args += ", ";
    args += use(op, operands[i]);
    arg_types.push_back(operands[i].type);
  }
  for (const auto& t : result_types)
    for (int64_t d : t.dims)
      if (d < 0) fail(op, "result type " + t.str() + " has a negative dimension");
  std::vector<Value> results = def_results(result_types);
  std::string s;
  if (!results.empty()) s = lhs(results) + " = ";
  // Ops from other dialects (via generic) come with their prefix.
  s += "\"" + (op.find('.') == std::string::npos ? "stablehlo." + op : op) + "\"(" + args + ")";
  if (!regions.empty()) {
    s += " (";
    for (size_t i = 0; i < regions.size(); ++i) {
      if (i) s += ", ";
      s += regions[i];
    }
    s += ")";
  }
  if (!attrs.empty()) s += " {" + attrs + "}";
  s += " : (" + type_list(arg_types) + ") -> ";
  s += result_types.size() == 1 ? result_types[0].str() : "(" + type_list(result_types) + ")";
  line(s);
  return results;
}

std::string Builder::Impl::region(Builder& b, const std::string& op,
                                  const std::vector<TensorType>& arg_types, const RegionFn& fn,
                                  const std::vector<TensorType>& ret_types) {
  ensure_open();
  if (!fn) fail(op, "region body is empty");
  // Restores the emission target even when the body throws, so a failed lowering
  // leaves the builder usable (its partial region text is discarded).
  struct Restore {
    Impl* self;
    std::string* out;
    int depth;
    ~Restore() {
      self->out = out;
      self->depth = depth;
      self->open_scopes.pop_back();
    }
  } restore{this, out, depth};
  std::string buf;
  const int op_depth = depth;
  open_scopes.push_back(next_scope++);
  out = &buf;
  depth = op_depth + 1;

  std::vector<Value> args;
  std::string header(static_cast<size_t>(op_depth) * 2, ' ');
  header += "^bb0(";
  for (size_t i = 0; i < arg_types.size(); ++i) {
    Value v = def(arg_types[i], "%v" + std::to_string(names.size()));
    if (i) header += ", ";
    header += names[v.id] + ": " + v.type.str();
    args.push_back(v);
  }
  header += "):\n";

  std::vector<Value> rets = fn(b, args);
  if (rets.size() != ret_types.size())
    fail(op, "region returned " + std::to_string(rets.size()) + " values, expected " +
                 std::to_string(ret_types.size()));
  std::string names_text;
  std::vector<TensorType> types_got;
  for (size_t i = 0; i < rets.size(); ++i) {
    if (rets[i].type != ret_types[i])
      fail(op, "region result " + std::to_string(i) + " has type " + rets[i].type.str() +
                   ", expected " + ret_types[i].str());
    if (i) names_text += ", ";
    names_text += use(op, rets[i]);
    types_got.push_back(rets[i].type);
  }
  line("\"stablehlo.return\"(" + names_text + ") : (" + type_list(types_got) + ") -> ()");
  std::string text_out = "{\n" + header + buf;
  text_out.append(static_cast<size_t>(op_depth) * 2, ' ');
  return text_out + "}";
}

// ---- Builder: signature and output ---------------------------------------------

Builder::Builder(std::string function_name) : impl_(std::make_shared<Impl>()) {
  // The name labels the module (it becomes the HloModule name in XLA dumps); the
  // entry function is always @main because that is what PJRT compiles.
  std::string n;
  for (char c : function_name)
    n += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.') ? c : '_';
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) n = "m_" + n;
  impl_->module_name = n;
}

Value Builder::parameter(const TensorType& type, int donate_to_output) {
  impl_->ensure_open();
  for (int64_t d : type.dims)
    if (d < 0) fail("parameter", "type " + type.str() + " has a negative dimension");
  if (donate_to_output >= 0)
    for (const auto& p : impl_->params)
      if (p.donate == donate_to_output)
        fail("parameter", "two parameters donated to output " + std::to_string(donate_to_output));
  // Function arguments belong to the function body scope whatever region is open.
  const int idx = static_cast<int>(impl_->params.size());
  Value v;
  v.id = static_cast<int>(impl_->names.size());
  v.type = type;
  impl_->names.push_back("%arg" + std::to_string(idx));
  impl_->types.push_back(type);
  impl_->scopes.push_back(0);
  impl_->params.push_back({v.id, type, donate_to_output});
  return v;
}

void Builder::donate(Value param, int output) {
  impl_->ensure_open();
  Impl::Param* target = nullptr;
  for (auto& p : impl_->params) {
    if (p.id == param.id) target = &p;
    else if (output >= 0 && p.donate == output)
      fail("parameter", "two parameters donated to output " + std::to_string(output));
  }
  if (!target) fail("parameter", "donate: the value is not a parameter of this function");
  target->donate = output;
}

int Builder::num_parameters() const { return static_cast<int>(impl_->params.size()); }

void Builder::ret(const std::vector<Value>& results) {
  Impl& m = *impl_;
  m.ensure_open();
  if (m.open_scopes.size() != 1) fail("return", "ret() called inside a region");
  for (const auto& v : results) m.use("return", v);
  for (const auto& p : m.params) {
    if (p.donate < 0) continue;
    if (static_cast<size_t>(p.donate) >= results.size())
      fail("return", "parameter donated to output " + std::to_string(p.donate) + " but there are " +
                         std::to_string(results.size()) + " results");
    if (results[p.donate].type != p.type)
      fail("return", "donated parameter of type " + p.type.str() + " aliases output " +
                         std::to_string(p.donate) + " of type " + results[p.donate].type.str());
  }
  m.results = results;
  m.finished = true;
}

std::string Builder::module_text() const {
  const Impl& m = *impl_;
  if (!m.finished) throw std::logic_error("hlo::Builder::module_text: ret() has not been called");
  if (!m.text.empty()) return m.text;
  std::string s = "module @" + m.module_name +
                  " attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
                  "  func.func public @main(";
  for (size_t i = 0; i < m.params.size(); ++i) {
    if (i) s += ", ";
    s += m.names[m.params[i].id] + ": " + m.params[i].type.str();
    if (m.params[i].donate >= 0)
      s += " {tf.aliasing_output = " + std::to_string(m.params[i].donate) + " : i32}";
  }
  s += ") -> (";
  std::string ret_names, ret_types;
  for (size_t i = 0; i < m.results.size(); ++i) {
    if (i) {
      ret_names += ", ";
      ret_types += ", ";
    }
    ret_names += m.names[m.results[i].id];
    ret_types += m.results[i].type.str();
  }
  s += ret_types + ") {\n" + m.body;
  s += m.results.empty() ? "    return\n" : "    return " + ret_names + " : " + ret_types + "\n";
  // Functions of modules the body calls (call_module.h): custom kernels.
  s += "  }\n" + called_functions(m.body) + "}\n";
  m.text = s;
  return s;
}

std::string Builder::fingerprint() const { return hash128(module_text()); }

Value Builder::generic(const std::string& op, const std::vector<Value>& operands,
                       const std::string& attrs, const TensorType& result) {
  return impl_->emit(op, operands, {}, attrs, {result})[0];
}

std::vector<Value> Builder::generic_multi(const std::string& op,
                                          const std::vector<Value>& operands,
                                          const std::string& attrs,
                                          const std::vector<TensorType>& results) {
  return impl_->emit(op, operands, {}, attrs, results);
}

}  // namespace tpu::hlo
