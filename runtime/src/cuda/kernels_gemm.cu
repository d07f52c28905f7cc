//===- kernels_gemm.cu - matmul, gemm and linear through cuBLASLt ---------===//
//
// Every product is one row-major GEMM (or a strided batch of them) run by
// cuBLASLt on column-major views: a row-major [R,C] matrix is a column-major
// C x R one, so C = A B becomes C^T = B^T A^T with B in cuBLASLt's "A" slot
// and A in its "B" slot, and D is an N x M column-major matrix whose rows
// are the row-major output's columns. linear's bias therefore uses
// CUBLASLT_EPILOGUE_BIAS directly: cuBLASLt broadcasts the bias along D's
// rows, i.e. along the output's columns (length N).
//
// Algorithm selection (cublasLtMatmulAlgoGetHeuristic) is costly, so the
// descriptors and the chosen algorithm are cached per problem: shapes,
// strides, transposes, epilogue, precision and operand alignment.
//
// FP32 uses CUBLAS_COMPUTE_32F, which never rounds inputs to TF32; BF16
// uses CUBLAS_COMPUTE_32F_FAST_16BF (fp32 storage, bf16 products, fp32
// accumulation). When the heuristic has no bf16 algorithm for a problem
// (plausible with 4-byte-aligned operands and odd strides), BF16 retries
// with CUBLAS_COMPUTE_32F: slower, never less accurate. A problem with no
// algorithm at all is an error and is not cached, so a later call asks
// again.
//
//===----------------------------------------------------------------------===//

#include "cuda/cuda_check.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "kernel_checks.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace spw::cuda {
namespace {

using namespace spw::checks;

// File-local, so another file's helper of the same name cannot clash.
[[noreturn]] void cublas_fail(cublasStatus_t s, const char *call,
                              const char *file, int line) {
  throw CudaError(std::string(call) + " failed at " + file + ":" +
                  std::to_string(line) + ": " + cublasLtGetStatusName(s) +
                  " (" + cublasLtGetStatusString(s) + ")");
}

} // namespace
} // namespace spw::cuda

