//===- device_test.cpp - the arena allocator, the CPU and loopback devices -===//

#include "bf16.h"
#include "context.h"
#include "device.h"

#include "storage/tensor_store.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

using namespace spw;

namespace {

// The op tables come from kernels.def: names, entry points and arities in
// its order, concat's input count read from its iattrs[1].
TEST(OpTable, NamesEntriesAndAritiesFollowKernelsDef) {
  EXPECT_STREQ(op_name(Op::matmul), "matmul");
  EXPECT_STREQ(op_name(Op::attention_grad), "attention_grad");
  EXPECT_EQ(entry_point(Op::less_or_equal), &spw_op_less_or_equal);
  const Arity lng = op_arity(Op::layer_norm_grad, nullptr);
  EXPECT_EQ(lng.ins, 3);
  EXPECT_EQ(lng.outs, 3);
  const Arity ag = op_arity(Op::attention_grad, nullptr);
  EXPECT_EQ(ag.ins, 4);
  EXPECT_EQ(ag.outs, 3);
  const int64_t concat_attrs[] = {1, 5};
  EXPECT_EQ(op_arity(Op::concat, concat_attrs).ins, 5);
  EXPECT_EQ(op_arity(Op::concat, nullptr).ins, 0);
  EXPECT_EQ(op_arity(Op::relu, nullptr).ins, 1);
}

TEST(ArenaAllocator, AlignsAndCountsAndRunsOut) {
  ArenaAllocator a(4096);
  EXPECT_EQ(a.capacity(), 4096);
  const int64_t x = a.allocate(1), y = a.allocate(257);
  EXPECT_EQ(x, 0);
  EXPECT_EQ(y, 256); // 1 byte still takes a 256-byte slot
  EXPECT_EQ(a.in_use(), 256 + 512);
  EXPECT_EQ(a.peak(), 768);
  EXPECT_EQ(a.allocate(4096), -1); // does not fit
  EXPECT_EQ(a.largest_free(), 4096 - 768);
}

TEST(ArenaAllocator, FreeMergesNeighboursAndBestFitReuses) {
  ArenaAllocator a(8 * 256);
  const int64_t b0 = a.allocate(256), b1 = a.allocate(512),
                b2 = a.allocate(256), b3 = a.allocate(256);
  ASSERT_EQ(b3, 1024);
  EXPECT_EQ(a.free(b1), 512);
  EXPECT_EQ(a.free(b1), -1); // twice: not an allocation any more
  // Best fit: a 256-byte request takes the smallest fitting range, the
  // 512-byte hole (the tail has 768).
  EXPECT_EQ(a.allocate(256), 256);
  EXPECT_EQ(a.free(b0), 256);
  EXPECT_EQ(a.free(256), 256);
  // 0..768 is one free range again (b0, the reused slot, the rest of b1).
  EXPECT_EQ(a.allocate(768), 0);
  EXPECT_EQ(a.free(b2), 256);
  EXPECT_EQ(a.free(b3), 256);
  EXPECT_EQ(a.free(0), 768);
  EXPECT_EQ(a.in_use(), 0);
  EXPECT_EQ(a.largest_free(), 8 * 256); // all merged
  EXPECT_EQ(a.peak(), 1280);            // the high-water mark stays
}

TEST(ArenaAllocator, ResetFreesEverything) {
  ArenaAllocator a(1024);
  a.allocate(1000);
  EXPECT_EQ(a.allocate(100), -1);
  a.reset();
  EXPECT_EQ(a.in_use(), 0);
  EXPECT_EQ(a.allocate(1024), 0);
}

TEST(LoopbackDevice, MemoryIsNotTheHostsAndReleasedMemoryReadsNaN) {
  auto d = make_loopback_device(1 << 20, Precision::FP32);
  const std::vector<float> v = {1.0f, -2.5f, 3.25f, 0.0f};
  float *p = static_cast<float *>(d->step_alloc(16, "t"));
  // Fresh step memory reads back as NaN.
  std::vector<float> back(4);
  d->download(back.data(), p, 16);
  for (float x : back)
    EXPECT_TRUE(std::isnan(x));
  d->upload(p, v.data(), 16);
  d->download(back.data(), p, 16);
  EXPECT_EQ(back, v);
  // Host code reading the device bytes directly does not see the values.
  EXPECT_NE(std::memcmp(p, v.data(), 16), 0);
  d->step_free(p);
  d->download(back.data(), p, 16);
  for (float x : back)
    EXPECT_TRUE(std::isnan(x));
  EXPECT_EQ(d->step_bytes_in_use(), 0);
  EXPECT_EQ(d->step_bytes_peak(), 256);
}

TEST(LoopbackDevice, RejectsCopiesOutsideItsMemory) {
  auto d = make_loopback_device(1 << 20, Precision::FP32);
  float host[4] = {};
  EXPECT_THROW(d->upload(host, host, 16), Error);
  EXPECT_THROW(d->step_alloc(int64_t(2) << 20, "too big"), Error);
}

} // namespace

