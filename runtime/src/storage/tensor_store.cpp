//===- tensor_store.cpp - tensors placed over GPU, pinned host and SSD ----===//

#include "storage/tensor_store.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/mman.h>

namespace spw::storage {

const char *tier_name(Tier t) {
  switch (t) {
  case Tier::Gpu:
    return "gpu";
  case Tier::Host:
    return "host";
  case Tier::Ssd:
    return "ssd";
  }
  return "?";
}

Tier parse_tier(const std::string &s) {
  if (s == "gpu")
    return Tier::Gpu;
  if (s == "host")
    return Tier::Host;
  if (s == "ssd")
    return Tier::Ssd;
  fail("unknown tier '%s' (expected gpu, host or ssd)", s.c_str());
}

static uint64_t round_up(uint64_t n, uint64_t g) { return (n + g - 1) / g * g; }

// ---- CpuDeviceMemory ------------------------------------------------------------

CpuDeviceMemory::CpuDeviceMemory(uint64_t bytes) : size_(bytes) {
  if (bytes == 0)
    fail("GPU arena: size 0");
  // Anonymous memory: pages are only touched when a tensor lands on them,
  // so a generous budget costs nothing until it is used.
  void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    fail("GPU arena (CPU backend): cannot map %s: %s",
         human_bytes(bytes).c_str(), std::strerror(errno));
  base_ = static_cast<char *>(p);
  h2d_.thread = std::thread(run, &h2d_);
  d2h_.thread = std::thread(run, &d2h_);
}

CpuDeviceMemory::~CpuDeviceMemory() {
  for (Worker *w : {&h2d_, &d2h_}) {
    {
      std::lock_guard<std::mutex> lock(w->mu);
      w->stop = true;
    }
    w->cv.notify_all();
    w->thread.join();
  }
  munmap(base_, size_);
}

void CpuDeviceMemory::run(Worker *w) {
  for (;;) {
    Copy c;
    {
      std::unique_lock<std::mutex> lock(w->mu);
      w->cv.wait(lock, [&] { return w->stop || !w->queue.empty(); });
      if (w->queue.empty())
        return; // stopping, and everything queued is done
      c = std::move(w->queue.front());
      w->queue.pop_front();
    }
    std::memcpy(c.dst, c.src, c.bytes);
    c.done->piece_done();
  }
}

void DeviceMemory::check_copy(uint64_t offset, const void *host,
                              uint64_t bytes, const char *dir,
                              const std::string &what,
                              const char *arena) const {
  if (offset > size() || bytes > size() - offset)
    fail("%s copy of '%s': bytes [%llu, %llu) lie outside the %s %s arena",
         dir, what.c_str(), (unsigned long long)offset,
         (unsigned long long)offset + bytes, human_bytes(size()).c_str(),
         arena);
  if (bytes > 0 && !host)
    fail("%s copy of '%s': the host buffer is null", dir, what.c_str());
}

Token CpuDeviceMemory::enqueue(Worker &w, void *dst, const void *src,
                               uint64_t bytes) {
  if (bytes == 0)
    return Token();
  auto done = std::make_shared<Completion>(1);
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.queue.push_back({dst, src, bytes, done});
  }
  w.cv.notify_one();
  return Token(done);
}

Token CpuDeviceMemory::copy_h2d(uint64_t offset, const void *host,
                                uint64_t bytes, const std::string &what) {
  check_copy(offset, host, bytes, "host-to-device", what);
  return enqueue(h2d_, base_ + offset, host, bytes);
}

Token CpuDeviceMemory::copy_d2h(void *host, uint64_t offset, uint64_t bytes,
                                const std::string &what) {
  check_copy(offset, host, bytes, "device-to-host", what);
  return enqueue(d2h_, host, base_ + offset, bytes);
}

// ---- TensorStore ------------------------------------------------------------------

TensorStore::TensorStore(DeviceMemory &gpu, PinnedPool &pool, SwapSpace *ssd,
                         const TensorStoreConfig &config)
    : gpu_(gpu), pool_(pool), ssd_(ssd) {
  Arena &g = arena(Tier::Gpu);
  g.granule = 256;
  g.capacity = gpu.size() / g.granule * g.granule;

  // Host extents are transferred to the SSD as they are, so they follow the
  // swap's O_DIRECT alignment (never below a page).
  Arena &h = arena(Tier::Host);
  h.granule = std::max<uint64_t>(4096, ssd ? ssd->align() : 4096);
  uint64_t want = config.host_bytes ? config.host_bytes : pool.size();
  want = want / h.granule * h.granule;
  if (want == 0)
    fail("host tier: %s is smaller than one %s block",
         human_bytes(config.host_bytes ? config.host_bytes : pool.size())
             .c_str(),
         human_bytes(h.granule).c_str());
  host_base_ = static_cast<char *>(pool.allocate(want, h.granule));
  if (!host_base_)
    fail("host tier: the pinned pool (%s, %s in use) has no free block of %s",
         human_bytes(pool.size()).c_str(),
         human_bytes(pool.bytes_in_use()).c_str(), human_bytes(want).c_str());
  h.capacity = want;

  Arena &s = arena(Tier::Ssd);
  if (ssd) {
    s.granule = std::max<uint64_t>(ssd->align(), 512);
    s.capacity = ssd->size() / s.granule * s.granule;
  }
}

