//===- trace_test.cpp - the trace recorder and completion timestamps -------===//
//
// Completions stamp when their last piece completed and call their on_done
// callbacks once, whichever comes first; the recorder keeps nothing while
// off, serializes a link's copies, names its lanes, and writes the task
// markers' spans; a move through the tensor store becomes a copy span on
// its link's lane that ends at the copy's completion.
//
//===----------------------------------------------------------------------===//
#include "context.h"
#include "formats.h"
#include "storage/completion.h"
#include "storage/tensor_store.h"
#include "trace.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <thread>

using namespace spw;
using namespace spw::storage;

namespace {

// The recorder is process-wide: each test starts it empty and on.
struct Tracing {
  Tracing() {
    trace::reset();
    trace::set_enabled(true);
  }
  ~Tracing() {
    trace::set_enabled(false);
    trace::reset();
  }
};

size_t count(const std::string &s, const std::string &what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos;
       at = s.find(what, at + 1))
    ++n;
  return n;
}

TEST(Completion, StampsTheLastPieceAndCallsBackOnce) {
  auto c = std::make_shared<Completion>(2);
  int calls = 0;
  int64_t seen = -1;
  c->on_done([&](int64_t at) {
    ++calls;
    seen = at;
  });
  EXPECT_EQ(c->done_us(), -1);
  const int64_t before = trace::now_us();
  c->piece_done();
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(c->done_us(), -1);
  c->piece_done();
  EXPECT_EQ(calls, 1);
  EXPECT_GE(c->done_us(), before);
  EXPECT_EQ(seen, c->done_us());
  // Registered after completion: called at once, with the same time.
  int64_t late = -1;
  c->on_done([&](int64_t at) { late = at; });
  EXPECT_EQ(late, c->done_us());
  EXPECT_EQ(calls, 1);
}

TEST(Completion, CallbackRacingTheLastPieceRunsOnce) {
  for (int i = 0; i < 200; ++i) {
    auto c = std::make_shared<Completion>(1);
    std::atomic<int> calls{0};
    std::thread t([&] { c->piece_done(); });
    c->on_done([&](int64_t) { calls++; });
    t.join();
    ASSERT_EQ(calls.load(), 1) << "iteration " << i;
  }
}

TEST(Trace, OffRecordsNothing) {
  trace::reset();
  trace::set_enabled(false);
  trace::span(trace::Lane::Compute, 0, "fwd L0 mb0", 0, 10);
  trace::link_span(trace::Lane::H2D, "h2d params/layer0", 0, 10);
  { trace::Scope k("matmul"); }
  EXPECT_EQ(count(trace::json(), "\"ph\": \"X\""), 0u);
}

TEST(Trace, KernelsAreDrawnOnTheSessionsThreadOnly) {
  const std::string path =
      ::testing::TempDir() + "/spillway_trace_test_kernels.json";
  {
    trace::Session session(path);
    { trace::Scope k("matmul"); }
    std::thread worker([] { trace::Scope k("add"); });
    worker.join();
    const std::string j = trace::json();
    EXPECT_NE(j.find("\"name\": \"matmul\""), std::string::npos) << j;
    EXPECT_EQ(j.find("\"name\": \"add\""), std::string::npos) << j;
    session.write();
  }
  EXPECT_FALSE(trace::enabled());
  std::FILE *f = std::fopen(path.c_str(), "r");
  ASSERT_NE(f, nullptr) << path;
  char head[32] = {};
  EXPECT_EQ(std::fread(head, 1, 16, f), 16u);
  std::fclose(f);
  std::remove(path.c_str());
  EXPECT_EQ(std::string(head), "{\"traceEvents\": ");
}

