//===- blas.cpp - the fast CPU kernels' GEMM ------------------------------===//

#include "cpu/blas.h"

#include "cpu/parallel.h"
#include "support.h"

#include <cblas.h>
#include <climits>
#include <mutex>
#include <string>

// OpenBLAS's own thread count (its pthread build runs a thread server).
extern "C" void openblas_set_num_threads(int);
extern "C" char *openblas_get_config(void);

namespace spw::cpu {
namespace {

void single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

int blas_int(int64_t v, const char *what) {
  if (v > INT_MAX)
    fail("GEMM %s %lld exceeds the BLAS's 32-bit int", what, (long long)v);
  return int(v);
}

} // namespace

const char *blas_name() {
  static std::string name = [] {
    std::string c = openblas_get_config();
    // "OpenBLAS 0.3.21 NO_AFFINITY SkylakeX MAX_THREADS=64"
    return c;
  }();
  return name.c_str();
}

void sgemm(int64_t M, int64_t N, int64_t K, float alpha, GemmOperand A,
           GemmOperand B, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0)
    return;
  if (K <= 0) { // C = beta * C; beta 0 does not read C
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  single_threaded_blas();
  const int ldc_i = blas_int(ldc, "leading dimension");
  const int lda = blas_int(A.ld, "leading dimension"),
            ldb = blas_int(B.ld, "leading dimension");
  const int k = blas_int(K, "inner dimension");
  const CBLAS_TRANSPOSE ta = A.trans ? CblasTrans : CblasNoTrans,
                        tb = B.trans ? CblasTrans : CblasNoTrans;
  // Chunks of at least 32 rows (columns): a thinner BLAS call runs its
  // micro-kernel on too little of C.
  if (M >= N) {
    blas_int(N, "dimension");
    parallel_for(M, 32, [&](int64_t lo, int64_t hi) {
      const float *a = A.trans ? A.p + lo : A.p + lo * A.ld;
      cblas_sgemm(CblasRowMajor, ta, tb, blas_int(hi - lo, "dimension"),
                  int(N), k, alpha, a, lda, B.p, ldb, beta, C + lo * ldc,
                  ldc_i);
    });
  } else {
    blas_int(M, "dimension");
    parallel_for(N, 32, [&](int64_t lo, int64_t hi) {
      const float *b = B.trans ? B.p + lo * B.ld : B.p + lo;
      cblas_sgemm(CblasRowMajor, ta, tb, int(M),
                  blas_int(hi - lo, "dimension"), k, alpha, A.p, lda, b, ldb,
                  beta, C + lo, ldc_i);
    });
  }
}

} // namespace spw::cpu
