//===- cuda_cases_gemm.cpp - matmul/gemm/linear cases for cuda-check ------===//
//
// The shapes reach every path of kernels_gemm.cu: single GEMMs of sizes
// that are not multiples of 4, 16 or any tile; 1-D operands on either side
// (numpy promotion); batch dims that are full on both sides (one strided
// batch), b shared by all of a's batch (one GEMM of all its rows), a
// broadcast on one side (batch stride 0) and irregular broadcasts ([2,1]
// x [3], looped batch groups); every transA / transB, alpha / beta with C
// full or broadcast ([N], [M,1], [1,1], a scalar) or absent; linear with and
// without its bias epilogue; K == 1 and K == 0 (no cuBLASLt call: zeros,
// beta C or the bias); and one large GEMM.
//
// Tolerances (relative norm). fp32: CUBLAS_COMPUTE_32F accumulates in fp32
// (never TF32), the CPU in double: ~sqrt(K) ulp, ~2e-6 at K = 1024, so the
// default 1e-5 holds. bf16 products: the inputs are rounded to bf16 (2^-9
// relative), ~2e-3 on uniform inputs, so 1e-2.
//
//===----------------------------------------------------------------------===//

#include "cuda_check_ops.h"

#include <cstdio>
#include <string>
#include <vector>

