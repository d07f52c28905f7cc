//===- kernels_gemm.cpp - matmul, gemm and linear on the CPU --------------===//
//
// Every product is matmul2d: one row-major GEMM with double accumulation
// (batched matmul loops over numpy-broadcast batch dims).
// The family's shared conventions (determinism, operand checks) are in
// cpu/kernels.h.
//
//===----------------------------------------------------------------------===//

#include "cpu/blas.h"
#include "cpu/kernels.h"
#include "cpu/parallel.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

using namespace spw;

namespace {

using namespace spw::checks;
using spw::cpu::for_each_index;

// ---- matmul ------------------------------------------------------------------

// C[M,N] = alpha * A[M,K] B[K,N] (+ beta * Cin, when given as a pointer with
// strides). A and B are addressed with arbitrary strides; B is packed
// row-major first when it is not, so the inner loop (i-k-j order) runs over
// contiguous memory.
struct MatView {
  const float *p;
  int64_t s0, s1; // strides of the two dims
};

// The fast kernels' matmul2d: C starts as float(beta * Cin) (or is
// overwritten when there is none), then one BLAS sgemm adds alpha * A B.
// An operand that is neither row- nor column-major is packed row-major.
void matmul2d_fast(MatView A, MatView B, float *C, int64_t M, int64_t N,
                   int64_t K, double alpha, const MatView *Cin, double beta,
                   std::vector<float> &pack) {
  cpu::GemmOperand a{A.p, false, A.s0}, b{B.p, false, B.s0};
  std::vector<float> packA;
  if (A.s1 == 1 && A.s0 >= std::max<int64_t>(K, 1)) {
  } else if (A.s0 == 1 && A.s1 >= std::max<int64_t>(M, 1)) {
    a = {A.p, true, A.s1};
  } else {
    packA.resize(size_t(M * K));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k)
        packA[size_t(i * K + k)] = A.p[i * A.s0 + k * A.s1];
    a = {packA.data(), false, std::max<int64_t>(K, 1)};
  }
  if (B.s1 == 1 && B.s0 >= std::max<int64_t>(N, 1)) {
  } else if (B.s0 == 1 && B.s1 >= std::max<int64_t>(K, 1)) {
    b = {B.p, true, B.s1};
  } else {
    pack.resize(size_t(K * N));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j)
        pack[size_t(k * N + j)] = B.p[k * B.s0 + j * B.s1];
    b = {pack.data(), false, std::max<int64_t>(N, 1)};
  }
  float c_beta = 0.0f;
  if (Cin) {
    cpu::parallel_for(M, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        for (int64_t j = 0; j < N; ++j)
          C[i * N + j] = float(beta * double(Cin->p[i * Cin->s0 + j * Cin->s1]));
    });
    c_beta = 1.0f;
  }
  cpu::sgemm(M, N, K, float(alpha), a, b, c_beta, C, N);
}

void matmul2d(MatView A, MatView B, float *C, int64_t M, int64_t N, int64_t K,
              double alpha, const MatView *Cin, double beta,
              std::vector<float> &pack, std::vector<double> &acc) {
  if (cpu::fast_kernels())
    return matmul2d_fast(A, B, C, M, N, K, alpha, Cin, beta, pack);
  const float *Bp = B.p;
  if (!(B.s1 == 1 && B.s0 == N)) {
    pack.resize(size_t(K * N));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j)
        pack[size_t(k * N + j)] = B.p[k * B.s0 + j * B.s1];
    Bp = pack.data();
  }
  acc.resize(size_t(N));
  for (int64_t i = 0; i < M; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    double *ac = acc.data();
    for (int64_t k = 0; k < K; ++k) {
      const double a = A.p[i * A.s0 + k * A.s1];
      const float *brow = Bp + k * N;
      for (int64_t j = 0; j < N; ++j)
        ac[j] += a * double(brow[j]);
    }
    float *crow = C + i * N;
    if (Cin) {
      for (int64_t j = 0; j < N; ++j)
        crow[j] = float(alpha * ac[j] +
                        beta * double(Cin->p[i * Cin->s0 + j * Cin->s1]));
    } else {
      for (int64_t j = 0; j < N; ++j)
        crow[j] = float(alpha * ac[j]);
    }
  }
}

