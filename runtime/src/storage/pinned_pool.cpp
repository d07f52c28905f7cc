//===- pinned_pool.cpp - the pinned staging pool --------------------------===//
//
// One anonymous mapping, populated up front and mlocked where the limit
// allows, carved first-fit into aligned blocks. Freed blocks are coalesced
// with their free neighbours so the pool does not fragment over a long run.
// It stays one mapping because two registrations cover it whole: the
// rings' fixed buffers and the device's page-locked memory
// (Device::register_host_memory(base(), size()), cudaHostRegister on the
// CUDA backend), so an SSD read lands where a DMA copy reads it.
//
//===----------------------------------------------------------------------===//

#include "storage/io_engine.h"

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <sys/mman.h>
#include <unistd.h>
#include <unordered_map>

namespace spw::storage {

struct PinnedPool::Impl {
  std::mutex mu;
  std::map<size_t, size_t> free_ranges; // offset -> length, disjoint
  std::unordered_map<size_t, size_t> used; // offset -> length
  size_t in_use = 0;
};

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// Transparent huge pages make the pool physically contiguous in 2 MiB runs.
// That matters for fixed buffers: a 1 MiB read_fixed from 4 KiB pages is 256
// segments, more than a virtio disk's max_segments (254), so the block layer
// splits every request in two and reads lose ~half their throughput; from
// huge pages the same request is one or a few segments.
constexpr size_t kHugePage = size_t(2) << 20;
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace detail {

// MADV_POPULATE_WRITE (Linux 5.14) answers EINVAL on older kernels: then
// every page is touched instead. Any other failure (ENOMEM above all: the
// memory is not there) is an error, because touching the pages would only
// hand the same shortage to the OOM killer.
void populate_pool(char *base, size_t size,
                   int (*advise)(void *, size_t, int)) {
  if (advise(base, size, MADV_POPULATE_WRITE) == 0)
    return;
  int e = errno;
  if (e == EINVAL) {
    size_t page = size_t(sysconf(_SC_PAGESIZE));
    for (size_t off = 0; off < size; off += page)
      base[off] = 0;
    return;
  }
  if (e == ENOMEM)
    fail("cannot populate a pinned staging pool of %s: out of memory; lower "
         "the pool size (spillway-iobench --buffer-pool) or free host memory",
         human_bytes(size).c_str());
  fail("cannot populate a pinned staging pool of %s: %s",
       human_bytes(size).c_str(), strerror(e));
}

} // namespace detail

PinnedPool::PinnedPool(size_t bytes) : impl_(std::make_unique<Impl>()) {
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  size_ = round_up(bytes ? bytes : page, page);
  // Map whole huge pages, plus one so the pool can start on a 2 MiB
  // boundary; the pool itself stays the size asked for.
  const size_t huge_span = round_up(size_, kHugePage);
  map_size_ = huge_span + kHugePage;
  void *p = mmap(nullptr, map_size_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    fail("cannot map a pinned staging pool of %zu bytes: %s", size_,
         strerror(errno));
  map_base_ = static_cast<char *>(p);
  base_ = reinterpret_cast<char *>(
      round_up(reinterpret_cast<uintptr_t>(map_base_), kHugePage));
  // Advice only: without THP the pool still works, from 4 KiB pages.
  madvise(base_, huge_span, MADV_HUGEPAGE);
  // Populate now, not on first I/O.
  try {
    detail::populate_pool(base_, size_, ::madvise);
  } catch (...) {
    munmap(map_base_, map_size_);
    base_ = nullptr;
    throw;
  }
  // Without the lock the pages stay populated; registration with a ring
  // pins them anyway. So a refused mlock is not an error.
  locked_ = mlock(base_, size_) == 0;
  impl_->free_ranges.emplace(0, size_);
}

PinnedPool::~PinnedPool() {
  if (base_) {
    if (locked_)
      munlock(base_, size_);
    munmap(map_base_, map_size_);
  }
}

void *PinnedPool::allocate(size_t bytes, size_t align) {
  if (align < 4096 || (align & (align - 1)))
    fail("pinned pool: alignment %zu is not a power of two >= 4096", align);
  bytes = round_up(bytes ? bytes : 1, 4096);
  auto base = reinterpret_cast<uintptr_t>(base_);
  std::lock_guard<std::mutex> lk(impl_->mu);
  auto &fr = impl_->free_ranges;
  for (auto it = fr.begin(); it != fr.end(); ++it) {
    size_t start = it->first, len = it->second;
    size_t a = round_up(base + start, align) - base;
    if (a + bytes > start + len)
      continue;
    fr.erase(it);
    if (a > start)
      fr.emplace(start, a - start);
    if (a + bytes < start + len)
      fr.emplace(a + bytes, start + len - (a + bytes));
    impl_->used.emplace(a, bytes);
    impl_->in_use += bytes;
    return base_ + a;
  }
  return nullptr;
}

void PinnedPool::free(void *p) {
  if (!p)
    return;
  if (!contains(p, 1))
    fail("pinned pool: freeing %p, which is not in the pool", p);
  size_t off = size_t(static_cast<char *>(p) - base_);
  std::lock_guard<std::mutex> lk(impl_->mu);
  auto u = impl_->used.find(off);
  if (u == impl_->used.end())
    fail("pinned pool: freeing %p, which is not an allocated block", p);
  size_t len = u->second;
  impl_->used.erase(u);
  impl_->in_use -= len;
  auto &fr = impl_->free_ranges;
  auto next = fr.lower_bound(off);
  if (next != fr.end() && next->first == off + len) {
    len += next->second;
    next = fr.erase(next);
  }
  if (next != fr.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += len;
      return;
    }
  }
  fr.emplace(off, len);
}

size_t PinnedPool::bytes_in_use() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->in_use;
}

} // namespace spw::storage
