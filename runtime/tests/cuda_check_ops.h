//===- cuda_check_ops.h - kernel cases for spillway-cuda-check -------------===//
//
// A case is one call of a C ABI kernel on fresh random host inputs.
// spillway-cuda-check runs it through a CPU context (the reference) and a
// CUDA context (inputs uploaded, outputs poisoned with NaN bytes first, then
// downloaded) and compares every output: floats by relative norm
// ||gpu - cpu|| / max(||cpu||, tiny) against the case's tolerance for the
// context's precision, integers and bools exactly. A case whose CPU run fails
// is itself a failure (the case is wrong, not the kernel).
//
// The cases of each kernel family live in their own cuda_cases_*.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_TESTS_CUDA_CHECK_OPS_H
#define SPILLWAY_RUNTIME_TESTS_CUDA_CHECK_OPS_H

#include "context.h"
#include "device.h"

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace spw::check {

struct HostTensor {
  int32_t dtype = SPW_F32;
  std::vector<int64_t> dims;
  std::vector<char> data; // numel * dtype_size bytes
  int64_t numel() const;
};

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(uint64_t seed) : gen(seed) {}
  // f32, uniform in [lo, hi] but never exactly 0 (a zero input hides bugs).
  HostTensor uniform(std::vector<int64_t> dims, double lo = -1, double hi = 1);
  // f32, |x| in [lo, hi] with a random sign.
  HostTensor magnitude(std::vector<int64_t> dims, double lo, double hi);
  // Integers in [0, bound) as `dtype` (SPW_I64 or SPW_I32).
  HostTensor index(std::vector<int64_t> dims, int64_t bound,
                   int32_t dtype = SPW_I64);
  // f32 rows (over the last dim) holding special values, by row r % 7: an
  // ordinary row, one NaN, one +Inf, one -Inf (each at a random column), all
  // -Inf, every element special (NaN, +Inf, -Inf, -0, +0, a number in
  // turn), zeros of both signs among numbers. Numbers are uniform in
  // [lo, hi], never 0.
  HostTensor special(std::vector<int64_t> dims, double lo = -2, double hi = 2);
  // Bools, true with probability p.
  HostTensor mask(std::vector<int64_t> dims, double p = 0.5);
  int64_t below(int64_t bound); // uniform in [0, bound)
};

struct OutSpec {
  int32_t dtype = SPW_F32;
  std::vector<int64_t> dims;
};

struct OpCase {
  std::string label; // "matmul [4,64,96]x[96,128]"
  Op op = Op::Count;
  std::vector<std::optional<HostTensor>> ins; // nullopt: an absent input
  std::vector<OutSpec> outs;                  // an absent output: dims empty
                                              // and dtype 0
  std::vector<int64_t> iattrs;
  std::vector<double> fattrs;
  // Every float output must put NaN, +Inf and -Inf where the CPU's does (all
  // cases); with zero_sign also a zero of the CPU's sign.
  bool zero_sign = false;
  // Relative-norm tolerance of float outputs, per precision.
  double tol_fp32 = 1e-5;
  double tol_bf16 = 1e-2;
};

using CaseList = std::vector<OpCase>;

// For the case files: a shape's element count, and "[2,3]".
int64_t count(const std::vector<int64_t> &dims);
std::string dims_str(const std::vector<int64_t> &dims);

// Compares a device's f32 output with the CPU's: "" when it passes, else
// why (naming the element). Classes first: NaN against NaN at the same
// position is equal (any payload), NaN against a number is a mismatch either
// way, infinities must be the same one, and with zero_sign a zero must have
// the CPU's sign; then the relative norm of the finite elements against
// `tol` (stored in *err_out) and no element off by more than 4 tol of the
// largest |value|.
std::string compare_f32(const float *gpu, const float *cpu, int64_t n,
                        bool zero_sign, double tol, double *err_out);

// Runs every case whose label contains `only` through `dctx` (a context
// with a device) and a CPU context, printing one line per case; `exact`
// (the loopback device) requires identical bits. Returns the failures.
int run_op_cases(spw_ctx *dctx, bool exact, const std::string &only,
                 uint64_t seed);

// Each family adds its cases (deterministic for a seed).
void add_elementwise_cases(CaseList &cases, Rng &rng);
void add_shape_cases(CaseList &cases, Rng &rng);
void add_gemm_cases(CaseList &cases, Rng &rng);
void add_nn_cases(CaseList &cases, Rng &rng);
void add_attention_cases(CaseList &cases, Rng &rng);

} // namespace spw::check

#endif // SPILLWAY_RUNTIME_TESTS_CUDA_CHECK_OPS_H
