//===- host_tasks.cpp - host worker threads -------------------------------===//

#include "host_tasks.h"

#include <algorithm>
#include <system_error>

// The trace recorder (trace.h, --trace) gets one span per task on the CPU
// optimizer's lane of the worker that ran it, where the runtime has one.
#if __has_include("trace.h")
#include "trace.h"
#define SPW_HOST_TASKS_TRACE 1
#endif

namespace spw {

HostTasks::HostTasks(int threads) {
  if (threads < 1 || threads > kMaxThreads)
    fail("host worker threads: %d (expected 1 to %d)", threads, kMaxThreads);
  workers_.reserve(size_t(threads));
  try {
    for (int i = 0; i < threads; ++i)
      workers_.emplace_back([this, i] { run(i); });
  } catch (const std::system_error &e) {
    // Joinable threads must not be destroyed: stop those that started.
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread &t : workers_)
      t.join();
    fail("cannot start %d host worker threads (%s); pass a smaller "
         "--optimizer-threads",
         threads, e.what());
  }
}

HostTasks::~HostTasks() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread &t : workers_)
    t.join();
}

storage::Token HostTasks::submit(const std::string &name,
                                 std::function<void()> fn) {
  auto done = std::make_shared<storage::Completion>(1);
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(Task{name, std::move(fn), done});
  }
  work_cv_.notify_one();
  return storage::Token(done);
}

void HostTasks::wait_all() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_cv_.wait(lk, [&] { return queue_.empty() && running_ == 0; });
}

// Hook for the trace recorder: one span [begin, end) on worker `index`'s
// CPU-optimizer lane, named by the task.
static int64_t trace_clock() {
#ifdef SPW_HOST_TASKS_TRACE
  return trace::enabled() ? trace::now_us() : 0;
#else
  return 0;
#endif
}

static void trace_task(int index, const std::string &name, int64_t begin) {
#ifdef SPW_HOST_TASKS_TRACE
  if (trace::enabled())
    trace::span(trace::Lane::HostOptimizer, index, name, begin,
                trace::now_us());
#else
  (void)index, (void)name, (void)begin;
#endif
}

void HostTasks::run(int index) {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lk(mu_);
      // Stop only once the queue is empty: the destructor drains.
      work_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty())
        return;
      task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    std::string error;
    const int64_t begin = trace_clock();
    try {
      task.fn();
    } catch (const std::exception &e) {
      error = task.name + ": " + e.what();
    } catch (...) {
      error = task.name + ": unknown exception";
    }
    trace_task(index, task.name, begin);
    // The task's captures go before its token completes: whoever waits may
    // then reuse what they referred to.
    task.fn = nullptr;
    task.done->piece_done(error);
    {
      std::lock_guard<std::mutex> lk(mu_);
      --running_;
    }
    idle_cv_.notify_all();
  }
}

int default_host_threads() {
  const int hw = int(std::thread::hardware_concurrency());
  return std::max(1, std::min(4, hw - 1));
}

} // namespace spw
