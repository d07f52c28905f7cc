//===- optimizer.cpp - AdamW and FOAM --------------------------------------===//
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
// The optimizer overlap splits one parameter's update into element ranges
// (now, or deferred to the next step with this step's gradient, t and
// hyper-parameters): the same loop over fewer elements, so the same bits.
//
// An update runs where the parameter's optimizer state is: on the device
// (Device::adamw / foam, the same float32 arithmetic) when the device holds
// it (its own copy, or an optimizer block bound on the GPU tier), else on
// host with the CPU arithmetic (the CPU device's resident state, an
// offload plan's CPU optimizer). In a bf16-mixed offload plan each update
// then writes the rounding of the master elements it changed into the
// parameter's bf16 working copy, bound on the same side (work_elements).
//
//===----------------------------------------------------------------------===//

#include "context.h"
#include "cpu/parallel.h"
#include "dist/dist.h"
#include "dist/zero.h"
#include "host_optimizer.h"
#include "spillway/runtime/zero_shard.h"
#include "tiers.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

using namespace spw;

namespace {

ParamInfo &param_at(spw_ctx *ctx, int32_t param) {
  if (param < 0 || size_t(param) >= ctx->params.size())
    fail("parameter index %d out of range (%zu parameters declared)", param,
         ctx->params.size());
  return ctx->params[size_t(param)];
}

// True when the parameter's update runs on the device (see the file
// comment).
bool state_on_device(const ParamInfo &p) {
  return p.dev_m || p.state_on_device;
}

ParamInfo &checked_param(spw_ctx *ctx, int32_t param, bool foam = false) {
  ParamInfo &p = ctx->params[size_t(param)];
  if (foam != (p.foam_level >= 0))
    fail("parameter '%s' is declared for %s but updated by %s",
         p.name.c_str(), p.foam_level >= 0 ? "FOAM" : "AdamW",
         foam ? "FOAM" : "AdamW");
  if (p.value->dtype != SPW_F32)
    fail("parameter '%s' is %s; AdamW updates only f32 parameters",
         p.name.c_str(), dtype_name(p.value->dtype));
  if (ctx->step < 1)
    fail("parameter '%s': optimizer step %lld (steps count from 1)",
         p.name.c_str(), (long long)ctx->step);
  // Gradient clipping is a barrier: every update of the step follows the
  // norm of all its gradients.
  if (ctx->grad_clip.declared && ctx->grad_clip.step != ctx->step)
    fail("parameter '%s' is updated at step %lld before the step's gradient "
         "norm is computed (spw_clip_grad_norm): gradient clipping needs "
         "every update after the last gradient",
         p.name.c_str(), (long long)ctx->step);
  return p;
}

void check_range(const ParamInfo &p, int64_t begin, int64_t end) {
  if (begin < 0 || begin >= end || end > p.value->numel)
    fail("element range [%lld, %lld) of parameter '%s' is empty or outside "
         "its %lld elements",
         (long long)begin, (long long)end, p.name.c_str(),
         (long long)p.value->numel);
}

// ZeRO (dist/zero.h): the part of elements [begin, end) whose update this
// rank makes, its shard's; empty (first >= second) when none is.
std::pair<int64_t, int64_t> local_range(const ParamInfo &p, int64_t begin,
                                        int64_t end) {
  if (p.shard_hi < 0)
    return {begin, end};
  return {std::max(begin, p.shard_lo), std::min(end, p.shard_hi)};
}

// A pending update overlapping [begin, end): updating those elements again
// before it is applied would lose it, or apply two steps out of order.
void check_nothing_pending(const ParamInfo &p, int64_t begin, int64_t end,
                           const char *what) {
  for (const PendingAdamW &q : p.pending)
    if (q.begin < end && begin < q.end)
      fail("%s elements [%lld, %lld) of parameter '%s', but the update of "
           "[%lld, %lld) deferred at step %lld is still pending: apply it "
           "first (spw_adamw_apply_pending, or spw_adamw_flush)",
           what, (long long)begin, (long long)end, p.name.c_str(),
           (long long)q.begin, (long long)q.end, (long long)q.step);
}

// Elements [begin, end) of a parameter of a split block (the update's
// ranges never straddle the split: sched-overlap-optimizer cuts there), or
// of a whole one bound contiguously.
// P: a float or bf16 pointer, or StateMem.
// `first`: the elements each part's pointer holds first (ZeRO's sharded
// state: ParamInfo::state_first), else 0 and the split.
template <class P>
P split_elements(const ParamInfo &p, const P part[2], const char *what,
                 int64_t begin, int64_t end, const int64_t *first = nullptr) {
  const int64_t s = p.bound_split;
  const int64_t f0 = first && first[0] >= 0 ? first[0] : 0;
  const int64_t f1 = first && first[0] >= 0 ? first[1] : s;
  P at{};
  if (end <= s)
    at = part[0] ? part[0] + (begin - f0) : P{};
  else if (begin >= s)
    at = part[1] ? part[1] + (begin - f1) : P{};
  else if (part[0] && part[1] && part[1] == part[0] + (f1 - f0))
    at = part[0] + (begin - f0);
  else
    fail("parameter '%s': the %s of elements [%lld, %lld) span both parts "
         "of its split block, which are not both bound back to back here",
         p.name.c_str(), what, (long long)begin, (long long)end);
  if (!at)
    fail("parameter '%s': the %s of elements [%lld, %lld) are not bound "
         "(that part of the block has no copy where the update runs)",
         p.name.c_str(), what, (long long)begin, (long long)end);
  return at;
}

// The bound f32 values of elements [begin, end) the update writes: `value`'s
// (the host or device tensor), a part of a split block, or this rank's
// shard of a master block cut for ZeRO's ranks (value_first).
float *value_elements(const ParamInfo &p, const spw_tensor &value,
                      int64_t begin, int64_t end) {
  if (p.value_first[0] >= 0) {
    if (p.bound_split >= 0)
      return split_elements(p, p.bound_w_part, "values", begin, end,
                            p.value_first);
    if (!p.bound_w_part[0])
      fail("parameter '%s' is updated while no copy of its master shard is "
           "bound",
           p.name.c_str());
    return p.bound_w_part[0] + (begin - p.value_first[0]);
  }
  if (p.bound_split >= 0)
    return split_elements(p, p.bound_w_part, "values", begin, end);
  if (!value.data)
    fail("parameter '%s' is updated while no copy of it is bound",
         p.name.c_str());
  return value.as<float>() + begin;
}

bf16 *work_elements(spw_ctx *ctx, const ParamInfo &p, int64_t begin,
                    int64_t end, bool on_device);

// ZeRO: every rank's updated shard of elements [begin, end) to every rank,
// after the update; every rank gathers, whether its own part ran or was
// skipped (a non-finite gradient: the step then fails on that rank).
void gather_updated(spw_ctx *ctx, ParamInfo &p, int64_t begin, int64_t end) {
  if (p.shard_hi < 0 || !dist::active())
    return;
  if (!has_tiers(ctx))
    return zero::gather_values(ctx, p, begin, end);
  // An offload plan's bound copy (one part of a split block).
  const bool host = !state_on_device(p);
  // Masters cut for the ranks stay so: the bf16 working copies the update
  // wrote are what the ranks exchange.
  const int32_t param = int32_t(&p - ctx->params.data());
  if (tiers_shards_masters(ctx) && tiers_hold_work(ctx, param)) {
    bf16 *at = work_elements(ctx, p, begin, end, /*on_device=*/!host);
    if (host)
      return tiers_defer_gather(ctx, param, begin, end, at);
    tiers_gathering(ctx, param, begin, end);
    return zero::gather_work(ctx, p, begin, end, at, /*host=*/false);
  }
  float *at = nullptr;
  if (p.bound_split >= 0)
    at = split_elements(p, p.bound_w_part, "values", begin, end);
  else if (float *w = host ? p.value->as<float>() : p.dev_value->as<float>())
    at = w + begin;
  else
    fail("parameter '%s' was updated, but no copy of its values is bound "
         "to gather into",
         p.name.c_str());
  // The CPU optimizer updates the host copy on its tasks: gathered once
  // they are done, when the plan next uses the copy.
  if (host)
    return tiers_defer_gather(ctx, param, begin, end, at);
  zero::gather_values(ctx, p, begin, end, at);
}

// The bound bf16 working copy of elements [begin, end) of a parameter a
// bf16-mixed plan's params block holds, which the update writes after its
// master elements; null for any other parameter. Checked before the update
// changes anything: the copy is bound where the update runs (`on_device`;
// host code may write the GPU tier of a device whose memory is the host's).
bf16 *work_elements(spw_ctx *ctx, const ParamInfo &p, int64_t begin,
                    int64_t end, bool on_device) {
  if (!tiers_hold_work(ctx, int32_t(&p - ctx->params.data())))
    return nullptr;
  if (!p.bound_work_part[0] && !p.bound_work_part[1])
    fail("parameter '%s' is updated while no copy of its bf16 working copy "
         "is bound (the plan binds the params block where the update runs)",
         p.name.c_str());
  if (on_device ? !p.work_on_device
                : p.work_on_device && !ctx->device->host_visible())
    fail("parameter '%s': its bf16 working copy is bound on %s but its "
         "update runs on %s; the plan binds the params block where the "
         "update runs",
         p.name.c_str(), p.work_on_device ? "the GPU" : "host",
         on_device ? "the GPU" : "host");
  if (p.bound_split >= 0)
    return split_elements(p, p.bound_work_part, "bf16 working copies", begin,
                          end);
  return p.bound_work_part[0] + begin;
}

} // namespace