TensorStore::~TensorStore() {
  wait_all();
  pool_.free(host_base_);
}

TensorStore::Tensor &TensorStore::tensor_locked(TensorId t) {
  if (t >= tensors_.size())
    fail("unknown tensor id %u (the store has %zu tensors)", t,
         tensors_.size());
  return tensors_[t];
}

const TensorStore::Tensor &TensorStore::tensor_locked(TensorId t) const {
  if (t >= tensors_.size())
    fail("unknown tensor id %u (the store has %zu tensors)", t,
         tensors_.size());
  return tensors_[t];
}

void TensorStore::check_tier(Tier tier) const {
  if (unsigned(tier) >= unsigned(kNumTiers))
    fail("unknown tier %d", int(tier));
  if (tier == Tier::Ssd && !ssd_)
    fail("the store has no SSD tier (no swap space was given)");
}

TensorId TensorStore::add(const std::string &name, uint64_t bytes, int tag) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes == 0)
    fail("tensor '%s': size 0", name.c_str());
  if (tag < 0 || tag >= kNumTags)
    fail("tensor '%s': tag %d outside [0, %d)", name.c_str(), tag, kNumTags);
  if (by_name_.count(name))
    fail("tensor '%s' is already in the store", name.c_str());
  TensorId id = TensorId(tensors_.size());
  tensors_.push_back(Tensor{name, bytes, {}, tag});
  by_name_.emplace(name, id);
  return id;
}

std::optional<TensorId> TensorStore::find(const std::string &name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_name_.find(name);
  if (it == by_name_.end())
    return std::nullopt;
  return it->second;
}

TensorId TensorStore::id(const std::string &name) const {
  if (auto t = find(name))
    return *t;
  fail("unknown tensor '%s'", name.c_str());
}

const std::string &TensorStore::name(TensorId t) const {
  std::lock_guard<std::mutex> lock(mu_);
  return tensor_locked(t).name; // names never change once added
}

uint64_t TensorStore::bytes(TensorId t) const {
  std::lock_guard<std::mutex> lock(mu_);
  return tensor_locked(t).bytes;
}

size_t TensorStore::num_tensors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tensors_.size();
}

uint64_t TensorStore::granule(Tier tier) const {
  check_tier(tier);
  return arena(tier).granule;
}

uint64_t TensorStore::extent_length(TensorId t, Tier tier) const {
  check_tier(tier);
  std::lock_guard<std::mutex> lock(mu_);
  return round_up(tensor_locked(t).bytes, arena(tier).granule);
}

std::optional<uint64_t> TensorStore::first_fit_locked(const Arena &a,
                                                      uint64_t len) const {
  uint64_t cursor = 0;
  for (const auto &[off, used] : a.used) {
    if (off >= cursor && off - cursor >= len)
      return cursor;
    cursor = std::max(cursor, off + used.first);
  }
  if (a.capacity >= cursor && a.capacity - cursor >= len)
    return cursor;
  return std::nullopt;
}