namespace spw::check {
namespace {

std::string num_str(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

void add_matmul(CaseList &cases, Rng &rng, const std::vector<int64_t> &a,
                const std::vector<int64_t> &b, const std::vector<int64_t> &y) {
  OpCase c;
  c.label = "matmul " + dims_str(a) + "x" + dims_str(b) + " f32";
  c.op = Op::matmul;
  c.ins.push_back(rng.uniform(a));
  c.ins.push_back(rng.uniform(b));
  c.outs.push_back({SPW_F32, y});
  cases.push_back(std::move(c));
}

// gemm of op(A) [M,K] and op(B) [K,N]; cdims: C's shape, or absent.
void add_gemm(CaseList &cases, Rng &rng, int64_t M, int64_t N, int64_t K,
              bool ta, bool tb, double alpha, double beta, bool with_c,
              const std::vector<int64_t> &cdims) {
  OpCase c;
  const std::vector<int64_t> a = ta ? std::vector<int64_t>{K, M}
                                    : std::vector<int64_t>{M, K};
  const std::vector<int64_t> b = tb ? std::vector<int64_t>{N, K}
                                    : std::vector<int64_t>{K, N};
  c.label = "gemm " + dims_str(a) + (ta ? "^T" : "") + "x" + dims_str(b) +
            (tb ? "^T" : "") + " alpha " + num_str(alpha) + " beta " +
            num_str(beta) +
            (with_c ? " c " + dims_str(cdims) : " no c") + " f32";
  c.op = Op::gemm;
  c.ins.push_back(rng.uniform(a));
  c.ins.push_back(rng.uniform(b));
  if (with_c)
    c.ins.push_back(rng.uniform(cdims));
  else
    c.ins.push_back(std::nullopt);
  c.outs.push_back({SPW_F32, {M, N}});
  c.iattrs = {ta ? 1 : 0, tb ? 1 : 0};
  c.fattrs = {alpha, beta};
  cases.push_back(std::move(c));
}

void add_linear(CaseList &cases, Rng &rng, const std::vector<int64_t> &x,
                int64_t N, bool bias) {
  OpCase c;
  const int64_t K = x.back();
  c.label = "linear " + dims_str(x) + "x" + dims_str({K, N}) +
            (bias ? " + b" : " no b") + " f32";
  c.op = Op::linear;
  c.ins.push_back(rng.uniform(x));
  c.ins.push_back(rng.uniform({K, N}));
  if (bias)
    c.ins.push_back(rng.uniform({N}));
  else
    c.ins.push_back(std::nullopt);
  std::vector<int64_t> y(x.begin(), x.end() - 1);
  y.push_back(N);
  c.outs.push_back({SPW_F32, y});
  cases.push_back(std::move(c));
}

} // namespace

void add_gemm_cases(CaseList &cases, Rng &rng) {
  // ---- matmul: single GEMMs.
  add_matmul(cases, rng, {7, 13}, {13, 9}, {7, 9});
  add_matmul(cases, rng, {64, 96}, {96, 128}, {64, 128});
  add_matmul(cases, rng, {1, 1}, {1, 1}, {1, 1});
  add_matmul(cases, rng, {5, 1}, {1, 6}, {5, 6});   // K == 1
  add_matmul(cases, rng, {1, 300}, {300, 1}, {1, 1}); // M == N == 1
  add_matmul(cases, rng, {129, 67}, {67, 255}, {129, 255});
  add_matmul(cases, rng, {3, 0}, {0, 4}, {3, 4}); // K == 0: zeros
  // 1-D operands: numpy promotion, the added dim dropped.
  add_matmul(cases, rng, {13}, {13, 9}, {9});
  add_matmul(cases, rng, {7, 13}, {13}, {7});
  add_matmul(cases, rng, {13}, {13}, {});
  add_matmul(cases, rng, {13}, {4, 13, 5}, {4, 5});
  add_matmul(cases, rng, {4, 7, 13}, {13}, {4, 7});
  // Batches: full on both sides (strided batch).
  add_matmul(cases, rng, {4, 33, 17}, {4, 17, 19}, {4, 33, 19});
  add_matmul(cases, rng, {2, 3, 9, 5}, {2, 3, 5, 11}, {2, 3, 9, 11});
  // b shared: a's batch folds into one GEMM.
  add_matmul(cases, rng, {4, 33, 17}, {17, 19}, {4, 33, 19});
  add_matmul(cases, rng, {2, 3, 9, 5}, {1, 5, 11}, {2, 3, 9, 11});
  // a shared: batch stride 0 on a.
  add_matmul(cases, rng, {33, 17}, {4, 17, 19}, {4, 33, 19});
  add_matmul(cases, rng, {1, 33, 17}, {5, 17, 19}, {5, 33, 19});
  // Irregular broadcasts: batch groups looped.
  add_matmul(cases, rng, {2, 1, 5, 7}, {1, 3, 7, 6}, {2, 3, 5, 6});
  add_matmul(cases, rng, {2, 3, 5, 7}, {3, 7, 6}, {2, 3, 5, 6});
  add_matmul(cases, rng, {3, 1, 4, 5}, {2, 5, 6}, {3, 2, 4, 6});
  add_matmul(cases, rng, {1, 1, 9}, {1, 9, 1}, {1, 1, 1});
  // Attention-like batched products.
  add_matmul(cases, rng, {2, 4, 100, 64}, {2, 4, 64, 100}, {2, 4, 100, 100});
  // Large: 8192 x 1024 x 4096.
  add_matmul(cases, rng, {8 * 1024, 1024}, {1024, 4096}, {8 * 1024, 4096});

  // ---- gemm: every transpose, alpha / beta, C full, broadcast or absent.
  for (int t = 0; t < 4; ++t)
    add_gemm(cases, rng, 37, 45, 21, t & 1, t & 2, 1.5, 0.5, true, {37, 45});
  for (int t = 0; t < 4; ++t)
    add_gemm(cases, rng, 64, 32, 48, t & 1, t & 2, 1.0, 0.0, false, {});
  add_gemm(cases, rng, 37, 45, 21, false, false, 1.0, 1.0, true, {45});
  add_gemm(cases, rng, 37, 45, 21, true, false, 0.75, -2.0, true, {1, 45});
  add_gemm(cases, rng, 37, 45, 21, false, true, 2.0, 0.25, true, {37, 1});
  add_gemm(cases, rng, 37, 45, 21, true, true, -1.0, 3.0, true, {1, 1});
  add_gemm(cases, rng, 37, 45, 21, false, false, 1.0, 0.5, true, {});
  add_gemm(cases, rng, 37, 45, 21, false, false, 2.0, 0.0, true, {37, 45});
  add_gemm(cases, rng, 1, 1, 1, true, true, 1.0, 1.0, true, {1, 1});
  add_gemm(cases, rng, 5, 7, 1, false, false, 1.0, 1.0, true, {7});
  add_gemm(cases, rng, 5, 7, 0, false, true, 1.0, 0.5, true, {7}); // K == 0
  add_gemm(cases, rng, 256, 768, 3072, false, true, 1.0, 1.0, true, {768});
  add_gemm(cases, rng, 768, 3072, 512, true, false, 1.0, 0.0, false, {});

  // ---- linear: bias epilogue or none, 1-D and batched x.
  add_linear(cases, rng, {4, 9, 33}, 20, true);
  add_linear(cases, rng, {4, 9, 33}, 20, false);
  add_linear(cases, rng, {33}, 20, true);
  add_linear(cases, rng, {1, 1}, 1, true);
  add_linear(cases, rng, {5, 64}, 128, true);
  add_linear(cases, rng, {7, 5}, 3, false);
  add_linear(cases, rng, {4, 0}, 5, true); // K == 0: the bias
  add_linear(cases, rng, {2, 512, 768}, 3072, true);
  add_linear(cases, rng, {2, 512, 3072}, 768, false);
}

} // namespace spw::check
