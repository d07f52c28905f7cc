//===- trace.cpp - the run's timeline as a Chrome trace --------------------===//

#include "trace.h"

#include "context.h"
#include "formats.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace spw::trace {

namespace detail {
std::atomic<bool> on{false};
}

namespace {

struct Event {
  Lane lane;
  int sub;
  std::string name;
  int64_t begin, end;
  std::string args;
};

constexpr int kLanes = int(Lane::Network) + 1;
// At most this many events are kept (about 200 MB); later ones are counted
// as dropped, which the trace says, so a long run cannot exhaust memory.
constexpr size_t kMaxEvents = size_t(1) << 20;

struct Recorder {
  std::mutex mu;
  std::vector<Event> events;
  int64_t link_end[kLanes] = {};
  uint64_t dropped = 0;
  size_t limit = kMaxEvents;
  bool keep() {
    if (events.size() < limit)
      return true;
    ++dropped;
    return false;
  }
};

Recorder &recorder() {
  static Recorder r;
  return r;
}

std::atomic<int64_t> task_total_us{0};

// The Session's thread; unset: any thread counts as the compute thread.
std::mutex compute_mu;
std::optional<std::thread::id> compute_thread;

// The task the calling thread is in (the generated step's thread).
struct CurrentTask {
  bool open = false;
  int64_t begin = 0;
  int32_t phase = 0, layer = 0, microbatch = 0;
};
thread_local CurrentTask current;

const char *phase_name(int32_t p) {
  return p == SPW_PHASE_FWD   ? "fwd"
         : p == SPW_PHASE_BWD ? "bwd"
         : p == SPW_PHASE_OPT ? "opt"
                              : "task";
}

// Thread ids: the fixed lanes 1..5, the network 7 (named only when it has
// spans), the optimizer's workers from 10 on.
int tid(Lane lane, int sub) {
  return lane == Lane::HostOptimizer ? 10 + sub
         : lane == Lane::Network     ? 7
                                     : int(lane) + 1;
}

std::string lane_name(Lane lane, int sub) {
  switch (lane) {
  case Lane::Compute:
    return "compute";
  case Lane::H2D:
    return "h2d";
  case Lane::D2H:
    return "d2h";
  case Lane::SsdRead:
    return "ssd read";
  case Lane::SsdWrite:
    return "ssd write";
  case Lane::HostOptimizer:
    return format("cpu optimizer %d", sub);
  case Lane::Network:
    return "network";
  }
  return "?";
}

} // namespace

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void span(Lane lane, int sub, const std::string &name, int64_t begin_us,
          int64_t end_us, const std::string &args) {
  if (!enabled())
    return;
  Recorder &r = recorder();
  std::lock_guard<std::mutex> lk(r.mu);
  if (!r.keep())
    return;
  r.events.push_back(
      {lane, lane == Lane::HostOptimizer ? std::max(sub, 0) : 0, name,
       begin_us, std::max(end_us, begin_us), args});
}

void link_span(Lane lane, const std::string &name, int64_t issued_us,
               int64_t done_us, const std::string &args) {
  if (!enabled())
    return;
  Recorder &r = recorder();
  std::lock_guard<std::mutex> lk(r.mu);
  int64_t &last = r.link_end[int(lane)];
  const int64_t begin = std::max(issued_us, last);
  // Two completions reported out of order (two I/O threads) are a
  // microsecond apart: the later-reported one ends where the other did.
  const int64_t end = std::max(done_us, begin);
  last = end;
  if (r.keep())
    r.events.push_back({lane, 0, name, begin, end, args});
}

bool on_compute_thread() {
  std::lock_guard<std::mutex> lk(compute_mu);
  return !compute_thread || *compute_thread == std::this_thread::get_id();
}

int64_t task_us() { return task_total_us.load(std::memory_order_relaxed); }