Extent TensorStore::insert_locked(TensorId t, Tier tier, uint64_t offset,
                                  bool explicit_) {
  Tensor &ten = tensor_locked(t);
  Arena &a = arena(tier);
  Copy &c = ten.copies[int(tier)];
  if (c.extent)
    fail("tensor '%s' already has a %s extent at [%llu, %llu); release it "
         "first",
         ten.name.c_str(), tier_name(tier),
         (unsigned long long)c.extent->offset,
         (unsigned long long)(c.extent->offset + c.extent->length));
  uint64_t len = round_up(ten.bytes, a.granule);
  if (!explicit_) {
    std::optional<uint64_t> at = first_fit_locked(a, len);
    if (!at) {
      uint64_t largest = 0, cursor = 0;
      for (const auto &[off, used] : a.used) {
        largest = std::max(largest, off - cursor);
        cursor = off + used.first;
      }
      largest = std::max(largest, a.capacity - cursor);
      fail("no room on the %s tier for tensor '%s': it needs %s (%llu "
           "bytes), %s of %s is free, the largest free range is %s",
           tier_name(tier), ten.name.c_str(), human_bytes(len).c_str(),
           (unsigned long long)len,
           human_bytes(a.capacity - a.in_use).c_str(),
           human_bytes(a.capacity).c_str(), human_bytes(largest).c_str());
    }
    offset = *at;
  } else {
    if (offset % a.granule)
      fail("tensor '%s': %s offset %llu is not a multiple of %llu",
           ten.name.c_str(), tier_name(tier), (unsigned long long)offset,
           (unsigned long long)a.granule);
    if (offset > a.capacity || len > a.capacity - offset)
      fail("tensor '%s': %s extent [%llu, %llu) lies outside the %s tier's "
           "%llu bytes",
           ten.name.c_str(), tier_name(tier), (unsigned long long)offset,
           (unsigned long long)(offset + len), tier_name(tier),
           (unsigned long long)a.capacity);
    auto next = a.used.lower_bound(offset + len);
    if (next != a.used.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second.first > offset)
        fail("tensor '%s': %s extent [%llu, %llu) overlaps tensor '%s' at "
             "[%llu, %llu)",
             ten.name.c_str(), tier_name(tier), (unsigned long long)offset,
             (unsigned long long)(offset + len),
             tensors_[prev->second.second].name.c_str(),
             (unsigned long long)prev->first,
             (unsigned long long)(prev->first + prev->second.first));
    }
  }
  a.used.emplace(offset, std::make_pair(len, t));
  a.in_use += len;
  a.peak = std::max(a.peak, a.in_use);
  c = Copy{};
  c.extent = Extent{offset, len};
  return *c.extent;
}

Extent TensorStore::allocate(TensorId t, Tier tier) {
  check_tier(tier);
  std::lock_guard<std::mutex> lock(mu_);
  reap_locked();
  return insert_locked(t, tier, 0, false);
}

Extent TensorStore::place(TensorId t, Tier tier, uint64_t offset) {
  check_tier(tier);
  std::lock_guard<std::mutex> lock(mu_);
  reap_locked();
  return insert_locked(t, tier, offset, true);
}

void TensorStore::release(TensorId t, Tier tier) {
  check_tier(tier);
  for (;;) {
    std::vector<Token> busy;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reap_locked();
      Tensor &ten = tensor_locked(t);
      Copy &c = ten.copies[int(tier)];
      if (!c.extent)
        return;
      if (c.readers == 0 && !c.filling) {
        Arena &a = arena(tier);
        a.used.erase(c.extent->offset);
        a.in_use -= c.extent->length;
        c = Copy{};
        return;
      }
      for (const Pending &p : pending_)
        if (p.tensor == t && (p.from == tier || p.to == tier))
          busy.push_back(p.token);
    }
    // The moves that use the copy report their own errors through their
    // tokens; here we only need them finished.
    for (const Token &tok : busy) {
      try {
        tok.wait();
      } catch (const Error &) {
      }
    }
  }
}

std::optional<Extent> TensorStore::extent(TensorId t, Tier tier) const {
  check_tier(tier);
  std::lock_guard<std::mutex> lock(mu_);
  return tensor_locked(t).copies[int(tier)].extent;
}

void *TensorStore::gpu_address(TensorId t) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Tensor &ten = tensor_locked(t);
  const Copy &c = ten.copies[int(Tier::Gpu)];
  if (!c.extent)
    fail("tensor '%s' has no copy on the gpu tier", ten.name.c_str());
  return gpu_.address(c.extent->offset);
}

void *TensorStore::host_address(TensorId t) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Tensor &ten = tensor_locked(t);
  const Copy &c = ten.copies[int(Tier::Host)];
  if (!c.extent)
    fail("tensor '%s' has no copy on the host tier", ten.name.c_str());
  return host_base_ + c.extent->offset;
}

std::string TensorStore::pending_desc_locked(TensorId t, Tier tier) const {
  for (const Pending &p : pending_)
    if (p.tensor == t && (p.from == tier || p.to == tier))
      return format("the move %s->%s", tier_name(p.from), tier_name(p.to));
  return "a move";
}

