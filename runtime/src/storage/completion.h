//===- completion.h - completion tokens for asynchronous storage work -----===//
//
// Every asynchronous operation of the storage layer (an I/O request through
// the engine, a host<->device copy, a tensor move) returns a Token. A token
// completes when all the pieces it was split into have completed; it carries
// the first error any piece reported. The executor waits on tokens; nothing
// is ever silently dropped: a token whose operation failed throws spw::Error
// from wait().
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_STORAGE_COMPLETION_H
#define SPILLWAY_RUNTIME_STORAGE_COMPLETION_H

#include "support.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace spw::storage {

// Shared state of one asynchronous operation made of `pending` pieces.
class Completion {
public:
  explicit Completion(int64_t pieces = 1) : pending_(pieces) {}

  // Adds pieces before they are submitted (a token's piece count may grow
  // while the operation is being split up; see IoEngine::submit).
  void add_pieces(int64_t n) { pending_.fetch_add(n); }
  // Marks one piece done; `error` non-empty records a failure (the first one
  // wins). Wakes waiters when the last piece completes.
  void piece_done(const std::string &error = {});

  bool done() const { return pending_.load() == 0; }
  // Blocks until every piece is done and the on_done callbacks have run
  // (a waiter then sees what they recorded: the trace's span of the move);
  // throws spw::Error with the first error, if any.
  void wait();
  // The first error, or empty (only meaningful once done()).
  std::string error() const;
  // When the last piece completed (trace::now_us, steady microseconds);
  // -1 while pieces are pending. What the telemetry and the trace take as
  // the end of the operation: when it ended, not when someone waited.
  int64_t done_us() const;
  // Calls fn(done_us) once the last piece has completed: at once (on the
  // calling thread) when it has, else on the thread that completes it.
  // fn must not block or wait on other completions.
  void on_done(std::function<void(int64_t)> fn);

private:
  std::atomic<int64_t> pending_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::string error_;
  int64_t done_us_ = -1; // under mu_
  bool callbacks_run_ = false; // under mu_: on_done_'s have returned
  std::vector<std::function<void(int64_t)>> on_done_;
};

// A handle on a Completion; cheap to copy. A default-constructed Token is
// already complete (an operation that needed no work).
class Token {
public:
  Token() = default;
  explicit Token(std::shared_ptr<Completion> c) : c_(std::move(c)) {}
  bool done() const { return !c_ || c_->done(); }
  void wait() const {
    if (c_)
      c_->wait();
  }
  std::string error() const { return c_ ? c_->error() : std::string(); }
  const std::shared_ptr<Completion> &completion() const { return c_; }

private:
  std::shared_ptr<Completion> c_;
};

// With tracing on (trace.h), draws the move a token stands for as a span on
// its link's lane, "<link> <block>" (h2d, d2h, ssd_read, ssd_write), from
// now (its issue) to its completion. Tiers are SPW_TIER_* (0 gpu, 1 host,
// 2 ssd); `bytes` is what the link moves.
void trace_move(const Token &t, const std::string &block, int from, int to,
                uint64_t bytes);

} // namespace spw::storage

#endif
