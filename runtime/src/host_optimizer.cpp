//===- host_optimizer.cpp - the CPU optimizer on host threads -------------===//
//
// See host_optimizer.h. The inline update paths of optimizer.cpp resolve the
// pointers and hand the kernel call here when the plan binds the parameter
// and its state on the host tier; this file splits it into tasks, keeps
// the gradient alive while they run and tells the plan's blocks (tiers.cpp)
// which tokens their host copies wait for.
//
//===----------------------------------------------------------------------===//

#include "host_optimizer.h"

#include "tiers.h"

#include <algorithm>
#include <chrono>

namespace spw {

namespace {

// Adds the time `body` takes to *busy_ns.
template <class F> void timed(std::atomic<int64_t> *busy_ns, F &&body) {
  const auto t0 = std::chrono::steady_clock::now();
  body();
  if (busy_ns)
    busy_ns->fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - t0)
                           .count());
}

// Tasks for [0, n) split in at most `workers` pieces of >= min_elems.
int64_t pieces(int64_t n, int64_t min_elems, int workers) {
  return std::clamp<int64_t>(n / std::max<int64_t>(min_elems, 1), 1,
                             std::max(workers, 1));
}

std::string piece_name(const std::string &name, int64_t k, int64_t count) {
  return count == 1 ? name
                    : name + format(" (%lld/%lld)", (long long)(k + 1),
                                    (long long)count);
}

int32_t index_of(const spw_ctx *ctx, const ParamInfo &p) {
  return int32_t(&p - ctx->params.data());
}

HostTasks &started(HostOptimizer &o) {
  if (!o.tasks)
    o.tasks = std::make_unique<HostTasks>(
        o.threads > 0 ? o.threads : default_host_threads());
  return *o.tasks;
}

template <class T>
void check_inside(const ParamInfo &p, const float *g, int64_t n,
                  const std::vector<T> &buf, const char *what) {
  const char *lo = reinterpret_cast<const char *>(g);
  const char *b = reinterpret_cast<const char *>(buf.data());
  if (!b || lo < b ||
      lo + n * int64_t(sizeof(float)) > b + int64_t(buf.size() * sizeof(T)))
    fail("parameter '%s': the CPU optimizer's gradient is not in its %s",
         p.name.c_str(), what);
}

// Frees the recorded gradients of the updates that finished; then, while
// the ones still running hold more than kRecordedBytesInFlight besides
// `adding`, waits for the oldest of them. (An error stays with its token:
// host_optimizer_finish reports it.)
void release_recorded(HostOptimizer &o, size_t adding) {
  size_t held = 0;
  for (HostOptimizer::Update &q : o.in_flight) {
    if (q.recorded.empty())
      continue;
    if (std::all_of(q.tokens.begin(), q.tokens.end(),
                    [](const storage::Token &t) { return t.done(); }))
      std::vector<char>().swap(q.recorded);
    else
      held += q.recorded.size();
  }
  for (HostOptimizer::Update &q : o.in_flight) {
    if (held + adding <= kRecordedBytesInFlight)
      break;
    if (q.recorded.empty())
      continue;
    for (const storage::Token &t : q.tokens) {
      try {
        o.wait(t);
      } catch (const Error &) {
      }
    }
    held -= q.recorded.size();
    std::vector<char>().swap(q.recorded);
  }
}

// The update's gradient buffer moves into `u` (its data stays where it is,
// so g stays valid); ParamInfo::grad records into a new buffer next time.
// The copies in flight are bounded (release_recorded), not one per
// parameter: a plan's host memory is its budget.
void keep_recorded(HostOptimizer &o, ParamInfo &p, HostOptimizer::Update &u) {
  release_recorded(o, p.grad.size());
  u.recorded.swap(p.grad);
  std::vector<char>().swap(p.grad);
}