namespace {

// The float32 constants of one AdamW step.
struct AdamWStep {
  float decay, w1, b2, w2, bc2_sqrt, eps, neg_step;
  float scale; // gradient clipping's coefficient (Scaled variants)
};

// One optimizer-state element: read (bf16 widens exactly), and stored
// (bf16 rounds to nearest even) returning the value stored, which the
// update then uses: the arithmetic is float32, the moments are the stored
// ones.
inline float loaded(float x) { return x; }
inline float loaded(bf16 x) { return to_float(x); }
inline float stored(float x, float *slot) {
  *slot = x;
  return x;
}
inline float stored(float x, bf16 *slot) {
  const bf16 b = to_bf16(x);
  *slot = b;
  return to_float(b);
}

// Elements [0, n) of one AdamW step, torch's operations in torch's order.
// Decays and Lerp are hoisted out of the loop so that it vectorizes; each
// element's float32 operations are the same in every clone (no FMA:
// -ffp-contract=off), so the bits are those of a scalar loop.
// Scaled: the gradient element is first multiplied by the clip coefficient
// (torch's clip_grad_norm_ multiplies the gradients in place, in float32).
// S: the state's storage (float, or bf16 under --optimizer-state-dtype).
template <class S, bool Decays, bool SmallLerp, bool Scaled>
__attribute__((always_inline)) inline void
adamw_elements(float *__restrict w, S *__restrict m, S *__restrict v,
               const float *__restrict g, int64_t n, AdamWStep c) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = Scaled ? g[i] * c.scale : g[i];
    float wi = w[i];
    if constexpr (Decays)
      wi = wi * c.decay;
    const float m0 = loaded(m[i]);
    // torch's lerp: m + w*(g-m) for weight < 0.5, else g - (g-m)*(1-w).
    float mi;
    if constexpr (SmallLerp)
      mi = m0 + c.w1 * (gi - m0);
    else
      mi = gi - (gi - m0) * (1.0f - c.w1);
    float vi = loaded(v[i]) * c.b2;
    vi = vi + c.w2 * gi * gi;
    mi = stored(mi, &m[i]);
    vi = stored(vi, &v[i]);
    const float denom = std::sqrt(vi) / c.bc2_sqrt + c.eps;
    w[i] = wi + c.neg_step * mi / denom;
  }
}

// One clone set per variant (clang's target_clones takes no templates).
#define SPW_ADAMW_VARIANT(name, S, decays, small, scaled)                      \
  __attribute__((target_clones("avx512f", "avx2", "default"))) void name(      \
      float *__restrict w, S *__restrict m, S *__restrict v,                   \
      const float *__restrict g, int64_t n, AdamWStep c) {                     \
    adamw_elements<S, decays, small, scaled>(w, m, v, g, n, c);                \
  }
