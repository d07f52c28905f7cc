//===- cuda_bench.cpp - kernel-level benchmarks of the CUDA backend --------===//
//
// spillway-cuda-bench (GPU machine; bench/device/cuda-vs-torch.sh runs it):
//   - GEMMs of a GPT's training step (forward and both backward products of
//     every linear, the LM head) through the backend's own path
//     (cuda::matmul_f32: its heuristic pick, cached) against cuBLAS's own
//     best for the same problem: every algorithm cuBLASLt's heuristic
//     offers (up to 32), each timed, the fastest kept. Ratio = best / ours
//     (1.0: ours is cuBLAS's best; the target is >= 0.95).
//   - Causal attention forward + backward (the attention and attention_grad
//     kernels) in TFLOP/s, forward 2*B*H*S^2*D (causal half of 4*...),
//     backward 2.5x that, the convention FlashAttention's papers use.
// Prints a table and one JSON line per row (prefix "json: ").
//
//===----------------------------------------------------------------------===//

#include "context.h"
#include "cuda/cuda_check.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"

#include <cublasLt.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace spw;

namespace {

#define LT(call)                                                               \
  do {                                                                         \
    cublasStatus_t s_ = (call);                                                \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                           \
      fail("%s failed: cublasStatus %d", #call, int(s_));                      \
  } while (0)

struct Timer {
  cudaEvent_t a, b;
  Timer() {
    SPW_CUDA(cudaEventCreate(&a));
    SPW_CUDA(cudaEventCreate(&b));
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  // Mean milliseconds of `iters` runs of f on `s` after `warm` runs.
  template <class F> double ms(cudaStream_t s, int warm, int iters, F f) {
    for (int i = 0; i < warm; ++i)
      f();
    SPW_CUDA(cudaEventRecord(a, s));
    for (int i = 0; i < iters; ++i)
      f();
    SPW_CUDA(cudaEventRecord(b, s));
    SPW_CUDA(cudaEventSynchronize(b));
    float t = 0;
    SPW_CUDA(cudaEventElapsedTime(&t, a, b));
    return double(t) / iters;
  }
};

// Random values in [-1, 1], never 0 (zeros time faster than real data),
// drawn afresh from `seed` so no two operands hold the same data.
std::vector<float> random_values(int64_t n, uint64_t seed) {
  std::vector<float> h(static_cast<size_t>(n));
  uint64_t x = 0x9e3779b97f4a7c15ull ^ (seed * 0xbf58476d1ce4e5b9ull);
  for (float &v : h) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = float(int64_t(x % 2001) - 1000) / 1000.0f + 1e-3f;
  }
  return h;
}

// Fills d on the timed stream `s` and waits for it: a plain cudaMemcpy runs
// on the legacy stream, which a non-blocking stream's GEMMs do not wait for.
void fill_random(float *d, int64_t n, uint64_t seed, cudaStream_t s) {
  const std::vector<float> h = random_values(n, seed);
  SPW_CUDA(cudaMemcpyAsync(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice,
                           s));
  SPW_CUDA(cudaStreamSynchronize(s)); // h is freed on return
}

// cuBLAS's best for row-major C[M,N] = op(A) op(B) (the transpose trick the
// backend uses: column-major C^T = op(B)^T op(A)^T), fp32 storage.
double cublas_best_ms(cublasLtHandle_t lt, void *ws, size_t ws_bytes,
                      cudaStream_t s, const float *A, const float *B,
                      float *C, int64_t M, int64_t N, int64_t K, bool ta,
                      bool tb, Precision p, int *algos) {
  cublasLtMatmulDesc_t op;
  LT(cublasLtMatmulDescCreate(&op,
                              p == Precision::BF16
                                  ? CUBLAS_COMPUTE_32F_FAST_16BF
                                  : CUBLAS_COMPUTE_32F,
                              CUDA_R_32F));
  // Column-major view: first operand is B (N x K as op), second is A.
  cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opb,
                                    sizeof opb));
  LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opa,
                                    sizeof opa));
  cublasLtMatrixLayout_t lb, la, lc;
  // B row-major [K,N] is column-major N x K (ld N); transposed: [N,K].
  LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, tb ? K : N, tb ? N : K,
                                tb ? K : N));
  LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, ta ? M : K, ta ? K : M,
                                ta ? M : K));
  LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, N, M, N));
  cublasLtMatmulPreference_t pref;
  LT(cublasLtMatmulPreferenceCreate(&pref));
  LT(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
      sizeof ws_bytes));
  cublasLtMatmulHeuristicResult_t res[32];
  int n = 0;
  LT(cublasLtMatmulAlgoGetHeuristic(lt, op, lb, la, lc, lc, pref, 32, res,
                                    &n));
  const float alpha = 1, beta = 0;
  double best = 1e30;
  Timer t;
  for (int i = 0; i < n; ++i) {
    if (res[i].state != CUBLAS_STATUS_SUCCESS)
      continue;
    const double ms = t.ms(s, 2, 10, [&] {
      LT(cublasLtMatmul(lt, op, &alpha, B, lb, A, la, &beta, C, lc, C, lc,
                        &res[i].algo, ws, ws_bytes, s));
    });
    best = std::min(best, ms);
  }
  *algos = n;
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  return best;
}