// Two updates of the same elements in flight at once could run in either
// order on two workers: the later one waits for the earlier (a plan updates
// an element once per step, so this does not wait in practice).
void after_overlapping(HostOptimizer &o, const HostOptimizer::Update &u) {
  for (const HostOptimizer::Update &q : o.in_flight)
    if (q.param == u.param && q.begin < u.end && u.begin < q.end)
      for (const storage::Token &t : q.tokens)
        o.wait(t);
}

void record(spw_ctx *ctx, HostOptimizer &o, HostOptimizer::Update &&u,
            int parts) {
  for (const storage::Token &t : u.tokens)
    tiers_note_host_update(ctx, u.param, parts, t);
  o.in_flight.push_back(std::move(u));
}

} // namespace

HostOptimizer::~HostOptimizer() {
  tasks.reset(); // drains: the queued tasks read in_flight's gradients
}

void HostOptimizer::wait(const storage::Token &t) {
  if (t.done())
    return t.wait(); // its error, if any
  const auto t0 = std::chrono::steady_clock::now();
  try {
    t.wait();
  } catch (...) {
    wait_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::steady_clock::now() - t0)
                   .count();
    throw;
  }
  wait_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::steady_clock::now() - t0)
                 .count();
}

std::vector<storage::Token>
submit_adamw_tasks(HostTasks &tasks, const std::string &name, float *w,
                   StateMem m, StateMem v, const float *g, int64_t n,
                   int64_t step, const AdamWHparams &h, int64_t min_elems,
                   std::atomic<int64_t> *busy_ns, bf16 *work) {
  const int64_t count = pieces(n, min_elems, tasks.threads());
  std::vector<storage::Token> tokens;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t lo = n * k / count, hi = n * (k + 1) / count;
    tokens.push_back(tasks.submit(piece_name(name, k, count), [=] {
      timed(busy_ns, [&] {
        adamw_kernel(w + lo, m + lo, v + lo, g + lo, hi - lo, step, h);
        if (work)
          round_to_bf16(w + lo, work + lo, hi - lo);
      });
    }));
  }
  return tokens;
}

std::vector<storage::Token>
submit_foam_tasks(HostTasks &tasks, const std::string &name, float *w,
                  StateMem m, StateMem v, const float *g, int64_t rows,
                  int64_t cols, int level, int64_t step, const AdamWHparams &h,
                  double alpha, int64_t min_elems,
                  std::atomic<int64_t> *busy_ns, bf16 *work) {
  // Whole rows: FOAM folds each row's state on its own.
  const int64_t nb = (cols + (int64_t(1) << level) - 1) >> level;
  const int64_t count =
      std::min(std::max<int64_t>(rows, 1),
               pieces(rows * cols, min_elems, tasks.threads()));
  std::vector<storage::Token> tokens;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t lo = rows * k / count, hi = rows * (k + 1) / count;
    tokens.push_back(tasks.submit(piece_name(name, k, count), [=] {
      timed(busy_ns, [&] {
        foam_kernel(w + lo * cols, m + lo * nb, v + lo * nb, g + lo * cols,
                    hi - lo, cols, level, step, h, alpha);
        if (work)
          round_to_bf16(w + lo * cols, work + lo * cols, (hi - lo) * cols);
      });
    }));
  }
  return tokens;
}

void host_optimizer_configure(spw_ctx *ctx, int threads) {
  if (threads < 0 || threads > HostTasks::kMaxThreads)
    fail("--optimizer-threads %d: expected 1 to %d", threads,
         HostTasks::kMaxThreads);
  HostOptimizer *o = tiers_host_optimizer(ctx);
  if (!o)
    fail("--optimizer-threads is for models compiled with an offload plan");
  if (o->tasks)
    fail("--optimizer-threads: the CPU optimizer has started already");
  o->threads = threads;
}

bool host_optimizer_runs(spw_ctx *ctx, const ParamInfo &p) {
  return ctx->tiers && tiers_host_bound(ctx, index_of(ctx, p));
}

