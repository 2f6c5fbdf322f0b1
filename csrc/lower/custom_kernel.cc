// The lowering of custom kernels (see custom_kernel.h): picks the module whose
// signature matches the call and inlines it.
#include "lower/custom_kernel.h"

#include <cstdio>
#include <map>
#include <mutex>
#include <stdexcept>

#include "hlo/call_module.h"
#include "lower/registry.h"

namespace tpu::lower {
namespace {

struct Variant {
  std::vector<hlo::TensorType> params;
  std::string static_key;
  std::string text;
};

std::mutex g_mu;
std::map<std::string, std::vector<Variant>>& variants() {
  static auto* m = new std::map<std::string, std::vector<Variant>>();
  return *m;
}

// The non-tensor arguments as torch_tpu/kernels/_static_key formats them:
// "a=1,b=0.5,c=True" (floats as %.17g, Python's '%.17g' % v).
std::string static_key(const Ctx& ctx) {
  std::string key;
  for (size_t i = 0; i < ctx.num_args(); ++i) {
    const Arg& a = ctx.arg(i);
    if (a.kind == Arg::kTensor || a.kind == Arg::kTensorList) continue;
    const c10::IValue& v = a.value;
    std::string s;
    if (v.isBool()) s = v.toBool() ? "True" : "False";
    else if (v.isInt()) s = std::to_string(v.toInt());
    else if (v.isDouble()) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g", v.toDouble());
      s = buf;
    } else if (v.isString()) s = v.toStringRef();
    else if (v.isNone()) s = "None";
    else throw c10::TypeError({__func__, __FILE__, __LINE__},
                              ctx.schema().name() + ": argument '" +
                                  ctx.schema().arguments()[i].name() +
                                  "' must be a bool, int, float or str");
    if (!key.empty()) key += ",";
    key += ctx.schema().arguments()[i].name() + "=" + s;
  }
  return key;
}

std::string types_str(const std::vector<hlo::TensorType>& ts) {
  std::string s = "(";
  for (size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + ts[i].str();
  return s + ")";
}

std::vector<hlo::Value> lower_custom(const std::string& op_name, Ctx& ctx) {
  std::vector<hlo::Value> args;
  std::vector<hlo::TensorType> types;
  for (size_t i = 0; i < ctx.num_args(); ++i) {
    const Arg& a = ctx.arg(i);
    if (a.kind == Arg::kTensorList)
      throw std::invalid_argument(op_name + ": tensor-list arguments are not supported");
    if (a.kind != Arg::kTensor) continue;
    args.push_back(a.tensor);
    types.push_back(a.tensor.type);
  }
  const std::string key = static_key(ctx);
  std::string text;
  {
    std::lock_guard<std::mutex> g(g_mu);
    auto it = variants().find(op_name);
    if (it != variants().end())
      for (const auto& v : it->second)
        if (v.params == types && v.static_key == key) text = v.text;
  }
  if (text.empty())
    throw std::invalid_argument(op_name + ": no StableHLO module for arguments " +
                                types_str(types) + (key.empty() ? "" : " [" + key + "]") +
                                " (the op's fake kernel adds one per signature)");
  return hlo::call_module(ctx.b, text, args);
}

}  // namespace

void add_custom_kernel(const std::string& op_name, const std::vector<int>& static_args) {
  if (find(op_name)) return;
  add(op_name, [op_name](Ctx& ctx) { return lower_custom(op_name, ctx); }, static_args);
}

void add_custom_kernel_variant(const std::string& op_name, const std::string& mlir_text,
                               const std::string& static_key) {
  hlo::FuncSignature sig = hlo::module_signature(mlir_text);  // validates the text
  std::lock_guard<std::mutex> g(g_mu);
  auto& vs = variants()[op_name];
  for (auto& v : vs)
    if (v.params == sig.params && v.static_key == static_key) {
      v.text = mlir_text;
      return;
    }
  vs.push_back(Variant{sig.params, static_key, mlir_text});
}

size_t custom_kernel_variants(const std::string& op_name) {
  std::lock_guard<std::mutex> g(g_mu);
  auto it = variants().find(op_name);
  return it == variants().end() ? 0 : it->second.size();
}

}  // namespace tpu::lower