TEST(Trace, LanesAreNamedAndLinksServeInOrder) {
  Tracing on;
  // Two copies issued together: the second starts when the first ended.
  trace::link_span(trace::Lane::H2D, "h2d a", 100, 110);
  trace::link_span(trace::Lane::H2D, "h2d b", 100, 130);
  trace::span(trace::Lane::HostOptimizer, 3, "adamw L1", 105, 120);
  const std::string j = trace::json();
  EXPECT_NE(j.find("{\"traceEvents\": ["), std::string::npos) << j;
  for (const char *lane : {"\"compute\"", "\"h2d\"", "\"d2h\"",
                           "\"ssd read\"", "\"ssd write\"",
                           "\"cpu optimizer 3\""})
    EXPECT_NE(j.find(lane), std::string::npos) << lane << "\n" << j;
  // Times from the first event.
  EXPECT_NE(j.find("\"name\": \"h2d a\", \"ts\": 0, \"dur\": 10"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"name\": \"h2d b\", \"ts\": 10, \"dur\": 20"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"tid\": 13, \"name\": \"adamw L1\""), std::string::npos)
      << j;
}

TEST(Trace, EventsPastTheLimitAreCountedAsDropped) {
  Tracing on;
  trace::set_event_limit(2);
  for (int i = 0; i < 5; ++i)
    trace::span(trace::Lane::Compute, 0, "k", i, i + 1);
  const std::string j = trace::json();
  trace::set_event_limit(0);
  EXPECT_EQ(count(j, "\"ph\": \"X\""), 2u) << j;
  EXPECT_NE(j.find("\"otherData\": {\"dropped_events\": 3}"),
            std::string::npos)
      << j;
}

TEST(Trace, TaskMarkersMakeSpansAndCountTime) {
  Tracing on;
  auto ctx = make_context();
  const int64_t before = trace::task_us();
  spw_task_begin(ctx.get(), SPW_PHASE_BWD, 3, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  spw_task_end(ctx.get());
  spw_task_begin(ctx.get(), SPW_PHASE_OPT, 3, -1);
  spw_task_end(ctx.get());
  EXPECT_FALSE(ctx->failed()) << ctx->error;
  EXPECT_GE(trace::task_us() - before, 2000);
  const std::string j = trace::json();
  EXPECT_NE(j.find("\"name\": \"bwd L3 mb1\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"name\": \"opt L3\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"phase\": \"bwd\", \"layer\": 3, \"microbatch\": 1"),
            std::string::npos)
      << j;
}

TEST(Trace, UnbalancedMarkersAreErrors) {
  auto ctx = make_context();
  spw_task_end(ctx.get());
  ASSERT_TRUE(ctx->failed());
  EXPECT_NE(ctx->error.find("spw_task_end: no task is running"),
            std::string::npos)
      << ctx->error;
  auto ctx2 = make_context();
  spw_task_begin(ctx2.get(), SPW_PHASE_FWD, 0, 0);
  spw_task_begin(ctx2.get(), SPW_PHASE_FWD, 1, 0);
  ASSERT_TRUE(ctx2->failed());
  EXPECT_NE(ctx2->error.find("fwd L1: task begun inside the task fwd L0"),
            std::string::npos)
      << ctx2->error;
  spw_task_end(ctx2.get()); // closes fwd L0 for the tests after this one
}

TEST(Trace, StoreMovesAreCopySpansEndingAtCompletion) {
  Tracing on;
  CpuDeviceMemory gpu(1 << 20);
  PinnedPool pool(1 << 20);
  TensorStore store(gpu, pool, nullptr);
  const TensorId t = store.add("params/layer2", 8192);
  store.allocate(t, Tier::Host);
  Token up = store.upload(t);
  up.wait();
  ASSERT_GE(up.completion()->done_us(), 0);
  Token down = store.download(t);
  down.wait();
  store.wait_all();
  const std::string j = trace::json();
  EXPECT_NE(j.find("\"name\": \"h2d params/layer2\""), std::string::npos)
      << j;
  EXPECT_NE(j.find("\"name\": \"d2h params/layer2\""), std::string::npos)
      << j;
  EXPECT_NE(j.find("\"bytes\": 8192, \"block\": \"params/layer2\", "
                   "\"from\": \"host\", \"to\": \"gpu\""),
            std::string::npos)
      << j;
  EXPECT_EQ(count(j, "\"ph\": \"X\""), 2u) << j;
}

} // namespace