struct Gemm {
  const char *what;
  int64_t M, N, K;
  bool ta, tb;
};

int run(int argc, char **argv) {
  int64_t tokens = 8 * 1024, d = 1024, vocab = 50304;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--d-model"))
      d = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--tokens"))
      tokens = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--vocab"))
      vocab = std::atoll(argv[i + 1]);
    else
      fail("unknown argument '%s' (--d-model D --tokens T --vocab V)",
           argv[i]);
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "spillway-cuda-bench: no usable CUDA device\n");
    return 2;
  }
  auto ctx = make_context();
  spw_use_cuda(ctx.get(), 1);
  ctx->precision = Precision::BF16;
  ctx->device = ctx->cuda_factory(int64_t(40) << 30, Precision::BF16);
  Device &dev = *ctx->device;
  std::printf("spillway-cuda-bench on %s; GPT width %lld, %lld tokens, "
              "vocab %lld\n",
              dev.name().c_str(), (long long)d, (long long)tokens,
              (long long)vocab);

  cudaStream_t s;
  SPW_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasLtHandle_t lt;
  LT(cublasLtCreate(&lt));
  const size_t ws_bytes = size_t(64) << 20;
  void *ws = dev.alloc(int64_t(ws_bytes), "workspace");
  cuda::Launch l;
  l.stream = s;
  l.lt = lt;
  l.lt_workspace = ws;
  l.lt_workspace_bytes = ws_bytes;
  l.device = &dev;

  const int64_t T = tokens, D = d, F = 4 * d, V = vocab;
  const std::vector<Gemm> gemms = {
      {"qkv/proj fwd x[T,D] w[D,D]", T, D, D, false, false},
      {"qkv/proj dx dy[T,D] w^T", T, D, D, false, true},
      {"qkv/proj dw x^T dy", D, D, T, true, false},
      {"mlp fc fwd [T,D]x[D,4D]", T, F, D, false, false},
      {"mlp fc dx [T,4D]x[4D,D]^T", T, D, F, false, true},
      {"mlp fc dw [D,T]x[T,4D]", D, F, T, true, false},
      {"mlp proj fwd [T,4D]x[4D,D]", T, D, F, false, false},
      {"lm head fwd [T,D]x[D,V]", T, V, D, false, false},
      {"lm head dx [T,V]x[V,D]^T", T, D, V, false, true},
      {"lm head dw [D,T]x[T,V]", D, V, T, true, false},
  };
  std::printf("\n%-30s %-5s %9s %9s %8s %7s\n", "GEMM", "prec", "ours ms",
              "best ms", "ours TF", "best/us");
  bool all_ok = true;
  uint64_t seed = 1;
  for (Precision p : {Precision::BF16, Precision::FP32}) {
    l.precision = p;
    for (const Gemm &g : gemms) {
      const int64_t a_n = g.M * g.K, b_n = g.K * g.N, c_n = g.M * g.N;
      float *A = static_cast<float *>(dev.alloc(a_n * 4, "A"));
      float *B = static_cast<float *>(dev.alloc(b_n * 4, "B"));
      float *C = static_cast<float *>(dev.alloc(c_n * 4, "C"));
      fill_random(A, a_n, seed++, s);
      fill_random(B, b_n, seed++, s);
      Timer t;
      const double ours = t.ms(s, 3, 10, [&] {
        cuda::matmul_f32(l, A, B, C, g.M, g.N, g.K, g.ta, g.tb, 1.0f, 0.0f);
      });
      int algos = 0;
      const double best = cublas_best_ms(lt, ws, ws_bytes, s, A, B, C, g.M,
                                         g.N, g.K, g.ta, g.tb, p, &algos);
      const double tf = 2.0 * double(g.M) * double(g.N) * double(g.K) /
                        (ours * 1e-3) / 1e12;
      const double ratio = best / ours;
      all_ok &= ratio >= 0.95;
      const char *pn = p == Precision::BF16 ? "bf16" : "fp32";
      std::printf("%-30s %-5s %9.3f %9.3f %8.1f %7.3f%s\n", g.what, pn, ours,
                  best, tf, ratio, ratio >= 0.95 ? "" : "  < 0.95");
      std::printf("json: {\"kind\": \"gemm\", \"what\": \"%s\", \"precision\": "
                  "\"%s\", \"M\": %lld, \"N\": %lld, \"K\": %lld, \"ours_ms\": "
                  "%.5f, \"cublas_best_ms\": %.5f, \"algorithms_tried\": %d, "
                  "\"ours_tflops\": %.2f, \"best_over_ours\": %.4f}\n",
                  g.what, pn, (long long)g.M, (long long)g.N, (long long)g.K,
                  ours, best, algos, tf, ratio);
      dev.release(A);
      dev.release(B);
      dev.release(C);
    }
  }

  // Attention forward + backward through the C ABI entry points.
  std::printf("\n%-34s %-5s %9s %9s %8s %8s\n", "attention (causal)", "prec",
              "fwd ms", "bwd ms", "fwd TF", "bwd TF");
  for (Precision p : {Precision::BF16, Precision::FP32})
    for (int64_t hd : {int64_t(64), int64_t(128)}) {
      ctx->precision = p;
      ctx->device = ctx->cuda_factory(int64_t(40) << 30, p);
      Device &dv = *ctx->device;
      const int64_t B = tokens / 1024, H = d / hd, S = 1024;
      const int64_t dims[] = {B, H, S, hd};
      auto make = [&](const char *w) {
        spw_tensor *t = alloc_step_tensor(ctx.get(), SPW_F32, 4, dims, w);
        // Through the device, so its compute stream (the kernels') waits.
        const std::vector<float> h = random_values(t->numel, seed++);
        dv.upload(t->data, h.data(), t->numel * 4);
        return t;
      };
      spw_tensor *q = make("q"), *k = make("k"), *v = make("v"),
                 *y = make("y"), *dy = make("dy"), *dq = make("dq"),
                 *dk = make("dk"), *dv2 = make("dv");
      const int64_t causal[] = {1};
      const double scale[] = {1.0 / std::sqrt(double(hd))};
      spw_tensor *fin[] = {q, k, v}, *fout[] = {y};
      spw_tensor *bin[] = {q, k, v, dy}, *bout[] = {dq, dk, dv2};
      auto timed = [&](auto f) {
        for (int i = 0; i < 2; ++i)
          f();
        dv.synchronize();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 5; ++i)
          f();
        dv.synchronize();
        return std::chrono::duration<double, std::milli>(
                   std::chrono::steady_clock::now() - t0)
                   .count() /
               5;
      };
      const double fwd = timed([&] {
        spw_op_attention(ctx.get(), fin, fout, causal, scale);
      });
      const double bwd = timed([&] {
        spw_op_attention_grad(ctx.get(), bin, bout, causal, scale);
      });
      if (ctx->failed())
        fail("attention: %s", ctx->error.c_str());
      const double flops = 2.0 * double(B * H) * double(S) * double(S) *
                           double(hd); // causal: half of 4*B*H*S^2*D
      const double ftf = flops / (fwd * 1e-3) / 1e12;
      const double btf = 2.5 * flops / (bwd * 1e-3) / 1e12;
      const char *pn = p == Precision::BF16 ? "bf16" : "fp32";
      std::string what = format("[%lld,%lld,%lld,%lld]", (long long)B,
                                (long long)H, (long long)S, (long long)hd);
      std::printf("%-34s %-5s %9.3f %9.3f %8.1f %8.1f\n", what.c_str(), pn,
                  fwd, bwd, ftf, btf);
      std::printf("json: {\"kind\": \"attention\", \"shape\": \"%s\", "
                  "\"precision\": \"%s\", \"fwd_ms\": %.4f, \"bwd_ms\": %.4f, "
                  "\"fwd_tflops\": %.2f, \"bwd_tflops\": %.2f}\n",
                  what.c_str(), pn, fwd, bwd, ftf, btf);
      clear_step(ctx.get());
    }
  cublasLtDestroy(lt);
  cudaStreamDestroy(s);
  std::printf("\nGEMMs %s cuBLAS's best within 5%%\n",
              all_ok ? "all" : "NOT all");
  return all_ok ? 0 : 1;
}

} // namespace

extern "C" void spw_model_declare(spw_ctx *) {}
extern "C" void spw_model_step(spw_ctx *) {}

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "spillway-cuda-bench: %s\n", e.what());
    return 2;
  }
}
