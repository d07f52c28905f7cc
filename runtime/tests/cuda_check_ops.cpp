//===- cuda_check_ops.cpp - every kernel case: CPU against a device --------===//
//
// The harness of cuda_check_ops.h. Each case runs through a CPU context and
// a context with a device (CUDA, or the loopback device, which checks the
// cases themselves on a machine without a GPU: there every result must be
// bit-identical). On the device every input and output gets a guard of
// NaN bytes after it, outputs start as NaN bytes, and the guards are
// checked after the kernel: a write outside a tensor fails the case.
//
//===----------------------------------------------------------------------===//

#include "cuda_check_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace spw::check {

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

int64_t count(const std::vector<int64_t> &dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

std::string dims_str(const std::vector<int64_t> &dims) {
  return shape_str(dims.data(), int(dims.size()));
}

namespace {
HostTensor empty_like(int32_t dtype, std::vector<int64_t> dims) {
  HostTensor t;
  t.dtype = dtype;
  t.dims = std::move(dims);
  t.data.resize(size_t(t.numel() * dtype_size(dtype)));
  return t;
}
} // namespace

HostTensor Rng::uniform(std::vector<int64_t> dims, double lo, double hi) {
  HostTensor t = empty_like(SPW_F32, std::move(dims));
  std::uniform_real_distribution<double> u(lo, hi);
  float *p = reinterpret_cast<float *>(t.data.data());
  for (int64_t i = 0; i < t.numel(); ++i) {
    float x = float(u(gen));
    while (x == 0.0f)
      x = float(u(gen));
    p[i] = x;
  }
  return t;
}

HostTensor Rng::magnitude(std::vector<int64_t> dims, double lo, double hi) {
  HostTensor t = empty_like(SPW_F32, std::move(dims));
  std::uniform_real_distribution<double> u(std::log(lo), std::log(hi));
  float *p = reinterpret_cast<float *>(t.data.data());
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float x = float(std::exp(u(gen)));
    p[i] = (gen() & 1) ? x : -x;
  }
  return t;
}

HostTensor Rng::special(std::vector<int64_t> dims, double lo, double hi) {
  HostTensor t = uniform(std::move(dims), lo, hi);
  const int64_t n = t.numel();
  const int64_t row = t.dims.empty() ? 1 : std::max<int64_t>(t.dims.back(), 1);
  const float kSpecial[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f};
  float *p = reinterpret_cast<float *>(t.data.data());
  for (int64_t r = 0; r * row < n; ++r) {
    float *x = p + r * row;
    const int64_t len = std::min(row, n - r * row);
    switch (r % 7) {
    case 1: x[below(len)] = NAN; break;
    case 2: x[below(len)] = INFINITY; break;
    case 3: x[below(len)] = -INFINITY; break;
    case 4:
      for (int64_t i = 0; i < len; ++i)
        x[i] = -INFINITY;
      break;
    case 5:
      for (int64_t i = 0; i < len; ++i)
        if (i % 6 < 5)
          x[i] = kSpecial[i % 6];
      break;
    case 6:
      for (int64_t i = 0; i < len; i += 2)
        x[i] = (i / 2) % 2 ? 0.0f : -0.0f;
      break;
    default: break;
    }
  }
  return t;
}

HostTensor Rng::index(std::vector<int64_t> dims, int64_t bound,
                      int32_t dtype) {
  HostTensor t = empty_like(dtype, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t v = below(bound);
    if (dtype == SPW_I32)
      reinterpret_cast<int32_t *>(t.data.data())[i] = int32_t(v);
    else
      reinterpret_cast<int64_t *>(t.data.data())[i] = v;
  }
  return t;
}

HostTensor Rng::mask(std::vector<int64_t> dims, double p) {
  HostTensor t = empty_like(SPW_BOOL, std::move(dims));
  std::bernoulli_distribution b(p);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data[size_t(i)] = b(gen) ? 1 : 0;
  return t;
}

int64_t Rng::below(int64_t bound) {
  return bound <= 0 ? 0 : int64_t(gen() % uint64_t(bound));
}

