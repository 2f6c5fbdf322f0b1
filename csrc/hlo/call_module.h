// Calling a whole StableHLO module from the program being built (custom
// kernels: a JAX function's lowering, hand-written MLIR). Free functions over
// hlo::Builder's public API, so that builder.h (included everywhere) stays as is.
//
// No PyTorch header may be included here.
#pragma once

#include <string>
#include <vector>

#include "hlo/builder.h"

namespace tpu::hlo {

// Inlines `module_text` into the module `b` builds: its functions become private
// functions renamed @k_<hash>_<name> (appended after @main by module_text(),
// once however often they are called), and @main gets a func.call of the
// module's function `entry`. Argument/result attributes (mhlo.sharding,
// jax.result_info, tf.aliasing_output ...) and loc(...) annotations are dropped.
// The args' types must equal the entry's parameter types (std::invalid_argument
// otherwise); returns its results.
std::vector<Value> call_module(Builder& b, const std::string& module_text,
                               const std::vector<Value>& args, const std::string& entry = "main");

// The parameter and result types of function `entry` of a module's text; throws
// std::invalid_argument when there is no such function or a type is not a static
// tensor type this layer knows.
struct FuncSignature {
  std::vector<TensorType> params, results;
};
FuncSignature module_signature(const std::string& module_text, const std::string& entry = "main");

// "tensor<2x3xf32>" -> TensorType; throws std::invalid_argument otherwise.
TensorType parse_tensor_type(const std::string& text);

// Used by Builder::module_text(): the text of the called modules' functions that
// `body` references (func.call callee = @k_<hash>_...), each module once.
std::string called_functions(const std::string& body);

}  // namespace tpu::hlo
