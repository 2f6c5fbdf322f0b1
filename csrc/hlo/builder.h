// torch_tpu HLO layer: builds one StableHLO module as MLIR text.
//
// No PyTorch header may be included here or in any csrc/hlo file.
//
// The builder emits MLIR's *generic* operation syntax ("stablehlo.add"(%a, %b) :
// (...) -> ...) with attributes in their dialect syntax, which every StableHLO
// version that PJRT plugins accept parses. Values are SSA names unique in the
// whole module (region arguments included). Every method checks its operand
// types and throws std::invalid_argument with a message naming the op on a
// mismatch, so a bad lowering fails at build time, not in the XLA compiler.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tpu::hlo {

enum class ElemType {
  PRED, S8, S16, S32, S64, U8, U16, U32, U64, F16, BF16, F32, F64, C64, C128,
  // The float8 formats PyTorch and XLA share (fn: no infinities; fnuz: no
  // infinities, no negative zero, one NaN 0x80).
  F8E4M3FN, F8E5M2, F8E4M3FNUZ, F8E5M2FNUZ
};

const char* mlir_name(ElemType t);  // "i1", "i8", ..., "ui8", "f16", "bf16", "f32", "complex<f32>"
bool is_float(ElemType t);          // F16, BF16, F32, F64 and the float8 types
bool is_float8(ElemType t);         // F8E4M3FN, F8E5M2, F8E4M3FNUZ, F8E5M2FNUZ
bool is_complex(ElemType t);
bool is_signed_int(ElemType t);     // S*
bool is_unsigned_int(ElemType t);   // U* (PRED excluded)
int bit_width(ElemType t);          // PRED -> 1 ... C128 -> 128

// A float8 format and the float32 -> float8 rounding rule PyTorch's casts follow
// (c10's fp8*_from_fp32_value): round to nearest even, then on overflow
// e4m3fn saturates to +-448 (infinities too), e5m2 goes to +-inf and the fnuz
// types to their NaN 0x80; NaN stays NaN (fn/e5m2 keep its sign), and the fnuz
// types have no -0. XLA's own convert overflows e4m3fn to NaN instead, so
// lowerings round through these rules (csrc/lower/float8.cc) rather than convert.
struct Float8Format {
  int mant_bits;      // 3 or 2
  int bias;           // exponent bias
  bool fnuz;          // no -0, NaN = 0x80
  uint8_t max_code;   // largest finite magnitude's bits
  enum Overflow { kSaturate, kInf, kNaN } overflow;
};
Float8Format float8_format(ElemType t);  // throws for a non-float8 type
uint8_t float8_bits(float f, ElemType t);  // the rule above on the host (constants)

struct TensorType {
  ElemType elem = ElemType::F32;
  std::vector<int64_t> dims;  // row-major; empty = rank 0
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  int64_t numel() const;
  std::string str() const;  // "tensor<2x3xf32>", "tensor<f32>"
  bool operator==(const TensorType& o) const { return elem == o.elem && dims == o.dims; }
  bool operator!=(const TensorType& o) const { return !(*this == o); }
};

// An SSA value of the module being built. Cheap to copy.
struct Value {
  int id = -1;
  TensorType type;
  bool valid() const { return id >= 0; }
  const std::vector<int64_t>& dims() const { return type.dims; }
  ElemType elem() const { return type.elem; }
  int64_t rank() const { return type.rank(); }
};

enum class Cmp { EQ, NE, LT, LE, GT, GE };

// XLA's precision config of dot_general / convolution operands. On a TPU a
// float32 product is computed from bfloat16 passes: DEFAULT one pass, HIGH
// three (bf16_3x), HIGHEST six (float32 accuracy). Other platforms (XLA:CPU)
// compute float32 in float32 whatever the setting.
enum class Precision { DEFAULT, HIGH, HIGHEST };
const char* precision_name(Precision p);  // "DEFAULT", "HIGH", "HIGHEST"

// Built-in reduction bodies, so simple reductions need no lambda.
enum class ReduceOp { Add, Mul, Max, Min, And, Or, Xor };