namespace {

constexpr int64_t kGuardBytes = 256;
constexpr uint8_t kPoison = 0xff; // every f32 made of it is a NaN

struct Outcome {
  bool ok = false;
  std::string detail;
};

std::unique_ptr<spw_tensor> host_tensor(const HostTensor &h) {
  auto t = make_tensor(h.dtype, int(h.dims.size()), h.dims.data(), "input");
  if (!h.data.empty())
    std::memcpy(t->data, h.data.data(), h.data.size());
  return t;
}

// || a - b || / || b || over float32 arrays. Elements that are not finite
// must be the same on both sides (a NaN loss where every label is ignored,
// an infinity from a -inf mask) and count as equal; elsewhere a NaN makes
// the result NaN, which fails every tolerance.
double rel_norm(const float *gpu, const float *cpu, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(cpu[i])) {
      const bool same = std::isnan(cpu[i]) ? std::isnan(gpu[i])
                                           : gpu[i] == cpu[i];
      if (!same)
        return NAN;
      continue;
    }
    const double d = double(gpu[i]) - double(cpu[i]);
    num += d * d;
    den += double(cpu[i]) * double(cpu[i]);
  }
  if (n == 0)
    return 0;
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

// The first element whose class differs: a NaN against a number (either
// way), a different infinity, or (zero_sign) a zero of the other sign. NaN
// against NaN is equal, whatever the payload. -1 when every class matches.
int64_t class_mismatch(const float *gpu, const float *cpu, int64_t n,
                       bool zero_sign) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gpu[i], c = cpu[i];
    if (std::isnan(c) || std::isnan(g)) {
      if (std::isnan(c) != std::isnan(g))
        return i;
    } else if (std::isinf(c) || std::isinf(g)) {
      if (g != c)
        return i;
    } else if (zero_sign && c == 0.0f &&
               (g != 0.0f || std::signbit(g) != std::signbit(c))) {
      return i;
    }
  }
  return -1;
}

struct MaxError {
  double err = 0, scale = 0; // max |gpu - cpu| and max |cpu| (finite ones)
  int64_t at = 0;
};
MaxError max_error(const float *gpu, const float *cpu, int64_t n) {
  MaxError m;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(cpu[i]))
      continue; // rel_norm checked these
    m.scale = std::max(m.scale, std::fabs(double(cpu[i])));
    const double d = std::fabs(double(gpu[i]) - double(cpu[i]));
    if (!(d <= m.err)) { // NaN counts as the worst
      m.err = std::isnan(d) ? INFINITY : d;
      m.at = i;
    }
  }
  return m;
}

} // namespace

std::string compare_f32(const float *g, const float *cpu, int64_t n,
                        bool zero_sign, double tol, double *err_out) {
  if (const int64_t at = class_mismatch(g, cpu, n, zero_sign); at >= 0)
    return format("element %lld is %.7g, the CPU's %.7g (NaN, infinities%s "
                  "must match)",
                  (long long)at, double(g[at]), double(cpu[at]),
                  zero_sign ? " and the sign of zero" : "");
  const double err = rel_norm(g, cpu, n);
  if (err_out)
    *err_out = err;
  if (!(err <= tol))
    return format("relative norm error %.3g > %.1g", err, tol);
  // The norm averages one wrong element away in a large output (a bad
  // last tile): no element may be off by more than 4 tol of the largest.
  const MaxError me = max_error(g, cpu, n);
  if (!(me.err <= 4 * tol * me.scale))
    return format("element %lld is %.7g, the CPU's %.7g (off by %.3g of the "
                  "largest |value| %.3g)",
                  (long long)me.at, double(g[me.at]), double(cpu[me.at]),
                  me.err / std::max(me.scale, 1e-30), me.scale);
  return "";
}