void matmul(spw_tensor *const *ins, spw_tensor *const *outs) {
  const spw_tensor &a = input(ins, 0, "a"), &b = input(ins, 1, "b");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(a, SPW_F32, "a");
  expect_dtype(b, SPW_F32, "b");
  expect_dtype(y, SPW_F32, "result");
  if (a.rank < 1 || b.rank < 1)
    fail("operands must have rank >= 1, got %s and %s", a.shape().c_str(),
         b.shape().c_str());
  // numpy: a 1-D a is [1,K] and b 1-D is [K,1], the added dim dropped after.
  const int64_t M = a.rank >= 2 ? a.dims[a.rank - 2] : 1;
  const int64_t K = a.dims[a.rank - 1];
  const int64_t Kb = b.rank >= 2 ? b.dims[b.rank - 2] : b.dims[0];
  const int64_t N = b.rank >= 2 ? b.dims[b.rank - 1] : 1;
  if (K != Kb)
    fail("inner dimensions differ: %s x %s", a.shape().c_str(),
         b.shape().c_str());
  // Batch dims broadcast like numpy.
  spw_tensor ab, bb; // shape-only views of the batch dims
  ab.rank = std::max(a.rank - 2, 0);
  bb.rank = std::max(b.rank - 2, 0);
  std::copy(a.dims, a.dims + ab.rank, ab.dims);
  std::copy(b.dims, b.dims + bb.rank, bb.dims);
  std::vector<int64_t> expect;
  try {
    expect = broadcast_shape(ab, bb);
  } catch (const Error &) {
    fail("batch dimensions of %s and %s are not broadcast-compatible",
         a.shape().c_str(), b.shape().c_str());
  }
  const int batch_rank = int(expect.size());
  if (a.rank >= 2)
    expect.push_back(M);
  if (b.rank >= 2)
    expect.push_back(N);
  expect_shape(y, expect, "result");
  auto sa = broadcast_strides(ab, batch_rank, expect.data(), "a");
  auto sb = broadcast_strides(bb, batch_rank, expect.data(), "b");
  std::vector<float> pack;
  std::vector<double> acc;
  const float *pa = a.as<float>(), *pb = b.as<float>();
  float *py = y.as<float>();
  for_each_index<2>(batch_rank, expect.data(), {sa.data(), sb.data()},
                    [&](int64_t bi, const std::array<int64_t, 2> &o) {
                      MatView A{pa + o[0] * M * K, K, 1};
                      MatView B{pb + o[1] * K * N, N, 1};
                      matmul2d(A, B, py + bi * M * N, M, N, K, 1.0, nullptr,
                               0.0, pack, acc);
                    });
}

void gemm(spw_tensor *const *ins, spw_tensor *const *outs,
          const int64_t *iattrs, const double *fattrs) {
  const spw_tensor &a = input(ins, 0, "a"), &b = input(ins, 1, "b");
  const spw_tensor *c = ins ? ins[2] : nullptr;
  spw_tensor &y = output(outs, 0, "y");
  need_iattrs(iattrs);
  if (!fattrs)
    fail("float attributes are NULL");
  const bool ta = iattrs[0] != 0, tb = iattrs[1] != 0;
  const double alpha = fattrs[0], beta = fattrs[1];
  expect_dtype(a, SPW_F32, "a");
  expect_dtype(b, SPW_F32, "b");
  expect_dtype(y, SPW_F32, "result");
  if (a.rank != 2 || b.rank != 2)
    fail("operands must be 2-D, got %s and %s", a.shape().c_str(),
         b.shape().c_str());
  const int64_t M = ta ? a.dims[1] : a.dims[0], K = ta ? a.dims[0] : a.dims[1];
  const int64_t Kb = tb ? b.dims[1] : b.dims[0], N = tb ? b.dims[0] : b.dims[1];
  if (K != Kb)
    fail("inner dimensions differ: %s%s x %s%s", a.shape().c_str(),
         ta ? "^T" : "", b.shape().c_str(), tb ? "^T" : "");
  expect_shape(y, {M, N}, "result");
  MatView A{a.as<float>(), ta ? 1 : K, ta ? M : 1};
  MatView B{b.as<float>(), tb ? 1 : N, tb ? K : 1};
  MatView Cv{};
  if (c) {
    expect_dtype(*c, SPW_F32, "c");
    int64_t md[2] = {M, N};
    auto s = broadcast_strides(*c, 2, md, "c");
    Cv = MatView{c->as<float>(), s[0], s[1]};
  }
  // beta = 0 does not read c (BLAS, onnxruntime and the CUDA kernel): a NaN
  // or Inf in c adds nothing, where 0 * NaN would be NaN.
  const bool use_c = c && beta != 0.0;
  std::vector<float> pack;
  std::vector<double> acc;
  matmul2d(A, B, y.as<float>(), M, N, K, alpha, use_c ? &Cv : nullptr, beta,
           pack, acc);
}

// ---- linear ----------------------------------------------------------------------

void linear(spw_tensor *const *ins, spw_tensor *const *outs) {
  const spw_tensor &x = input(ins, 0, "x"), &w = input(ins, 1, "w");
  const spw_tensor *b = ins[2];
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(x, SPW_F32, "x");
  expect_dtype(w, SPW_F32, "w");
  expect_dtype(y, SPW_F32, "result");
  if (x.rank < 1)
    fail("x must have rank >= 1, got %s", x.shape().c_str());
  if (w.rank != 2)
    fail("w must be [K,N], got %s", w.shape().c_str());
  const int64_t K = x.dims[x.rank - 1], N = w.dims[1];
  if (w.dims[0] != K)
    fail("inner dimensions differ: x %s, w %s", x.shape().c_str(),
         w.shape().c_str());
  if (b) {
    expect_dtype(*b, SPW_F32, "b");
    expect_shape(*b, {N}, "b");
  }
  std::vector<int64_t> want(x.dims, x.dims + x.rank - 1);
  want.push_back(N);
  expect_shape(y, want, "result");
  const int64_t M = prod(x.dims, 0, x.rank - 1);
  MatView A{x.as<float>(), K, 1}, B{w.as<float>(), N, 1};
  MatView C{b ? b->as<float>() : nullptr, 0, 1};
  std::vector<float> pack;
  std::vector<double> acc;
  matmul2d(A, B, y.as<float>(), M, N, K, 1.0, b ? &C : nullptr, 1.0, pack,
           acc);
}

} // namespace

SPW_KERNEL_DEF(matmul) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "matmul", [&] { matmul(ins, outs); });
}
SPW_KERNEL_DEF(gemm) {
  guarded(ctx, "gemm", [&] { gemm(ins, outs, iattrs, fattrs); });
}
SPW_KERNEL_DEF(linear) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "linear", [&] { linear(ins, outs); });
}
