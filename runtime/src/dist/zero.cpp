//===- zero.cpp - ZeRO-1: the optimizer state sharded over the ranks ------===//
//
// zero.h says what; this is how. Shards are contiguous element ranges cut
// at multiples of 64 elements (spillway/runtime/zero_shard.h, which the
// cost model sizes each rank's state by), so a parameter of at most 64
// elements lives on the last rank, and one of fewer than 64 per rank on a
// few ranks.
//
//===----------------------------------------------------------------------===//

#include "dist/zero.h"

#include "dist/dist.h"
#include "dist/nccl.h"
#include "spillway/runtime/zero_shard.h"
#include "tiers.h"
#include "trace.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace spw::zero {
namespace {

// Where shards are cut (start): 64 elements, or the norm's blocks when the
// model clips its gradients.
int64_t g_align = SPW_ZERO_SHARD_ALIGN;

// Every rank's count and displacement of elements [begin, end) of p:
// each rank's shard of them, relative to `begin`.
void range_layout(const ParamInfo &p, int64_t begin, int64_t end,
                  std::vector<int64_t> &counts, std::vector<int64_t> &displs) {
  const int n = dist::size();
  counts.assign(size_t(n), 0);
  displs.assign(size_t(n), 0);
  for (int r = 0; r < n; ++r) {
    const Shard s = shard_of(p, r);
    const int64_t lo = std::max(begin, s.first), hi = std::min(end, s.last);
    if (lo < hi) {
      counts[size_t(r)] = hi - lo;
      displs[size_t(r)] = lo - begin;
    }
  }
}

// A span on the compute lane, which the collective blocks (--trace).
struct Span {
  int64_t t0;
  std::string name;
  int64_t bytes;
  Span(std::string what, int64_t b)
      : t0(trace::enabled() ? trace::now_us() : -1), name(std::move(what)),
        bytes(b) {}
  ~Span() {
    if (t0 >= 0)
      trace::span(trace::Lane::Compute, 0, name, t0, trace::now_us(),
                  format("\"bytes\": %lld", (long long)bytes));
  }
};

// The memory the update wrote: the device's copy of the values (the host
// copy itself on a device whose memory is the host's).
float *values(const ParamInfo &p) {
  const spw_tensor *t = p.dev_value ? p.dev_value.get() : p.value.get();
  if (!t->data)
    fail("parameter '%s' has no values to gather (the device was not "
         "started)",
         p.name.c_str());
  return static_cast<float *>(t->data);
}

} // namespace

Shard shard_of(int64_t n, int r, int ranks, int64_t align) {
  return {spw_zero_shard_cut(n, r, ranks, align),
          spw_zero_shard_cut(n, r + 1, ranks, align)};
}

int64_t slot_numel(const spw_ctx *ctx, const ParamInfo &p) {
  if (ctx->declared_shards <= 0)
    return p.state_numel();
  return spw_zero_shard_slot(p.state_numel(), ctx->declared_shards,
                             ctx->declared_shard_align);
}

Shard shard_of(const ParamInfo &p, int r) {
  return shard_of(p.state_numel(), r, dist::size(), g_align);
}

std::string unsupported(const spw_ctx *ctx) {
  // (One process keeps the whole state: one shard, the plan as it is.)
  if (has_tiers(ctx) && ctx->declared_shards <= 0 && dist::size() > 1)
    return format(
        "--zero 1 shards the optimizer state, but this executable's offload "
        "plan keeps the whole state in its optimizer blocks: run it without "
        "--zero, or recompile with spillwayc --zero 1 --ranks %d (this "
        "job's ranks), which cuts the blocks for them",
        dist::size());
  if (ctx->declared_shards > 0 && ctx->declared_shards != dist::size())
    return format(
        "this executable's offload plan holds one rank's shard of the "
        "optimizer state%s of %d ranks (spillwayc --zero %d --ranks %d), but "
        "this job has %d: run it under %s, or recompile %s",
        ctx->gradient_shards ? " and of the gradients" : "",
        ctx->declared_shards, cut_stage(ctx), ctx->declared_shards,
        dist::size(), dist::launch_command(ctx->declared_shards).c_str(),
        dist::size() == 1 ? "without --zero for one process"
                          : format("with --ranks %d", dist::size()).c_str());
  for (const ParamInfo &p : ctx->params)
    if (p.foam_level >= 0)
      return format("--zero 1 shards AdamW's state, but parameter '%s' is "
                    "updated by FOAM (spillwayc --optimizer foam), whose "
                    "state is folded already: run it without --zero, or "
                    "compile with --optimizer adamw",
                    p.name.c_str());
  return "";
}

