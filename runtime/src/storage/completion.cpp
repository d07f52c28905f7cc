//===- completion.cpp - completion tokens ---------------------------------===//

#include "storage/completion.h"

#include "spillway/runtime/tier.h"
#include "trace.h"

namespace spw::storage {

void Completion::piece_done(const std::string &error) {
  if (!error.empty()) {
    std::lock_guard<std::mutex> lk(mu_);
    if (error_.empty())
      error_ = error;
  }
  // The decrement happens outside the lock, the notifies inside it: a
  // waiter that saw pending_ != 0 (or the callbacks not yet run) holds the
  // lock until it sleeps, so it cannot miss the wakeup. wait() returns only
  // after the callbacks have run (outside the lock: they may take others),
  // so a waiter sees what they recorded.
  if (pending_.fetch_sub(1) == 1) {
    std::vector<std::function<void(int64_t)>> fns;
    int64_t at;
    {
      std::lock_guard<std::mutex> lk(mu_);
      at = done_us_ = trace::now_us();
      fns.swap(on_done_);
      cv_.notify_all(); // done_us() waits for the stamp only
    }
    for (auto &fn : fns)
      fn(at);
    std::lock_guard<std::mutex> lk(mu_);
    callbacks_run_ = true;
    cv_.notify_all();
  }
}

int64_t Completion::done_us() const {
  std::unique_lock<std::mutex> lk(mu_);
  // The last piece stamps the time just after its decrement: a caller that
  // saw done() waits for the stamp.
  cv_.wait(lk, [&] { return pending_.load() != 0 || done_us_ >= 0; });
  return done_us_;
}

void Completion::on_done(std::function<void(int64_t)> fn) {
  int64_t at;
  {
    std::lock_guard<std::mutex> lk(mu_);
    // done_us_, not pending_: the last piece may have counted down but not
    // yet taken the lock, and then it runs fn.
    if (done_us_ < 0) {
      on_done_.push_back(std::move(fn));
      return;
    }
    at = done_us_;
  }
  fn(at);
}

void Completion::wait() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return callbacks_run_; });
  if (!error_.empty())
    throw Error(error_);
}

std::string Completion::error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return error_;
}

void trace_move(const Token &t, const std::string &block, int from, int to,
                uint64_t bytes) {
  if (!trace::enabled() || !t.completion())
    return;
  const int64_t issued = trace::now_us();
  trace::Lane lane;
  const char *link;
  if (to == SPW_TIER_GPU) {
    lane = trace::Lane::H2D, link = "h2d";
  } else if (from == SPW_TIER_GPU) {
    lane = trace::Lane::D2H, link = "d2h";
  } else if (from == SPW_TIER_SSD) {
    lane = trace::Lane::SsdRead, link = "ssd_read";
  } else {
    lane = trace::Lane::SsdWrite, link = "ssd_write";
  }
  static const char *const kTier[] = {"gpu", "host", "ssd"};
  const char *f = from >= 0 && from < 3 ? kTier[from] : "?";
  const char *d = to >= 0 && to < 3 ? kTier[to] : "?";
  std::string name = std::string(link) + " " + block;
  std::string args = format("\"bytes\": %llu, \"block\": %s, \"from\": "
                            "\"%s\", \"to\": \"%s\"",
                            (unsigned long long)bytes,
                            json_string(block).c_str(), f, d);
  t.completion()->on_done(
      [lane, name = std::move(name), args = std::move(args),
       issued](int64_t done) {
        trace::link_span(lane, name, issued, done, args);
      });
}

} // namespace spw::storage