namespace {

TEST(StepTensors, ViewSharesDataAndReleaseFreesOnlyTheRoot) {
  auto ctx = make_context();
  const int64_t d23[] = {2, 3}, d6[] = {6}, d5[] = {5};
  spw_tensor *t = spw_alloc(ctx.get(), SPW_F32, 2, d23);
  spw_tensor *v = spw_view(ctx.get(), t, SPW_F32, 1, d6);
  ASSERT_FALSE(ctx->failed()) << ctx->error;
  EXPECT_EQ(v->data, t->data);
  EXPECT_EQ(v->numel, 6);
  spw_release(ctx.get(), v); // a view owns nothing
  EXPECT_EQ(v->data, t->data);
  spw_release(ctx.get(), t);
  EXPECT_EQ(t->data, nullptr);
  spw_release(ctx.get(), t); // twice: nothing
  EXPECT_FALSE(ctx->failed()) << ctx->error;
  spw_view(ctx.get(), t, SPW_F32, 1, d6);
  EXPECT_NE(ctx->error.find("view [6] of a released tensor [2,3]"),
            std::string::npos)
      << ctx->error;
  ctx->error.clear();
  spw_tensor *u = spw_alloc(ctx.get(), SPW_F32, 2, d23);
  spw_view(ctx.get(), u, SPW_F32, 1, d5);
  EXPECT_NE(ctx->error.find("the dtype and the element count must be the "
                            "same"),
            std::string::npos)
      << ctx->error;
}

// spw_param_work (bf16-mixed without an offload plan): the value rounded
// to nearest even, on the device, made again after a write of the value
// (here a load: device_push_param) and not before; not released with the
// step's tensors; and refused for a parameter that is not f32.
TEST(StepTensors, ParamWorkIsTheRoundedValueAfterEveryWrite) {
  for (bool loopback : {false, true}) {
    SCOPED_TRACE(loopback ? "loopback" : "cpu");
    auto ctx = make_context();
    const int64_t d[] = {4};
    spw_declare_param(ctx.get(), "w", SPW_F32, 1, d, 0);
    spw_declare_param(ctx.get(), "ids", SPW_I64, 1, d, 16);
    ASSERT_FALSE(ctx->failed()) << ctx->error;
    ParamInfo &p = ctx->params[0];
    // Halfway cases round to even, either way; a carry steps the exponent.
    const float first[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f,
                           0x1.fffffep0f};
    std::memcpy(p.value->data, first, sizeof first);
    device_start(ctx.get(), loopback ? make_loopback_device(1 << 20,
                                                            Precision::FP32)
                                     : make_cpu_device());
    auto read = [&] {
      spw_tensor *w = spw_param_work(ctx.get(), 0);
      EXPECT_FALSE(ctx->failed()) << ctx->error;
      EXPECT_EQ(w->dtype, SPW_BF16);
      std::vector<uint16_t> host(4);
      ctx->device->download(host.data(), w->data, 8);
      return host;
    };
    auto rounded = [](const float *v) {
      std::vector<uint16_t> r;
      for (int i = 0; i < 4; ++i)
        r.push_back(to_bf16(v[i]).bits);
      return r;
    };
    EXPECT_EQ(read(), rounded(first));
    EXPECT_EQ(read(), std::vector<uint16_t>({0x3f80, 0x3f82, 0xc020, 0x4000}));
    // A write the runtime is not told of is not seen: the copy is made once
    // per write, not at every read.
    const float second[] = {0.5f, -0.25f, 3.0f + 0x1p-7f, 1e-3f};
    std::memcpy(p.value->data, second, sizeof second);
    EXPECT_EQ(read(), rounded(first));
    device_push_param(ctx.get(), 0);
    EXPECT_EQ(read(), rounded(second));
    spw_tensor *w = spw_param_work(ctx.get(), 0);
    void *data = w->data;
    spw_release(ctx.get(), w);
    EXPECT_EQ(w->data, data);
    spw_param_work(ctx.get(), 1);
    EXPECT_TRUE(ctx->failed());
    EXPECT_NE(ctx->error.find("parameter 'ids' is i64; only an f32 parameter "
                              "has a bf16 working copy"),
              std::string::npos)
        << ctx->error;
  }
}

TEST(StepTensors, ParametersAndInputsAreNotReleased) {
  auto ctx = make_context();
  const int64_t d[] = {4};
  spw_declare_param(ctx.get(), "w", SPW_F32, 1, d, 0);
  spw_declare_input(ctx.get(), "x", SPW_F32, 1, d);
  ASSERT_FALSE(ctx->failed()) << ctx->error;
  spw_tensor *w = spw_param(ctx.get(), 0);
  void *data = w->data;
  spw_release(ctx.get(), w);
  EXPECT_EQ(w->data, data);
  EXPECT_FALSE(ctx->failed()) << ctx->error;
}

} // namespace

