//===- trace.h - the run's timeline as a Chrome trace (--trace FILE) ------===//
//
// A process-wide recorder of spans on named lanes (compute, the copy links,
// the CPU optimizer's worker threads), written at the end of the run (and
// when it fails) as Chrome trace JSON: {"traceEvents": [...]} of "X"
// (complete) events in microseconds, pid 1, one tid per lane with a
// thread_name metadata event, which Perfetto and chrome://tracing open.
// Off (the default), every entry point is one relaxed atomic load.
//
// Thread-safe: spans come from the compute thread, the copy workers' and
// the I/O engine's completions, the host optimizer's threads and the
// exchange thread (dist.h).
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_TRACE_H
#define SPILLWAY_RUNTIME_SRC_TRACE_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace spw::trace {

// Network: the exchange thread's collectives (ZeRO stage 2's reduce-scatters,
// dist.h), on a lane of its own only in runs that have them.
enum class Lane {
  Compute,
  H2D,
  D2H,
  SsdRead,
  SsdWrite,
  HostOptimizer,
  Network
};

namespace detail {
extern std::atomic<bool> on;
}
inline bool enabled() { return detail::on.load(std::memory_order_relaxed); }
int64_t now_us(); // steady clock, microseconds

// One event [begin, end) on `lane` (`sub`: a worker thread index for
// HostOptimizer, else 0), named e.g. "fwd L3 mb1", "h2d params/layer3";
// `args` optional "key":value JSON members.
void span(Lane lane, int sub, const std::string &name, int64_t begin_us,
          int64_t end_us, const std::string &args = "");

// A copy on a link, issued at `issued_us` and complete at `done_us`. A link
// serves its copies one at a time in issue order (a copy engine, a stream),
// so the span starts when the copy was issued or the link's previous copy
// ended, whichever is later: the lane shows when the link was busy with it.
void link_span(Lane lane, const std::string &name, int64_t issued_us,
               int64_t done_us, const std::string &args = "");

// Whether the calling thread is the run's compute thread (the one that
// started the Session; any thread when none did).
bool on_compute_thread();

// A span on the compute lane around a scope, when tracing (a kernel) on
// the compute thread: a kernel a worker thread runs (the host optimizer's)
// is on its own lane, not drawn across the compute lane's tasks.
// `name` must outlive the scope (a string literal, an op's name).
class Scope {
public:
  explicit Scope(const char *name)
      : name_(name),
        begin_(enabled() && on_compute_thread() ? now_us() : -1) {}
  ~Scope() {
    if (begin_ >= 0)
      span(Lane::Compute, 0, name_, begin_, now_us());
  }
  Scope(const Scope &) = delete;
  Scope &operator=(const Scope &) = delete;

private:
  const char *name_;
  int64_t begin_;
};

// Microseconds the calling process spent inside task spans (between
// spw_task_begin and spw_task_end, outermost only), counted whether or not
// tracing is on: the offload telemetry's device busy time.
int64_t task_us();

// --trace FILE for the run: Session(path) turns recording on (an empty
// path: off); write() writes the file atomically (spw::Error naming
// --trace when it cannot), and the destructor writes it if write() was not
// reached (the run failed), reporting a failure on stderr only.
class Session {
public:
  explicit Session(const std::string &path);
  ~Session();
  void write();
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;

private:
  std::string path_;
  bool written_ = false;
};

// The recorded events as Chrome trace JSON (what Session writes), and
// forgetting them (tests).
std::string json();
void reset();
// Recording on or off without a file, and the most events kept (0: the
// default, 2^20) (tests).
void set_enabled(bool on);
void set_event_limit(size_t n);

} // namespace spw::trace

#endif
