//===- host_tasks_test.cpp - host worker threads and the CPU optimizer ----===//
//
// HostTasks: FIFO order, errors carried by the task's token, a token that
// waits for its task only, the destructor draining the queue. The CPU
// optimizer's split updates give the single kernel call's bits, and an
// offload plan's update bound on host runs as tasks that the next move of
// the block waits for.
//
//===----------------------------------------------------------------------===//

#include "host_optimizer.h"
#include "test_util.h"
#include "tiers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <thread>

namespace {

using spw::HostTasks;
using spw::storage::Token;

TEST(HostTasks, OneThreadRunsTasksInSubmissionOrder) {
  HostTasks tasks(1);
  std::vector<int> order;
  std::vector<Token> tokens;
  for (int i = 0; i < 100; ++i)
    tokens.push_back(tasks.submit("t", [&order, i] { order.push_back(i); }));
  tasks.wait_all();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(order[size_t(i)], i);
    EXPECT_TRUE(tokens[size_t(i)].done());
  }
}

TEST(HostTasks, ManyThreadsRunEveryTaskOnce) {
  HostTasks tasks(3);
  EXPECT_EQ(tasks.threads(), 3);
  std::vector<std::atomic<int>> ran(500);
  std::vector<Token> tokens;
  for (size_t i = 0; i < ran.size(); ++i)
    tokens.push_back(tasks.submit("t", [&ran, i] { ran[i]++; }));
  for (const Token &t : tokens)
    t.wait();
  for (size_t i = 0; i < ran.size(); ++i)
    EXPECT_EQ(ran[i].load(), 1) << i;
}

TEST(HostTasks, ErrorsBecomeTheTokensNamingTheTask) {
  HostTasks tasks(2);
  Token bad = tasks.submit("adamw 'w'", [] { spw::fail("no %s", "luck"); });
  Token odd = tasks.submit("other", [] { throw std::runtime_error("odd"); });
  Token good = tasks.submit("fine", [] {});
  tasks.wait_all();
  EXPECT_EQ(bad.error(), "adamw 'w': no luck");
  try {
    bad.wait();
    ADD_FAILURE() << "wait() did not throw";
  } catch (const spw::Error &e) {
    EXPECT_STREQ(e.what(), "adamw 'w': no luck");
  }
  EXPECT_EQ(odd.error(), "other: odd");
  EXPECT_NO_THROW(good.wait());
  EXPECT_EQ(good.error(), "");
  // The workers go on after a failed task.
  int x = 0;
  tasks.submit("after", [&x] { x = 7; }).wait();
  EXPECT_EQ(x, 7);
}

TEST(HostTasks, ATokenWaitsForItsTaskOnly) {
  HostTasks tasks(2);
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  Token blocked = tasks.submit("blocked", [open] { open.wait(); });
  Token free = tasks.submit("free", [] {});
  free.wait(); // returns while the first task still waits on the gate
  EXPECT_FALSE(blocked.done());
  gate.set_value();
  blocked.wait();
}

TEST(HostTasks, DestructorRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  std::vector<Token> tokens;
  {
    HostTasks tasks(2);
    std::promise<void> gate;
    std::shared_future<void> open = gate.get_future().share();
    tokens.push_back(tasks.submit("first", [open, &ran] {
      open.wait();
      ran++;
    }));
    for (int i = 0; i < 50; ++i)
      tokens.push_back(tasks.submit("t", [&ran] { ran++; }));
    gate.set_value();
  } // no wait_all: the destructor drains
  EXPECT_EQ(ran.load(), 51);
  for (const Token &t : tokens)
    EXPECT_TRUE(t.done());
}

TEST(HostTasks, ThreadCounts) {
  EXPECT_THROW(HostTasks(0), spw::Error);
  EXPECT_THROW(HostTasks(HostTasks::kMaxThreads + 1), spw::Error);
  const int d = spw::default_host_threads();
  EXPECT_GE(d, 1);
  EXPECT_LE(d, 4);
}