namespace {

Outcome run_case(const OpCase &c, spw_ctx *dctx, bool exact) {
  const KernelEntry entry = entry_point(c.op);
  Device &dev = *dctx->device;
  // The CPU reference.
  auto cctx = make_context();
  std::vector<std::unique_ptr<spw_tensor>> cin, cout;
  std::vector<spw_tensor *> cin_p, cout_p;
  for (const auto &h : c.ins) {
    cin.push_back(h ? host_tensor(*h) : nullptr);
    cin_p.push_back(cin.back().get());
  }
  for (const OutSpec &o : c.outs) {
    cout.push_back(o.dtype ? make_tensor(o.dtype, int(o.dims.size()),
                                         o.dims.data(), "output")
                           : nullptr);
    cout_p.push_back(cout.back().get());
  }
  entry(cctx.get(), cin_p.data(), cout_p.data(), c.iattrs.data(),
        c.fattrs.data());
  if (cctx->failed())
    return {false, "the CPU reference failed (the case is wrong): " +
                       cctx->error};

  // The device: a guard before the first tensor and after each one, the
  // padding of each tensor's aligned slot poisoned too (it is guard), and
  // outputs poisoned.
  clear_step(dctx);
  dctx->error.clear();
  std::vector<std::pair<char *, int64_t>> guards;
  auto guard = [&] {
    char *g = static_cast<char *>(dev.step_alloc(kGuardBytes, "guard"));
    dev.fill(g, kPoison, kGuardBytes);
    guards.push_back({g, kGuardBytes});
  };
  auto slot = [&](spw_tensor *t) {
    const int64_t bytes = t->bytes();
    const int64_t aligned = std::max<int64_t>(
        (bytes + ArenaAllocator::kAlign - 1) / ArenaAllocator::kAlign *
            ArenaAllocator::kAlign,
        ArenaAllocator::kAlign);
    dev.fill(t->data, kPoison, aligned);
    if (aligned > bytes)
      guards.push_back({static_cast<char *>(t->data) + bytes, aligned - bytes});
  };
  guard();
  std::vector<spw_tensor *> din, dout;
  for (const auto &h : c.ins) {
    if (!h) {
      din.push_back(nullptr);
      continue;
    }
    spw_tensor *t = alloc_step_tensor(dctx, h->dtype, int(h->dims.size()),
                                      h->dims.data(), "input");
    slot(t);
    if (!h->data.empty())
      dev.upload(t->data, h->data.data(), int64_t(h->data.size()));
    guard();
    din.push_back(t);
  }
  for (const OutSpec &o : c.outs) {
    if (!o.dtype) {
      dout.push_back(nullptr);
      continue;
    }
    spw_tensor *t = alloc_step_tensor(dctx, o.dtype, int(o.dims.size()),
                                      o.dims.data(), "output");
    slot(t);
    guard();
    dout.push_back(t);
  }
  entry(dctx, din.data(), dout.data(), c.iattrs.data(), c.fattrs.data());
  if (dctx->failed())
    return {false, "the device kernel failed: " + dctx->error};
  dev.synchronize();

  for (const auto &[g, n] : guards) {
    std::vector<uint8_t> b(static_cast<size_t>(n));
    dev.download(b.data(), g, n);
    for (uint8_t x : b)
      if (x != kPoison)
        return {false, "wrote outside an input or output (a guard changed)"};
  }
  // Inputs are read-only.
  for (size_t i = 0; i < c.ins.size(); ++i) {
    if (!c.ins[i] || c.ins[i]->data.empty())
      continue;
    std::vector<char> back(c.ins[i]->data.size());
    dev.download(back.data(), din[i]->data, int64_t(back.size()));
    if (back != c.ins[i]->data)
      return {false, format("input %zu was written", i)};
  }
  // Products (GEMMs, attention) take bf16 inputs at bf16 precision; every
  // other op computes the same in either, and gets the fp32 tolerance.
  const bool product = c.op == Op::matmul || c.op == Op::gemm ||
                       c.op == Op::linear || c.op == Op::attention ||
                       c.op == Op::attention_grad;
  const double tol = dctx->precision == Precision::BF16 && product
                         ? c.tol_bf16
                         : c.tol_fp32;
  double worst = 0;
  for (size_t i = 0; i < c.outs.size(); ++i) {
    if (!cout[i])
      continue;
    const spw_tensor &ref = *cout[i];
    std::vector<char> got(static_cast<size_t>(ref.bytes()));
    dev.download(got.data(), dout[i]->data, ref.bytes());
    if (exact || ref.dtype != SPW_F32) {
      if (std::memcmp(got.data(), ref.data, got.size()) != 0) {
        int64_t diff = 0;
        const int64_t es = dtype_size(ref.dtype);
        for (int64_t e = 0; e < ref.numel; ++e)
          diff += std::memcmp(got.data() + e * es,
                              static_cast<char *>(ref.data) + e * es,
                              size_t(es)) != 0;
        return {false, format("output %zu: %lld of %lld elements differ "
                              "(%s: exact)",
                              i, (long long)diff, (long long)ref.numel,
                              exact ? "loopback" : dtype_name(ref.dtype))};
      }
      continue;
    }
    const float *g = reinterpret_cast<const float *>(got.data());
    double err = 0;
    const std::string why =
        compare_f32(g, ref.as<float>(), ref.numel, c.zero_sign, tol, &err);
    if (!why.empty())
      return {false, format("output %zu: ", i) + why};
    worst = std::max(worst, err);
  }
  return {true, exact ? "bit-identical" : format("rel err %.2g", worst)};
}

// Special-value copies of the small cases: their f32 inputs replaced by
// Rng::special rows (NaN, +-Inf, -Inf rows, -0), so the device must give the
// CPU's NaN, infinities (and, where IEEE fixes it, zero signs) for every op.
// Exceptions, where the fused kernels differ from the CPU on purpose: the
// tiled attention multiplies the masked part of a causal tile by P = 0, so a
// NaN or Inf in V, dy or in a masked key's row would reach rows the CPU never
// reads it for (0 * NaN); attention gets specials in q and k only, and its
// gradient only without the causal mask.
void add_special_cases(CaseList &cases, Rng &rng) {
  const size_t n = cases.size();
  for (size_t i = 0; i < n; ++i) {
    const OpCase &base = cases[i];
    if (base.ins.empty() || !base.ins[0] || base.ins[0]->numel() > 65536 ||
        base.ins[0]->numel() == 0)
      continue;
    size_t limit = base.ins.size();
    if (base.op == Op::attention)
      limit = 2;
    else if (base.op == Op::attention_grad && base.iattrs.at(0) != 0)
      continue;
    OpCase c = base;
    bool any = false;
    for (size_t k = 0; k < limit; ++k)
      if (c.ins[k] && c.ins[k]->dtype == SPW_F32 && c.ins[k]->numel() > 1) {
        c.ins[k] = rng.special(c.ins[k]->dims);
        any = true;
      }
    if (!any)
      continue;
    switch (c.op) {
    // Exact in IEEE arithmetic (or moving bytes): -0 must stay -0.
    case Op::add: case Op::sub: case Op::mul: case Op::div: case Op::neg:
    case Op::relu: case Op::relu_grad: case Op::where: case Op::reshape:
    case Op::transpose: case Op::broadcast_to: case Op::concat:
    case Op::slice: case Op::slice_grad: case Op::gather:
      c.zero_sign = true;
      break;
    default: break;
    }
    c.label += " special";
    cases.push_back(std::move(c));
  }
}

} // namespace