#define SPW_ADAMW_VARIANTS(prefix, S)                                          \
  SPW_ADAMW_VARIANT(prefix##_decay_small, S, true, true, false)                \
  SPW_ADAMW_VARIANT(prefix##_decay_large, S, true, false, false)               \
  SPW_ADAMW_VARIANT(prefix##_small, S, false, true, false)                     \
  SPW_ADAMW_VARIANT(prefix##_large, S, false, false, false)                    \
  SPW_ADAMW_VARIANT(prefix##_decay_small_scaled, S, true, true, true)          \
  SPW_ADAMW_VARIANT(prefix##_decay_large_scaled, S, true, false, true)         \
  SPW_ADAMW_VARIANT(prefix##_small_scaled, S, false, true, true)               \
  SPW_ADAMW_VARIANT(prefix##_large_scaled, S, false, false, true)              \
  using prefix##_fn =                                                          \
      void (*)(float *, S *, S *, const float *, int64_t, AdamWStep);          \
  prefix##_fn prefix##_variant(bool decays, bool small, bool scaled) {         \
    return scaled                                                              \
               ? (decays ? (small ? prefix##_decay_small_scaled                \
                                  : prefix##_decay_large_scaled)               \
                         : (small ? prefix##_small_scaled                      \
                                  : prefix##_large_scaled))                    \
               : (decays                                                       \
                      ? (small ? prefix##_decay_small : prefix##_decay_large)  \
                      : (small ? prefix##_small : prefix##_large));            \
  }
SPW_ADAMW_VARIANTS(adamw, float)
SPW_ADAMW_VARIANTS(adamw_bf16, bf16)
#undef SPW_ADAMW_VARIANTS
#undef SPW_ADAMW_VARIANT

} // namespace

namespace spw {
void round_to_bf16(const float *x, bf16 *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = to_bf16(x[i]);
}

void round_to_bf16_on_device(spw_ctx *ctx, const float *x, bf16 *y,
                             int64_t n) {
  const int64_t dims[1] = {n};
  auto from = make_tensor(SPW_F32, 1, dims, "master", /*allocate=*/false);
  auto to = make_tensor(SPW_BF16, 1, dims, "bf16 working copy",
                        /*allocate=*/false);
  from->data = const_cast<float *>(x);
  to->data = y;
  from->on_device = to->on_device = true;
  spw_tensor *ins[] = {from.get()}, *outs[] = {to.get()};
  entry_point(Op::cast)(ctx, ins, outs, nullptr, nullptr);
  if (ctx->failed())
    throw Error(ctx->error);
}

void adamw_kernel(float *w, StateMem m, StateMem v, const float *g, int64_t n,
                  int64_t step, const AdamWHparams &h) {
  const double t = double(step);
  const double bc1 = 1.0 - std::pow(h.beta1, t);
  const double bc2 = 1.0 - std::pow(h.beta2, t);
  AdamWStep c;
  c.decay = float(1.0 - h.lr * h.weight_decay);
  c.w1 = float(1.0 - h.beta1);
  c.b2 = float(h.beta2);
  c.w2 = float(1.0 - h.beta2);
  c.bc2_sqrt = float(std::sqrt(bc2));
  c.eps = float(h.eps);
  c.neg_step = float(-(h.lr / bc1));
  c.scale = float(h.grad_scale);
  const bool decays = h.weight_decay != 0.0, small = c.w1 < 0.5f;
  // A coefficient of 1 changes no gradient (x * 1 == x): the plain loop.
  const bool scaled = c.scale != 1.0f;
  if (m.half != v.half)
    fail("AdamW: m and v are stored in different dtypes");
  // Elements are independent: any cut gives the same bits (the optimizer
  // overlap's ranges rely on it too). 64 Ki elements per chunk at least.
  if (m.half) {
    auto run = adamw_bf16_variant(decays, small, scaled);
    cpu::parallel_for(n, int64_t(1) << 16, [&](int64_t lo, int64_t hi) {
      run(w + lo, m.b16() + lo, v.b16() + lo, g + lo, hi - lo, c);
    });
    return;
  }
  auto run = adamw_variant(decays, small, scaled);
  cpu::parallel_for(n, int64_t(1) << 16, [&](int64_t lo, int64_t hi) {
    run(w + lo, m.f32() + lo, v.f32() + lo, g + lo, hi - lo, c);
  });
}
} // namespace spw

namespace {

// One AdamW update of elements [begin, end) at step t; g[i - begin] is the
// gradient of element i. The loop is spw_adamw's, element by element, so
// any split of a parameter into ranges gives the same bits.
void check_host_values(const spw_ctx *ctx, const ParamInfo &p) {
  // On a device whose memory the host cannot read, the values must be the
  // host-tier copy the CPU optimizer updates.
  if (p.w_on_device && !ctx->device->host_visible())
    fail("parameter '%s': its optimizer state is bound on host but its "
         "values on the GPU (the plan binds both where the update runs)",
         p.name.c_str());
}

// The CPU's own float32 state (adam_m or adam_v). bf16 state is never
// here: device_start gives every parameter device state then (bf16 in host
// memory on the CPU device), or the plan binds its optimizer block.
StateMem host_state(const spw_ctx *ctx, const ParamInfo &p,
                    std::vector<float> &state) {
  if (ctx->state_bf16)
    fail("parameter '%s': its bf16 optimizer state is neither on the device "
         "nor bound by the offload plan (the run's device was not started)",
         p.name.c_str());
  return {state.data(), false};
}

// work[i] = to_bf16(w[i]) for i < n, on the CPU's threads.
void round_in_parallel(const float *w, bf16 *work, int64_t n) {
  cpu::parallel_for(n, int64_t(1) << 16, [&](int64_t lo, int64_t hi) {
    round_to_bf16(w + lo, work + lo, hi - lo);
  });
}

// An offload plan's CPU optimizer runs it on host threads (host_optimizer.h);
// `deferred`: the deferred update's gradient buffer g points into, which it
// then keeps; `planned`: g is in the plan's pending block.
void adamw_update(spw_ctx *ctx, ParamInfo &p, const float *g, int64_t begin,
                  int64_t end, int64_t step, const AdamWHparams &h,
                  std::vector<float> *deferred = nullptr,
                  bool planned = false) {
  const size_t n = size_t(p.state_local_numel());
  if (!p.bound_m && p.bound_split < 0 && p.adam_m.size() != n) {
    p.adam_m.assign(n, 0.0f);
    p.adam_v.assign(n, 0.0f);
  }
  // ZeRO: this rank's shard of the range (the state holds only that).
  if (const auto [b, e] = local_range(p, begin, end); b != begin || e != end) {
    if (b >= e)
      return;
    g += b - begin;
    begin = b;
    end = e;
  }
  // An offload plan binds the state of the block the update runs in (one
  // part of it, when the block is split).
  float *w;
  StateMem m, v;
  w = value_elements(p, *p.value, begin, end);
  if (p.bound_split >= 0) {
    m = split_elements(p, p.bound_m_part, "AdamW m", begin, end, p.state_first);
    v = split_elements(p, p.bound_v_part, "AdamW v", begin, end, p.state_first);
  } else {
    m = (p.bound_m ? p.bound_m : host_state(ctx, p, p.adam_m)) +
        (begin - p.shard_lo);
    v = (p.bound_v ? p.bound_v : host_state(ctx, p, p.adam_v)) +
        (begin - p.shard_lo);
  }
  check_host_values(ctx, p);
  bf16 *work = work_elements(ctx, p, begin, end, /*on_device=*/false);
  param_written(p);
  if (host_optimizer_runs(ctx, p))
    return host_optimizer_adamw(ctx, p, w, m, v, g, begin, end, step, h,
                                deferred, planned, work);
  adamw_kernel(w, m, v, g, end - begin, step, h);
  if (work)
    round_in_parallel(w, work, end - begin);
}

const float *recorded_grad(const ParamInfo &p) {
  return reinterpret_cast<const float *>(p.grad.data());
}

// A NaN or infinite gradient element would make the element's weight and
// moments NaN for good: it is recorded instead of applied (and the step's
// later updates are skipped), so the weights stay those of the last good
// step. The driver reports it after reading the loss: a non-finite loss
// explains it better than the gradient does. False: skip the update.
bool check_finite_grad(spw_ctx *ctx, const ParamInfo &p, const float *g,
                       int64_t begin, int64_t end) {
  if (!ctx->grad_error.empty())
    return false;
  // ZeRO: this rank holds the mean gradient of its shard only.
  std::tie(begin, end) = local_range(p, begin, end);
  for (int64_t i = begin; i < end; ++i)
    if (!std::isfinite(g[i])) {
      ctx->grad_error = spw::format(
          "the gradient of parameter '%s' %s holds %s at flat index %lld",
          p.name.c_str(), p.value->shape().c_str(),
          std::isnan(g[i]) ? "NaN" : g[i] > 0 ? "+Inf" : "-Inf", (long long)i);
      return false;
    }
  return true;
}

} // namespace

namespace {

struct FoamStep {
  float b1, w1, b2, w2, inv_block, neg_step, alpha, eps, neg_decay;
  bool decays;
};

// Rows [0, rows) of one FOAM step. Per row, first every block's two means
// and its folded m and v (each block's sums in element order, as the
// reference loop), then the row's weights, each element's float32
// operations those of the reference loop: the same bits, but the weight
// loop runs over the whole row and vectorizes. `gbar` holds a row's block
// means.
// S: the folded state's storage (float, or bf16: stored rounded, and the
// weights read the stored moments).
template <class S>
__attribute__((always_inline)) inline void
foam_rows(float *__restrict w, S *__restrict m, S *__restrict v,
          const float *__restrict g, int64_t rows, int64_t cols, int64_t block,
          int64_t nb, const FoamStep &c, float *gbar, float *mrow,
          float *vrow) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *gr = g + r * cols;
    float *wr = w + r * cols;
    for (int64_t k = 0; k < nb; ++k) {
      const int64_t lo = k * block, hi = std::min(cols, lo + block);
      float sum = 0.0f, sumsq = 0.0f;
      for (int64_t j = lo; j < hi; ++j) {
        sum += gr[j];
        sumsq += gr[j] * gr[j];
      }
      const float gb = sum * c.inv_block, qb = sumsq * c.inv_block;
      const float mk =
          stored(loaded(m[r * nb + k]) * c.b1 + gb * c.w1, &m[r * nb + k]);
      const float vk =
          stored(loaded(v[r * nb + k]) * c.b2 + qb * c.w2, &v[r * nb + k]);
      for (int64_t j = lo; j < hi; ++j) {
        gbar[j] = gb;
        mrow[j] = mk;
        vrow[j] = vk;
      }
    }
    for (int64_t j = 0; j < cols; ++j) {
      const float res = gr[j] - gbar[j];
      const float mj = mrow[j] + res;
      const float vj = vrow[j] + res * res;
      const float upd = c.alpha * mj / (std::sqrt(vj) + c.eps);
      float x = wr[j] + c.neg_step * upd;
      if (c.decays)
        x = x + x * c.neg_decay;
      wr[j] = x;
    }
  }
}

#define SPW_FOAM_VARIANT(name, S)                                              \
  __attribute__((target_clones("avx512f", "avx2", "default"))) void name(      \
      float *__restrict w, S *__restrict m, S *__restrict v,                   \
      const float *__restrict g, int64_t rows, int64_t cols, int64_t block,    \
      int64_t nb, const FoamStep &c, float *gbar, float *mrow, float *vrow) {  \
    foam_rows<S>(w, m, v, g, rows, cols, block, nb, c, gbar, mrow, vrow);      \
  }
SPW_FOAM_VARIANT(foam_rows_f32, float)
SPW_FOAM_VARIANT(foam_rows_bf16, bf16)
#undef SPW_FOAM_VARIANT
} // namespace

namespace spw {
void foam_kernel(float *w, StateMem m, StateMem v, const float *g, int64_t rows,
                 int64_t cols, int level, int64_t step, const AdamWHparams &h,
                 double alpha) {
  const int64_t block = int64_t(1) << level;
  const int64_t nb = (cols + block - 1) / block;
  const double t = double(step);
  const double bc1 = 1.0 - std::pow(h.beta1, t);
  const double bc2 = 1.0 - std::pow(h.beta2, t);
  FoamStep c;
  c.b1 = float(h.beta1);
  c.w1 = float(1.0 - h.beta1);
  c.b2 = float(h.beta2);
  c.w2 = float(1.0 - h.beta2);
  c.inv_block = float(1.0 / double(block));
  c.neg_step = float(-(h.lr * std::sqrt(bc2) / bc1));
  c.alpha = float(alpha);
  c.eps = float(h.eps);
  c.neg_decay = float(-(h.lr * h.weight_decay));
  c.decays = h.weight_decay > 0.0;
  // Rows are independent: any cut gives the same bits.
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(cols, 1));
  cpu::parallel_for(rows, grain, [&](int64_t lo, int64_t hi) {
    std::vector<float> scratch(size_t(3 * cols));
    float *gbar = scratch.data(), *mrow = gbar + cols, *vrow = mrow + cols;
    if (m.half)
      foam_rows_bf16(w + lo * cols, m.b16() + lo * nb, v.b16() + lo * nb,
                     g + lo * cols, hi - lo, cols, block, nb, c, gbar, mrow,
                     vrow);
    else
      foam_rows_f32(w + lo * cols, m.f32() + lo * nb, v.f32() + lo * nb,
                    g + lo * cols, hi - lo, cols, block, nb, c, gbar, mrow,
                    vrow);
  });
}
} // namespace spw

namespace {

// One FOAM update (docs/runtime.md, "FOAM"): per block of 2^level elements
// of a row, one pass over its gradient for the two block means, one update
// of the block's folded m and v, and one pass that updates its weights with
// the residual recomputed on the fly: no m x n temporaries. Follows the
// authors' foam_adam.py: the padded last block of a row divides by the full
// block size, eps outside the sqrt, step size lr * sqrt(1 - beta2^t) /
// (1 - beta1^t), the decoupled weight decay after the update; the residual
// scale is 1.
void foam_update(spw_ctx *ctx, ParamInfo &p, const float *g, int64_t step,
                 const AdamWHparams &h, double alpha) {
  const int64_t cols = p.value->dims[p.value->rank - 1];
  const int64_t rows = cols ? p.value->numel / cols : 0;
  const int64_t block = int64_t(1) << p.foam_level;
  const int64_t nb = (cols + block - 1) / block;
  const size_t ns = size_t(rows * nb);
  if (!p.bound_m && p.adam_m.size() != ns) {
    p.adam_m.assign(ns, 0.0f);
    p.adam_v.assign(ns, 0.0f);
  }
  if (p.bound_split >= 0)
    fail("parameter '%s': a FOAM update of a split block (the optimizer "
         "overlap splits AdamW updates only)",
         p.name.c_str());
  float *w = p.value->as<float>();
  const StateMem m = p.bound_m ? p.bound_m : host_state(ctx, p, p.adam_m);
  const StateMem v = p.bound_v ? p.bound_v : host_state(ctx, p, p.adam_v);
  if (!w)
    fail("parameter '%s' is updated while no copy of it is bound",
         p.name.c_str());
  check_host_values(ctx, p);
  bf16 *work = work_elements(ctx, p, 0, p.value->numel, /*on_device=*/false);
  param_written(p);
  if (host_optimizer_runs(ctx, p))
    return host_optimizer_foam(ctx, p, w, m, v, g, rows, cols, p.foam_level,
                               step, h, alpha, work);
  foam_kernel(w, m, v, g, rows, cols, p.foam_level, step, h, alpha);
  if (work)
    round_in_parallel(w, work, p.value->numel);
}

// The update of elements [begin, end) on the context's device: its own
// copies of the parameter and state, or the GPU-tier copies bound by the
// offload plan (of one part, when the block is split), with the same
// float32 arithmetic. `g` is the device gradient of element `begin`.
void device_update(spw_ctx *ctx, ParamInfo &p, const float *g, int64_t begin,
                   int64_t end, int64_t step, const AdamWHparams &h,
                   double alpha) {
  Device &d = *ctx->device;
  param_written(p);
  float *w;
  StateMem m, v;
  if (p.dev_m) {
    // The device's own state is live from the first update on (device_pull
    // reads it back), a rank's empty ZeRO shard's too.
    p.state_live = true;
  } else if (!p.w_on_device) {
    fail("parameter '%s': its optimizer state is bound on the GPU but its "
         "values on host (the plan binds both where the update runs)",
         p.name.c_str());
  }
  // ZeRO: the state (the device's own, or the bound optimizer block) holds
  // this rank's shard only.
  const auto [b, e] = local_range(p, begin, end);
  if (b >= e)
    return;
  g += b - begin;
  begin = b;
  end = e;
  if (p.dev_m) {
    w = p.dev_value->as<float>() + begin;
    m = p.dev_m + (begin - p.shard_lo);
    v = p.dev_v + (begin - p.shard_lo);
  } else if (p.bound_split >= 0) {
    w = value_elements(p, *p.dev_value, begin, end);
    m = split_elements(p, p.bound_m_part, "AdamW m", begin, end, p.state_first);
    v = split_elements(p, p.bound_v_part, "AdamW v", begin, end, p.state_first);
  } else {
    if (!p.bound_m)
      fail("parameter '%s' is updated while no copy of it is bound",
           p.name.c_str());
    w = value_elements(p, *p.dev_value, begin, end);
    m = p.bound_m + (begin - p.shard_lo);
    v = p.bound_v + (begin - p.shard_lo);
  }
  if (p.foam_level >= 0 && p.bound_split >= 0)
    fail("parameter '%s': a FOAM update of a split block (the optimizer "
         "overlap splits AdamW updates only)",
         p.name.c_str());
  bf16 *work = work_elements(ctx, p, begin, end, /*on_device=*/true);
  if (p.foam_level >= 0) {
    const int64_t cols = p.value->dims[p.value->rank - 1];
    const int64_t rows = cols ? p.value->numel / cols : 0;
    d.foam(w, m, v, g, rows, cols, p.foam_level, h, alpha, step);
  } else {
    d.adamw(w, m, v, g, end - begin, h, step);
  }
  // The new master's rounding, in stream order after the update.
  if (work)
    round_to_bf16_on_device(ctx, w, work, end - begin);
  // The device's own state is live now (device_pull reads it back); an
  // offload plan's is gathered from its blocks instead.
  if (p.dev_m)
    p.state_live = true;
}

// The device gradient of an update on the device; on host-visible memory
// also checked for non-finite elements [begin, end), as the CPU optimizer
// checks them (false: skip the update).
bool device_grad(spw_ctx *ctx, const ParamInfo &p, const spw_tensor *grad,
                 int64_t begin, int64_t end, const float **g) {
  if (!grad->on_device && !ctx->device->host_visible())
    fail("parameter '%s': the gradient is in host memory, but the update "
         "runs on the %s device",
         p.name.c_str(), ctx->device->name().c_str());
  *g = grad->as<float>();
  return !ctx->device->host_visible() ||
         check_finite_grad(ctx, p, *g, begin, end);
}

// Applies a deferred update where the state is now, moving its gradient
// slice across when it was deferred on the other side.
void apply_pending(spw_ctx *ctx, ParamInfo &p, PendingAdamW &q) {
  Device &d = *ctx->device;
  const int64_t n = q.end - q.begin, bytes = n * int64_t(sizeof(float));
  if (q.planned) {
    // In the plan's pending block, on the side where the state is.
    if (state_on_device(p)) {
      device_update(ctx, p, q.planned, q.begin, q.end, q.step, q.h, 0.0);
    } else if (q.planned_on_device && !d.host_visible()) {
      // Flushed on gathered host copies (a checkpoint, the run's end): the
      // slice comes back from the device first.
      q.grad.resize(size_t(n));
      d.download(q.grad.data(), q.planned, bytes);
      adamw_update(ctx, p, q.grad.data(), q.begin, q.end, q.step, q.h,
                   &q.grad);
    } else {
      adamw_update(ctx, p, q.planned, q.begin, q.end, q.step, q.h, nullptr,
                   /*planned=*/true);
    }
  } else if (state_on_device(p)) {
    if (!q.dev_grad) {
      q.dev_grad = static_cast<float *>(d.alloc(bytes, "a deferred gradient"));
      d.upload(q.dev_grad, q.grad.data(), bytes);
    }
    device_update(ctx, p, q.dev_grad, q.begin, q.end, q.step, q.h, 0.0);
  } else {
    if (q.dev_grad) {
      q.grad.resize(size_t(n));
      d.download(q.grad.data(), q.dev_grad, bytes);
    }
    adamw_update(ctx, p, q.grad.data(), q.begin, q.end, q.step, q.h,
                 &q.grad);
  }
  if (q.dev_grad)
    p.spare_dev_grads.push_back({q.dev_grad, n});
  if (!q.grad.empty())
    p.spare_grads.push_back(std::move(q.grad));
  gather_updated(ctx, p, q.begin, q.end);
}

} // namespace

extern "C" void spw_adamw(spw_ctx *ctx, int32_t param, spw_tensor *grad,
                          double lr, double beta1, double beta2, double eps,
                          double weight_decay) {
  guarded(ctx, "spw_adamw", [&] {
    const bool on_device = state_on_device(param_at(ctx, param));
    reduce_grad(ctx, param, grad);
    record_grad(ctx, param, grad, /*host_update=*/!on_device);
    if (ctx->evaluate_only)
      return;
    ParamInfo &p = checked_param(ctx, param);
    check_nothing_pending(p, 0, p.value->numel, "updating");
    AdamWHparams h = effective_adamw(
        ctx, AdamWHparams{lr, beta1, beta2, eps, weight_decay});
    if (on_device) {
      const float *g;
      if (device_grad(ctx, p, grad, 0, p.value->numel, &g))
        device_update(ctx, p, g, 0, p.value->numel, ctx->step, h, 0.0);
    } else if (check_finite_grad(ctx, p, recorded_grad(p), 0, p.value->numel)) {
      adamw_update(ctx, p, recorded_grad(p), 0, p.value->numel, ctx->step, h);
    }
    gather_updated(ctx, p, 0, p.value->numel);
  });
}

namespace {

// Adds to `total` the sum of the squares of x[i] / divisor (float32
// division, as the micro-batch mean divides) over n float32 values, in
// double: fixed blocks of 64 Ki elements summed in order, so the bits depend
// on nothing but the values, and a sum taken in chunks of whole blocks,
// each continuing the last, is the same sum.
constexpr int64_t kSquaresBlock = int64_t(1) << 16;
static_assert(kSquaresBlock == SPW_ZERO_SHARD_ALIGN_CLIPPED,
              "ZeRO's shards under clipping are whole blocks of the norm");
// Each block's sum of squares (the blocks of n values from g).
std::vector<double> square_sums(const float *g, int64_t n, float divisor) {
  const int64_t blocks = (n + kSquaresBlock - 1) / kSquaresBlock;
  std::vector<double> part(size_t(blocks), 0.0);
  cpu::parallel_for(blocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t e = std::min(n, (b + 1) * kSquaresBlock);
      double acc = 0;
      for (int64_t i = b * kSquaresBlock; i < e; ++i) {
        const float x = divisor == 1.0f ? g[i] : g[i] / divisor;
        acc += double(x) * double(x);
      }
      part[size_t(b)] = acc;
    }
  });
  return part;
}

double add_sum_of_squares(double total, const float *g, int64_t n,
                          float divisor) {
  for (double x : square_sums(g, n, divisor))
    total += x;
  return total;
}

// The coefficient torch's clip_grad_norm_ computes from the sum of the
// squared per-tensor norms, recorded for the step's updates (and the log).
float finish_clip(spw_ctx *ctx, double limit, double sum_of_norms) {
  float scale = 1.0f;
  double norm = 0;
  if (limit > 0) {
    const float total = float(std::sqrt(sum_of_norms));
    norm = double(total);
    // clip_coef = max_norm / (total_norm + 1e-6), as torch evaluates it
    // (Tensor.__rtruediv__: the reciprocal, then the product), clamped to
    // at most 1.
    const float coef = (1.0f / (total + 1e-6f)) * float(limit);
    scale = std::isfinite(coef) ? std::min(coef, 1.0f) : 1.0f;
  }
  // A non-finite norm (a non-finite gradient) leaves the coefficient 1:
  // the updates then find the gradient and report it.
  ctx->grad_clip.step = ctx->step;
  ctx->grad_clip.norm = limit > 0 ? norm : NAN;
  ctx->grad_clip.scale = scale;
  return scale;
}

// The coefficient as a step tensor (f32 scalar) on the context's device.
spw_tensor *clip_coefficient_tensor(spw_ctx *ctx, float scale) {
  const int64_t dims[1] = {0};
  spw_tensor *out = alloc_step_tensor(ctx, SPW_F32, 0, dims,
                                      "the gradient clip coefficient");
  if (ctx->device->host_visible())
    *out->as<float>() = scale;
  else
    ctx->device->upload(out->data, &scale, sizeof scale);
  return out;
}

} // namespace

float spw::grad_norm(spw_ctx *ctx, const float *data, bool on_device,
                     int64_t n, float divisor) {
  if (!on_device || ctx->device->host_visible())
    return float(std::sqrt(add_sum_of_squares(0.0, data, n, divisor)));
  // Device memory the host cannot read: a chunk of whole blocks at a time,
  // so host memory stays bounded whatever the tensor's size.
  constexpr int64_t kChunk = 16 * kSquaresBlock;
  std::vector<float> host(size_t(std::min(n, kChunk)));
  double total = 0;
  for (int64_t off = 0; off < n; off += kChunk) {
    const int64_t m = std::min(kChunk, n - off);
    ctx->device->download(host.data(), data + off, size_t(m) * sizeof(float));
    total = add_sum_of_squares(total, host.data(), m, divisor);
  }
  return float(std::sqrt(total));
}

std::vector<double> spw::block_sums_of_squares(spw_ctx *ctx, const float *data,
                                               bool on_device, int64_t n,
                                               float divisor) {
  if (!on_device || ctx->device->host_visible())
    return square_sums(data, n, divisor);
  constexpr int64_t kChunk = 16 * kSquaresBlock;
  std::vector<float> host(size_t(std::min(n, kChunk)));
  std::vector<double> parts;
  for (int64_t off = 0; off < n; off += kChunk) {
    const int64_t m = std::min(kChunk, n - off);
    ctx->device->download(host.data(), data + off, size_t(m) * sizeof(float));
    const std::vector<double> p = square_sums(host.data(), m, divisor);
    parts.insert(parts.end(), p.begin(), p.end());
  }
  return parts;
}

namespace {
// spw_clip_grad_norm(_params): params null or params[i] < 0: the gradient's
// parameter is not known (averaged whole, its norm taken whole).
spw_tensor *clip_grad_norm(spw_ctx *ctx, int32_t n, spw_tensor *const *grads,
                           const int64_t *params, double max_norm,
                           const char *what) {
  if (!ctx)
    return nullptr;
  spw_tensor *out = &ctx->dummy;
  guarded(ctx, what, [&] {
    if (!ctx->grad_clip.declared)
      fail("the model computes a gradient norm but declared no gradient "
           "clipping (spw_declare_grad_clip)");
    if (n < 0 || (n > 0 && !grads))
      fail("%d gradients", n);
    float scale = 1.0f;
    if (!ctx->evaluate_only) {
      const double limit = ctx->overrides.grad_clip.value_or(max_norm);
      // torch's foreach path: the 2-norm of the per-tensor 2-norms, each a
      // float32 as torch's are.
      double sum = 0;
      if (limit > 0)
        for (int32_t i = 0; i < n; ++i) {
          spw_tensor *g = grads[i];
          if (!g || g->dtype != SPW_F32)
            fail("gradient %d is not a float32 tensor", i);
          const int32_t param =
              params && params[i] >= 0 ? int32_t(params[i]) : -1;
          const ParamInfo *p = param >= 0 ? &param_at(ctx, param) : nullptr;
          // The norm of the mean gradient over the data-parallel ranks;
          // under ZeRO of the ranks' shards.
          reduce_grad(ctx, param, g);
          const float ni = p && p->shard_hi >= 0
                               ? zero::grad_norm_of_shards(ctx, *p, g)
                               : grad_norm(ctx, g->as<float>(), g->on_device,
                                           g->numel, 1.0f);
          sum += double(ni) * double(ni);
        }
      scale = finish_clip(ctx, limit, sum);
    }
    out = clip_coefficient_tensor(ctx, scale);
  });
  return out;
}
} // namespace

extern "C" spw_tensor *spw_clip_grad_norm(spw_ctx *ctx, int32_t n,
                                          spw_tensor *const *grads,
                                          double max_norm) {
  return clip_grad_norm(ctx, n, grads, nullptr, max_norm, "spw_clip_grad_norm");
}

extern "C" spw_tensor *spw_clip_grad_norm_params(spw_ctx *ctx, int32_t n,
                                                 spw_tensor *const *grads,
                                                 const int64_t *params,
                                                 double max_norm) {
  return clip_grad_norm(ctx, n, grads, params, max_norm,
                        "spw_clip_grad_norm_params");
}

extern "C" spw_tensor *spw_clip_grad_norm_of(spw_ctx *ctx, int32_t n,
                                             const int64_t *params,
                                             double max_norm) {
  if (!ctx)
    return nullptr;
  spw_tensor *out = &ctx->dummy;
  guarded(ctx, "spw_clip_grad_norm_of", [&] {
    if (!ctx->grad_clip.declared)
      fail("the model computes a gradient norm but declared no gradient "
           "clipping (spw_declare_grad_clip)");
    if (n <= 0 || !params)
      fail("%d parameters", n);
    float scale = 1.0f;
    if (!ctx->evaluate_only) {
      const double limit = ctx->overrides.grad_clip.value_or(max_norm);
      double sum = 0;
      if (limit > 0) {
        const GradClip &c = ctx->grad_clip;
        for (int32_t i = 0; i < n; ++i) {
          const ParamInfo &p = param_at(ctx, int32_t(params[i]));
          const size_t k = size_t(params[i]);
          if (k >= c.part_step.size() || c.part_step[k] != ctx->step)
            fail("the norm of parameter '%s''s gradient was not taken at "
                 "step %lld (spw_grad_norms of its layer must come first)",
                 p.name.c_str(), (long long)ctx->step);
          sum += double(c.part_norm[k]) * double(c.part_norm[k]);
        }
      }
      scale = finish_clip(ctx, limit, sum);
    }
    out = clip_coefficient_tensor(ctx, scale);
  });
  return out;
}

extern "C" void spw_foam(spw_ctx *ctx, int32_t param, spw_tensor *grad,
                         double lr, double beta1, double beta2, double eps,
                         double weight_decay, double alpha) {
  guarded(ctx, "spw_foam", [&] {
    const bool on_device = state_on_device(param_at(ctx, param));
    reduce_grad(ctx, param, grad);
    record_grad(ctx, param, grad, /*host_update=*/!on_device);
    if (ctx->evaluate_only)
      return;
    ParamInfo &p = checked_param(ctx, param, /*foam=*/true);
    AdamWHparams h = effective_adamw(
        ctx, AdamWHparams{lr, beta1, beta2, eps, weight_decay});
    if (h.grad_scale != 1.0)
      fail("parameter '%s': FOAM updates do not take gradient clipping's "
           "coefficient (compile without --grad-clip or with --optimizer "
           "adamw)",
           p.name.c_str());
    const double a = ctx->overrides.foam_alpha.value_or(alpha);
    if (on_device) {
      const float *g;
      if (device_grad(ctx, p, grad, 0, p.value->numel, &g))
        device_update(ctx, p, g, 0, p.value->numel, ctx->step, h, a);
      return;
    }
    if (!check_finite_grad(ctx, p, recorded_grad(p), 0, p.value->numel))
      return;
    foam_update(ctx, p, recorded_grad(p), ctx->step, h, a);
  });
}

extern "C" void spw_adamw_range(spw_ctx *ctx, int32_t param, spw_tensor *grad,
                                int64_t begin, int64_t end, double lr,
                                double beta1, double beta2, double eps,
                                double weight_decay) {
  guarded(ctx, "spw_adamw_range", [&] {
    const bool on_device = state_on_device(param_at(ctx, param));
    reduce_grad(ctx, param, grad);
    record_grad(ctx, param, grad, /*host_update=*/!on_device);
    if (ctx->evaluate_only)
      return;
    ParamInfo &p = checked_param(ctx, param);
    check_range(p, begin, end);
    check_nothing_pending(p, begin, end, "updating");
    AdamWHparams h = effective_adamw(
        ctx, AdamWHparams{lr, beta1, beta2, eps, weight_decay});
    if (on_device) {
      const float *g;
      if (device_grad(ctx, p, grad, begin, end, &g))
        device_update(ctx, p, g + begin, begin, end, ctx->step, h, 0.0);
    } else if (check_finite_grad(ctx, p, recorded_grad(p), begin, end)) {
      adamw_update(ctx, p, recorded_grad(p) + begin, begin, end, ctx->step, h);
    }
    gather_updated(ctx, p, begin, end);
  });
}

extern "C" void spw_adamw_defer(spw_ctx *ctx, int32_t param, spw_tensor *grad,
                                int64_t begin, int64_t end, double lr,
                                double beta1, double beta2, double eps,
                                double weight_decay) {
  guarded(ctx, "spw_adamw_defer", [&] {
    const bool on_device = state_on_device(param_at(ctx, param));
    reduce_grad(ctx, param, grad);
    record_grad(ctx, param, grad, /*host_update=*/!on_device);
    if (ctx->evaluate_only)
      return;
    ParamInfo &p = checked_param(ctx, param);
    check_range(p, begin, end);
    check_nothing_pending(p, begin, end, "deferring the update of");
    PendingAdamW q;
    q.begin = begin;
    q.end = end;
    q.step = ctx->step;
    q.h = effective_adamw(ctx,
                          AdamWHparams{lr, beta1, beta2, eps, weight_decay});
    if (on_device) {
      // The slice stays on the device, in a buffer of an earlier deferral
      // of the same size when there is one.
      const float *g;
      if (!device_grad(ctx, p, grad, begin, end, &g))
        return;
      const int64_t n = end - begin;
      // An offload plan keeps the slice in its GPU arena (a `pending` block).
      if ((q.planned = tiers_pending_grad(ctx, param, begin, end, true))) {
        q.planned_on_device = !ctx->device->host_visible();
        ctx->device->copy(q.planned, g + begin, n * int64_t(sizeof(float)));
        p.pending.push_back(std::move(q));
        return;
      }
      auto spare = std::find_if(p.spare_dev_grads.begin(),
                                p.spare_dev_grads.end(),
                                [&](const auto &s) { return s.second == n; });
      if (spare != p.spare_dev_grads.end()) {
        q.dev_grad = spare->first;
        p.spare_dev_grads.erase(spare);
      } else {
        q.dev_grad = static_cast<float *>(ctx->device->alloc(
            n * int64_t(sizeof(float)), "a deferred gradient"));
      }
      ctx->device->copy(q.dev_grad, g + begin, n * int64_t(sizeof(float)));
      p.pending.push_back(std::move(q));
      return;
    }
    const float *g = recorded_grad(p);
    if (!check_finite_grad(ctx, p, g, begin, end))
      return;
    // An offload plan keeps the slice in its arena (a `pending` block).
    if ((q.planned = tiers_pending_grad(ctx, param, begin, end, false))) {
      std::copy(g + begin, g + end, q.planned);
    } else {
      if (!p.spare_grads.empty()) {
        q.grad = std::move(p.spare_grads.back());
        p.spare_grads.pop_back();
      }
      q.grad.assign(g + begin, g + end);
    }
    p.pending.push_back(std::move(q));
  });
}

extern "C" void spw_adamw_apply_pending(spw_ctx *ctx, int32_t param,
                                        int64_t begin, int64_t end) {
  guarded(ctx, "spw_adamw_apply_pending", [&] {
    if (param < 0 || size_t(param) >= ctx->params.size())
      fail("parameter index %d out of range (%zu parameters declared)", param,
           ctx->params.size());
    if (ctx->evaluate_only)
      return;
    ParamInfo &p = ctx->params[size_t(param)];
    check_range(p, begin, end);
    auto it = std::find_if(p.pending.begin(), p.pending.end(),
                           [&](const PendingAdamW &q) {
                             return q.begin == begin && q.end == end;
                           });
    if (it == p.pending.end()) {
      // Nothing deferred yet (the first step) or already flushed; but a
      // pending update of other elements here means the schedule's ranges
      // disagree.
      check_nothing_pending(p, begin, end, "applying the update of");
      return;
    }
    if (it->step >= ctx->step)
      fail("parameter '%s': the update of [%lld, %lld) deferred at step %lld "
           "is applied at step %lld; a deferred update is applied in a later "
           "step",
           p.name.c_str(), (long long)begin, (long long)end,
           (long long)it->step, (long long)ctx->step);
    apply_pending(ctx, p, *it);
    p.pending.erase(it);
  });
}

extern "C" void spw_adamw_flush(spw_ctx *ctx) {
  guarded(ctx, "spw_adamw_flush", [&] {
    // Each entry leaves the list as it is applied: after a failure part-way
    // a later flush applies only what is still pending, never one twice.
    for (ParamInfo &p : ctx->params)
      while (!p.pending.empty()) {
        apply_pending(ctx, p, p.pending.front());
        p.pending.erase(p.pending.begin());
      }
  });
}