void start(spw_ctx *ctx) {
  if (!active(ctx))
    return;
  if (const std::string why = unsupported(ctx); !why.empty())
    fail("%s", why.c_str());
  g_align = ctx->grad_clip.declared ? SPW_ZERO_SHARD_ALIGN_CLIPPED
                                    : SPW_ZERO_SHARD_ALIGN;
  if (ctx->declared_shards > 0 && ctx->declared_shard_align != g_align)
    fail("the offload plan's optimizer shards are cut at multiples of %lld "
         "elements, but this model %s: %lld (the compiler and the runtime "
         "disagree)",
         (long long)ctx->declared_shard_align,
         ctx->grad_clip.declared ? "clips its gradients" : "does not clip",
         (long long)g_align);
  for (ParamInfo &p : ctx->params) {
    if (p.value->dtype != SPW_F32)
      continue; // no optimizer state
    const Shard s = shard_of(p, dist::rank());
    p.shard_lo = s.first;
    p.shard_hi = s.last;
  }
}

bool exchanges_on_device(const spw_ctx *ctx) {
  Device &d = *ctx->device;
  return !d.host_visible() && d.collective_stream() && nccl::active();
}

void reduce_scatter_mean(spw_ctx *ctx, ParamInfo &p, spw_tensor *grad,
                         bool wait) {
  const int64_t n = p.value->numel;
  if (grad->numel != n || p.shard_hi < 0)
    fail("the gradient of '%s' has %lld elements, the parameter %lld "
         "(sharded: %s)",
         p.name.c_str(), (long long)grad->numel, (long long)n,
         p.shard_hi < 0 ? "no" : "yes");
  Span span("reduce-scatter '" + p.name + "'", n * int64_t(sizeof(float)));
  std::vector<int64_t> counts, displs;
  range_layout(p, 0, n, counts, displs);
  const int64_t first = p.shard_lo, mine = p.shard_hi - p.shard_lo;
  std::vector<float> out(static_cast<size_t>(mine));
  const float ranks = float(dist::size());
  Device &d = *ctx->device;
  // The sum over ranks, then one float32 division: the mean's arithmetic
  // of the unsharded average (reduce_mean), so the same bits.
  if (!grad->on_device || d.host_visible()) {
    float *g = grad->as<float>();
    dist::reduce_scatter_sum(g, out.data(), counts);
    for (int64_t i = 0; i < mine; ++i)
      g[first + i] = out[size_t(i)] / ranks;
    return;
  }
  // Device memory with NCCL: each rank's shard summed into its place on
  // its rank (nccl.h), then the same float32 division by the div kernel.
  // Waited for, so the span and the measured time are the exchange's.
  if (void *stream = d.collective_stream(); stream && nccl::active()) {
    const auto t0 = std::chrono::steady_clock::now();
    float *g = grad->as<float>();
    nccl::reduce_scatter_sum(g, counts, displs, stream);
    if (mine > 0)
      divide_on_device(ctx, g + first, mine, ranks);
    if (!wait) {
      dist::note_zero_traffic(n * int64_t(sizeof(float)), 0, 0.0);
      return;
    }
    d.synchronize();
    dist::note_zero_traffic(
        n * int64_t(sizeof(float)), 0,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count());
    return;
  }
  // Device memory: the whole gradient through a host copy (MPI's
  // reduce-scatter takes the whole vector at once).
  std::vector<float> host(static_cast<size_t>(n));
  d.download(host.data(), grad->data, n * int64_t(sizeof(float)));
  dist::reduce_scatter_sum(host.data(), out.data(), counts);
  for (float &x : out)
    x = x / ranks;
  if (mine > 0)
    d.upload(grad->as<float>() + first, out.data(),
             mine * int64_t(sizeof(float)));
}

