//===- optimizer.cpp - AdamW ------------------------------------------------===//
//
// Matches torch.optim.AdamW (foreach=False, _single_tensor_adamw) operation
// by operation in float32, with the scalars computed in double and cast to
// float where PyTorch's CPU kernels cast them:
//   param.mul_(1 - lr * wd)
//   exp_avg.lerp_(grad, 1 - beta1)         (lerp: m + w*(g-m) for w < 0.5)
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
//   denom = (exp_avg_sq.sqrt() / sqrt(1 - beta2^t)).add_(eps)
//   param.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1^t))
//
//===----------------------------------------------------------------------===//

#include "runtime_internal.h"

#include <cmath>

using namespace spw;

extern "C" void spw_adamw(spw_ctx *ctx, int32_t param, spw_tensor *grad,
                          double lr, double beta1, double beta2, double eps,
                          double weight_decay) {
  guarded(ctx, "spw_adamw", [&] {
    record_grad(ctx, param, grad);
    if (ctx->evaluate_only)
      return;
    ParamInfo &p = ctx->params[size_t(param)];
    if (p.value->dtype != SPW_F32)
      fail("parameter '%s' is %s; AdamW updates only f32 parameters",
           p.name.c_str(), dtype_name(p.value->dtype));
    if (ctx->step < 1)
      fail("parameter '%s': optimizer step %lld (steps count from 1)",
           p.name.c_str(), (long long)ctx->step);
    AdamWHparams h = effective_adamw(
        ctx, AdamWHparams{lr, beta1, beta2, eps, weight_decay});
    const size_t n = size_t(p.value->numel);
    if (!p.bound_m && p.adam_m.size() != n) {
      p.adam_m.assign(n, 0.0f);
      p.adam_v.assign(n, 0.0f);
    }
    const double t = double(ctx->step);
    const double bc1 = 1.0 - std::pow(h.beta1, t);
    const double bc2 = 1.0 - std::pow(h.beta2, t);
    const float decay = float(1.0 - h.lr * h.weight_decay);
    const float w1 = float(1.0 - h.beta1);
    const float b2 = float(h.beta2);
    const float w2 = float(1.0 - h.beta2);
    const float bc2_sqrt = float(std::sqrt(bc2));
    const float feps = float(h.eps);
    const float neg_step = float(-(h.lr / bc1));
    const bool decays = h.weight_decay != 0.0;
    float *w = p.value->as<float>();
    const float *g = reinterpret_cast<const float *>(p.grad.data());
    // An offload plan binds the state of the block the update runs in.
    float *m = p.bound_m ? p.bound_m : p.adam_m.data();
    float *v = p.bound_v ? p.bound_v : p.adam_v.data();
    for (size_t i = 0; i < n; ++i) {
      if (decays)
        w[i] = w[i] * decay;
      // torch's lerp for weight < 0.5; for weight >= 0.5 it uses the other
      // form, which we follow as well.
      if (w1 < 0.5f)
        m[i] = m[i] + w1 * (g[i] - m[i]);
      else
        m[i] = g[i] - (g[i] - m[i]) * (1.0f - w1);
      v[i] = v[i] * b2;
      v[i] = v[i] + w2 * g[i] * g[i];
      float denom = std::sqrt(v[i]) / bc2_sqrt + feps;
      w[i] = w[i] + neg_step * m[i] / denom;
    }
  });
}
