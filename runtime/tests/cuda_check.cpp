//===- cuda_check.cpp - the CUDA kernels against the CPU backend -----------===//
//
// spillway-cuda-check: runs every CUDA kernel of the runtime on fresh random
// inputs (never zeros) and compares it with the CPU backend, the reference.
// Built only where nvcc is found; it runs on a machine with an NVIDIA GPU
// (scripts/device/cuda-check.sh). Each case:
//   - draws parameters, gradients and the AdamW/FOAM state (m of either
//     sign, v positive) from a seeded RNG: log-uniform magnitudes, no zeros;
//   - runs T steps on the CPU runtime (spw_adamw / spw_foam through a
//     context, as the executable does) and on the GPU kernel;
//   - surrounds every device tensor with guard elements filled with a NaN
//     pattern and checks that the kernel left them alone (no write outside
//     the tensor);
//   - requires the same bits (the kernels round like the CPU, see
//     optimizer_kernels.cu), and reports the largest relative difference
//     when they are not.
// Every CUDA call is checked. Exit status: 0 all passed, 1 a mismatch, 2 no
// usable GPU or a CUDA error (the message says which call).
//
//===----------------------------------------------------------------------===//

#include "context.h"
#include "cuda/cuda_check.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "cuda/optimizer_kernels.h"
#include "cuda_check_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace spw;

namespace {

constexpr int64_t kGuard = 64; // guard elements on each side of a tensor
constexpr uint32_t kGuardBits = 0x7fc0dead; // a quiet NaN

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(uint64_t seed) : gen(seed) {}
  // |x| log-uniform in [lo, hi], random sign: never zero.
  float value(double lo, double hi) {
    std::uniform_real_distribution<double> u(std::log(lo), std::log(hi));
    float x = float(std::exp(u(gen)));
    return (gen() & 1) ? x : -x;
  }
  std::vector<float> values(int64_t n, double lo, double hi) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float &x : v)
      x = value(lo, hi);
    return v;
  }
};

// A device copy of a host array with guards on both sides.
struct DeviceArray {
  float *base = nullptr; // guard, data, guard
  int64_t n = 0;
  explicit DeviceArray(const std::vector<float> &host) : n(int64_t(host.size())) {
    SPW_CUDA(cudaMalloc(reinterpret_cast<void **>(&base),
                        size_t(n + 2 * kGuard) * sizeof(float)));
    std::vector<uint32_t> guard(size_t(kGuard), kGuardBits);
    SPW_CUDA(cudaMemcpy(base, guard.data(), guard.size() * 4,
                        cudaMemcpyHostToDevice));
    SPW_CUDA(cudaMemcpy(base + kGuard + n, guard.data(), guard.size() * 4,
                        cudaMemcpyHostToDevice));
    if (n)
      SPW_CUDA(cudaMemcpy(data(), host.data(), size_t(n) * 4,
                          cudaMemcpyHostToDevice));
  }
  DeviceArray(const DeviceArray &) = delete;
  ~DeviceArray() { cudaFree(base); }
  float *data() const { return base + kGuard; }
  std::vector<float> host() const {
    std::vector<float> h(static_cast<size_t>(n));
    if (n)
      SPW_CUDA(cudaMemcpy(h.data(), data(), size_t(n) * 4,
                          cudaMemcpyDeviceToHost));
    return h;
  }
  bool guards_intact() const {
    std::vector<uint32_t> g(size_t(2 * kGuard));
    SPW_CUDA(cudaMemcpy(g.data(), base, size_t(kGuard) * 4,
                        cudaMemcpyDeviceToHost));
    SPW_CUDA(cudaMemcpy(g.data() + kGuard, base + kGuard + n,
                        size_t(kGuard) * 4, cudaMemcpyDeviceToHost));
    for (uint32_t x : g)
      if (x != kGuardBits)
        return false;
    return true;
  }
};

struct Compare {
  int64_t differing = 0;
  double max_rel = 0;
};