std::shared_ptr<dist::ReduceScatter> exchange_for(const ParamInfo &p) {
  const int64_t n = p.value->numel;
  if (p.shard_hi < 0)
    fail("parameter '%s' is not sharded (zero::start)", p.name.c_str());
  // Host memory, checked as alloc_step_tensor checks a large step tensor
  // there (the sum it replaces).
  if (n * int64_t(sizeof(float)) >= kCheckedAllocation)
    check_memory(n * int64_t(sizeof(float)),
                 format("the gradient sum of '%s' (reduce-scattered) needs",
                        p.name.c_str()));
  auto job = std::make_shared<dist::ReduceScatter>();
  std::vector<int64_t> displs;
  range_layout(p, 0, n, job->counts, displs);
  job->x.resize(size_t(n));
  job->out.resize(size_t(p.shard_hi - p.shard_lo));
  job->name = "'" + p.name + "'";
  return job;
}

std::function<void()>
start_reduce_scatter_mean(spw_ctx *ctx, ParamInfo &p, spw_tensor *grad,
                          std::shared_ptr<dist::ReduceScatter> job) {
  const int64_t n = p.value->numel;
  if (grad->numel != n || int64_t(job->x.size()) != n)
    fail("the gradient of '%s' has %lld elements, the parameter %lld",
         p.name.c_str(), (long long)grad->numel, (long long)n);
  Device &d = *ctx->device;
  if (!grad->on_device || d.host_visible()) {
    if (grad->data != job->x.data())
      fail("the gradient sum of '%s' is not the exchange's buffer",
           p.name.c_str());
  } else {
    d.download(job->x.data(), grad->data, n * int64_t(sizeof(float)));
  }
  const int64_t bytes = n * int64_t(sizeof(float));
  dist::Ticket ticket = 0;
  if (dist::exchange_thread()) {
    ticket = dist::start_reduce_scatter_sum(job);
  } else {
    // It runs here: the compute lane's span, as reduce_scatter_mean's.
    Span span("reduce-scatter '" + p.name + "'", bytes);
    ticket = dist::start_reduce_scatter_sum(job);
  }
  return [&p, job = std::move(job), ticket, bytes] {
    if (ticket) {
      Span span("wait for the reduce-scatter of '" + p.name + "'", bytes);
      dist::finish(ticket);
    }
    // reduce_scatter_mean's arithmetic: the sum over ranks, then one
    // float32 division.
    const float ranks = float(dist::size());
    for (float &x : job->out)
      x = x / ranks;
  };
}

float grad_norm_of_shards(spw_ctx *ctx, const ParamInfo &p,
                          const spw_tensor *grad, float divisor) {
  const int64_t n = p.value->numel;
  if (grad->numel != n)
    fail("parameter '%s': its gradient has %lld elements, not %lld",
         p.name.c_str(), (long long)grad->numel, (long long)n);
  return grad_norm_of_shard(ctx, p, grad->as<float>() + p.shard_lo,
                            grad->on_device, divisor);
}

float grad_norm_of_shard(spw_ctx *ctx, const ParamInfo &p, const float *shard,
                         bool on_device, float divisor) {
  constexpr int64_t B = SPW_ZERO_SHARD_ALIGN_CLIPPED;
  const int64_t n = p.value->numel;
  const int64_t blocks = (n + B - 1) / B;
  if (g_align != B)
    fail("parameter '%s': its shards are not cut at the norm's blocks",
         p.name.c_str());
  // This rank's blocks, then every rank's (a shard of whole blocks: the
  // last may end at n).
  std::vector<double> part(size_t(blocks), 0.0);
  const int64_t first = p.shard_lo / B;
  std::vector<double> mine = block_sums_of_squares(
      ctx, shard, on_device, p.shard_hi - p.shard_lo, divisor);
  std::copy(mine.begin(), mine.end(), part.begin() + first);
  std::vector<int64_t> counts(size_t(dist::size()), 0),
      displs(size_t(dist::size()), 0);
  for (int r = 0; r < dist::size(); ++r) {
    const Shard s = shard_of(p, r);
    if (s.size() > 0) {
      displs[size_t(r)] = s.first / B;
      counts[size_t(r)] = (s.last + B - 1) / B - s.first / B;
    }
  }
  dist::allgather_in_place(part.data(), counts, displs);
  double total = 0;
  for (double x : part)
    total += x;
  return float(std::sqrt(total));
}

