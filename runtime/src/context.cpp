//===- context.cpp - model description, step tensors, loss, gradients -----===//

#include "context.h"

#include "dist/dist.h"
#include "dist/nccl.h"
#include "dist/zero.h"
#include "spillway/runtime/zero_shard.h"
#include "tiers.h"
#include "trace.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <xxhash.h>

namespace spw {

std::unique_ptr<spw_ctx> make_context() {
  auto ctx = std::make_unique<spw_ctx>();
  ctx->dummy.data = &ctx->dummy_storage;
  // A context computes on the CPU device until the driver starts the run's
  // device (device_start), so it always has one.
  ctx->device = make_cpu_device();
  return ctx;
}

// The device tensor of a host tensor declared on the context: on a
// host-visible device the host copy itself, elsewhere none until
// device_start makes the device's copy.
static std::unique_ptr<spw_tensor> declared_twin(const spw_ctx *ctx,
                                                 const spw_tensor &t) {
  auto d = std::make_unique<spw_tensor>();
  d->dtype = t.dtype;
  d->rank = t.rank;
  std::copy(t.dims, t.dims + t.rank, d->dims);
  d->numel = t.numel;
  d->data = ctx->device->host_visible() ? t.data : nullptr;
  d->on_device = true;
  return d;
}

void clear_step(spw_ctx *ctx) {
  ctx->reduced_grads.clear();
  ctx->step_tensors.clear();
  ctx->device->reset_step();
  ctx->loss = nullptr;
  for (OutputInfo &o : ctx->outputs)
    o.set = false;
}

AdamWHparams effective_adamw(const spw_ctx *ctx, const AdamWHparams &call) {
  AdamWHparams h = call;
  const AdamWOverrides &o = ctx->overrides;
  if (o.lr) h.lr = *o.lr;
  if (o.beta1) h.beta1 = *o.beta1;
  if (o.beta2) h.beta2 = *o.beta2;
  if (o.eps) h.eps = *o.eps;
  if (o.weight_decay) h.weight_decay = *o.weight_decay;
  if (ctx->grad_clip.declared && ctx->grad_clip.step == ctx->step)
    h.grad_scale = double(ctx->grad_clip.scale);
  return h;
}

double effective_grad_clip(const spw_ctx *ctx) {
  if (!ctx->grad_clip.declared)
    return 0;
  return ctx->overrides.grad_clip.value_or(ctx->grad_clip.max_norm);
}

void allocate_declared(spw_ctx *ctx, bool skip_plan_params) {
  auto give = [](spw_tensor &t) {
    if (t.data || t.owned)
      return;
    t.owned = alloc_buffer(t.bytes());
    t.data = t.owned.get();
  };
  for (size_t i = 0; i < ctx->params.size(); ++i) {
    ParamInfo &p = ctx->params[i];
    if (!skip_plan_params || !tiers_hold(ctx, i, SPW_BLOCK_PARAMS))
      give(*p.value);
    p.dev_value = declared_twin(ctx, *p.value);
  }
  for (OutputInfo &o : ctx->outputs) {
    give(*o.value);
    std::memset(o.value->data, 0, size_t(o.value->bytes()));
  }
  ctx->defer_alloc = false;
}

} // namespace spw

using namespace spw;

static void check_name(const char *name, const char *what) {
  if (!name || !*name)
    fail("%s name is empty", what);
}

