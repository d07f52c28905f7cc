//===- loopback_memory_test.cpp - the loopback device's GPU tier ----------===//
//
// Bytes arrive scrambled on the device side and unscrambled on the host
// side; a destination reads as NaN until its copy's token completes; each
// direction completes in issue order on its own thread; delays are a pure
// function of the seed; bad ranges are errors naming the tensor. Nothing
// here depends on how long a copy takes: the "before completion" cases use
// delays of tens of seconds that the destructor cuts short.
//
//===----------------------------------------------------------------------===//
#include "device.h"
#include "loopback_memory.h"

#include "storage/tensor_store.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <set>
#include <vector>

using spw::loopback_copy_delay_us;
using spw::LoopbackCopyOptions;
using spw::make_loopback_tier_memory;
using spw::storage::DeviceMemory;
using spw::storage::Token;

namespace {

constexpr uint64_t kArena = 1 << 20;
constexpr int64_t kLongDelay = 60'000'000; // 60 s: never waited out

std::string expect_error(const std::function<void()> &f) {
  try {
    f();
  } catch (const spw::Error &e) {
    return e.what();
  }
  ADD_FAILURE() << "expected spw::Error";
  return "";
}

std::vector<uint8_t> pattern(size_t n, uint8_t salt) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = uint8_t(i * 131 + salt * 17 + (i >> 8));
  return v;
}

// The device-side bytes at `p`, unscrambled.
std::vector<uint8_t> device_bytes(const void *p, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = uint8_t(static_cast<const uint8_t *>(p)[i] ^ spw::kLoopbackScramble);
  return v;
}

bool all_nan(const std::vector<uint8_t> &bytes) {
  for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    float f;
    std::memcpy(&f, bytes.data() + i, 4);
    if (!std::isnan(f))
      return false;
  }
  return true;
}

// A seed whose first copy in direction `slow_d2h` waits at least half of
// kLongDelay and whose first copy in the other direction waits at most 1%.
uint64_t seed_with_slow_first_copy(bool slow_d2h) {
  for (uint64_t seed = 1; seed < 100000; ++seed) {
    LoopbackCopyOptions o{seed, kLongDelay};
    if (loopback_copy_delay_us(o, slow_d2h, 0) >= kLongDelay / 2 &&
        loopback_copy_delay_us(o, !slow_d2h, 0) <= kLongDelay / 100)
      return seed;
  }
  ADD_FAILURE() << "no such seed";
  return 1;
}

struct Arena {
  std::vector<char> mem = std::vector<char>(kArena);
  char *base() { return mem.data(); }
};

} // namespace

TEST(LoopbackMemory, DataArrivesScrambledOnTheDeviceAndPlainOnTheHost) {
  for (uint64_t seed : {uint64_t(0), uint64_t(1), uint64_t(42)}) {
    Arena a;
    auto dev = make_loopback_tier_memory(a.base(), kArena, {seed, 100});
    EXPECT_STREQ(dev->kind(), "loopback");
    EXPECT_EQ(dev->size(), kArena);
    EXPECT_EQ(dev->address(4096), a.base() + 4096);
    const std::vector<uint8_t> in = pattern(300001, uint8_t(seed));
    Token up = dev->copy_h2d(4096, in.data(), in.size(), "x");
    dev->compute_waits(up);
    EXPECT_TRUE(up.done());
    for (size_t i = 0; i < in.size(); ++i)
      ASSERT_EQ(uint8_t(a.mem[4096 + i]),
                uint8_t(in[i] ^ spw::kLoopbackScramble))
          << "seed " << seed << " byte " << i;
    std::vector<uint8_t> out(in.size());
    Token down = dev->copy_d2h(out.data(), 4096, out.size(), "x");
    down.wait();
    EXPECT_EQ(out, in) << "seed " << seed;
    // Zero bytes: nothing to do, an already complete token.
    EXPECT_TRUE(dev->copy_h2d(0, nullptr, 0, "empty").done());
    EXPECT_TRUE(dev->copy_d2h(nullptr, kArena, 0, "empty").done());
  }
}

TEST(LoopbackMemory, AnUploadReadsAsNaNUntilItCompletes) {
  Arena a;
  std::memset(a.base(), spw::kLoopbackScramble, kArena); // device zeros
  const std::vector<uint8_t> in = pattern(65536, 3);
  Token up;
  {
    auto dev = make_loopback_tier_memory(
        a.base(), kArena, {seed_with_slow_first_copy(false), kLongDelay});
    up = dev->copy_h2d(8192, in.data(), in.size(), "blocks.0.w");
    // Issued, not complete: a kernel that forgot to wait reads NaN.
    EXPECT_TRUE(all_nan(device_bytes(a.base() + 8192, in.size())));
    EXPECT_FALSE(up.done());
    // Outside the copy nothing changed.
    EXPECT_EQ(device_bytes(a.base() + 8192 - 4, 4), std::vector<uint8_t>(4));
    EXPECT_EQ(device_bytes(a.base() + 8192 + in.size(), 4),
              std::vector<uint8_t>(4));
  } // the destructor finishes the queued copy without its delay
  EXPECT_TRUE(up.done());
  EXPECT_EQ(device_bytes(a.base() + 8192, in.size()), in);
}