namespace {
// Every rank's elements [begin, end) of p (its shard's) to every rank, in
// place at w (element `begin`): f32 values or bf16 working copies.
template <class T>
void gather_elements(spw_ctx *ctx, const ParamInfo &p, int64_t begin,
                     int64_t end, T *w, bool host, const char *what) {
  const int64_t bytes = (end - begin) * int64_t(sizeof(T));
  Span span("all-gather '" + p.name + "'" + what, bytes);
  std::vector<int64_t> counts, displs;
  range_layout(p, begin, end, counts, displs);
  Device &d = *ctx->device;
  void *stream = host ? nullptr : d.collective_stream();
  if (host || d.host_visible()) {
    dist::allgather_in_place(w, counts, displs);
  } else if (stream && nccl::active()) {
    // Each rank's updated shard broadcast from it, in place (nccl.h).
    const auto t0 = std::chrono::steady_clock::now();
    nccl::allgather(w, counts, displs, stream);
    d.synchronize();
    dist::note_zero_traffic(
        0, bytes,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count());
  } else {
    std::vector<T> h(size_t(end - begin));
    d.download(h.data(), w, bytes);
    dist::allgather_in_place(h.data(), counts, displs);
    d.upload(w, h.data(), bytes);
  }
}
} // namespace

void gather_values(spw_ctx *ctx, ParamInfo &p, int64_t begin, int64_t end,
                   float *at, bool host) {
  if (p.shard_hi < 0 || begin >= end || !dist::active())
    return;
  gather_elements(ctx, p, begin, end, at ? at : values(p) + begin, host, "");
  param_written(p);
}

void gather_work(spw_ctx *ctx, const ParamInfo &p, int64_t begin, int64_t end,
                 bf16 *at, bool host) {
  if (p.shard_hi < 0 || begin >= end || !dist::active())
    return;
  gather_elements(ctx, p, begin, end, reinterpret_cast<uint16_t *>(at), host,
                  " (bf16)");
}

std::vector<char> state_present(spw_ctx *ctx) {
  const size_t np = ctx->params.size();
  std::vector<double> has(np, 0.0);
  for (size_t i = 0; i < np; ++i)
    has[i] = ctx->params[i].adam_m.empty() ? 0.0 : 1.0;
  dist::allreduce_sum(has.data(), int64_t(np));
  std::vector<char> out(np);
  for (size_t i = 0; i < np; ++i)
    out[i] = has[i] > 0.0 && ctx->params[i].shard_hi >= 0;
  return out;
}

void gather_moment(const ParamInfo &p, bool v, std::vector<float> &out) {
  const std::vector<float> &mine = v ? p.adam_v : p.adam_m;
  const int64_t n = p.state_local_numel();
  if (int64_t(mine.size()) != n)
    fail("parameter '%s': this rank holds %zu moment elements of its "
         "shard's %lld",
         p.name.c_str(), mine.size(), (long long)n);
  std::vector<int64_t> counts, displs;
  range_layout(p, 0, p.state_numel(), counts, displs);
  out.clear();
  if (dist::rank() == 0)
    out.resize(size_t(p.state_numel()));
  dist::gather_to_root(mine.data(), n, out.data(), counts, displs);
}

void gather_to_root_in_pieces(
    const ParamInfo &p,
    const std::function<void(int64_t, int64_t, float *)> &read,
    const std::function<void(int64_t, int64_t, const float *)> &emit) {
  constexpr int64_t kPiece = int64_t(1) << 20;
  const int64_t n = p.state_numel();
  std::vector<int64_t> counts, displs;
  std::vector<float> mine, out;
  for (int64_t b = 0; b < n; b += kPiece) {
    const int64_t e = std::min(n, b + kPiece);
    range_layout(p, b, e, counts, displs);
    const int64_t lo = std::max(b, p.shard_lo), hi = std::min(e, p.shard_hi);
    const int64_t count = std::max<int64_t>(0, hi - lo);
    mine.resize(size_t(count));
    if (count)
      read(lo - p.shard_lo, count, mine.data());
    if (dist::rank() == 0)
      out.resize(size_t(e - b));
    dist::gather_to_root(mine.data(), count, out.data(), counts, displs);
    if (dist::rank() == 0)
      emit(b, e - b, out.data());
  }
}

void keep_shard(const ParamInfo &p, std::vector<float> &moment) {
  if (p.shard_hi < 0 || int64_t(moment.size()) != p.state_numel())
    return;
  moment.erase(moment.begin() + p.shard_hi, moment.end());
  moment.erase(moment.begin(), moment.begin() + p.shard_lo);
}

} // namespace spw::zero