extern "C" {

void spw_declare_weights(spw_ctx *ctx, int64_t total_bytes) {
  guarded(ctx, "spw_declare_weights", [&] {
    if (total_bytes < 0)
      fail("negative size %lld", (long long)total_bytes);
    ctx->weights_bytes = total_bytes;
  });
}

void spw_declare_state_dict_prefix(spw_ctx *ctx, const char *prefix) {
  guarded(ctx, "spw_declare_state_dict_prefix",
          [&] { ctx->state_dict_prefix = prefix ? prefix : ""; });
}

void spw_declare_param_alias(spw_ctx *ctx, int32_t index, const char *name) {
  guarded(ctx, "spw_declare_param_alias", [&] {
    check_name(name, "parameter alias");
    if (index < 0 || size_t(index) >= ctx->params.size())
      fail("alias '%s' of parameter %d, which is not declared", name, index);
    ctx->params[size_t(index)].aliases.push_back(name);
  });
}

void spw_declare_param_fold(spw_ctx *ctx, int32_t index, const char *source) {
  guarded(ctx, "spw_declare_param_fold", [&] {
    check_name(source, "folded parameter");
    if (index < 0 || size_t(index) >= ctx->params.size())
      fail("fold of '%s' in parameter %d, which is not declared", source,
           index);
    ctx->params[size_t(index)].folded_from = source;
  });
}

int32_t spw_declare_param(spw_ctx *ctx, const char *name, int32_t dtype,
                          int32_t rank, const int64_t *dims, int64_t offset) {
  int32_t index = -1;
  guarded(ctx, "spw_declare_param", [&] {
    check_name(name, "parameter");
    for (const ParamInfo &p : ctx->params)
      if (p.name == name)
        fail("parameter '%s' declared twice", name);
    if (offset < 0)
      fail("parameter '%s': negative weights offset %lld", name,
           (long long)offset);
    ParamInfo p;
    p.name = name;
    p.offset = offset;
    // The driver allocates once the weights file is checked against the
    // declarations (allocate_declared): a bad file is found without
    // touching a buffer sized from the model.
    p.value = make_tensor(dtype, rank, dims, name, !ctx->defer_alloc);
    if (p.value->data)
      std::memset(p.value->data, 0, size_t(p.value->bytes()));
    p.dev_value = declared_twin(ctx, *p.value);
    ctx->params.push_back(std::move(p));
    index = int32_t(ctx->params.size() - 1);
  });
  return index;
}

int32_t spw_declare_input(spw_ctx *ctx, const char *name, int32_t dtype,
                          int32_t rank, const int64_t *dims) {
  int32_t index = -1;
  guarded(ctx, "spw_declare_input", [&] {
    check_name(name, "input");
    for (const InputInfo &in : ctx->inputs)
      if (in.name == name)
        fail("input '%s' declared twice", name);
    InputInfo in;
    in.name = name;
    // The view points into the loaded batches; until then, into zeros (or
    // nowhere, for the driver, which loads every input before a step).
    in.view = make_tensor(dtype, rank, dims, name, !ctx->defer_alloc);
    if (in.view->data)
      std::memset(in.view->data, 0, size_t(in.view->bytes()));
    in.dev_view = declared_twin(ctx, *in.view);
    ctx->inputs.push_back(std::move(in));
    index = int32_t(ctx->inputs.size() - 1);
  });
  return index;
}

int32_t spw_declare_output(spw_ctx *ctx, const char *name, int32_t dtype,
                           int32_t rank, const int64_t *dims) {
  int32_t index = -1;
  guarded(ctx, "spw_declare_output", [&] {
    check_name(name, "output");
    for (const OutputInfo &o : ctx->outputs)
      if (o.name == name)
        fail("output '%s' declared twice", name);
    OutputInfo o;
    o.name = name;
    o.value = make_tensor(dtype, rank, dims, name, !ctx->defer_alloc);
    if (o.value->data)
      std::memset(o.value->data, 0, size_t(o.value->bytes()));
    ctx->outputs.push_back(std::move(o));
    index = int32_t(ctx->outputs.size() - 1);
  });
  return index;
}

int64_t ParamInfo::state_numel() const {
  if (foam_level < 0)
    return value->numel;
  const int64_t cols = value->dims[value->rank - 1];
  const int64_t block = int64_t(1) << foam_level;
  return value->numel / std::max<int64_t>(cols, 1) *
         ((cols + block - 1) / block);
}

std::vector<int64_t> ParamInfo::state_dims() const {
  std::vector<int64_t> d(value->dims, value->dims + value->rank);
  if (foam_level >= 0) {
    const int64_t block = int64_t(1) << foam_level;
    d.back() = (d.back() + block - 1) / block;
  }
  return d;
}

void spw_declare_foam(spw_ctx *ctx, int32_t param, int64_t level,
                      double alpha) {
  guarded(ctx, "spw_declare_foam", [&] {
    if (param < 0 || size_t(param) >= ctx->params.size())
      fail("parameter index %d out of range (%zu parameters declared)", param,
           ctx->params.size());
    ParamInfo &p = ctx->params[size_t(param)];
    if (p.value->rank != 2 || p.value->dtype != SPW_F32)
      fail("parameter '%s' is %s %s; FOAM folds only 2-D f32 weights",
           p.name.c_str(), dtype_name(p.value->dtype),
           p.value->shape().c_str());
    if (level < 0 || level > 16)
      fail("parameter '%s': FOAM level %lld is outside [0, 16]",
           p.name.c_str(), (long long)level);
    if (!(alpha >= 1e-30) || !(alpha <= 1e6))
      fail("parameter '%s': FOAM alpha %g is outside [1e-30, 1e6]",
           p.name.c_str(), alpha);
    if (ctx->tiers)
      fail("parameter '%s': FOAM must be declared before the tiers (its "
           "state size sets the optimizer blocks)",
           p.name.c_str());
    if (!p.adam_m.empty())
      fail("parameter '%s' already has AdamW state", p.name.c_str());
    p.foam_level = int32_t(level);
    p.foam_alpha = alpha;
  });
}

void spw_declare_adamw(spw_ctx *ctx, double lr, double beta1, double beta2,
                       double eps, double weight_decay) {
  guarded(ctx, "spw_declare_adamw", [&] {
    ctx->declared_adamw = AdamWHparams{lr, beta1, beta2, eps, weight_decay};
  });
}

void spw_declare_grad_clip(spw_ctx *ctx, double max_norm) {
  guarded(ctx, "spw_declare_grad_clip", [&] {
    if (!(max_norm > 0 && max_norm <= 1e30))
      fail("max_norm %g: expected a positive finite number", max_norm);
    ctx->grad_clip.declared = true;
    ctx->grad_clip.max_norm = max_norm;
  });
}

void spw_declare_optimizer_shards(spw_ctx *ctx, int32_t ranks, int64_t align) {
  guarded(ctx, "spw_declare_optimizer_shards", [&] {
    if (ranks < 2)
      fail("optimizer state sharded over %d ranks: expected 2 or more", ranks);
    if (align != SPW_ZERO_SHARD_ALIGN && align != SPW_ZERO_SHARD_ALIGN_CLIPPED)
      fail("optimizer shards cut at multiples of %lld elements: expected %d "
           "or %d (with gradient clipping)",
           (long long)align, SPW_ZERO_SHARD_ALIGN,
           SPW_ZERO_SHARD_ALIGN_CLIPPED);
    if (ctx->tiers)
      fail("the optimizer shards are declared before the tiers (they size "
           "the optimizer blocks' members)");
    ctx->declared_shards = ranks;
    ctx->declared_shard_align = align;
  });
}

void spw_declare_gradient_shards(spw_ctx *ctx) {
  guarded(ctx, "spw_declare_gradient_shards", [&] {
    if (ctx->declared_shards <= 0)
      fail("gradient shards declared before the optimizer shards "
           "(spw_declare_optimizer_shards gives the ranks they are cut for)");
    if (ctx->tiers)
      fail("the gradient shards are declared before the tiers (they size "
           "the gradient blocks' members)");
    ctx->gradient_shards = true;
  });
}

void spw_declare_optimizer_state_dtype(spw_ctx *ctx, int32_t dtype) {
  guarded(ctx, "spw_declare_optimizer_state_dtype", [&] {
    if (dtype != SPW_F32 && dtype != SPW_BF16)
      fail("optimizer state dtype %d: AdamW and FOAM state is f32 (%d) or "
           "bf16 (%d)",
           dtype, int(SPW_F32), int(SPW_BF16));
    auto started = [&] {
      for (const ParamInfo &p : ctx->params)
        if (p.dev_m)
          return true;
      return false;
    };
    if (ctx->tiers || started())
      fail("the optimizer state dtype is declared before the tiers and "
           "before the run's device starts (it sets the optimizer blocks' "
           "and the device state's size)");
    for (const ParamInfo &p : ctx->params)
      if (!p.adam_m.empty())
        fail("parameter '%s' already has optimizer state", p.name.c_str());
    ctx->state_bf16 = dtype == SPW_BF16;
  });
}

void spw_declare_bf16_mixed(spw_ctx *ctx) {
  guarded(ctx, "spw_declare_bf16_mixed", [&] { ctx->bf16_mixed = true; });
}

spw_tensor *spw_input(spw_ctx *ctx, int32_t index) {
  if (!ctx)
    return nullptr;
  spw_tensor *t = &ctx->dummy;
  guarded(ctx, "spw_input", [&] {
    if (index < 0 || size_t(index) >= ctx->inputs.size())
      fail("input index %d out of range (%zu inputs declared)", index,
           ctx->inputs.size());
    const InputInfo &in = ctx->inputs[size_t(index)];
    if (!in.dev_view->data && in.dev_view->numel > 0)
      fail("input '%s' is read before the run started its device "
           "(device_start)",
           in.name.c_str());
    t = in.dev_view.get();
  });
  return t;
}

// Reading a parameter with an update still deferred would train on stale
// weights; the schedule applies it before the first read.
static void check_nothing_pending(const ParamInfo &p) {
  if (!p.pending.empty())
    fail("parameter '%s' is read while the update of its elements "
         "[%lld, %lld) deferred at step %lld is still pending "
         "(spw_adamw_apply_pending must come before the read)",
         p.name.c_str(), (long long)p.pending.front().begin,
         (long long)p.pending.front().end, (long long)p.pending.front().step);
}

spw_tensor *spw_param(spw_ctx *ctx, int32_t index) {
  if (!ctx)
    return nullptr;
  spw_tensor *t = &ctx->dummy;
  guarded(ctx, "spw_param", [&] {
    if (index < 0 || size_t(index) >= ctx->params.size())
      fail("parameter index %d out of range (%zu parameters declared)", index,
           ctx->params.size());
    const ParamInfo &p = ctx->params[size_t(index)];
    check_nothing_pending(p);
    // An offload plan's parameters have no device copy of their own; the
    // step binds the block's GPU-tier copy (spw_bind) before the layer's
    // tasks read it.
    if (!p.dev_value->data && p.dev_value->numel > 0)
      fail("parameter '%s' is read while no copy of it is bound (the offload "
           "plan binds its layer's block first)",
           p.name.c_str());
    t = p.dev_value.get();
  });
  return t;
}

spw_tensor *spw_param_work(spw_ctx *ctx, int32_t index) {
  if (!ctx)
    return nullptr;
  spw_tensor *t = &ctx->dummy;
  guarded(ctx, "spw_param_work", [&] {
    // A bf16-mixed plan's params block holds the working copy (its master
    // block the value): the copy bound by spw_bind, which every update
    // writes. The value need not be bound for the read.
    if (index >= 0 && size_t(index) < ctx->params.size() &&
        tiers_hold(ctx, size_t(index), SPW_BLOCK_PARAMS) &&
        tiers_bf16_params(ctx)) {
      ParamInfo &p = ctx->params[size_t(index)];
      check_nothing_pending(p);
      if (!p.dev_work || p.work_owned || !p.dev_work->data)
        fail("parameter '%s' is read while no copy of its bf16 working copy "
             "is bound (the offload plan binds its layer's params block "
             "first)",
             p.name.c_str());
      t = p.dev_work.get();
      return;
    }
    spw_tensor *value = spw_param(ctx, index);
    if (!ctx->error.empty())
      return;
    ParamInfo &p = ctx->params[size_t(index)];
    if (p.value->dtype != SPW_F32)
      fail("parameter '%s' is %s; only an f32 parameter has a bf16 working "
           "copy",
           p.name.c_str(), dtype_name(p.value->dtype));
    // An fp32 plan's blocks would need room for the copy the plan does not
    // count: the compiler reads a held parameter with spw_param.
    if (tiers_hold(ctx, size_t(index), SPW_BLOCK_PARAMS))
      fail("parameter '%s' is held by the offload plan's blocks, which keep "
           "no bf16 working copy (read it with spw_param and a cast)",
           p.name.c_str());
    Device &d = *ctx->device;
    if (!p.dev_work || !p.work_owned) {
      auto w = std::make_unique<spw_tensor>();
      w->dtype = SPW_BF16;
      w->rank = value->rank;
      std::copy(value->dims, value->dims + value->rank, w->dims);
      w->numel = value->numel;
      w->on_device = true;
      w->data = d.alloc(w->bytes(), ("bf16 working copy of '" + p.name + "'")
                                        .c_str());
      p.dev_work = std::move(w);
      p.work_owned = true;
      p.work_stale = true;
    }
    if (p.work_stale) {
      spw_tensor *ins[] = {value}, *outs[] = {p.dev_work.get()};
      entry_point(Op::cast)(ctx, ins, outs, nullptr, nullptr);
      p.work_stale = false;
    }
    t = p.dev_work.get();
  });
  return t;
}

spw_tensor *spw_alloc(spw_ctx *ctx, int32_t dtype, int32_t rank,
                      const int64_t *dims) {
  if (!ctx)
    return nullptr;
  spw_tensor *t = &ctx->dummy;
  guarded(ctx, "spw_alloc", [&] {
    t = alloc_step_tensor(ctx, dtype, rank, dims, "tensor");
  });
  return t;
}

spw_tensor *spw_constant(spw_ctx *ctx, int32_t dtype, int32_t rank,
                         const int64_t *dims, const void *data) {
  if (!ctx)
    return nullptr;
  spw_tensor *t = &ctx->dummy;
  guarded(ctx, "spw_constant", [&] {
    // The device keeps one copy per distinct constant (see spw_ctx).
    auto c = make_tensor(dtype, rank, dims, "constant", /*allocate=*/false);
    if (c->numel > 0 && !data)
      fail("data is NULL for a constant of shape %s", c->shape().c_str());
    const int64_t bytes = c->bytes();
    const auto key = std::make_tuple(
        data, bytes, bytes ? uint64_t(XXH3_64bits(data, size_t(bytes))) : 0);
    void *&dev = ctx->device_constants[key];
    if (!dev) {
      dev = ctx->device->alloc(bytes, "constant");
      ctx->device->upload(dev, data, bytes);
    }
    c->data = dev;
    c->on_device = true; // not releasable: the copy is kept
    ctx->step_tensors.push_back(std::move(c));
    t = ctx->step_tensors.back().get();
  });
  return t;
}

spw_tensor *spw_view(spw_ctx *ctx, spw_tensor *x, int32_t dtype,
                     int32_t rank, const int64_t *dims) {
  if (!ctx)
    return nullptr;
  spw_tensor *t = &ctx->dummy;
  guarded(ctx, "spw_view", [&] {
    auto v = make_tensor(dtype, rank, dims, "view", /*allocate=*/false);
    if (!x)
      fail("view of a NULL tensor");
    if (x->dtype != dtype || x->numel != v->numel)
      fail("a view %s %s of a %s %s tensor: the dtype and the element count "
           "must be the same",
           dtype_name(dtype), v->shape().c_str(), dtype_name(x->dtype),
           x->shape().c_str());
    if (!x->data && x->numel > 0)
      fail("view %s of a released tensor %s", v->shape().c_str(),
           x->shape().c_str());
    v->data = x->data;
    v->on_device = x->on_device; // not releasable: the memory is x's
    ctx->step_tensors.push_back(std::move(v));
    t = ctx->step_tensors.back().get();
  });
  return t;
}

void spw_release(spw_ctx *ctx, spw_tensor *t) {
  guarded(ctx, "spw_release", [&] {
    // Only step tensors: parameters, inputs and outputs keep their data.
    if (!t || !t->data || !t->releasable)
      return;
    if (t->on_device)
      ctx->device->step_free(t->data);
    t->owned.reset();
    t->data = nullptr;
  });
}

void spw_set_loss(spw_ctx *ctx, spw_tensor *loss) {
  guarded(ctx, "spw_set_loss", [&] {
    if (!loss)
      fail("loss tensor is NULL");
    if (loss->dtype != SPW_F32 || loss->numel != 1)
      fail("the loss must be a float32 scalar, got %s %s",
           dtype_name(loss->dtype), loss->shape().c_str());
    ctx->loss = loss;
  });
}

void spw_set_output(spw_ctx *ctx, int32_t index, spw_tensor *value) {
  guarded(ctx, "spw_set_output", [&] {
    if (index < 0 || size_t(index) >= ctx->outputs.size())
      fail("output index %d out of range (%zu outputs declared)", index,
           ctx->outputs.size());
    OutputInfo &o = ctx->outputs[size_t(index)];
    if (!value)
      fail("output '%s': tensor is NULL", o.name.c_str());
    const spw_tensor &v = *o.value;
    bool same = value->dtype == v.dtype && value->rank == v.rank;
    for (int i = 0; same && i < v.rank; ++i)
      same = value->dims[i] == v.dims[i];
    if (!same)
      fail("output '%s' is %s %s, but it was declared %s %s", o.name.c_str(),
           dtype_name(value->dtype), value->shape().c_str(),
           dtype_name(v.dtype), v.shape().c_str());
    if (v.numel > 0)
      read_tensor(ctx, *value, v.data);
    o.set = true;
  });
}

} // extern "C"