Compare compare(const std::vector<float> &cpu, const std::vector<float> &gpu) {
  Compare c;
  if (cpu.size() != gpu.size() || cpu.empty()) {
    // Nothing (or not the same thing) to compare is a failure, never a pass.
    c.differing = int64_t(std::max(cpu.size(), gpu.size())) + 1;
    c.max_rel = INFINITY;
    return c;
  }
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (std::memcmp(&cpu[i], &gpu[i], 4) == 0)
      continue;
    ++c.differing;
    double d = std::fabs(double(cpu[i]) - double(gpu[i]));
    double s = std::max(std::fabs(double(cpu[i])), 1e-30);
    c.max_rel = std::max(c.max_rel, std::isfinite(d) ? d / s : INFINITY);
  }
  return c;
}

struct Report {
  int failures = 0;
  void line(const std::string &name, const std::string &what,
            const Compare &c, bool guards) {
    bool ok = c.differing == 0 && guards;
    failures += !ok;
    std::printf("%-4s %-34s %-10s %s\n", ok ? "ok" : "FAIL", name.c_str(),
                what.c_str(),
                ok ? "bit-identical"
                   : (!guards ? "wrote outside the tensor"
                              : format("%lld elements differ, max rel %.3g",
                                       (long long)c.differing, c.max_rel)
                                    .c_str()));
  }
};

void check_ctx(const spw_ctx *ctx, const char *what) {
  if (ctx->failed())
    throw Error(format("CPU reference (%s): %s", what, ctx->error.c_str()));
}

// A runtime context with one f32 parameter of `dims` holding `w`.
std::unique_ptr<spw_ctx> cpu_context(const std::vector<int64_t> &dims,
                                     const std::vector<float> &w) {
  auto ctx = make_context();
  spw_declare_param(ctx.get(), "p", SPW_F32, int32_t(dims.size()),
                    dims.data(), 0);
  check_ctx(ctx.get(), "spw_declare_param");
  std::memcpy(ctx->params[0].value->data, w.data(), w.size() * 4);
  return ctx;
}


// AdamW: several tensors of awkward sizes in one multi-tensor launch, T
// steps, against spw_adamw on each; `scale` != 1: with gradient clipping's
// coefficient (the CPU context's step norm set to it).
void check_adamw(Report &r, uint64_t seed, double wd, double beta1,
                 float scale = 1.0f) {
  const std::vector<int64_t> sizes = {1, 3, 255, 256, 1023, 1025, 4096 + 17,
                                      70001};
  const double lr = 1e-3, beta2 = 0.999, eps = 1e-8;
  const int steps = 3;
  Rng rng(seed);
  std::vector<std::unique_ptr<spw_ctx>> cpu;
  std::vector<std::unique_ptr<DeviceArray>> w, m, v, g;
  std::vector<std::vector<std::vector<float>>> grads(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i];
    auto w0 = rng.values(n, 1e-3, 1.0);
    // A run's later state, not zeros: m of either sign, v positive.
    auto m0 = rng.values(n, 1e-6, 1.0), v0 = rng.values(n, 1e-10, 1.0);
    for (float &x : v0)
      x = std::fabs(x);
    cpu.push_back(cpu_context({n}, w0));
    cpu.back()->params[0].adam_m = m0;
    cpu.back()->params[0].adam_v = v0;
    w.push_back(std::make_unique<DeviceArray>(w0));
    m.push_back(std::make_unique<DeviceArray>(m0));
    v.push_back(std::make_unique<DeviceArray>(v0));
    for (int t = 0; t < steps; ++t)
      grads[i].push_back(rng.values(n, 1e-6, 10.0));
    g.push_back(std::make_unique<DeviceArray>(grads[i][0]));
  }
  void *scratch = nullptr;
  SPW_CUDA(cudaMalloc(&scratch, cuda::adamw_scratch_bytes(sizes.size())));
  for (int t = 1; t <= steps; ++t) {
    std::vector<cuda::AdamWTensor> ts;
    for (size_t i = 0; i < sizes.size(); ++i) {
      SPW_CUDA(cudaMemcpy(g[i]->data(), grads[i][size_t(t - 1)].data(),
                          size_t(sizes[i]) * 4, cudaMemcpyHostToDevice));
      ts.push_back({w[i]->data(), m[i]->data(), v[i]->data(), g[i]->data(),
                    sizes[i], false});
      cpu[i]->step = t;
      if (scale != 1.0f) {
        cpu[i]->grad_clip.declared = true;
        cpu[i]->grad_clip.step = t;
        cpu[i]->grad_clip.scale = scale;
      }
      auto grad = make_tensor(SPW_F32, 1, &sizes[i], "grad");
      std::memcpy(grad->data, grads[i][size_t(t - 1)].data(),
                  size_t(sizes[i]) * 4);
      spw_adamw(cpu[i].get(), 0, grad.get(), lr, beta1, beta2, eps, wd);
      check_ctx(cpu[i].get(), "spw_adamw");
    }
    cuda::adamw_multi(
        ts, cuda::adamw_scalars(lr, beta1, beta2, eps, wd, t, double(scale)),
        scratch, nullptr);
    SPW_CUDA(cudaDeviceSynchronize());
  }
  SPW_CUDA(cudaFree(scratch));
  Compare cw, cm, cv;
  bool guards = true;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const ParamInfo &p = cpu[i]->params[0];
    std::vector<float> pw(p.value->as<float>(),
                          p.value->as<float>() + sizes[i]);
    auto add = [](Compare &a, const Compare &b) {
      a.differing += b.differing;
      a.max_rel = std::max(a.max_rel, b.max_rel);
    };
    add(cw, compare(pw, w[i]->host()));
    add(cm, compare(p.adam_m, m[i]->host()));
    add(cv, compare(p.adam_v, v[i]->host()));
    guards = guards && w[i]->guards_intact() && m[i]->guards_intact() &&
             v[i]->guards_intact() && g[i]->guards_intact();
  }
  const std::string name =
      scale != 1.0f ? format("adamw_multi (8 tensors, wd %g, beta1 %g, clip "
                             "coefficient %g)",
                             wd, beta1, double(scale))
                    : format("adamw_multi (8 tensors, wd %g, beta1 %g)", wd,
                             beta1);
  r.line(name, "weights", cw, guards);
  r.line(name, "m", cm, guards);
  r.line(name, "v", cv, guards);
}

