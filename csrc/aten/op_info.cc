#include "aten/op_info.h"

#include <mutex>
#include <unordered_map>

namespace tpu::aten {

std::string full_name(const c10::OperatorName& n) {
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

namespace {

ArgClass classify(const c10::Argument& a) {
  const c10::TypePtr& t = a.real_type();
  auto kind = t->kind();
  if (kind == c10::TypeKind::OptionalType) {
    auto elem = t->castRaw<c10::OptionalType>()->getElementType();
    switch (elem->kind()) {
      case c10::TypeKind::TensorType: return ArgClass::kTensor;
      case c10::TypeKind::NumberType:
      case c10::TypeKind::FloatType: return ArgClass::kScalar;
      case c10::TypeKind::GeneratorType: return ArgClass::kGenerator;
      default: return ArgClass::kOther;
    }
  }
  switch (kind) {
    case c10::TypeKind::TensorType: return ArgClass::kTensor;
    case c10::TypeKind::NumberType:
    case c10::TypeKind::FloatType: return ArgClass::kScalar;
    case c10::TypeKind::GeneratorType: return ArgClass::kGenerator;
    case c10::TypeKind::ListType: {
      auto elem = t->castRaw<c10::ListType>()->getElementType();
      if (elem->kind() == c10::TypeKind::TensorType) return ArgClass::kTensorList;
      if (elem->kind() == c10::TypeKind::OptionalType &&
          elem->castRaw<c10::OptionalType>()->getElementType()->kind() ==
              c10::TypeKind::TensorType)
        return ArgClass::kOptTensorList;
      if (elem->kind() == c10::TypeKind::NumberType || elem->kind() == c10::TypeKind::FloatType)
        return ArgClass::kScalarList;
      return ArgClass::kOther;
    }
    default: return ArgClass::kOther;
  }
}

bool writes(const c10::Argument& a) { return a.alias_info() && a.alias_info()->isWrite(); }

// Same argument names and types, ignoring alias annotations.
bool same_args(const std::vector<c10::Argument>& a, const std::vector<c10::Argument>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name() != b[i].name() || *a[i].real_type() != *b[i].real_type()) return false;
  return true;
}

// The functional lowering for an in-place or out= overload, if any.
const lower::Lowering* functional_lowering(const c10::FunctionSchema& s, OpInfo::Form* form) {
  std::string base = s.name();
  std::vector<c10::Argument> args;
  bool inplace = !base.empty() && base.back() == '_' && base.substr(0, 8) != "aten::__";
  bool has_out = false;
  for (const auto& a : s.arguments()) {
    if (a.is_out()) {
      has_out = true;
      continue;
    }
    args.push_back(a);
  }
  if (inplace) base.pop_back();
  else if (!has_out) return nullptr;
  for (const auto& [name, low] : lower::all()) {
    auto dot = name.find('.');
    std::string lname = name.substr(0, dot);
    if (lname != base) continue;
    std::string overload = dot == std::string::npos ? "" : name.substr(dot + 1);
    auto h = c10::Dispatcher::singleton().findSchema({lname, overload});
    if (!h) continue;
    if (same_args(h->schema().arguments(), args)) {
      *form = inplace ? OpInfo::kInplace : OpInfo::kOut;
      return &low;
    }
  }
  return nullptr;
}

std::mutex g_mu;
std::unordered_map<const void*, std::unique_ptr<OpInfo>>& infos() {
  static auto* m = new std::unordered_map<const void*, std::unique_ptr<OpInfo>>();
  return *m;
}

std::unique_ptr<OpInfo> make_info(const c10::OperatorHandle& op) {
  const auto& s = op.schema();
  auto info = std::make_unique<OpInfo>();
  info->name = full_name(s.operator_name());
  info->lowering = lower::find(info->name);
  if (!info->lowering) info->lowering = functional_lowering(s, &info->form);
  if (!info->lowering) return nullptr;
  if (info->lowering->skip_meta) info->has_meta = false;
  const auto& args = s.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    ArgClass c = classify(args[i]);
    for (int st : info->lowering->static_args)
      if (st == static_cast<int>(i) && (c == ArgClass::kScalar || c == ArgClass::kScalarList))
        c = ArgClass::kOther;
    info->arg_class.push_back(c);
    if (writes(args[i])) info->mutated.push_back(static_cast<int>(i));
    if (args[i].is_out()) info->has_out = true;
  }
  return info;
}

}  // namespace

OpInfo* op_info(const c10::OperatorHandle& op) {
  const void* key = &op.schema();
  // Every op call of both modes asks: a per-thread copy of the map answers
  // without the process-wide lock (OpInfos are never freed).
  thread_local std::unordered_map<const void*, OpInfo*> mine;
  auto hit = mine.find(key);
  if (hit != mine.end()) return hit->second;
  std::lock_guard<std::mutex> g(g_mu);
  auto it = infos().find(key);
  if (it != infos().end()) return mine[key] = it->second.get();
  auto info = make_info(op);
  OpInfo* p = info.get();
  infos().emplace(key, std::move(info));
  return mine[key] = p;
}

void for_each_op_info(const std::function<void(OpInfo&)>& fn) {
  std::lock_guard<std::mutex> g(g_mu);
  for (auto& [key, info] : infos())
    if (info) fn(*info);
}

std::vector<c10::OperatorHandle> lowered_ops(const std::string& ns) {
  std::vector<c10::OperatorHandle> out;
  const std::string prefix = ns + "::";
  for (const auto& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (ns.empty() ? name.name.find("::") == std::string::npos : name.name.rfind(prefix, 0) != 0)
      continue;
    auto h = c10::Dispatcher::singleton().findSchema(name);
    if (!h) continue;
    if (op_info(*h)) out.push_back(*h);
  }
  return out;
}

}  // namespace tpu::aten