namespace {

// The CPU device is host memory: kernels run on the tensors in place, copies
// within one buffer are nothing, and the offload plan's GPU tier is a
// CpuDeviceMemory.
TEST(CpuDevice, HostMemoryKernelsInPlaceAndItsTierMemory) {
  auto d = make_cpu_device();
  EXPECT_EQ(d->name(), "cpu");
  EXPECT_TRUE(d->host_visible());
  EXPECT_EQ(d->step_arena_bytes(), 0);
  void *a = d->step_alloc(100, "a");
  void *b = d->step_alloc(28, "b");
  EXPECT_EQ(d->step_bytes_in_use(), 128);
  d->step_free(a);
  EXPECT_EQ(d->step_bytes_in_use(), 28);
  EXPECT_EQ(d->step_bytes_peak(), 128);
  d->step_free(&a); // not a step allocation: ignored
  d->reset_step();
  EXPECT_EQ(d->step_bytes_in_use(), 0);
  (void)b;

  float host[4] = {1, 2, 3, 4}, back[4] = {};
  auto *buf = static_cast<float *>(d->alloc(16, "buf"));
  d->upload(buf, host, 16);
  d->upload(buf, buf, 16); // one buffer: nothing to copy
  d->download(back, buf, 16);
  EXPECT_EQ(std::memcmp(back, host, 16), 0);
  d->fill(buf, 0, 16);
  EXPECT_EQ(buf[3], 0.0f); // the host reads device memory in place
  d->release(buf);

  // A kernel through the device: the CPU kernel on the tensors' own data.
  auto ctx = make_context();
  const int64_t dims[] = {3};
  auto x = make_tensor(SPW_F32, 1, dims, "x"),
       y = make_tensor(SPW_F32, 1, dims, "y");
  for (int i = 0; i < 3; ++i)
    x->as<float>()[i] = float(i) + 0.5f;
  spw_tensor *ins[] = {x.get(), x.get()}, *outs[] = {y.get()};
  spw_op_add(ctx.get(), ins, outs, nullptr, nullptr);
  ASSERT_FALSE(ctx->failed()) << ctx->error;
  EXPECT_EQ(y->as<float>()[2], 5.0f);

  // The optimizer is the CPU arithmetic, bit for bit.
  float w1[3] = {1, -2, 3}, m1[3] = {}, v1[3] = {}, g[3] = {0.5f, -1, 2};
  float w2[3] = {1, -2, 3}, m2[3] = {}, v2[3] = {};
  AdamWHparams h;
  d->adamw(w1, m1, v1, g, 3, h, 1);
  adamw_kernel(w2, m2, v2, g, 3, 1, h);
  EXPECT_EQ(std::memcmp(w1, w2, sizeof w1), 0);
  EXPECT_EQ(std::memcmp(v1, v2, sizeof v1), 0);

  auto tier = d->make_tier_memory(4096);
  EXPECT_STREQ(tier->kind(), "cpu");
  EXPECT_EQ(tier->size(), 4096u);
}

// Every context computes on a device: the CPU device until the run starts
// another, with the parameters' and inputs' host copies as its own (no
// second copy on a host-visible device).
TEST(CpuDevice, ContextsStartOnItWithoutASecondCopy) {
  auto ctx = make_context();
  ASSERT_NE(ctx->device, nullptr);
  EXPECT_TRUE(ctx->device->host_visible());
  const int64_t d[] = {4};
  spw_declare_param(ctx.get(), "w", SPW_F32, 1, d, 0);
  spw_declare_input(ctx.get(), "x", SPW_F32, 1, d);
  ASSERT_FALSE(ctx->failed()) << ctx->error;
  EXPECT_EQ(spw_param(ctx.get(), 0)->data, ctx->params[0].value->data);
  EXPECT_EQ(spw_input(ctx.get(), 0)->data, ctx->inputs[0].view->data);

  // Started as the driver starts it (the inputs loaded first).
  InputInfo &in = ctx->inputs[0];
  in.batches = alloc_buffer(2 * in.view->bytes());
  in.num_batches = 2;
  in.view->owned.reset();
  in.view->data = in.batches.get();
  device_start(ctx.get(), make_cpu_device());
  EXPECT_EQ(spw_param(ctx.get(), 0)->data, ctx->params[0].value->data);
  EXPECT_EQ(in.dev_batches, in.batches.get());
  EXPECT_FALSE(ctx->params[0].dev_m); // the state stays the host's
}

// The loopback device's GPU tier is memory of the device: kernels accept
// its addresses, it reads as NaN until a copy fills it, its bytes are not
// the host's, and a copy into it reads back through the device.
TEST(LoopbackDevice, TierMemoryIsDeviceMemory) {
  auto d = make_loopback_device(1 << 20, Precision::FP32);
  EXPECT_FALSE(d->host_visible());
  auto tier = d->make_tier_memory(4096);
  EXPECT_STREQ(tier->kind(), "loopback");
  float back[4] = {};
  d->download(back, tier->address(256), 16); // a device address
  EXPECT_TRUE(std::isnan(back[0]));
  const float host[4] = {1.5f, -2, 3, 4};
  const storage::Token t = tier->copy_h2d(256, host, 16, "x");
  tier->compute_waits(t);
  EXPECT_NE(std::memcmp(tier->address(256), host, 16), 0); // scrambled
  d->download(back, tier->address(256), 16);
  EXPECT_EQ(std::memcmp(back, host, 16), 0);
  d->register_host_memory(back, sizeof back); // nothing to pin
  d->unregister_host_memory(back);
}

} // namespace