// FOAM: one [rows, cols] weight at `level`, T steps, against spw_foam.
void check_foam(Report &r, uint64_t seed, int64_t rows, int64_t cols,
                int level, double wd) {
  const double lr = 1e-2, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  const int steps = 3;
  Rng rng(seed);
  std::uniform_real_distribution<double> au(0.1, 1.5);
  const double alpha = au(rng.gen);
  const int64_t n = rows * cols;
  auto w0 = rng.values(n, 1e-3, 1.0);
  auto cpu = cpu_context({rows, cols}, w0);
  spw_declare_foam(cpu.get(), 0, level, alpha);
  check_ctx(cpu.get(), "spw_declare_foam");
  const int64_t folded = cpu->params[0].state_numel();
  // A run's later folded state, not zeros: m~ of either sign, v~ positive.
  auto m0 = rng.values(folded, 1e-6, 1.0), v0 = rng.values(folded, 1e-10, 1.0);
  for (float &x : v0)
    x = std::fabs(x);
  cpu->params[0].adam_m = m0;
  cpu->params[0].adam_v = v0;
  DeviceArray w(w0), m(m0), v(v0),
      g(std::vector<float>(static_cast<size_t>(n), 1.0f));
  for (int t = 1; t <= steps; ++t) {
    auto gt = rng.values(n, 1e-6, 10.0);
    SPW_CUDA(cudaMemcpy(g.data(), gt.data(), size_t(n) * 4,
                        cudaMemcpyHostToDevice));
    cpu->step = t;
    const int64_t dims[] = {rows, cols};
    auto grad = make_tensor(SPW_F32, 2, dims, "grad");
    std::memcpy(grad->data, gt.data(), size_t(n) * 4);
    spw_foam(cpu.get(), 0, grad.get(), lr, beta1, beta2, eps, wd, alpha);
    check_ctx(cpu.get(), "spw_foam");
    cuda::foam(w.data(), m.data(), v.data(), false, g.data(), rows, cols, level,
               cuda::foam_scalars(lr, beta1, beta2, eps, wd, alpha, level, t),
               nullptr);
    SPW_CUDA(cudaDeviceSynchronize());
  }
  const ParamInfo &p = cpu->params[0];
  std::vector<float> pw(p.value->as<float>(), p.value->as<float>() + n);
  const bool guards = w.guards_intact() && m.guards_intact() &&
                      v.guards_intact() && g.guards_intact();
  const std::string name = format("foam [%lld,%lld] level %d wd %g",
                                  (long long)rows, (long long)cols, level, wd);
  r.line(name, "weights", compare(pw, w.host()), guards);
  r.line(name, "m~", compare(p.adam_m, m.host()), guards);
  r.line(name, "v~", compare(p.adam_v, v.host()), guards);
}