class Builder;
// Body of a region (reduce, scatter, sort, reduce_window, select_and_scatter):
// receives the region's block arguments, returns the values to yield.
using RegionFn = std::function<std::vector<Value>(Builder&, const std::vector<Value>&)>;

class Builder {
 public:
  explicit Builder(std::string function_name = "main");

  // ---- function signature -------------------------------------------------
  // Adds a function argument. `donate_to_output`, when >= 0, marks the argument
  // as aliased to that result (attribute tf.aliasing_output), allowing PJRT to
  // reuse its buffer; the result must have the same type.
  Value parameter(const TensorType& type, int donate_to_output = -1);
  // The same aliasing, decided after the parameter was made (once the caller
  // knows which result overwrites it).
  void donate(Value param, int output);
  int num_parameters() const;
  // Sets the function results; must be called exactly once, last.
  void ret(const std::vector<Value>& results);

  // ---- constants and iota -------------------------------------------------
  // Rank-0 constants (integer/bool types take `i`, float types `f`; a complex
  // type gets real part `f`, imaginary 0). Non-finite floats (inf, -inf, nan)
  // and bf16/f16 must print in a form MLIR accepts (hex form 0x7F800000 etc.).
  Value constant_f(double f, ElemType t);
  Value constant_i(int64_t i, ElemType t);
  // A constant of any shape, every element equal (a splat).
  Value splat_f(double f, const TensorType& t);
  Value splat_i(int64_t i, const TensorType& t);
  Value iota(const TensorType& t, int64_t dim);
  // A constant with one value per element, row-major; values.size() == t.numel().
  // Same element-type rules as constant_i / constant_f.
  Value dense_i(const std::vector<int64_t>& values, const TensorType& t);
  Value dense_f(const std::vector<double>& values, const TensorType& t);

  // ---- elementwise --------------------------------------------------------
  // Same-typed operands required (use convert/broadcast first).
  Value unary(const std::string& op, Value a);  // op without prefix: "negate", "exponential", "log", "sqrt", "rsqrt", "tanh", "logistic", "abs", "sign", "floor", "ceil", "round_nearest_even", "not", "cosine", "sine", "tan", "log_plus_one", "exponential_minus_one", "is_finite", "popcnt", "real", "imag", "cbrt" ...
  Value binary(const std::string& op, Value a, Value b);  // "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power", "atan2", "and", "or", "xor", "shift_left", "shift_right_arithmetic", "shift_right_logical"
  Value add(Value a, Value b) { return binary("add", a, b); }
  Value sub(Value a, Value b) { return binary("subtract", a, b); }
  Value mul(Value a, Value b) { return binary("multiply", a, b); }
  Value div(Value a, Value b) { return binary("divide", a, b); }
  Value max(Value a, Value b) { return binary("maximum", a, b); }
  Value min(Value a, Value b) { return binary("minimum", a, b); }
  Value neg(Value a) { return unary("negate", a); }
  // Result type: PRED with a's dims. compare_type is chosen from the element type
  // (FLOAT, SIGNED, UNSIGNED; PRED compares as UNSIGNED).
  Value compare(Value a, Value b, Cmp dir);
  Value select(Value pred, Value on_true, Value on_false);  // pred may be rank 0
  Value clamp(Value lo, Value x, Value hi);                 // lo/hi rank 0 or x's shape
  Value convert(Value a, ElemType to);                      // no-op when equal
  Value bitcast_convert(Value a, const TensorType& to);

  // ---- shape --------------------------------------------------------------
  Value reshape(Value a, const std::vector<int64_t>& dims);  // no-op when equal
  Value transpose(Value a, const std::vector<int64_t>& permutation);
  // Result dims `dims`; operand dimension i maps to result dimension broadcast_dims[i].
  Value broadcast_in_dim(Value a, const std::vector<int64_t>& dims,
                         const std::vector<int64_t>& broadcast_dims);
  // Numpy-style: right-aligns a's dims with `dims` (size-1 dims stretch).
  Value broadcast_to(Value a, const std::vector<int64_t>& dims);
  Value slice(Value a, const std::vector<int64_t>& start, const std::vector<int64_t>& limit,
              const std::vector<int64_t>& strides);
  Value dynamic_slice(Value a, const std::vector<Value>& starts,  // rank-0 integer values
                      const std::vector<int64_t>& sizes);
  Value dynamic_update_slice(Value a, Value update, const std::vector<Value>& starts);
  Value concatenate(const std::vector<Value>& parts, int64_t dim);
  Value pad(Value a, Value pad_value, const std::vector<int64_t>& low,
            const std::vector<int64_t>& high, const std::vector<int64_t>& interior);
  Value reverse(Value a, const std::vector<int64_t>& dims);

