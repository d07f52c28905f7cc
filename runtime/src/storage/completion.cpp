//===- completion.cpp - completion tokens ---------------------------------===//

#include "storage/completion.h"

namespace spw::storage {

void Completion::piece_done(const std::string &error) {
  if (!error.empty()) {
    std::lock_guard<std::mutex> lk(mu_);
    if (error_.empty())
      error_ = error;
  }
  // The decrement happens outside the lock, the notify inside it: a waiter
  // that saw pending_ != 0 holds the lock until it sleeps, so it cannot miss
  // the wakeup.
  if (pending_.fetch_sub(1) == 1) {
    std::lock_guard<std::mutex> lk(mu_);
    cv_.notify_all();
  }
}

void Completion::wait() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return pending_.load() == 0; });
  if (!error_.empty())
    throw Error(error_);
}

std::string Completion::error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return error_;
}

} // namespace spw::storage