// bf16 optimizer state (--optimizer-state-dtype bf16): adamw_multi and
// foam with `half` moments against the CPU kernels on the same bf16 arrays,
// T steps; weights and the stored moments bit for bit.
void check_state_bf16(Report &r, uint64_t seed) {
  const double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, wd = 0.01;
  const int steps = 3;
  Rng rng(seed);
  auto to_dev = [](const void *host, size_t bytes) {
    void *d = nullptr;
    SPW_CUDA(cudaMalloc(&d, bytes));
    SPW_CUDA(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
  };
  auto widened = [](const void *dev, size_t n) {
    std::vector<bf16> b(n);
    SPW_CUDA(cudaMemcpy(b.data(), dev, n * 2, cudaMemcpyDeviceToHost));
    std::vector<float> f(n);
    for (size_t i = 0; i < n; ++i)
      f[i] = to_float(b[i]);
    return f;
  };
  auto rounded = [](std::vector<float> x) {
    std::vector<bf16> b(x.size());
    round_to_bf16(x.data(), b.data(), int64_t(x.size()));
    return b;
  };
  // AdamW: n elements; FOAM: [rows, cols] at level 2 (state [rows, nb]).
  for (const auto &[rows, cols, foam] :
       {std::tuple<int64_t, int64_t, bool>{1, 70001, false},
        {1, 1025, false},
        {33, 1023, true}}) {
    const int64_t n = rows * cols, level = 2;
    const int64_t ns = foam ? rows * ((cols + 3) / 4) : n;
    std::vector<float> w = rng.values(n, 1e-3, 1.0);
    std::vector<float> v0 = rng.values(ns, 1e-10, 1.0);
    for (float &x : v0)
      x = std::fabs(x);
    std::vector<bf16> m = rounded(rng.values(ns, 1e-6, 1.0)), v = rounded(v0);
    float *dw = static_cast<float *>(to_dev(w.data(), size_t(n) * 4));
    void *dm = to_dev(m.data(), size_t(ns) * 2),
         *dv = to_dev(v.data(), size_t(ns) * 2);
    float *dg = static_cast<float *>(to_dev(w.data(), size_t(n) * 4));
    void *scratch = nullptr;
    SPW_CUDA(cudaMalloc(&scratch, cuda::adamw_scratch_bytes(1)));
    for (int t = 1; t <= steps; ++t) {
      const std::vector<float> g = rng.values(n, 1e-6, 10.0);
      SPW_CUDA(cudaMemcpy(dg, g.data(), size_t(n) * 4, cudaMemcpyHostToDevice));
      const AdamWHparams h{lr, beta1, beta2, eps, wd};
      const StateMem hm{m.data(), true}, hv{v.data(), true};
      if (foam) {
        foam_kernel(w.data(), hm, hv, g.data(), rows, cols, int(level), t, h,
                    0.5);
        cuda::foam(
            dw, dm, dv, true, dg, rows, cols, int(level),
            cuda::foam_scalars(lr, beta1, beta2, eps, wd, 0.5, int(level), t),
            nullptr);
      } else {
        adamw_kernel(w.data(), hm, hv, g.data(), n, t, h);
        cuda::adamw_multi({{dw, dm, dv, dg, n, true}},
                          cuda::adamw_scalars(lr, beta1, beta2, eps, wd, t),
                          scratch, nullptr);
      }
      SPW_CUDA(cudaDeviceSynchronize());
    }
    std::vector<float> gw(static_cast<size_t>(n)), hmw(static_cast<size_t>(ns)),
        hvw(static_cast<size_t>(ns));
    SPW_CUDA(cudaMemcpy(gw.data(), dw, size_t(n) * 4, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < ns; ++i) {
      hmw[size_t(i)] = to_float(m[size_t(i)]);
      hvw[size_t(i)] = to_float(v[size_t(i)]);
    }
    const std::string name =
        foam ? format("foam bf16 state [%lld,%lld] level %lld", (long long)rows,
                      (long long)cols, (long long)level)
             : format("adamw_multi bf16 state (%lld)", (long long)n);
    r.line(name, "weights", compare(w, gw), true);
    r.line(name, "m", compare(hmw, widened(dm, size_t(ns))), true);
    r.line(name, "v", compare(hvw, widened(dv, size_t(ns))), true);
    for (void *p :
         {static_cast<void *>(dw), dm, dv, static_cast<void *>(dg), scratch})
      SPW_CUDA(cudaFree(p));
  }
}

// The CUDA device's queued AdamW against adamw_kernel bit for bit. Every
// gradient is uploaded first (an upload flushes the queue), then all updates
// are queued and the device is synchronised once, so each launch takes
// several queued updates: per step the first 3 tensors with one learning
// rate and the other 122 with another (a change of scalars flushes midway),
// except at step 2, where one rate makes a single launch of all 125. The
// 122-entry table outgrows the first launch's (4 KiB, 85 entries) while
// that launch may still be in flight, and the 7 launches of the 4 steps go
// round the ring of pinned tables (3) twice with no synchronisation between
// them.
void check_device_adamw(Report &r) {
  auto ctx = make_context();
  spw_use_cuda(ctx.get(), 0);
  check_ctx(ctx.get(), "spw_use_cuda");
  std::unique_ptr<Device> dev = ctx->cuda_factory(int64_t(1) << 30,
                                                  Precision::FP32);
  Rng rng(77);
  std::vector<int64_t> sizes = {5, 4097, 1, 100003, 640};
  for (int64_t k = 0; k < 120; ++k)
    sizes.push_back(1 + (k * 37) % 300);
  constexpr int64_t kSteps = 4;
  const size_t count = sizes.size();
  std::vector<std::vector<float>> w, m, v;
  std::vector<float *> dw, dm, dv;
  for (int64_t n : sizes) {
    w.push_back(rng.values(n, 1e-3, 1.0));
    m.push_back(rng.values(n, 1e-6, 1.0));
    v.push_back(rng.values(n, 1e-10, 1.0));
    for (float &x : v.back())
      x = std::fabs(x);
    for (auto *vec : {&dw, &dm, &dv})
      vec->push_back(static_cast<float *>(dev->alloc(n * 4, "check")));
    dev->upload(dw.back(), w.back().data(), n * 4);
    dev->upload(dm.back(), m.back().data(), n * 4);
    dev->upload(dv.back(), v.back().data(), n * 4);
  }
  // A gradient buffer per update, as step tensors are: the queue reads
  // them only when it flushes.
  std::vector<std::vector<std::vector<float>>> g(kSteps);
  std::vector<std::vector<float *>> dg(kSteps);
  for (int64_t t = 0; t < kSteps; ++t)
    for (size_t i = 0; i < count; ++i) {
      g[t].push_back(rng.values(sizes[i], 1e-6, 10.0));
      dg[t].push_back(static_cast<float *>(dev->alloc(sizes[i] * 4, "grad")));
      dev->upload(dg[t][i], g[t][i].data(), sizes[i] * 4);
    }
  for (int64_t t = 1; t <= kSteps; ++t)
    for (size_t i = 0; i < count; ++i) {
      AdamWHparams h;
      h.lr = (t == 2 || i < 3) ? 1e-3 : 2e-3;
      h.weight_decay = 0.01;
      dev->adamw(dw[i], dm[i], dv[i], dg[t - 1][i], sizes[i], h, t);
      adamw_kernel(w[i].data(), m[i].data(), v[i].data(), g[t - 1][i].data(),
                   sizes[i], t, h);
    }
  dev->synchronize();
  Compare cw, cm, cv;
  for (size_t i = 0; i < count; ++i) {
    std::vector<float> hw(w[i].size()), hm(m[i].size()), hv(v[i].size());
    dev->download(hw.data(), dw[i], sizes[i] * 4);
    dev->download(hm.data(), dm[i], sizes[i] * 4);
    dev->download(hv.data(), dv[i], sizes[i] * 4);
    for (auto [c, a, b] : {std::tuple{&cw, &w[i], &hw},
                           std::tuple{&cm, &m[i], &hm},
                           std::tuple{&cv, &v[i], &hv}}) {
      const Compare d = compare(*a, *b);
      c->differing += d.differing;
      c->max_rel = std::max(c->max_rel, d.max_rel);
    }
  }
  const std::string name = "device adamw queue (125 tensors, 4 steps)";
  r.line(name, "weights", cw, true);
  r.line(name, "m", cm, true);
  r.line(name, "v", cv, true);
}

// cuBLASLt's fp32 fallback for BF16 GEMMs (kernels_gemm.cu). A BF16
// product first as planned (bf16 products: within 1e-2 of a double-precision
// reference); then with the test hook on, as if the heuristic had no bf16
// algorithm: exactly one plan must fall back to fp32 products, and match the
// reference to fp32's tolerance (1e-5; bf16 products give about 2e-3 here);
// then a strided batch with odd strides (4-byte-aligned operands, where the
// heuristic may have no bf16 algorithm) within 1e-2, whichever it gets.
void check_gemm_fallback(Report &r) {
  cudaStream_t stream;
  SPW_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasLtHandle_t lt;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS)
    throw Error("cublasLtCreate failed");
  const size_t ws_bytes = size_t(32) << 20;
  void *ws = nullptr;
  SPW_CUDA(cudaMalloc(&ws, ws_bytes));
  cuda::Launch l;
  l.stream = stream;
  l.lt = lt;
  l.lt_workspace = ws;
  l.lt_workspace_bytes = ws_bytes;
  l.precision = Precision::BF16;
  const int64_t M = 256, N = 192, K = 512, batch = 3;
  const int64_t sA = M * K + 1, sB = K * N + 3, sC = M * N + 1; // odd
  Rng rng(91);
  const std::vector<float> a = rng.values(batch * sA, 1e-2, 1.0);
  const std::vector<float> b = rng.values(batch * sB, 1e-2, 1.0);
  std::vector<float> ref(size_t(batch * sC), 0.0f);
  for (int64_t q = 0; q < batch; ++q)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k)
          acc += double(a[size_t(q * sA + i * K + k)]) *
                 double(b[size_t(q * sB + k * N + j)]);
        ref[size_t(q * sC + i * N + j)] = float(acc);
      }
  DeviceArray da(a), db(b), dc(std::vector<float>(ref.size(), NAN));
  // One product (batch 1) or the strided batch; the relative-norm error of
  // the result against `ref` (the batch: each matrix's rows, not the gaps).
  auto product = [&](bool strided) {
    if (strided)
      cuda::matmul_f32(l, da.data(), db.data(), dc.data(), M, N, K, false,
                       false, 1.0f, 0.0f, batch, sA, sB, sC);
    else
      cuda::matmul_f32(l, da.data(), db.data(), dc.data(), M, N, K, false,
                       false, 1.0f, 0.0f);
    SPW_CUDA(cudaStreamSynchronize(stream));
    const std::vector<float> got = dc.host();
    double err = 0;
    std::string why;
    for (int64_t q = 0; q < (strided ? batch : 1) && why.empty(); ++q) {
      double e = 0;
      why = check::compare_f32(got.data() + q * sC, ref.data() + q * sC, M * N,
                               false, 1.0, &e);
      err = std::max(err, e);
    }
    return why.empty() ? err : double(INFINITY);
  };
  auto verdict = [&](const std::string &what, bool ok, const std::string &d) {
    r.failures += !ok;
    std::printf("%-4s %-34s %-10s %s\n", ok ? "ok" : "FAIL",
                "gemm bf16 fp32 fallback", what.c_str(), d.c_str());
  };
  const double fast = product(false);
  verdict("bf16", fast <= 1e-2,
          format("rel err %.3g (<= 1e-2; %s)", fast,
                 fast > 1e-4 ? "bf16 rounding seen"
                             : "fp32-accurate: the heuristic's pick"));
  const int64_t before = cuda::gemm_fp32_fallbacks();
  cuda::skip_fast_bf16_for_testing(true);
  double fb = INFINITY;
  try {
    fb = product(false);
  } catch (...) {
    cuda::skip_fast_bf16_for_testing(false);
    throw;
  }
  cuda::skip_fast_bf16_for_testing(false);
  const int64_t plans = cuda::gemm_fp32_fallbacks() - before;
  verdict("fallback", fb <= 1e-5 && plans == 1,
          format("rel err %.3g (fp32 products: <= 1e-5), %lld fallback "
                 "plan(s) (1 expected)",
                 fb, (long long)plans));
  const double odd = product(true);
  verdict("odd strides", odd <= 1e-2,
          format("batch %lld, strides %lld/%lld/%lld: rel err %.3g (<= 1e-2)",
                 (long long)batch, (long long)sA, (long long)sB, (long long)sC,
                 odd));
  SPW_CUDA(cudaFree(ws));
  cublasLtDestroy(lt);
  SPW_CUDA(cudaStreamDestroy(stream));
}