namespace spw {
void divide_on_device(spw_ctx *ctx, float *x, int64_t n, float d) {
  const int64_t dims[1] = {n};
  auto v = make_tensor(SPW_F32, 1, dims, "gradient", /*allocate=*/false);
  v->data = x;
  v->on_device = true;
  spw_tensor *divisor =
      alloc_step_tensor(ctx, SPW_F32, 0, dims, "the ranks' count");
  ctx->device->upload(divisor->data, &d, sizeof d);
  spw_tensor *ins[] = {v.get(), divisor}, *outs[] = {v.get()};
  entry_point(Op::div)(ctx, ins, outs, nullptr, nullptr);
  if (ctx->failed())
    throw Error(ctx->error);
}

void reduce_mean(spw_ctx *ctx, float *data, bool on_device, int64_t n,
                 const std::string &what) {
  const int64_t t0 = trace::enabled() ? trace::now_us() : -1;
  struct Span {
    int64_t t0;
    const std::string &what;
    int64_t bytes;
    ~Span() {
      if (t0 >= 0)
        trace::span(trace::Lane::Compute, 0, "allreduce " + what, t0,
                    trace::now_us(),
                    format("\"bytes\": %lld", (long long)bytes));
    }
  } span{t0, what, n * int64_t(sizeof(float))};
  // The sum over ranks, then one float32 division: the micro-batch mean's
  // arithmetic (a sum of the replicas' gradients divided by their count).
  const float ranks = float(dist::size());
  auto mean = [&](float *x, int64_t m) {
    dist::allreduce_sum(x, m);
    for (int64_t i = 0; i < m; ++i)
      x[i] = x[i] / ranks;
  };
  if (!on_device || ctx->device->host_visible()) {
    mean(data, n);
    return;
  }
  // Device memory with NCCL (--collectives nccl): summed in place on the
  // device's stream, then the same float32 division by the device's div
  // kernel. Waited for, so the span and the measured time are the
  // average's.
  if (void *stream = ctx->device->collective_stream();
      stream && nccl::active()) {
    const auto t0 = std::chrono::steady_clock::now();
    nccl::allreduce_sum(data, n, stream);
    divide_on_device(ctx, data, n, ranks);
    ctx->device->synchronize();
    dist::note_traffic(
        n * int64_t(sizeof(float)),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count());
    return;
  }
  // Device memory: through a bounded host buffer, in order.
  constexpr int64_t kChunk = int64_t(1) << 22;
  std::vector<float> host(size_t(std::min(n, kChunk)));
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t m = std::min(kChunk, n - at);
    const int64_t bytes = m * int64_t(sizeof(float));
    ctx->device->download(host.data(), data + at, bytes);
    mean(host.data(), m);
    ctx->device->upload(data + at, host.data(), bytes);
  }
}