std::vector<float> random_values(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// bf16 optimizer state: each task's moments start at its own element (2
// bytes each), so the split still gives the single call's bits.
TEST(HostOptimizer, SplitAdamWWithBf16StateGivesTheSingleCallsBits) {
  const size_t n = 100003;
  const std::vector<float> g = random_values(n, 1, -1.0f, 1.0f);
  std::vector<float> w = random_values(n, 2, -2.0f, 2.0f), w0 = w;
  std::vector<spw::bf16> m(n), v(n);
  const std::vector<float> mf = random_values(n, 3, -0.1f, 0.1f),
                           vf = random_values(n, 4, 0.0f, 0.01f);
  spw::round_to_bf16(mf.data(), m.data(), int64_t(n));
  spw::round_to_bf16(vf.data(), v.data(), int64_t(n));
  std::vector<spw::bf16> m0 = m, v0 = v;
  const spw::AdamWHparams h{1e-2, 0.9, 0.999, 1e-8, 0.01};
  spw::adamw_kernel(w0.data(), m0.data(), v0.data(), g.data(), int64_t(n), 3,
                    h);
  HostTasks tasks(3);
  std::vector<Token> tokens =
      spw::submit_adamw_tasks(tasks, "adamw 'w'", w.data(), m.data(), v.data(),
                              g.data(), int64_t(n), 3, h, 1000, nullptr);
  EXPECT_EQ(tokens.size(), 3u);
  for (const Token &t : tokens)
    t.wait();
  EXPECT_TRUE(same_bits(w, w0));
  EXPECT_EQ(std::memcmp(m.data(), m0.data(), n * 2), 0);
  EXPECT_EQ(std::memcmp(v.data(), v0.data(), n * 2), 0);
  tasks.wait_all();
}

TEST(HostOptimizer, SplitAdamWGivesTheSingleCallsBits) {
  const size_t n = 100003; // not a multiple of the pieces
  const std::vector<float> g = random_values(n, 1, -1.0f, 1.0f);
  std::vector<float> w = random_values(n, 2, -2.0f, 2.0f), w0 = w;
  std::vector<float> m = random_values(n, 3, -0.1f, 0.1f), m0 = m;
  std::vector<float> v = random_values(n, 4, 0.0f, 0.01f), v0 = v;
  const spw::AdamWHparams h{1e-2, 0.9, 0.999, 1e-8, 0.01};
  spw::adamw_kernel(w0.data(), m0.data(), v0.data(), g.data(), int64_t(n), 3,
                    h);
  HostTasks tasks(3);
  std::atomic<int64_t> busy{0};
  std::vector<Token> tokens =
      spw::submit_adamw_tasks(tasks, "adamw 'w'", w.data(), m.data(), v.data(),
                              g.data(), int64_t(n), 3, h, 1000, &busy);
  EXPECT_EQ(tokens.size(), 3u); // one per worker
  for (const Token &t : tokens)
    t.wait();
  EXPECT_TRUE(same_bits(w, w0));
  EXPECT_TRUE(same_bits(m, m0));
  EXPECT_TRUE(same_bits(v, v0));
  EXPECT_GT(busy.load(), 0);
  // Small updates stay whole.
  EXPECT_EQ(spw::submit_adamw_tasks(tasks, "small", w.data(), m.data(),
                                    v.data(), g.data(), 999, 4, h, 1000,
                                    nullptr)
                .size(),
            1u);
  tasks.wait_all();
}

TEST(HostOptimizer, SplitFoamGivesTheSingleCallsBits) {
  const int64_t rows = 37, cols = 70, level = 2;
  const int64_t nb = (cols + 3) / 4;
  const std::vector<float> g =
      random_values(size_t(rows * cols), 5, -1.0f, 1.0f);
  std::vector<float> w = random_values(size_t(rows * cols), 6, -2, 2), w0 = w;
  std::vector<float> m = random_values(size_t(rows * nb), 7, -0.1f, 0.1f),
                     m0 = m;
  std::vector<float> v = random_values(size_t(rows * nb), 8, 0, 0.01f), v0 = v;
  const spw::AdamWHparams h{1e-2, 0.9, 0.999, 1e-8, 0.01};
  spw::foam_kernel(w0.data(), m0.data(), v0.data(), g.data(), rows, cols, level,
                   2, h, 0.25);
  HostTasks tasks(4);
  std::vector<Token> tokens = spw::submit_foam_tasks(
      tasks, "foam 'w'", w.data(), m.data(), v.data(), g.data(), rows, cols,
      level, 2, h, 0.25, 500, nullptr);
  EXPECT_EQ(tokens.size(), 4u);
  for (const Token &t : tokens)
    t.wait();
  EXPECT_TRUE(same_bits(w, w0));
  EXPECT_TRUE(same_bits(m, m0));
  EXPECT_TRUE(same_bits(v, v0));
}

// An offload plan with a parameter of 3 * 2^16 + 5 elements and its AdamW
// state homed on host (the CPU optimizer): spw_adamw hands the update to
// three worker tasks and returns; the move of the parameters to the GPU
// waits for them, so the GPU copy has the update's result, bit for bit the
// inline kernel's; the step end frees the recorded gradient.
TEST(HostOptimizer, PlanUpdateBoundOnHostRunsAsTasksTheNextMoveWaitsFor) {
  const int64_t n = 3 * spw::kHostUpdateMinElems + 5;
  const uint64_t bytes = uint64_t(n) * 4, slot = (bytes + 4095) / 4096 * 4096;
  auto ctx = spw::make_context();
  spw_declare_param(ctx.get(), "w", SPW_F32, 1, &n, 0);
  const std::vector<float> w0 = random_values(size_t(n), 9, -1.0f, 1.0f);
  std::memcpy(ctx->params[0].value->data, w0.data(), bytes);
  const int64_t predicted[4] = {0, 0, 0, 0};
  spw_declare_tiers(ctx.get(), int64_t(slot), int64_t(3 * slot), 0, "",
                    predicted);
  const int64_t members[] = {0}, offsets[] = {0};
  spw_declare_block(ctx.get(), 0, 0, int64_t(bytes), 1, 0, 1, members, offsets);
  spw_declare_block(ctx.get(), 1, 0, int64_t(2 * bytes), 1, int64_t(slot), 1,
                    members, offsets);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);
  spw::host_optimizer_configure(ctx.get(), 3);
  spw::tiers_scatter(ctx.get());
  ctx->step = 1;
  spw::tiers_step_begin(ctx.get());
  spw_bind(ctx.get(), 1, 0, 1);
  spw_bind(ctx.get(), 0, 0, 1);
  ASSERT_TRUE(spw::host_optimizer_runs(ctx.get(), ctx->params[0]));
  const std::vector<float> g = random_values(size_t(n), 10, -1.0f, 1.0f);
  auto grad = spwtest::f32({n}, g);
  const spw::AdamWHparams h{1e-2, 0.9, 0.999, 1e-8, 0.01};
  spw_adamw(ctx.get(), 0, grad.get(), h.lr, h.beta1, h.beta2, h.eps,
            h.weight_decay);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  spw::HostOptimizer &o = *spw::tiers_host_optimizer(ctx.get());
  ASSERT_EQ(o.in_flight.size(), 1u);
  EXPECT_EQ(o.in_flight[0].tokens.size(), 3u);
  // The update holds the recorded gradient; ParamInfo::grad keeps none.
  EXPECT_TRUE(o.in_flight[0].recorded.size() == bytes ||
              o.in_flight[0].tokens[0].done());
  EXPECT_EQ(ctx->params[0].grad.capacity(), 0u);

  const int32_t t = spw_move(ctx.get(), 0, 0, 1, 0, 0, 0);
  for (const Token &u : o.in_flight[0].tokens)
    EXPECT_TRUE(u.done()); // the move issued after the update had run
  spw_await(ctx.get(), t);
  spw_bind(ctx.get(), 0, 0, 0);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  std::vector<float> want = w0, m(size_t(n), 0.0f), v(size_t(n), 0.0f);
  spw::adamw_kernel(want.data(), m.data(), v.data(), g.data(), n, 1, h);
  std::vector<float> got(static_cast<size_t>(n));
  std::memcpy(got.data(), ctx->params[0].value->data, bytes);
  EXPECT_TRUE(same_bits(got, want));
  // The GPU copy is bound now: another update would run inline.
  EXPECT_FALSE(spw::host_optimizer_runs(ctx.get(), ctx->params[0]));

  spw::tiers_step_end(ctx.get());
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  EXPECT_TRUE(o.in_flight.empty());
  EXPECT_GT(spw::host_optimizer_seconds(ctx.get()), 0.0);
  EXPECT_EQ(spw::host_optimizer_seconds(ctx.get()),
            spw::host_optimizer_total_seconds(ctx.get()));
  const spw::ParamInfo &p = ctx->params[0];
  EXPECT_EQ(p.grad.capacity(), 0u);

  // Gathered, the plain copies hold the update and its state.
  spw::tiers_gather(ctx.get());
  EXPECT_TRUE(same_bits(
      std::vector<float>(p.value->as<float>(), p.value->as<float>() + n),
      want));
  EXPECT_TRUE(same_bits(p.adam_m, m));
  EXPECT_TRUE(same_bits(p.adam_v, v));
}