struct Args {
  std::string device = "cuda", only, precision = "both";
  uint64_t seed = 1;
  bool optimizer = true;
};

const char kUsage[] =
    "usage: spillway-cuda-check [--device cuda|loopback] [--precision "
    "fp32|bf16|both]\n"
    "                           [--only SUBSTRING] [--seed N] "
    "[--no-optimizer] [--self-test-compare]\n"
    "Runs every CUDA kernel against the CPU backend on random inputs.\n"
    "--device loopback checks the kernel cases themselves on a machine\n"
    "without a GPU (the loopback device must match the CPU bit for bit).\n"
    "Exit status: 0 all passed, 1 a mismatch, 2 no usable GPU or an error.\n";

// The kernel cases through a context with the device `device` makes.
int check_ops(const Args &a, const std::string &device, Precision p) {
  auto ctx = make_context();
  std::unique_ptr<Device> dev;
  if (device == "loopback") {
    dev = make_loopback_device(int64_t(8) << 30, p);
  } else {
    spw_use_cuda(ctx.get(), p == Precision::BF16);
    check_ctx(ctx.get(), "spw_use_cuda");
    dev = ctx->cuda_factory(0, p);
  }
  ctx->precision = p;
  ctx->device = std::move(dev);
  std::printf("kernel cases on %s, %s\n", ctx->device->name().c_str(),
              precision_name(p));
  return check::run_op_cases(ctx.get(), device == "loopback", a.only,
                             a.seed);
}