#define SPW_CUBLAS(call)                                                       \
  do {                                                                         \
    cublasStatus_t spw_cublas_s_ = (call);                                     \
    if (spw_cublas_s_ != CUBLAS_STATUS_SUCCESS)                                \
      ::spw::cuda::cublas_fail(spw_cublas_s_, #call, __FILE__, __LINE__);      \
  } while (0)

namespace spw::cuda {
namespace {

constexpr int kThreads = 256;

// ---- small kernels: broadcast fills -----------------------------------------

// d[b, i, j] = (c ? beta * c[b * cb + i * cs0 + j * cs1] : 0)
//            + (bias ? bias[j] : 0), for `batch` M x N matrices spaced sd.
// Expands gemm's broadcast C into the output, and is the whole result when
// K == 0 (cuBLASLt does not take empty inner dimensions).
__global__ void fill_kernel(float *d, int64_t sd, const float *c, int64_t cb,
                            int64_t cs0, int64_t cs1, float beta,
                            const float *bias, int64_t batch, int64_t M,
                            int64_t N) {
  const int64_t mn = M * N, total = batch * mn;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = t / mn, r = t - b * mn;
    const int64_t i = r / N, j = r - i * N;
    float v = bias ? bias[j] : 0.0f;
    // beta == 0 must not read c: it may be the uninitialized output.
    if (c && beta != 0.0f)
      v += beta * c[b * cb + i * cs0 + j * cs1];
    d[b * sd + i * N + j] = v;
  }
}

unsigned grid_for(const Launch &l, int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  const int64_t cap = int64_t(l.sm_count) * 32;
  return unsigned(std::max<int64_t>(1, std::min(blocks, cap)));
}

void fill(const Launch &l, float *d, int64_t sd, const float *c, int64_t cb,
          int64_t cs0, int64_t cs1, float beta, const float *bias,
          int64_t batch, int64_t M, int64_t N) {
  const int64_t total = batch * M * N;
  if (total == 0)
    return;
  fill_kernel<<<grid_for(l, total), kThreads, 0, l.stream>>>(
      d, sd, c, cb, cs0, cs1, beta, bias, batch, M, N);
  SPW_CUDA(cudaGetLastError());
}

// ---- cuBLASLt plans ---------------------------------------------------------

// A row-major problem: D[b] = alpha op(A[b]) op(B[b]) + beta C[b] (+ bias),
// strides in elements.
struct Problem {
  int64_t M = 0, N = 0, K = 0;
  bool ta = false, tb = false;
  int64_t batch = 1, sA = 0, sB = 0, sC = 0;
};

// Descriptors and the algorithm of one problem; owns its cuBLASLt objects.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;            // the heuristic found an algorithm
  bool bias_as_c = false;     // no algorithm with the bias epilogue: the bias
                              // is filled into D and added as C instead
  bool fp32_fallback = false; // BF16 precision, run at CUBLAS_COMPUTE_32F
  Plan() = default;
  Plan(const Plan &) = delete;
  Plan &operator=(const Plan &) = delete;
  ~Plan() {
    // Host-side frees; their status cannot be reported from a destructor.
    if (d)
      cublasLtMatrixLayoutDestroy(d);
    if (b)
      cublasLtMatrixLayoutDestroy(b);
    if (a)
      cublasLtMatrixLayoutDestroy(a);
    if (op)
      cublasLtMatmulDescDestroy(op);
  }
};

struct PrefGuard {
  cublasLtMatmulPreference_t p = nullptr;
  ~PrefGuard() {
    if (p)
      cublasLtMatmulPreferenceDestroy(p);
  }
};

using PlanKey = std::array<int64_t, 20>;

std::mutex plan_mutex;
constexpr size_t kMaxPlans = 4096; // a step has far fewer distinct GEMMs
std::atomic<bool> skip_fast_bf16{false}; // skip_fast_bf16_for_testing
std::atomic<int64_t> fp32_fallbacks{0};  // plans made with the fallback

// Guarded by plan_mutex. Never destroyed: freeing cuBLASLt objects during
// static destruction would race the library's own teardown.
std::map<PlanKey, std::unique_ptr<Plan>> &plan_cache() {
  static auto *plans = new std::map<PlanKey, std::unique_ptr<Plan>>;
  return *plans;
}

// The largest power of two (<= 256) dividing the address and every batch
// stride in bytes: cuBLASLt's heuristic assumes 256-byte aligned operands
// unless told otherwise, and batch i starts at base + i * stride.
uint32_t alignment(const void *p, int64_t stride_elems) {
  uint64_t bits = uint64_t(reinterpret_cast<uintptr_t>(p)) | 256u;
  if (stride_elems != 0)
    bits |= uint64_t(stride_elems) * sizeof(float);
  return uint32_t(bits & (~bits + 1));
}

void set_layout_batch(cublasLtMatrixLayout_t lay, int64_t batch,
                      int64_t stride) {
  const int32_t count = int32_t(batch);
  SPW_CUBLAS(cublasLtMatrixLayoutSetAttribute(
      lay, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  SPW_CUBLAS(cublasLtMatrixLayoutSetAttribute(
      lay, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
      sizeof(stride)));
}

// Builds the column-major view of `p` (see the file comment) at `compute`
// and asks the heuristic for the best algorithm within the workspace; ok
// stays false when it has none.
std::unique_ptr<Plan> try_plan(const Launch &l, const Problem &p,
                               const float *bias, const uint32_t align[4],
                               cublasComputeType_t compute) {
  auto plan = std::make_unique<Plan>();
  SPW_CUBLAS(cublasLtMatmulDescCreate(&plan->op, compute, CUDA_R_32F));
  // cuBLASLt's A is our B: stored column-major N x K (ld N), or K x N
  // (ld K) transposed. Its B is our A: K x M (ld K), or M x K (ld M)
  // transposed. D is N x M (ld N).
  const cublasOperation_t opa = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opb = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  SPW_CUBLAS(cublasLtMatmulDescSetAttribute(
      plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  SPW_CUBLAS(cublasLtMatmulDescSetAttribute(
      plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  if (bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = CUDA_R_32F;
    SPW_CUBLAS(cublasLtMatmulDescSetAttribute(
        plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    SPW_CUBLAS(cublasLtMatmulDescSetAttribute(
        plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
        sizeof(bias_type)));
    // The heuristic reads the pointer's alignment; each call sets it again.
    SPW_CUBLAS(cublasLtMatmulDescSetAttribute(
        plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  const uint64_t a_rows = uint64_t(p.tb ? p.K : p.N);
  const uint64_t a_cols = uint64_t(p.tb ? p.N : p.K);
  const uint64_t b_rows = uint64_t(p.ta ? p.M : p.K);
  const uint64_t b_cols = uint64_t(p.ta ? p.K : p.M);
  SPW_CUBLAS(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_32F, a_rows, a_cols,
                                        int64_t(a_rows)));
  SPW_CUBLAS(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_32F, b_rows, b_cols,
                                        int64_t(b_rows)));
  SPW_CUBLAS(cublasLtMatrixLayoutCreate(&plan->d, CUDA_R_32F, uint64_t(p.N),
                                        uint64_t(p.M), p.N));
  if (p.batch > 1) {
    set_layout_batch(plan->a, p.batch, p.sB);
    set_layout_batch(plan->b, p.batch, p.sA);
    set_layout_batch(plan->d, p.batch, p.sC);
  }
  PrefGuard pref;
  SPW_CUBLAS(cublasLtMatmulPreferenceCreate(&pref.p));
  const uint64_t ws = l.lt_workspace ? uint64_t(l.lt_workspace_bytes) : 0;
  SPW_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
      pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // align[]: our A, B, C, D; cuBLASLt's A and B are swapped.
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    SPW_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
        pref.p, which[i], &align[i], sizeof(align[i])));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(
      l.lt, plan->op, plan->a, plan->b, plan->d, plan->d, pref.p, 1, &result,
      &found);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED || (s == CUBLAS_STATUS_SUCCESS &&
                                           found == 0))
    return plan; // ok stays false: the caller tries another compute type
  SPW_CUBLAS(s);
  plan->algo = result.algo;
  plan->ok = true;
  return plan;
}

// The precision's compute type first; for BF16 then plain fp32 products.
// With a bias that has no algorithm for its epilogue, a plan that runs the
// bias as C (the caller then plans the product without the bias, so BF16
// keeps its bf16 products where they exist).
std::unique_ptr<Plan> make_plan(const Launch &l, const Problem &p,
                                const float *bias, const uint32_t align[4]) {
  const bool bf16 = l.precision == Precision::BF16;
  const bool fast = bf16 && !skip_fast_bf16.load();
  if (fast) {
    auto plan = try_plan(l, p, bias, align, CUBLAS_COMPUTE_32F_FAST_16BF);
    if (plan->ok)
      return plan;
  }
  if (!bias || !fast) {
    auto plan = try_plan(l, p, bias, align, CUBLAS_COMPUTE_32F);
    if (plan->ok) {
      plan->fp32_fallback = bf16;
      return plan;
    }
    if (!bias)
      return plan; // ok false: no algorithm at all
  }
  auto memo = std::make_unique<Plan>();
  memo->bias_as_c = true;
  return memo;
}

std::string problem_str(const Problem &p) {
  return format("[%lld,%lld]%s x [%lld,%lld]%s, batch %lld",
                (long long)(p.ta ? p.K : p.M), (long long)(p.ta ? p.M : p.K),
                p.ta ? "^T" : "", (long long)(p.tb ? p.N : p.K),
                (long long)(p.tb ? p.K : p.N), p.tb ? "^T" : "",
                (long long)p.batch);
}

// D = alpha op(A) op(B) + beta Cin (+ bias along the columns), row-major.
// Cin null: no C term (beta ignored); Cin may be D (in place). Cin, when
// given, has D's layout (row-major [M,N], batch stride sC). bias: N floats,
// only with batch 1.
void run_gemm(const Launch &l, const Problem &p, const float *A,
              const float *B, const float *Cin, float *D, const float *bias,
              float alpha, float beta) {
  if (p.M == 0 || p.N == 0 || p.batch == 0)
    return;
  if (p.M < 0 || p.N < 0 || p.K < 0 || p.batch < 0)
    fail("GEMM with negative sizes: %s", problem_str(p).c_str());
  if (p.batch > INT32_MAX)
    fail("GEMM batch %lld is too large for cuBLASLt", (long long)p.batch);
  if (bias && (p.batch != 1 || Cin))
    fail("GEMM bias only applies to a single product without C");
  if (!Cin)
    beta = 0.0f;
  if (p.K == 0) {
    // op(A) op(B) is all zeros.
    fill(l, D, p.sC, Cin, p.sC, p.N, 1, beta, bias, p.batch, p.M, p.N);
    return;
  }
  if (!l.lt)
    fail("no cuBLASLt handle");
  const uint32_t align[4] = {alignment(A, p.sA), alignment(B, p.sB),
                             alignment(Cin ? Cin : D, p.sC),
                             alignment(D, p.sC)};
  const uint32_t bias_align = bias ? alignment(bias, 0) : 0;
  const PlanKey key = {p.M,
                       p.N,
                       p.K,
                       int64_t(p.ta) | int64_t(p.tb) << 1 |
                           int64_t(bias != nullptr) << 2,
                       p.batch,
                       p.sA,
                       p.sB,
                       p.sC,
                       int64_t(l.precision),
                       align[0],
                       align[1],
                       align[2],
                       align[3],
                       bias_align,
                       int64_t(l.lt_workspace ? l.lt_workspace_bytes : 0),
                       int64_t(reinterpret_cast<uintptr_t>(l.lt)),
                       0,
                       0,
                       0,
                       0};
  std::unique_lock<std::mutex> lock(plan_mutex);
  auto &plans = plan_cache();
  auto it = plans.find(key);
  if (it == plans.end()) {
    std::unique_ptr<Plan> made = make_plan(l, p, bias, align);
    if (!made->ok && !made->bias_as_c)
      fail("cuBLASLt has no algorithm for %s (%s, also none with fp32 "
           "products)",
           problem_str(p).c_str(), precision_name(l.precision));
    if (made->fp32_fallback && fp32_fallbacks.fetch_add(1) == 0)
      std::fprintf(stderr,
                   "spillway: cuBLASLt has no bf16 algorithm for %s; it "
                   "runs with fp32 products (slower; further such GEMMs "
                   "are not reported)\n",
                   problem_str(p).c_str());
    if (plans.size() >= kMaxPlans)
      plans.clear();
    it = plans.emplace(key, std::move(made)).first;
  }
  const Plan &plan = *it->second;
  if (plan.bias_as_c) {
    // No algorithm with the bias epilogue: the bias as C instead.
    lock.unlock();
    fill(l, D, 0, nullptr, 0, 0, 0, 0.0f, bias, 1, p.M, p.N);
    run_gemm(l, p, A, B, D, D, nullptr, alpha, 1.0f);
    return;
  }
  if (bias)
    SPW_CUBLAS(cublasLtMatmulDescSetAttribute(
        plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  // cuBLASLt's A is B and its B is A (see the file comment).
  SPW_CUBLAS(cublasLtMatmul(l.lt, plan.op, &alpha, B, plan.a, A, plan.b,
                            &beta, Cin ? Cin : D, plan.d, D, plan.d,
                            &plan.algo, l.lt_workspace,
                            l.lt_workspace ? l.lt_workspace_bytes : 0,
                            l.stream));
}

// ---- the ops ----------------------------------------------------------------

void matmul_op(const Launch &l, spw_tensor *const *ins,
               spw_tensor *const *outs, const int64_t *, const double *) {
  const spw_tensor &a = input(ins, 0, "a"), &b = input(ins, 1, "b");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(a, SPW_F32, "a");
  expect_dtype(b, SPW_F32, "b");
  expect_dtype(y, SPW_F32, "result");
  if (a.rank < 1 || b.rank < 1)
    fail("operands must have rank >= 1, got %s and %s", a.shape().c_str(),
         b.shape().c_str());
  // numpy: a 1-D a is [1,K] and a 1-D b is [K,1], the added dim dropped
  // from the result; row-major memory is the same either way.
  const int64_t M = a.rank >= 2 ? a.dims[a.rank - 2] : 1;
  const int64_t K = a.dims[a.rank - 1];
  const int64_t Kb = b.rank >= 2 ? b.dims[b.rank - 2] : b.dims[0];
  const int64_t N = b.rank >= 2 ? b.dims[b.rank - 1] : 1;
  if (K != Kb)
    fail("inner dimensions differ: %s x %s", a.shape().c_str(),
         b.shape().c_str());
  spw_tensor ab, bb; // shape-only views of the batch dims
  ab.rank = std::max(a.rank - 2, 0);
  bb.rank = std::max(b.rank - 2, 0);
  std::copy(a.dims, a.dims + ab.rank, ab.dims);
  std::copy(b.dims, b.dims + bb.rank, bb.dims);
  const int batch_rank = std::max(ab.rank, bb.rank);
  std::vector<int64_t> expect(size_t(batch_rank), 1);
  for (int i = 0; i < batch_rank; ++i) {
    const int ia = ab.rank - batch_rank + i, ib = bb.rank - batch_rank + i;
    const int64_t da = ia >= 0 ? ab.dims[ia] : 1;
    const int64_t db = ib >= 0 ? bb.dims[ib] : 1;
    if (da != db && da != 1 && db != 1)
      fail("batch dimensions of %s and %s are not broadcast-compatible",
           a.shape().c_str(), b.shape().c_str());
    expect[size_t(i)] = da == 1 ? db : da;
  }
  std::vector<int64_t> out_shape = expect;
  if (a.rank >= 2)
    out_shape.push_back(M);
  if (b.rank >= 2)
    out_shape.push_back(N);
  expect_shape(y, out_shape, "result");
  if (y.numel == 0)
    return;
  const auto sa = broadcast_strides(ab, batch_rank, expect.data(), "a");
  const auto sb = broadcast_strides(bb, batch_rank, expect.data(), "b");
  // The batch space with size-1 dims dropped and neighbours merged where
  // both operands step through them evenly (strides in matrices).
  struct Dim {
    int64_t n, sa, sb;
  };
  std::vector<Dim> dims;
  for (int d = 0; d < batch_rank; ++d) {
    const int64_t n = expect[size_t(d)];
    if (n == 1)
      continue;
    const Dim cur{n, sa[size_t(d)], sb[size_t(d)]};
    if (!dims.empty() && dims.back().sa == cur.sa * n &&
        dims.back().sb == cur.sb * n)
      dims.back() = Dim{dims.back().n * n, cur.sa, cur.sb};
    else
      dims.push_back(cur);
  }
  const float *pa = a.as<float>(), *pb = b.as<float>();
  float *py = y.as<float>();
  Problem p;
  p.M = M, p.N = N, p.K = K;
  if (dims.empty()) {
    run_gemm(l, p, pa, pb, nullptr, py, nullptr, 1.0f, 0.0f);
    return;
  }
  if (dims.size() == 1 && dims[0].sb == 0 && dims[0].sa == 1) {
    // a's batch is contiguous and b is shared: one GEMM of all a's rows.
    p.M = M * dims[0].n;
    run_gemm(l, p, pa, pb, nullptr, py, nullptr, 1.0f, 0.0f);
    return;
  }
  // The innermost merged dim is one strided-batched call (a stride 0 for a
  // broadcast operand); the outer ones, irregular broadcasts only, loop.
  const Dim inner = dims.back();
  dims.pop_back();
  p.batch = inner.n;
  p.sA = inner.sa * M * K;
  p.sB = inner.sb * K * N;
  p.sC = M * N;
  int64_t outer = 1;
  for (const Dim &d : dims)
    outer *= d.n;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rest = o, oa = 0, ob = 0;
    for (size_t d = dims.size(); d-- > 0;) {
      const int64_t i = rest % dims[d].n;
      rest /= dims[d].n;
      oa += i * dims[d].sa;
      ob += i * dims[d].sb;
    }
    run_gemm(l, p, pa + oa * M * K, pb + ob * K * N, nullptr,
             py + o * inner.n * M * N, nullptr, 1.0f, 0.0f);
  }
}

void gemm_op(const Launch &l, spw_tensor *const *ins, spw_tensor *const *outs,
             const int64_t *iattrs, const double *fattrs) {
  const spw_tensor &a = input(ins, 0, "a"), &b = input(ins, 1, "b");
  const spw_tensor *c = ins ? ins[2] : nullptr;
  spw_tensor &y = output(outs, 0, "y");
  if (!iattrs)
    fail("integer attributes are NULL");
  if (!fattrs)
    fail("float attributes are NULL");
  const bool ta = iattrs[0] != 0, tb = iattrs[1] != 0;
  const float alpha = float(fattrs[0]), beta = float(fattrs[1]);
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
  const float *cin = nullptr;
  if (c) {
    expect_dtype(*c, SPW_F32, "c");
    const int64_t md[2] = {M, N};
    const auto s = broadcast_strides(*c, 2, md, "c");
    if (y.numel == 0 || beta == 0.0f) {
      // No C term to add (beta 0 never reads C).
    } else if (s[0] == N && s[1] == 1) {
      cin = c->as<float>(); // already [M,N]
    } else {
      // Broadcast C expanded into the output, then accumulated in place.
      fill(l, y.as<float>(), 0, c->as<float>(), 0, s[0], s[1], 1.0f, nullptr,
           1, M, N);
      cin = y.as<float>();
    }
  }
  if (y.numel == 0)
    return;
  Problem p;
  p.M = M, p.N = N, p.K = K, p.ta = ta, p.tb = tb;
  run_gemm(l, p, a.as<float>(), b.as<float>(), cin, y.as<float>(), nullptr,
           alpha, beta);
}

void linear_op(const Launch &l, spw_tensor *const *ins,
               spw_tensor *const *outs, const int64_t *, const double *) {
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
  if (y.numel == 0)
    return;
  Problem p;
  p.M = y.numel / N, p.N = N, p.K = K;
  run_gemm(l, p, x.as<float>(), w.as<float>(), nullptr, y.as<float>(),
           b ? b->as<float>() : nullptr, 1.0f, 0.0f);
}

} // namespace

void matmul_f32(const Launch &l, const float *A, const float *B, float *C,
                int64_t M, int64_t N, int64_t K, bool transA, bool transB,
                float alpha, float beta, int64_t batch, int64_t strideA,
                int64_t strideB, int64_t strideC) {
  if (M < 0 || N < 0 || K < 0 || batch < 0 || strideA < 0 || strideB < 0 ||
      strideC < 0)
    fail("matmul_f32: negative size or stride (M %lld, N %lld, K %lld, "
         "batch %lld)",
         (long long)M, (long long)N, (long long)K, (long long)batch);
  Problem p;
  p.M = M, p.N = N, p.K = K, p.ta = transA, p.tb = transB;
  p.batch = batch;
  if (batch > 1) {
    p.sA = strideA, p.sB = strideB;
    p.sC = strideC == 0 ? M * N : strideC;
    if (p.sC < M * N)
      fail("matmul_f32: strideC %lld overlaps [%lld,%lld] results",
           (long long)p.sC, (long long)M, (long long)N);
  }
  run_gemm(l, p, A, B, beta != 0.0f ? C : nullptr, C, nullptr, alpha, beta);
}

void skip_fast_bf16_for_testing(bool skip) {
  std::lock_guard<std::mutex> lock(plan_mutex);
  skip_fast_bf16.store(skip);
  plan_cache().clear(); // plans made under the other setting
}

int64_t gemm_fp32_fallbacks() { return fp32_fallbacks.load(); }

Kernel gemm_kernel_for(Op op) {
  switch (op) {
  case Op::matmul:
    return matmul_op;
  case Op::gemm:
    return gemm_op;
  case Op::linear:
    return linear_op;
  default:
    return nullptr;
  }
}

} // namespace spw::cuda