// The recorded gradients the running updates hold are bounded: with the
// workers busy (a task that sleeps first), two updates of 12 MiB gradients
// hold theirs; the third waits for the oldest, which then frees its copy,
// so no more than kRecordedBytesInFlight besides the newest are held.
TEST(HostOptimizer, RecordedGradientsInFlightAreBounded) {
  const int64_t n = int64_t(3) << 20; // 12 MiB of float32
  const uint64_t bytes = uint64_t(n) * 4;
  ASSERT_LE(2 * bytes, spw::kRecordedBytesInFlight);
  ASSERT_GT(3 * bytes, spw::kRecordedBytesInFlight);
  auto ctx = spw::make_context();
  for (const char *name : {"a", "b", "c"})
    spw_declare_param(ctx.get(), name, SPW_F32, 1, &n, 0);
  const int64_t predicted[4] = {0, 0, 0, 0};
  spw_declare_tiers(ctx.get(), 4096, int64_t(9 * bytes), 0, "", predicted);
  const int64_t members[] = {0, 1, 2};
  const int64_t offsets[] = {0, int64_t(bytes), int64_t(2 * bytes)};
  spw_declare_block(ctx.get(), 0, 0, int64_t(3 * bytes), 1, 0, 3, members,
                    offsets);
  spw_declare_block(ctx.get(), 1, 0, int64_t(6 * bytes), 1,
                    int64_t(3 * bytes), 3, members, offsets);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);
  spw::host_optimizer_configure(ctx.get(), 1);
  spw::tiers_scatter(ctx.get());
  ctx->step = 1;
  spw::tiers_step_begin(ctx.get());
  spw_bind(ctx.get(), 1, 0, 1);
  spw_bind(ctx.get(), 0, 0, 1);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  spw::HostOptimizer &o = *spw::tiers_host_optimizer(ctx.get());
  o.tasks = std::make_unique<HostTasks>(1);
  const Token busy = o.tasks->submit("busy", [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  });
  const std::vector<float> g(size_t(n), 0.5f);
  auto grad = spwtest::f32({n}, g);
  const spw::AdamWHparams h{1e-2, 0.9, 0.999, 1e-8, 0.01};
  auto held = [&] {
    uint64_t sum = 0;
    for (const spw::HostOptimizer::Update &u : o.in_flight)
      sum += u.recorded.size();
    return sum;
  };
  for (int32_t i = 0; i < 2; ++i)
    spw_adamw(ctx.get(), i, grad.get(), h.lr, h.beta1, h.beta2, h.eps,
              h.weight_decay);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  EXPECT_FALSE(busy.done());
  EXPECT_EQ(held(), 2 * bytes);
  spw_adamw(ctx.get(), 2, grad.get(), h.lr, h.beta1, h.beta2, h.eps,
            h.weight_decay);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  ASSERT_EQ(o.in_flight.size(), 3u);
  EXPECT_TRUE(o.in_flight[0].recorded.empty());
  for (const Token &t : o.in_flight[0].tokens)
    EXPECT_TRUE(t.done());
  EXPECT_LE(held(), spw::kRecordedBytesInFlight + bytes);
  spw::tiers_step_end(ctx.get());
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
}

