//===- gradcheck.cpp - the gradient check (--check-gradients) -------------===//

#include "driver/driver.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <unordered_set>

namespace spw::driver {

namespace {

struct SplitMix64 {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

// K distinct indices of [0, n), sorted (Floyd's algorithm), or all of them.
std::vector<int64_t> sample_indices(int64_t n, int64_t k, SplitMix64 &rng) {
  std::vector<int64_t> out;
  if (n <= k) {
    for (int64_t i = 0; i < n; ++i)
      out.push_back(i);
    return out;
  }
  std::unordered_set<int64_t> chosen;
  for (int64_t j = n - k; j < n; ++j) {
    int64_t t = int64_t(rng.next() % uint64_t(j + 1));
    chosen.insert(chosen.count(t) ? j : t);
  }
  out.assign(chosen.begin(), chosen.end());
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace

int check_gradients(spw_ctx *ctx, const Options &o) {
  ctx->evaluate_only = true;
  const float base = run_step(ctx, 0, "gradient check, base step");
  if (!std::isfinite(base))
    fail("gradient check: the loss on batch 0 is %g", double(base));
  std::printf("gradient check on batch 0: loss %.7g, h = %g * max(1, |p|), "
              "tol %g, up to %lld elements per parameter, seed %llu\n",
              double(base), o.fd_eps, o.fd_tol, (long long)o.fd_samples,
              (unsigned long long)o.seed);
  std::vector<std::vector<char>> analytic;
  for (const ParamInfo &p : ctx->params)
    analytic.push_back(p.grad);
  SplitMix64 rng{o.seed};
  bool all_ok = true;
  for (size_t pi = 0; pi < ctx->params.size(); ++pi) {
    ParamInfo &p = ctx->params[pi];
    if (p.value->dtype != SPW_F32) {
      std::printf("gradcheck %s: skipped (%s parameter)\n", p.name.c_str(),
                  dtype_name(p.value->dtype));
      continue;
    }
    const bool have_grad = !analytic[pi].empty();
    const float *an_all =
        reinterpret_cast<const float *>(analytic[pi].data());
    float *w = p.value->as<float>();
    auto idx = sample_indices(p.value->numel, o.fd_samples, rng);
    int64_t ok = 0;
    double max_abs = 0.0;
    std::string details;
    int shown = 0;
    for (int64_t i : idx) {
      const float orig = w[i];
      const double h = o.fd_eps * std::max(1.0, std::fabs(double(orig)));
      const std::string label =
          format("gradient check of %s[%lld]", p.name.c_str(), (long long)i);
      w[i] = float(double(orig) + h);
      const double hp = w[i];
      device_push_param(ctx, pi);
      const double lp = run_step(ctx, 0, label);
      w[i] = float(double(orig) - h);
      const double hm = w[i];
      device_push_param(ctx, pi);
      const double lm = run_step(ctx, 0, label);
      w[i] = orig;
      device_push_param(ctx, pi);
      const double fd = (lp - lm) / (hp - hm);
      const double an = have_grad ? double(an_all[i]) : 0.0;
      const double err = std::fabs(fd - an);
      // Relative tolerance, plus the finite difference's own rounding noise:
      // a float32 loss is only known to a few ulps.
      const double noise =
          32.0 * double(FLT_EPSILON) * std::max(std::fabs(lp), std::fabs(lm)) /
          (hp - hm);
      const bool good = std::isfinite(fd) && std::isfinite(an) &&
                        err <= o.fd_tol * std::max(std::fabs(fd),
                                                   std::fabs(an)) +
                                   noise;
      if (!std::isfinite(err))
        max_abs = INFINITY;
      else
        max_abs = std::max(max_abs, err);
      if (good) {
        ++ok;
      } else if (shown++ < 5) {
        details += format("  %s[%lld]: analytic %.7g, finite difference "
                          "%.7g\n",
                          p.name.c_str(), (long long)i, an, fd);
      }
    }
    std::printf("gradcheck %s: %lld/%zu elements ok, max abs err %.2g%s\n",
                p.name.c_str(), (long long)ok, idx.size(), max_abs,
                have_grad ? "" : " (no gradient recorded; compared with 0)");
    std::fputs(details.c_str(), stdout);
    if (ok != int64_t(idx.size()))
      all_ok = false;
  }
  // The last step run perturbed nothing, but its gradients are those of
  // p - h for one element: restore the base step's.
  for (size_t pi = 0; pi < ctx->params.size(); ++pi)
    ctx->params[pi].grad = analytic[pi];
  std::printf("%s\n", all_ok ? "gradient check passed"
                             : "gradient check FAILED");
  flush_stdout();
  return all_ok ? 0 : 1;
}

} // namespace spw::driver