void reduce_grad(spw_ctx *ctx, int32_t param, spw_tensor *grad) {
  // NCCL of one rank too (--collectives nccl alone): its path runs whole.
  if ((!dist::active() && !nccl::active()) || ctx->evaluate_only || !grad)
    return;
  ParamInfo *p = param >= 0 && size_t(param) < ctx->params.size()
                     ? &ctx->params[size_t(param)]
                     : nullptr;
  if (p && p->reduced_step == ctx->step)
    return;
  auto &done = ctx->reduced_grads;
  if (std::find(done.begin(), done.end(), grad) == done.end()) {
    if (grad->dtype != SPW_F32)
      fail("the gradient of %s is %s; data-parallel training averages "
           "float32 gradients",
           p ? format("'%s'", p->name.c_str()).c_str() : "a parameter",
           dtype_name(grad->dtype));
    // ZeRO: each rank needs the mean of its shard only (clipping's norm
    // too: zero::grad_norm_of_shards); a gradient whose parameter is not
    // known (spw_clip_grad_norm) is averaged whole.
    if (p && p->shard_hi >= 0)
      zero::reduce_scatter_mean(ctx, *p, grad);
    else
      reduce_mean(ctx, grad->as<float>(), grad->on_device, grad->numel,
                  p ? format("'%s'", p->name.c_str()) : "a clipped gradient");
    done.push_back(grad);
  }
  if (p)
    p->reduced_step = ctx->step;
}