// A failed update surfaces wherever its blocks' host copies are used next
// (so each of these waits for it) and fails the step naming the parameter.
TEST(HostOptimizer, AFailedUpdateFailsWhatUsesItsBlocksNamingTheParameter) {
  auto ctx = spw::make_context();
  const int64_t n = 64;
  spw_declare_param(ctx.get(), "w", SPW_F32, 1, &n, 0);
  const int64_t predicted[4] = {0, 0, 0, 0};
  spw_declare_tiers(ctx.get(), 4096, 8192, 0, "", predicted);
  const int64_t members[] = {0}, offsets[] = {0};
  spw_declare_block(ctx.get(), 0, 0, 256, 0, 0, 1, members, offsets);
  spw_declare_block(ctx.get(), 1, 0, 512, 1, 0, 1, members, offsets);
  spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);
  spw::tiers_scatter(ctx.get());
  ctx->step = 1;
  spw::tiers_step_begin(ctx.get());
  const int32_t t = spw_move(ctx.get(), 0, 0, 0, 1, 0, 4096);
  spw_await(ctx.get(), t);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;

  spw::HostOptimizer &o = *spw::tiers_host_optimizer(ctx.get());
  o.tasks = std::make_unique<HostTasks>(1);
  const Token bad =
      o.tasks->submit("adamw 'w' [0, 64)", [] { spw::fail("disk on fire"); });
  spw::tiers_note_host_update(ctx.get(), 0, 3, bad);
  spw::HostOptimizer::Update u;
  u.param = 0;
  u.end = n;
  u.tokens = {bad};
  o.in_flight.push_back(std::move(u));

  const std::string why = "adamw 'w' [0, 64): disk on fire";
  spw_bind(ctx.get(), 0, 0, 1);
  EXPECT_EQ(ctx->error, "spw_bind: " + why);
  ctx->error.clear();
  spw_move(ctx.get(), 1, 0, 1, 0, 0, 0); // the state's host copy is read
  EXPECT_EQ(ctx->error, "spw_move: " + why);
  ctx->error.clear();
  spw_drop(ctx.get(), 0, 0, 1);
  EXPECT_EQ(ctx->error, "spw_drop: " + why);
  ctx->error.clear();
  spw::tiers_step_end(ctx.get());
  EXPECT_EQ(ctx->error, "the CPU optimizer's " + why);
  ctx->error.clear();
  // Reported at the step end, the update is not in flight any more.
  EXPECT_TRUE(o.in_flight.empty());
  EXPECT_NO_THROW(spw::tiers_gather(ctx.get()));
}

TEST(HostOptimizer, ThreadsAreConfiguredBeforeTheFirstUpdateOnly) {
  auto ctx = spw::make_context();
  EXPECT_THROW(spw::host_optimizer_configure(ctx.get(), 2), spw::Error);
  const int64_t predicted[4] = {0, 0, 0, 0};
  spw_declare_tiers(ctx.get(), 4096, 4096, 0, "", predicted);
  EXPECT_NO_THROW(spw::host_optimizer_configure(ctx.get(), 2));
  EXPECT_THROW(spw::host_optimizer_configure(ctx.get(), -1), spw::Error);
  EXPECT_EQ(spw::host_optimizer_seconds(ctx.get()), 0.0);
}

} // namespace