int run_op_cases(spw_ctx *dctx, bool exact, const std::string &only,
                 uint64_t seed) {
  CaseList cases;
  Rng rng(seed);
  add_elementwise_cases(cases, rng);
  add_shape_cases(cases, rng);
  add_gemm_cases(cases, rng);
  add_nn_cases(cases, rng);
  add_attention_cases(cases, rng);
  add_special_cases(cases, rng);
  int failures = 0, run = 0;
  const char *prec = dctx->precision == Precision::BF16 ? "bf16" : "fp32";
  for (const OpCase &c : cases) {
    if (!only.empty() && c.label.find(only) == std::string::npos)
      continue;
    ++run;
    Outcome o;
    try {
      o = run_case(c, dctx, exact);
    } catch (const std::exception &e) {
      o = {false, std::string("error: ") + e.what()};
    }
    failures += !o.ok;
    std::printf("%-4s %-4s %-56s %s\n", o.ok ? "ok" : "FAIL", prec,
                c.label.c_str(), o.detail.c_str());
    std::fflush(stdout);
  }
  clear_step(dctx);
  // A case the device ran on host copies checked the CPU against itself.
  const std::string fb = dctx->device->host_fallbacks();
  if (!fb.empty()) {
    ++failures;
    std::printf("FAIL %-4s ops without a device kernel (ran on host copies): "
                "%s\n",
                prec, fb.c_str());
  }
  std::printf("kernel cases (%s): %d run, %d failed\n", prec, run, failures);
  return failures;
}

} // namespace spw::check
