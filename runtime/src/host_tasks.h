//===- host_tasks.h - host worker threads ---------------------------------===//
//
// A fixed pool of host threads fed from one FIFO queue: the CPU optimizer of
// an offload plan (host_optimizer.cpp) runs its updates here, concurrently
// with the step. Tasks start in submission order; each has a token
// (storage::Completion) that completes when the task has run and carries
// the error it threw, so whoever needs the task's result waits for that
// task only.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_HOST_TASKS_H
#define SPILLWAY_RUNTIME_SRC_HOST_TASKS_H

#include "storage/completion.h"

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace spw {

// Host worker threads (the CPU optimizer of an offload plan). submit()
// returns at once; the token completes when fn has run (an spw::Error it
// throws becomes the token's error, "NAME: message"; any other exception
// too). The destructor runs every task already submitted, then joins.
class HostTasks {
public:
  explicit HostTasks(int threads); // 1 .. kMaxThreads, else spw::Error
  ~HostTasks();
  HostTasks(const HostTasks &) = delete;
  HostTasks &operator=(const HostTasks &) = delete;

  storage::Token submit(const std::string &name, std::function<void()> fn);
  // Blocks until every task submitted so far has run (errors stay with
  // their tokens).
  void wait_all();
  int threads() const { return int(workers_.size()); }

  static constexpr int kMaxThreads = 1024;

private:
  struct Task {
    std::string name;
    std::function<void()> fn;
    std::shared_ptr<storage::Completion> done;
  };
  void run(int index);

  std::mutex mu_;
  std::condition_variable work_cv_; // a task was queued, or stop
  std::condition_variable idle_cv_; // a task finished
  std::deque<Task> queue_;
  int64_t running_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// --optimizer-threads' default: min(4, hardware threads - 1), at least 1
// (one core stays with the thread that issues the step's compute).
int default_host_threads();

} // namespace spw

#endif