  // ---- linear algebra -----------------------------------------------------
  // The precision config that dot_general and convolution put on float32 (and
  // complex64) operands from now on; HIGHEST until changed. Operands of other
  // types get none: bfloat16/float16 products are exact in one pass.
  void set_float32_precision(Precision p);
  Precision float32_precision() const;
  // Result dims: batch dims, then lhs free dims, then rhs free dims (StableHLO order).
  // `result` is the preferred element type: bfloat16/float16 operands with a
  // float32 result accumulate in float32.
  Value dot_general(Value lhs, Value rhs, const std::vector<int64_t>& lhs_batch,
                    const std::vector<int64_t>& rhs_batch,
                    const std::vector<int64_t>& lhs_contract,
                    const std::vector<int64_t>& rhs_contract, ElemType result);

  // ---- in-program collectives (builder_collectives.cc) ------------------------
  // `groups` are replica groups: each inner list names the replicas that
  // exchange data (every replica in exactly one group, all groups one size,
  // at least one group). A nonzero `channel_id` gives the op a channel handle
  // (cross-partition programs need one; cross-replica ones do not).
  Value all_reduce(Value x, ReduceOp op, const std::vector<std::vector<int64_t>>& groups,
                   int64_t channel_id = 0);
  // Concatenates the group's `x` along `dim` (that dimension grows group-size times).
  Value all_gather(Value x, int64_t dim, const std::vector<std::vector<int64_t>>& groups,
                   int64_t channel_id = 0);
  // Reduces across the group, then each replica keeps its slice along `dim`.
  Value reduce_scatter(Value x, int64_t dim, ReduceOp op,
                       const std::vector<std::vector<int64_t>>& groups, int64_t channel_id = 0);
  // Splits `x` along split_dim into group-size blocks, sends block j to the
  // group's j-th replica, concatenates what arrives along concat_dim.
  Value all_to_all(Value x, int64_t split_dim, int64_t concat_dim,
                   const std::vector<std::vector<int64_t>>& groups, int64_t channel_id = 0);
  // Sends `x` from each pair's source replica to its target; a replica that is
  // no pair's target gets zeros.
  Value collective_permute(Value x, const std::vector<std::pair<int64_t, int64_t>>& pairs,
                           int64_t channel_id = 0);

  // ---- reductions and regions ----------------------------------------------
  // Reduces `dims` away (result keeps the other dims in order).
  Value reduce(Value input, Value init, const std::vector<int64_t>& dims, ReduceOp op);
  // Variadic form: inputs.size() == inits.size(); body receives
  // (acc_0..acc_{n-1}, x_0..x_{n-1}) as rank-0 values and returns n values.
  std::vector<Value> reduce(const std::vector<Value>& inputs, const std::vector<Value>& inits,
                            const std::vector<int64_t>& dims, const RegionFn& body);
  Value reduce_window(Value input, Value init, const std::vector<int64_t>& window_dims,
                      const std::vector<int64_t>& window_strides,
                      const std::vector<int64_t>& base_dilations,
                      const std::vector<int64_t>& window_dilations,
                      const std::vector<std::pair<int64_t, int64_t>>& padding, ReduceOp op);
  Value select_and_scatter(Value operand, Value source, Value init,
                           const std::vector<int64_t>& window_dims,
                           const std::vector<int64_t>& window_strides,
                           const std::vector<std::pair<int64_t, int64_t>>& padding,
                           Cmp select_dir /* GE for max-pool */, ReduceOp scatter_op);
  // Sorts along `dim`; body receives (a_0, b_0, a_1, b_1, ...) rank-0 values and
  // returns one PRED (a < b in the comparator's sense).
  std::vector<Value> sort(const std::vector<Value>& inputs, int64_t dim, bool is_stable,
                          const RegionFn& comparator);
  // stablehlo.while over the loop-carried values `init`: `cond` receives them and
  // returns one rank-0 PRED (keep going), `body` receives them and returns their
  // next values (same types). Pass everything the regions read as carried values:
  // the regions must not use values defined outside them.
  std::vector<Value> while_loop(const std::vector<Value>& init, const RegionFn& cond,
                                const RegionFn& body);