std::string json() {
  Recorder &r = recorder();
  std::lock_guard<std::mutex> lk(r.mu);
  int64_t origin = 0;
  if (!r.events.empty()) {
    origin = r.events.front().begin;
    for (const Event &e : r.events)
      origin = std::min(origin, e.begin);
  }
  std::string out = "{\"traceEvents\": [\n";
  auto meta = [&](const char *what, const char *key, int t,
                  const std::string &value) {
    out += format("{\"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"name\": \"%s\", "
                  "\"args\": {\"%s\": %s}},\n",
                  t, what, key, value.c_str());
  };
  out += "{\"ph\": \"M\", \"pid\": 1, \"name\": \"process_name\", \"args\": "
         "{\"name\": \"spillway\"}},\n";
  std::map<int, std::pair<Lane, int>> lanes;
  for (int l = 0; l < int(Lane::HostOptimizer); ++l)
    lanes[tid(Lane(l), 0)] = {Lane(l), 0};
  for (const Event &e : r.events)
    lanes[tid(e.lane, e.sub)] = {e.lane, e.sub};
  for (const auto &[t, lane] : lanes) {
    meta("thread_name", "name", t,
         json_string(lane_name(lane.first, lane.second)));
    meta("thread_sort_index", "sort_index", t, std::to_string(t));
  }
  // By lane and start (a parent before the spans it contains).
  std::vector<const Event *> order;
  for (const Event &e : r.events)
    order.push_back(&e);
  std::stable_sort(order.begin(), order.end(),
                   [](const Event *a, const Event *b) {
                     const int ta = tid(a->lane, a->sub),
                               tb = tid(b->lane, b->sub);
                     if (ta != tb)
                       return ta < tb;
                     if (a->begin != b->begin)
                       return a->begin < b->begin;
                     return a->end > b->end;
                   });
  for (size_t i = 0; i < order.size(); ++i) {
    const Event &e = *order[i];
    out += format("{\"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"name\": %s, "
                  "\"ts\": %lld, \"dur\": %lld",
                  tid(e.lane, e.sub), json_string(e.name).c_str(),
                  (long long)(e.begin - origin),
                  (long long)(e.end - e.begin));
    if (!e.args.empty())
      out += ", \"args\": {" + e.args + "}";
    out += i + 1 < order.size() ? "},\n" : "}\n";
  }
  if (order.empty()) // no trailing comma after the metadata
    out.erase(out.size() - 2, 1);
  out += format("], \"displayTimeUnit\": \"ms\", \"otherData\": "
                "{\"dropped_events\": %llu}}\n",
                (unsigned long long)r.dropped);
  return out;
}

void reset() {
  Recorder &r = recorder();
  std::lock_guard<std::mutex> lk(r.mu);
  r.events.clear();
  r.dropped = 0;
  std::fill(std::begin(r.link_end), std::end(r.link_end), 0);
}

void set_event_limit(size_t n) {
  Recorder &r = recorder();
  std::lock_guard<std::mutex> lk(r.mu);
  r.limit = n ? n : kMaxEvents;
}

void set_enabled(bool v) { detail::on.store(v, std::memory_order_relaxed); }

Session::Session(const std::string &path) : path_(path) {
  if (path_.empty())
    return;
  reset();
  {
    std::lock_guard<std::mutex> lk(compute_mu);
    compute_thread = std::this_thread::get_id();
  }
  set_enabled(true);
}

void Session::write() {
  if (path_.empty() || written_)
    return;
  written_ = true;
  try {
    write_file_atomic(path_, json());
  } catch (const Error &e) {
    fail("--trace: %s", e.what());
  }
}

Session::~Session() {
  if (path_.empty())
    return;
  try {
    write(); // the run failed before its end: what it did so far
  } catch (const Error &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  set_enabled(false);
  std::lock_guard<std::mutex> lk(compute_mu);
  compute_thread.reset();
}

} // namespace spw::trace

using namespace spw;

extern "C" {

void spw_task_begin(spw_ctx *ctx, int32_t phase, int32_t layer,
                    int32_t microbatch) {
  guarded(ctx, "spw_task_begin", [&] {
    trace::CurrentTask &t = trace::current;
    if (t.open)
      fail("%s L%d: task begun inside the task %s L%d (a missing "
           "spw_task_end)",
           trace::phase_name(phase), layer, trace::phase_name(t.phase),
           t.layer);
    t = {true, trace::now_us(), phase, layer, microbatch};
  });
}

void spw_task_end(spw_ctx *ctx) {
  trace::CurrentTask &t = trace::current;
  if (!t.open) {
    guarded(ctx, "spw_task_end", [] { fail("no task is running"); });
    return;
  }
  t.open = false;
  const int64_t end = trace::now_us();
  trace::task_total_us.fetch_add(end - t.begin, std::memory_order_relaxed);
  if (!trace::enabled())
    return;
  const char *p = trace::phase_name(t.phase);
  const std::string name =
      t.microbatch >= 0 ? format("%s L%d mb%d", p, t.layer, t.microbatch)
                        : format("%s L%d", p, t.layer);
  trace::span(trace::Lane::Compute, 0, name, t.begin, end,
              format("\"phase\": \"%s\", \"layer\": %d, \"microbatch\": %d",
                     p, t.layer, t.microbatch));
}

} // extern "C"