// Copies `grad` into the parameter's recorded gradient after checking it.
void record_grad(spw_ctx *ctx, int32_t param, const spw_tensor *grad,
                 bool host_update) {
  if (param < 0 || size_t(param) >= ctx->params.size())
    fail("parameter index %d out of range (%zu parameters declared)", param,
         ctx->params.size());
  ParamInfo &p = ctx->params[size_t(param)];
  if (!grad)
    fail("gradient of '%s' is NULL", p.name.c_str());
  const spw_tensor &v = *p.value;
  bool same = grad->dtype == v.dtype && grad->rank == v.rank;
  for (int i = 0; same && i < v.rank; ++i)
    same = grad->dims[i] == v.dims[i];
  if (!same)
    fail("gradient of '%s' is %s %s, but the parameter is %s %s",
         p.name.c_str(), dtype_name(grad->dtype), grad->shape().c_str(),
         dtype_name(v.dtype), v.shape().c_str());
  // Only host code reads the copy: an update on host state, and the
  // gradient check (which evaluates). An update on the device skips it.
  if (grad->on_device && !ctx->evaluate_only && !host_update)
    return;
  p.grad.resize(size_t(grad->bytes()));
  if (!p.grad.empty())
    read_tensor(ctx, *grad, p.grad.data());
}