void host_optimizer_adamw(spw_ctx *ctx, ParamInfo &p, float *w, StateMem m,
                          StateMem v, const float *g, int64_t begin,
                          int64_t end, int64_t step, const AdamWHparams &h,
                          std::vector<float> *deferred, bool planned,
                          bf16 *work) {
  HostOptimizer &o = *tiers_host_optimizer(ctx);
  HostTasks &tasks = started(o);
  const int64_t n = end - begin;
  HostOptimizer::Update u;
  u.param = index_of(ctx, p);
  u.begin = begin;
  u.end = end;
  after_overlapping(o, u);
  if (planned) {
    // In the plan's pending block: nothing to keep alive.
  } else if (deferred) {
    check_inside(p, g, n, *deferred, "deferred update");
    u.deferred.swap(*deferred);
  } else {
    check_inside(p, g, n, p.grad, "recorded gradient");
    keep_recorded(o, p, u);
  }
  u.tokens = submit_adamw_tasks(
      tasks,
      format("adamw '%s' [%lld, %lld)%s", p.name.c_str(), (long long)begin,
             (long long)end, deferred || planned ? " deferred" : ""),
      w, m, v, g, n, step, h, kHostUpdateMinElems, &o.busy_ns, work);
  // The parts of a split block the elements lie in (the updates' ranges
  // never straddle the split, except on a contiguous whole).
  const int64_t s = p.bound_split;
  const int parts = s < 0 ? 3 : end <= s ? 1 : begin >= s ? 2 : 3;
  record(ctx, o, std::move(u), parts);
}

void host_optimizer_foam(spw_ctx *ctx, ParamInfo &p, float *w, StateMem m,
                         StateMem v, const float *g, int64_t rows, int64_t cols,
                         int level, int64_t step, const AdamWHparams &h,
                         double alpha, bf16 *work) {
  HostOptimizer &o = *tiers_host_optimizer(ctx);
  HostTasks &tasks = started(o);
  HostOptimizer::Update u;
  u.param = index_of(ctx, p);
  u.end = rows * cols;
  after_overlapping(o, u);
  check_inside(p, g, rows * cols, p.grad, "recorded gradient");
  keep_recorded(o, p, u);
  u.tokens = submit_foam_tasks(tasks, format("foam '%s'", p.name.c_str()), w, m,
                               v, g, rows, cols, level, step, h, alpha,
                               kHostUpdateMinElems, &o.busy_ns, work);
  record(ctx, o, std::move(u), 3);
}

std::string host_optimizer_finish(spw_ctx *ctx, bool step_end) {
  HostOptimizer *o = tiers_host_optimizer(ctx);
  if (!o)
    return {};
  std::string error;
  for (const HostOptimizer::Update &u : o->in_flight)
    for (const storage::Token &t : u.tokens) {
      try {
        o->wait(t);
      } catch (const Error &e) {
        if (error.empty())
          error = e.what();
      }
    }
  for (HostOptimizer::Update &u : o->in_flight)
    if (u.deferred.capacity())
      ctx->params[size_t(u.param)].spare_grads.push_back(
          std::move(u.deferred));
  o->in_flight.clear();
  if (step_end) {
    const int64_t busy = o->busy_ns.load();
    o->step_seconds = double(busy - o->busy_ns_at_step_end) * 1e-9;
    o->total_seconds = double(busy) * 1e-9;
    o->busy_ns_at_step_end = busy;
    o->step_wait_seconds = double(o->wait_ns - o->wait_ns_at_step_end) * 1e-9;
    o->wait_ns_at_step_end = o->wait_ns;
  }
  return error.empty() ? error : "the CPU optimizer's " + error;
}

double host_optimizer_seconds(const spw_ctx *ctx) {
  const HostOptimizer *o = tiers_host_optimizer(ctx);
  return o ? o->step_seconds : 0.0;
}

double host_optimizer_total_seconds(const spw_ctx *ctx) {
  const HostOptimizer *o = tiers_host_optimizer(ctx);
  return o ? o->total_seconds : 0.0;
}

double host_optimizer_wait_seconds(const spw_ctx *ctx) {
  const HostOptimizer *o = tiers_host_optimizer(ctx);
  return o ? o->step_wait_seconds : 0.0;
}

} // namespace spw