TEST(LoopbackMemory, ADownloadReadsAsNaNUntilItCompletes) {
  Arena a;
  const std::vector<uint8_t> data = pattern(4096, 9);
  for (size_t i = 0; i < data.size(); ++i)
    a.mem[i] = char(data[i] ^ spw::kLoopbackScramble);
  std::vector<float> host(1024 + 2, 1.0f);
  Token down;
  {
    auto dev = make_loopback_tier_memory(
        a.base(), kArena, {seed_with_slow_first_copy(true), kLongDelay});
    down = dev->copy_d2h(host.data() + 1, 0, 4096, "grads.3");
    for (int i = 1; i <= 1024; ++i)
      ASSERT_TRUE(std::isnan(host[size_t(i)])) << i;
    EXPECT_EQ(host[0], 1.0f);
    EXPECT_EQ(host[1025], 1.0f);
    EXPECT_FALSE(down.done());
  }
  EXPECT_TRUE(down.done());
  EXPECT_EQ(std::memcmp(host.data() + 1, data.data(), data.size()), 0);
}

TEST(LoopbackMemory, DirectionsHaveTheirOwnThreads) {
  // The first upload waits ~a minute; a download issued after it completes
  // at once (it would wait behind the upload on a shared thread).
  Arena a;
  std::vector<uint8_t> in = pattern(4096, 1), out(4096);
  Token up, down;
  {
    auto dev = make_loopback_tier_memory(
        a.base(), kArena, {seed_with_slow_first_copy(false), kLongDelay});
    up = dev->copy_h2d(0, in.data(), in.size(), "a");
    down = dev->copy_d2h(out.data(), 65536, out.size(), "b");
    down.wait();
    EXPECT_FALSE(up.done());
  }
  EXPECT_TRUE(up.done());
}

TEST(LoopbackMemory, CopiesInOneDirectionCompleteInIssueOrder) {
  Arena a;
  const LoopbackCopyOptions o{7, 300};
  // Later copies often have shorter delays: the order is the queue's.
  bool shorter_later = false;
  for (uint64_t i = 0; i + 1 < 64; ++i)
    shorter_later |= loopback_copy_delay_us(o, false, i + 1) <
                     loopback_copy_delay_us(o, false, i);
  EXPECT_TRUE(shorter_later);
  auto dev = make_loopback_tier_memory(a.base(), kArena, o);
  constexpr int kCopies = 64;
  constexpr uint64_t kSlot = 8192;
  std::vector<std::vector<uint8_t>> in, out(kCopies);
  std::vector<Token> up, down;
  for (int i = 0; i < kCopies; ++i)
    in.push_back(pattern(kSlot - 7 * size_t(i), uint8_t(i)));
  for (int i = 0; i < kCopies; ++i)
    up.push_back(dev->copy_h2d(uint64_t(i) * kSlot, in[size_t(i)].data(),
                               in[size_t(i)].size(), "up"));
  for (int k : {kCopies / 3, kCopies - 1}) {
    up[size_t(k)].wait();
    for (int j = 0; j < k; ++j)
      EXPECT_TRUE(up[size_t(j)].done()) << j << " before " << k;
  }
  for (int i = 0; i < kCopies; ++i) {
    out[size_t(i)].resize(in[size_t(i)].size());
    down.push_back(dev->copy_d2h(out[size_t(i)].data(), uint64_t(i) * kSlot,
                                 out[size_t(i)].size(), "down"));
  }
  for (int k : {kCopies / 2, kCopies - 1}) {
    down[size_t(k)].wait();
    for (int j = 0; j < k; ++j)
      EXPECT_TRUE(down[size_t(j)].done()) << j << " before " << k;
  }
  for (int i = 0; i < kCopies; ++i)
    EXPECT_EQ(out[size_t(i)], in[size_t(i)]) << i;
}