spw_tensor *alloc_step_tensor(spw_ctx *ctx, int32_t dtype, int32_t rank,
                              const int64_t *dims, const char *what) {
  // The shape checks of make_tensor, without its host buffer.
  auto t = make_tensor(dtype, rank, dims, what, /*allocate=*/false);
  // Host memory is the device's: a large tensor is checked against what
  // there is, as make_tensor checks host buffers (with overcommit the
  // allocation would succeed and the kernel writing it meet the OOM killer).
  if (ctx->device->host_visible() && t->bytes() >= kCheckedAllocation)
    check_memory(t->bytes(), format("%s %s %s needs", what,
                                    dtype_name(dtype),
                                    shape_str(dims, rank).c_str()));
  t->data = ctx->device->step_alloc(t->bytes(), what);
  t->on_device = true;
  t->releasable = true;
  ctx->step_tensors.push_back(std::move(t));
  return ctx->step_tensors.back().get();
}

void read_tensor(spw_ctx *ctx, const spw_tensor &t, void *host) {
  if (t.bytes() == 0)
    return;
  if (!t.on_device) {
    std::memmove(host, t.data, size_t(t.bytes()));
    return;
  }
  ctx->device->download(host, t.data, t.bytes());
}

static std::unique_ptr<spw_tensor> device_twin(const spw_tensor &t,
                                               void *data) {
  auto d = std::make_unique<spw_tensor>();
  d->dtype = t.dtype;
  d->rank = t.rank;
  std::copy(t.dims, t.dims + t.rank, d->dims);
  d->numel = t.numel;
  d->data = data;
  d->on_device = true;
  return d;
}