Token TensorStore::move(TensorId t, Tier from, Tier to, Priority prio) {
  check_tier(from);
  check_tier(to);
  std::lock_guard<std::mutex> lock(mu_);
  reap_locked();
  Tensor &ten = tensor_locked(t);
  bool link = (from == Tier::Ssd && to == Tier::Host) ||
              (from == Tier::Host && to == Tier::Gpu) ||
              (from == Tier::Gpu && to == Tier::Host) ||
              (from == Tier::Host && to == Tier::Ssd);
  if (!link)
    fail("tensor '%s': there is no %s->%s link (moves go ssd<->host<->gpu)",
         ten.name.c_str(), tier_name(from), tier_name(to));
  Copy &src = ten.copies[int(from)];
  if (!src.extent)
    fail("tensor '%s' is not resident on the %s tier (cannot move %s->%s)",
         ten.name.c_str(), tier_name(from), tier_name(from), tier_name(to));
  if (src.filling)
    fail("tensor '%s': its %s copy is still being filled by %s; wait on "
         "that move's token before moving it %s->%s",
         ten.name.c_str(), tier_name(from),
         pending_desc_locked(t, from).c_str(), tier_name(from),
         tier_name(to));
  if (!src.bad.empty())
    fail("tensor '%s': its %s copy is invalid, the move that filled it "
         "failed: %s",
         ten.name.c_str(), tier_name(from), src.bad.c_str());

  Copy &dst = ten.copies[int(to)];
  bool allocated = false;
  if (dst.extent) {
    if (dst.filling || dst.readers)
      fail("tensor '%s': its %s copy is in use by %s in flight; wait on "
           "that move's token before moving %s->%s over it",
           ten.name.c_str(), tier_name(to), pending_desc_locked(t, to).c_str(),
           tier_name(from), tier_name(to));
  } else {
    insert_locked(t, to, 0, false);
    allocated = true;
  }

  const std::string &what = ten.name;
  uint64_t host_off = ten.copies[int(Tier::Host)].extent->offset;
  char *host = host_base_ + host_off;
  uint64_t link_bytes = 0;
  Token tok;
  try {
    if (from == Tier::Ssd || to == Tier::Ssd) {
      uint64_t ssd_off = ten.copies[int(Tier::Ssd)].extent->offset;
      link_bytes = round_up(ten.bytes, arena(Tier::Ssd).granule);
      tok = to == Tier::Host
                ? ssd_->read(ssd_off, host, link_bytes, prio, what)
                : ssd_->write(ssd_off, host, link_bytes, prio, what);
    } else {
      uint64_t gpu_off = ten.copies[int(Tier::Gpu)].extent->offset;
      link_bytes = ten.bytes;
      tok = to == Tier::Gpu ? gpu_.copy_h2d(gpu_off, host, ten.bytes, what)
                            : gpu_.copy_d2h(host, gpu_off, ten.bytes, what);
    }
  } catch (...) {
    if (allocated) {
      Arena &a = arena(to);
      a.used.erase(dst.extent->offset);
      a.in_use -= dst.extent->length;
      dst = Copy{};
    }
    throw;
  }
  src.readers++;
  dst.filling = true;
  dst.bad.clear();
  pending_.push_back(Pending{t, from, to, link_bytes, tok});
  trace_move(tok, what, int(from), int(to), link_bytes); // --trace: its span
  return tok;
}

void TensorStore::reap_locked() const {
  for (size_t i = 0; i < pending_.size();) {
    Pending &p = pending_[i];
    if (!p.token.done()) {
      ++i;
      continue;
    }
    Tensor &ten = tensors_[p.tensor];
    std::string err = p.token.error();
    if (err.empty()) {
      auto counter = [&](LinkBytes &b) {
        return p.to == Tier::Host
                   ? (p.from == Tier::Ssd ? &b.ssd_read : &b.d2h)
                   : (p.to == Tier::Gpu ? &b.h2d : &b.ssd_write);
      };
      *counter(moved_) += p.link_bytes;
      *counter(moved_by_tag_[size_t(ten.tag)]) += p.link_bytes;
    } else {
      ++failed_;
      ten.copies[int(p.to)].bad = err;
    }
    ten.copies[int(p.from)].readers--;
    ten.copies[int(p.to)].filling = false;
    pending_[i] = std::move(pending_.back());
    pending_.pop_back();
  }
}

LinkBytes TensorStore::moved() const {
  std::lock_guard<std::mutex> lock(mu_);
  reap_locked();
  return moved_;
}

LinkBytes TensorStore::moved_by_tag(int tag) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (tag < 0 || tag >= kNumTags)
    fail("moved_by_tag: tag %d outside [0, %d)", tag, kNumTags);
  reap_locked();
  return moved_by_tag_[size_t(tag)];
}

uint64_t TensorStore::failed_moves() const {
  std::lock_guard<std::mutex> lock(mu_);
  reap_locked();
  return failed_;
}

TierUsage TensorStore::usage(Tier tier) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (tier == Tier::Ssd && !ssd_)
    return {};
  const Arena &a = arena(tier);
  return {a.capacity, a.in_use, a.peak};
}

void TensorStore::wait_all() {
  std::vector<Token> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Pending &p : pending_)
      all.push_back(p.token);
  }
  for (const Token &tok : all) {
    try {
      tok.wait();
    } catch (const Error &) {
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  reap_locked();
}

} // namespace spw::storage