int run(const Args &a) {
  if (a.device == "loopback") {
    int f = check_ops(a, "loopback", Precision::FP32);
    std::printf("%s: %d check(s) failed\n", f ? "FAILED" : "PASSED", f);
    return f ? 1 : 0;
  }
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::fprintf(stderr,
                 "spillway-cuda-check: no usable CUDA device (%s); run it on "
                 "the GPU machine (scripts/device/cuda-check.sh)\n",
                 e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    return 2;
  }
  cudaDeviceProp prop{};
  SPW_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("spillway-cuda-check: %s (sm_%d%d), %d device(s)\n", prop.name,
              prop.major, prop.minor, devices);
  Report r;
  if (a.optimizer && a.only.empty()) {
    check_adamw(r, 1, 0.01, 0.9);
    check_adamw(r, 2, 0.0, 0.9);
    check_adamw(r, 3, 0.1, 0.3); // beta1 < 0.5: lerp's other form
    check_adamw(r, 4, 0.01, 0.9, 0.0421f); // gradient clipping's scale
    check_device_adamw(r);
    check_state_bf16(r, 5);
    int seed = 10;
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 6},
                              {7, 3}, {64, 256}, {33, 1023}, {1, 70001}})
      for (int level : {0, 1, 2, 3})
        check_foam(r, uint64_t(seed++), rows, cols, level,
                   level % 2 ? 0.0 : 0.01);
  }
  if (a.precision != "fp32" &&
      std::string("gemm bf16 fp32 fallback").find(a.only) != std::string::npos)
    check_gemm_fallback(r);
  if (a.precision != "bf16")
    r.failures += check_ops(a, "cuda", Precision::FP32);
  if (a.precision != "fp32")
    r.failures += check_ops(a, "cuda", Precision::BF16);
  std::printf("%s: %d check(s) failed\n",
              r.failures ? "FAILED" : "PASSED", r.failures);
  return r.failures ? 1 : 0;
}

} // namespace