void device_start(spw_ctx *ctx, std::unique_ptr<Device> device) {
  // The declarations' device goes (nothing of the step lives on it yet):
  // the constants it holds with it.
  ctx->device_constants.clear();
  for (ParamInfo &p : ctx->params) {
    p.dev_work.reset(); // the old device's memory, freed with it
    p.work_owned = false;
  }
  ctx->device = std::move(device);
  Device &d = *ctx->device;
  // A host-visible device (the CPU) computes on the host copies in place:
  // no second copy of the parameters or inputs. An offload plan's members
  // get no device copy here: their blocks' tier copies are bound instead
  // (spw_bind), and the optimizer state lives in the optimizer blocks.
  const bool in_place = d.host_visible();
  for (size_t i = 0; i < ctx->params.size(); ++i) {
    ParamInfo &p = ctx->params[i];
    const std::string what = "parameter '" + p.name + "'";
    void *w = nullptr;
    if (!tiers_hold(ctx, i, SPW_BLOCK_PARAMS))
      w = in_place ? p.value->data : d.alloc(p.value->bytes(), what.c_str());
    p.dev_value = device_twin(*p.value, w);
    // On host-visible memory the update runs on the host state (adam_m,
    // adam_v), as it always has on the CPU; but bf16 state is the device's
    // there too (adam_m and adam_v stay float32, for checkpoints).
    if (p.value->dtype == SPW_F32 && !ctx->outputs.size() &&
        (!in_place || ctx->state_bf16) &&
        !tiers_hold(ctx, i, SPW_BLOCK_OPTIMIZER)) {
      const int64_t sb = state_bytes(ctx, p);
      const std::string ms = "optimizer state of '" + p.name + "'";
      p.dev_m = {d.alloc(sb, ms.c_str()), ctx->state_bf16};
      p.dev_v = {d.alloc(sb, ms.c_str()), ctx->state_bf16};
    }
  }
  for (InputInfo &in : ctx->inputs) {
    const int64_t bytes = in.view->bytes() * in.num_batches;
    const std::string what = "input '" + in.name + "'";
    in.dev_batches =
        in_place ? in.batches.get() : d.alloc(bytes, what.c_str());
    d.upload(in.dev_batches, in.batches.get(), bytes);
    in.dev_view = device_twin(*in.view, in.dev_batches);
  }
  device_push(ctx);
}