TEST(LoopbackMemory, DelaysAreAPureFunctionOfTheSeed) {
  const LoopbackCopyOptions a{1, 200}, b{2, 200}, none{0, 200}, flat{5, 0};
  std::vector<int64_t> a_h2d, a_d2h, b_h2d;
  std::set<int64_t> seen;
  for (uint64_t i = 0; i < 1000; ++i) {
    a_h2d.push_back(loopback_copy_delay_us(a, false, i));
    a_d2h.push_back(loopback_copy_delay_us(a, true, i));
    b_h2d.push_back(loopback_copy_delay_us(b, false, i));
    EXPECT_EQ(loopback_copy_delay_us(a, false, i), a_h2d.back());
    EXPECT_EQ(loopback_copy_delay_us(none, false, i), 0);
    EXPECT_EQ(loopback_copy_delay_us(none, true, i), 0);
    EXPECT_EQ(loopback_copy_delay_us(flat, true, i), 0);
    for (int64_t d : {a_h2d.back(), a_d2h.back(), b_h2d.back()}) {
      EXPECT_GE(d, 0);
      EXPECT_LE(d, 200);
      seen.insert(d);
    }
  }
  EXPECT_NE(a_h2d, b_h2d);
  EXPECT_NE(a_h2d, a_d2h);
  // Spread over the range, both ends included.
  EXPECT_GT(seen.size(), 150u);
  EXPECT_LE(*seen.begin(), 2);
  EXPECT_GE(*seen.rbegin(), 198);
}

TEST(LoopbackMemory, BadCopiesAreErrorsNamingTheTensor) {
  Arena a;
  std::memset(a.base(), 0x11, kArena);
  auto dev = make_loopback_tier_memory(a.base(), kArena, {});
  std::vector<uint8_t> host(8192, 0x22);
  std::string e = expect_error(
      [&] { dev->copy_h2d(kArena - 4096, host.data(), 8192, "layers.2.w"); });
  EXPECT_NE(e.find("host-to-device copy of 'layers.2.w'"), std::string::npos)
      << e;
  EXPECT_NE(e.find("outside the 1 MiB loopback GPU arena"), std::string::npos)
      << e;
  e = expect_error(
      [&] { dev->copy_d2h(host.data(), kArena + 256, 1, "layers.2.m"); });
  EXPECT_NE(e.find("device-to-host copy of 'layers.2.m'"), std::string::npos)
      << e;
  // An offset + bytes that wraps around 2^64.
  e = expect_error(
      [&] { dev->copy_d2h(host.data(), 256, UINT64_MAX, "layers.2.v"); });
  EXPECT_NE(e.find("'layers.2.v'"), std::string::npos) << e;
  e = expect_error([&] { dev->copy_h2d(0, nullptr, 16, "emb"); });
  EXPECT_NE(e.find("host-to-device copy of 'emb': the host buffer is null"),
            std::string::npos)
      << e;
  // Refused before anything was poisoned or queued.
  for (size_t i = 0; i < kArena; ++i)
    ASSERT_EQ(a.mem[i], 0x11) << i;
  EXPECT_EQ(host, std::vector<uint8_t>(8192, 0x22));

  e = expect_error([&] { make_loopback_tier_memory(nullptr, 1, {}); });
  EXPECT_NE(e.find("no device buffer"), std::string::npos) << e;
  e = expect_error([&] { make_loopback_tier_memory(a.base(), 0, {}); });
  EXPECT_NE(e.find("size 0"), std::string::npos) << e;
  e = expect_error([&] { make_loopback_tier_memory(a.base(), 1, {1, -5}); });
  EXPECT_NE(e.find("max_delay_us -5"), std::string::npos) << e;
}

TEST(LoopbackMemory, TensorStoreMovesThroughIt) {
  // The store's moves over the loopback tier: what a kernel finds at the
  // GPU address after the upload's token is the host copy (scrambled), and
  // a download brings it back; delays on, several copies in flight.
  Arena a;
  spw::storage::PinnedPool pool(2 << 20);
  auto dev = make_loopback_tier_memory(a.base(), kArena, {11, 300});
  spw::storage::TensorStore store(*dev, pool, nullptr);
  std::vector<spw::storage::TensorId> ids;
  std::vector<std::vector<uint8_t>> data;
  std::vector<Token> ups;
  for (int i = 0; i < 24; ++i) {
    const size_t n = 1000 + size_t(i) * 1777;
    ids.push_back(store.add("t" + std::to_string(i), n));
    data.push_back(pattern(n, uint8_t(i + 1)));
    store.allocate(ids.back(), spw::storage::Tier::Host);
    std::memcpy(store.host_address(ids.back()), data.back().data(), n);
    ups.push_back(store.upload(ids.back()));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    dev->compute_waits(ups[i]);
    EXPECT_EQ(device_bytes(store.gpu_address(ids[i]), data[i].size()), data[i])
        << i;
    std::memset(store.host_address(ids[i]), 0, data[i].size());
  }
  std::vector<Token> downs;
  for (spw::storage::TensorId t : ids)
    downs.push_back(store.download(t));
  for (size_t i = 0; i < ids.size(); ++i) {
    downs[i].wait();
    EXPECT_EQ(
        std::memcmp(store.host_address(ids[i]), data[i].data(), data[i].size()),
        0)
        << i;
  }
  uint64_t total = 0;
  for (const auto &d : data)
    total += d.size();
  EXPECT_EQ(store.moved().h2d, total);
  EXPECT_EQ(store.moved().d2h, total);
}