// libspillway_runtime.a's driver (spw_main, in main.cpp) calls the compiled
// model's two entry points. This tool is no model and never runs the
// driver, but the linker may still pull the driver's object in for an
// inline function both define, so it gets these (never called).
extern "C" void spw_model_declare(spw_ctx *) {}
extern "C" void spw_model_step(spw_ctx *) {}

// --self-test-compare: the float comparison's verdicts on crafted outputs
// (no device needed), so a test can pin what counts as equal.
int self_test_compare() {
  struct T {
    const char *what;
    std::vector<float> gpu, cpu;
    bool zero_sign, want_ok;
  };
  const float nan = NAN, inf = INFINITY;
  const T tests[] = {
      {"NaN = NaN at the same position", {1, nan, 3}, {1, nan, 3}, false, true},
      {"NaN payloads differ", {std::nanf("7"), 2}, {nan, 2}, false, true},
      {"NaN where the CPU has a number", {1, nan, 3}, {1, 2, 3}, false, false},
      {"a number where the CPU has NaN", {1, 2, 3}, {1, nan, 3}, false, false},
      {"the same infinities", {inf, -inf, 1}, {inf, -inf, 1}, false, true},
      {"+inf where the CPU has -inf", {inf, 1}, {-inf, 1}, false, false},
      {"a number where the CPU has inf", {1e30f, 1}, {inf, 1}, false, false},
      {"-0 against +0, sign not checked", {-0.0f, 1}, {0.0f, 1}, false, true},
      {"-0 against +0, sign checked", {-0.0f, 1}, {0.0f, 1}, true, false},
      {"-0 against -0, sign checked", {-0.0f, 1}, {-0.0f, 1}, true, true},
      {"within tolerance", {1.000001f, 2}, {1, 2}, false, true},
      {"beyond tolerance", {1.1f, 2}, {1, 2}, false, false},
  };
  int bad = 0;
  for (const T &t : tests) {
    const std::string why = spw::check::compare_f32(
        t.gpu.data(), t.cpu.data(), int64_t(t.cpu.size()), t.zero_sign, 1e-5,
        nullptr);
    const bool ok = why.empty();
    bad += ok != t.want_ok;
    std::printf("%-4s %s: %s\n", ok == t.want_ok ? "ok" : "FAIL", t.what,
                ok ? "equal" : why.c_str());
  }
  std::printf("compare self-test: %d failed\n", bad);
  return bad ? 1 : 0;
}

int main(int argc, char **argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "spillway-cuda-check: %s needs a value\n%s",
                     f.c_str(), kUsage);
        std::exit(2);
      }
      return argv[++i];
    };
    if (f == "--device")
      a.device = value();
    else if (f == "--precision")
      a.precision = value();
    else if (f == "--only")
      a.only = value();
    else if (f == "--seed")
      a.seed = std::strtoull(value().c_str(), nullptr, 10);
    else if (f == "--no-optimizer")
      a.optimizer = false;
    else if (f == "--self-test-compare")
      return self_test_compare();
    else if (f == "--help" || f == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else {
      std::fprintf(stderr, "spillway-cuda-check: unknown argument '%s'\n%s",
                   f.c_str(), kUsage);
      return 2;
    }
  }
  if ((a.device != "cuda" && a.device != "loopback") ||
      (a.precision != "fp32" && a.precision != "bf16" &&
       a.precision != "both")) {
    std::fprintf(stderr, "spillway-cuda-check: bad --device or --precision\n%s",
                 kUsage);
    return 2;
  }
  try {
    return run(a);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "spillway-cuda-check: %s\n", e.what());
    return 2;
  }
}