int64_t state_bytes(const spw_ctx *ctx, const ParamInfo &p) {
  return p.state_local_numel() * (ctx->state_bf16 ? 2 : 4);
}

void upload_state(Device &d, StateMem dev, const std::vector<float> &host) {
  const int64_t n = int64_t(host.size());
  if (!dev.half)
    return d.upload(dev.p, host.data(), n * 4);
  std::vector<bf16> rounded(host.size());
  round_to_bf16(host.data(), rounded.data(), n);
  d.upload(dev.p, rounded.data(), n * 2);
}

void download_state(Device &d, std::vector<float> &host, StateMem dev) {
  const int64_t n = int64_t(host.size());
  if (!dev.half)
    return d.download(host.data(), dev.p, n * 4);
  std::vector<bf16> stored(host.size());
  d.download(stored.data(), dev.p, n * 2);
  for (int64_t i = 0; i < n; ++i)
    host[size_t(i)] = to_float(stored[size_t(i)]);
}

// An offload plan's members are copied to and from their blocks by
// tiers_scatter / tiers_gather, never here.
void device_push_param(spw_ctx *ctx, size_t param) {
  ParamInfo &p = ctx->params[param];
  Device &d = *ctx->device;
  param_written(p);
  if (!tiers_hold(ctx, param, SPW_BLOCK_PARAMS))
    d.upload(p.dev_value->data, p.value->data, p.value->bytes());
  if (!p.dev_m)
    return;
  const int64_t sb = state_bytes(ctx, p);
  p.state_live = !p.adam_m.empty();
  if (p.state_live) {
    upload_state(d, p.dev_m, p.adam_m);
    upload_state(d, p.dev_v, p.adam_v);
  } else {
    d.fill(p.dev_m.p, 0, sb);
    d.fill(p.dev_v.p, 0, sb);
  }
}

void device_push(spw_ctx *ctx) {
  for (size_t i = 0; i < ctx->params.size(); ++i)
    device_push_param(ctx, i);
  ctx->device->synchronize();
}

void device_pull(spw_ctx *ctx) {
  Device &d = *ctx->device;
  for (size_t i = 0; i < ctx->params.size(); ++i) {
    ParamInfo &p = ctx->params[i];
    if (!tiers_hold(ctx, i, SPW_BLOCK_PARAMS))
      d.download(p.value->data, p.dev_value->data, p.value->bytes());
    if (!p.state_live)
      continue;
    p.adam_m.resize(size_t(p.state_local_numel()));
    p.adam_v.resize(size_t(p.state_local_numel()));
    download_state(d, p.adam_m, p.dev_m);
    download_state(d, p.adam_v, p.dev_v);
  }
}
} // namespace spw

extern "C" void spw_param_grad(spw_ctx *ctx, int32_t param, spw_tensor *grad) {
  guarded(ctx, "spw_param_grad",
          [&] { record_grad(ctx, param, grad, /*host_update=*/false); });
}