  // ---- gather / scatter -----------------------------------------------------
  struct GatherDims {
    std::vector<int64_t> offset_dims, collapsed_slice_dims, operand_batching_dims,
        start_indices_batching_dims, start_index_map;
    int64_t index_vector_dim = 0;
  };
  Value gather(Value operand, Value indices, const GatherDims& dims,
               const std::vector<int64_t>& slice_sizes, const TensorType& result,
               bool indices_are_sorted = false);
  struct ScatterDims {
    std::vector<int64_t> update_window_dims, inserted_window_dims, input_batching_dims,
        scatter_indices_batching_dims, scatter_dims_to_operand_dims;
    int64_t index_vector_dim = 0;
  };
  // `combine` == nullptr means replace (the update wins); otherwise a ReduceOp.
  Value scatter(Value operand, Value indices, Value updates, const ScatterDims& dims,
                const ReduceOp* combine, bool indices_are_sorted = false,
                bool unique_indices = false);

  // ---- convolution --------------------------------------------------------
  // Layout string per StableHLO: e.g. input "[b, f, 0, 1]", kernel "[o, i, 0, 1]",
  // output "[b, f, 0, 1]" -- given here as dimension-number vectors.
  struct ConvDims {
    int64_t input_batch = 0, input_feature = 1;
    std::vector<int64_t> input_spatial;
    int64_t kernel_input_feature = 1, kernel_output_feature = 0;
    std::vector<int64_t> kernel_spatial;
    int64_t output_batch = 0, output_feature = 1;
    std::vector<int64_t> output_spatial;
  };
  Value convolution(Value lhs, Value rhs, const ConvDims& dims,
                    const std::vector<int64_t>& window_strides,
                    const std::vector<std::pair<int64_t, int64_t>>& padding,
                    const std::vector<int64_t>& lhs_dilation,
                    const std::vector<int64_t>& rhs_dilation, int64_t feature_group_count,
                    int64_t batch_group_count, const TensorType& result);

  // ---- random ---------------------------------------------------------------
  // stablehlo.rng_bit_generator with algorithm PHILOX: state is u64[2] (or [3]);
  // returns {new_state, bits} with bits of type `result` (an unsigned integer type).
  std::pair<Value, Value> rng_bit_generator(Value state, const TensorType& result);

  // ---- escape hatch -----------------------------------------------------------
  // Emits `"<op>"(operands) {attrs} : (types) -> result` verbatim; `attrs` is the
  // attribute dictionary body without braces (may be empty).
  // An op name without a dialect prefix gets "stablehlo.".
  Value generic(const std::string& op, const std::vector<Value>& operands,
                const std::string& attrs, const TensorType& result);
  // Same for ops with several (or zero) results.
  std::vector<Value> generic_multi(const std::string& op, const std::vector<Value>& operands,
                                   const std::string& attrs,
                                   const std::vector<TensorType>& results);

  // ---- output -----------------------------------------------------------------
  // The whole module: `module @<name> { func.func public @main(...) -> (...) {...} }`.
  std::string module_text() const;
  // 128-bit structural hash (hex) of module_text(): equal text, equal hash.
  std::string fingerprint() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// Promote helpers used by lowerings: broadcast both to a common numpy shape.
std::vector<int64_t> broadcast_shapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

// 128-bit hash (hex string) of arbitrary bytes; used for cache keys.
std::string hash128(const std::string& bytes);

}  // namespace tpu::hlo
