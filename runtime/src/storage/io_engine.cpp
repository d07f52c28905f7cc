//===- io_engine.cpp - the asynchronous SSD I/O engine --------------------===//
//
// Each queue has one worker that owns an io_uring ring (or, where io_uring
// is refused, a few pread/pwrite threads). submit() splits a request into
// pieces and puts them on the queue of their file, one FIFO per priority;
// the worker keeps up to queue_depth pieces in flight, always taking the
// most urgent waiting piece first. Every result goes through check(), the
// one place that decides between done, resubmit and fail, so both backends
// treat the kernel's answers alike.
//
// The ring is created by the worker thread itself: with SINGLE_ISSUER and
// DEFER_TASKRUN only the creating task may submit and reap. New work wakes a
// worker blocked in io_uring_enter through an eventfd whose read is always
// armed on the ring.
//
//===----------------------------------------------------------------------===//

#include "storage/io_engine.h"

#include <liburing.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <future>
#include <mutex>
#include <set>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <unordered_set>

namespace spw::storage {

const char *backend_name(Backend b) {
  switch (b) {
  case Backend::Auto:
    return "auto";
  case Backend::Uring:
    return "io_uring";
  case Backend::Threads:
    return "threads";
  }
  return "?";
}

Backend parse_backend(const std::string &s) {
  if (s == "auto")
    return Backend::Auto;
  if (s == "io_uring" || s == "uring")
    return Backend::Uring;
  if (s == "threads")
    return Backend::Threads;
  fail("unknown I/O backend '%s' (expected auto, io_uring or threads)",
       s.c_str());
}

namespace {

// glibc before 2.37 knows neither the mask bit nor the fields; the kernel's
// struct statx has had them at a fixed place since Linux 6.1.
constexpr unsigned kStatxDioAlign = 0x2000;

template <class S> void dio_align_of(const S &st, uint32_t &mem, uint32_t &off) {
  if constexpr (requires { st.stx_dio_mem_align; }) {
    mem = st.stx_dio_mem_align;
    off = st.stx_dio_offset_align;
  } else {
    static_assert(sizeof(S) >= 0xa0);
    memcpy(&mem, reinterpret_cast<const char *>(&st) + 0x98, 4);
    memcpy(&off, reinterpret_cast<const char *>(&st) + 0x9c, 4);
  }
}

size_t direct_alignment(int fd) {
  struct statx st;
  memset(&st, 0, sizeof st);
  size_t align = 0;
  if (statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS | kStatxDioAlign, &st) ==
      0) {
    if (st.stx_mask & kStatxDioAlign) {
      uint32_t mem = 0, off = 0;
      dio_align_of(st, mem, off);
      align = std::max(mem, off);
    }
    if (!align)
      align = st.stx_blksize;
  }
  return std::max<size_t>(align, 4096);
}

void default_notice(const std::string &msg) {
  fprintf(stderr, "spillway: %s\n", msg.c_str());
}

constexpr uint64_t kWakeTag = 0; // user_data of the eventfd read

} // namespace

// One submit() call, shared by its pieces.
struct Request {
  IoOp op;
  Priority prio;
  std::string what;
  std::shared_ptr<Completion> completion;
};

// A part of a request moved by one kernel submission (or, after a short
// transfer, several).
struct Piece {
  std::shared_ptr<Request> req;
  const FileInfo *file;
  uint64_t offset; // of the whole piece
  char *buf;
  uint64_t length;
  uint64_t done = 0; // bytes known transferred
  unsigned retries = 0;
};

struct Queue {
  unsigned index = 0;
  std::mutex mu;
  std::deque<Piece *> waiting[kNumPriorities];
  bool stop = false;
  // Set (under mu) when the io_uring worker gave up on its ring: why. The
  // worker has failed everything it held; push() fails new pieces at once.
  std::string broken;
  // io_uring backend
  int wake_fd = -1;
  std::atomic<bool> wake_pending{false};
  std::promise<int> ring_ready; // the worker's ring set-up: < 0 = -errno
  // threads backend
  std::condition_variable cv;
  std::vector<std::thread> threads;

  Queue() = default;
  Queue(const Queue &) = delete;
  Queue &operator=(const Queue &) = delete;
  // stop_queues() joins the workers first; the eventfd is closed here too,
  // so a queue dropped on a failed start (an eventfd of a later queue
  // refused) does not leak its own.
  ~Queue() {
    if (wake_fd >= 0)
      ::close(wake_fd);
  }

  Piece *pop_locked() {
    for (auto &q : waiting)
      if (!q.empty()) {
        Piece *p = q.front();
        q.pop_front();
        return p;
      }
    return nullptr;
  }
  bool empty_locked() const {
    for (auto &q : waiting)
      if (!q.empty())
        return false;
    return true;
  }
};

enum class Verdict { Done, Again, Failed };

struct IoEngine::Impl {
  EngineConfig cfg;
  std::unique_ptr<ScriptedFaults> own_faults; // from SPILLWAY_IO_FAULTS
  Backend backend = Backend::Uring;
  std::atomic<bool> registered{false};
  std::vector<std::unique_ptr<Queue>> queues;

  std::mutex files_mu;
  std::deque<FileInfo> files; // stable addresses: pieces point into it
  std::vector<bool> open;

  std::mutex said_mu;
  std::set<std::string> said; // notices already given, by key

  std::mutex drain_mu;
  std::condition_variable drain_cv;
  int64_t outstanding = 0; // pieces not yet done

  std::atomic<uint64_t> bytes_read{0}, bytes_written{0}, requests{0},
      submissions{0}, resubmits{0};

  void say_once(const std::string &key, const std::string &msg) {
    {
      std::lock_guard<std::mutex> lk(said_mu);
      if (!said.insert(key).second)
        return;
    }
    cfg.notice(msg);
  }

  std::string describe(const Piece &p) const {
    return format("%s of %llu bytes at offset %llu of '%s' (tensor '%s')",
                  p.req->op == IoOp::Read ? "read" : "write",
                  (unsigned long long)(p.length - p.done),
                  (unsigned long long)(p.offset + p.done),
                  p.file->path.c_str(), p.req->what.c_str());
  }

  // Decides what a result `res` (bytes, or -errno) of the submission of
  // p's remainder means.
  Verdict check(Piece &p, int res, std::string &err) {
    uint64_t want = p.length - p.done;
    if (cfg.faults)
      res = cfg.faults->rewrite_completion(
          PieceInfo{p.req->op, p.file->path, p.offset + p.done, want,
                    p.req->what},
          res);
    if (res < 0) {
      int e = -res;
      if (e == EAGAIN || e == EINTR || e == ECANCELED) {
        if (p.retries++ < cfg.retries) {
          ++resubmits;
          return Verdict::Again;
        }
        err = describe(p) + format(" failed: %s (still failing after %u "
                                   "retries)",
                                   strerror(e), cfg.retries);
        return Verdict::Failed;
      }
      err = describe(p) + " failed: " + strerror(e);
      return Verdict::Failed;
    }
    uint64_t now = p.done + std::min<uint64_t>(uint64_t(res), want);
    // O_DIRECT needs the next submission aligned; redoing the unaligned
    // tail moves the same bytes again, which is harmless.
    if (now < p.length && p.file->direct)
      now = now / p.file->align * p.file->align;
    if (now == p.done) {
      if (p.retries++ < cfg.retries) {
        ++resubmits;
        return Verdict::Again;
      }
      err = describe(p) +
            format(" failed: no progress after %u retries%s", cfg.retries,
                   p.req->op == IoOp::Read
                       ? " (the file may be shorter than expected)"
                       : "");
      return Verdict::Failed;
    }
    p.done = now;
    if (p.done < p.length) {
      ++resubmits;
      return Verdict::Again;
    }
    (p.req->op == IoOp::Read ? bytes_read : bytes_written) += p.length;
    return Verdict::Done;
  }

  void finish(Piece *p, const std::string &err) {
    p->req->completion->piece_done(err);
    delete p;
    std::lock_guard<std::mutex> lk(drain_mu);
    if (--outstanding == 0)
      drain_cv.notify_all();
  }

  // ---- io_uring backend ---------------------------------------------------

  int init_ring(io_uring &ring) {
    if (cfg.faults)
      if (int r = cfg.faults->ring_init_result())
        return r;
    unsigned entries = cfg.queue_depth + 1; // + the wakeup read
    // As fio: drop the flags the kernel does not know one at a time
    // (DEFER_TASKRUN needs SINGLE_ISSUER, so it goes first).
    unsigned flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
                     IORING_SETUP_COOP_TASKRUN;
    const unsigned drop[] = {IORING_SETUP_DEFER_TASKRUN,
                             IORING_SETUP_SINGLE_ISSUER,
                             IORING_SETUP_COOP_TASKRUN};
    int r = io_uring_queue_init(entries, &ring, flags);
    for (unsigned d : drop) {
      if (r != -EINVAL)
        break;
      flags &= ~d;
      r = io_uring_queue_init(entries, &ring, flags);
    }
    return r;
  }

  // Registers the pool's 1 GiB pieces; false when the ring uses plain
  // reads and writes.
  bool register_pool(io_uring &ring) {
    PinnedPool *pool = cfg.pool;
    if (!pool || !cfg.register_buffers)
      return false;
    int r = cfg.faults ? cfg.faults->register_buffers_result() : 0;
    if (r == 0) {
      std::vector<iovec> iov;
      for (size_t off = 0; off < pool->size(); off += kMaxRegisteredPiece)
        iov.push_back({pool->base() + off,
                       std::min(kMaxRegisteredPiece, pool->size() - off)});
      r = io_uring_register_buffers(&ring, iov.data(), unsigned(iov.size()));
    }
    if (r < 0) {
      say_once("register",
               format("registering the %s staging pool with io_uring failed "
                      "(%s%s); using unregistered buffers",
                      human_bytes(pool->size()).c_str(), strerror(-r),
                      r == -ENOMEM || r == -EPERM
                          ? "; is the locked-memory limit (ulimit -l) too "
                            "small?"
                          : ""));
      return false;
    }
    return true;
  }

  void prep(io_uring &ring, Piece *p, bool fixed) {
    // The ring has queue_depth + 1 entries and never more than that many
    // submissions outstanding, so there is always one; submitting what is
    // queued frees entries should that ever change.
    io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    while (!sqe) {
      io_uring_submit(&ring);
      sqe = io_uring_get_sqe(&ring);
    }
    char *buf = p->buf + p->done;
    unsigned len = unsigned(p->length - p->done);
    uint64_t off = p->offset + p->done;
    int fd = p->file->fd;
    if (fixed && cfg.pool->contains(buf, len)) {
      int idx = int(size_t(buf - cfg.pool->base()) / kMaxRegisteredPiece);
      if (p->req->op == IoOp::Read)
        io_uring_prep_read_fixed(sqe, fd, buf, len, off, idx);
      else
        io_uring_prep_write_fixed(sqe, fd, buf, len, off, idx);
    } else if (p->req->op == IoOp::Read) {
      io_uring_prep_read(sqe, fd, buf, len, off);
    } else {
      io_uring_prep_write(sqe, fd, buf, len, off);
    }
    io_uring_sqe_set_data64(sqe, reinterpret_cast<uint64_t>(p));
    ++submissions;
  }

  void uring_worker(Queue &q) {
    std::promise<int> &init = q.ring_ready;
    io_uring ring;
    int r = init_ring(ring);
    if (r < 0) {
      init.set_value(r);
      return;
    }
    bool fixed = register_pool(ring);
    if (!fixed && cfg.pool && cfg.register_buffers)
      registered = false;
    init.set_value(fixed ? 1 : 0);

    uint64_t wake_buf = 0;
    bool wake_armed = false;
    unsigned inflight = 0;
    std::vector<Piece *> again;
    std::unordered_set<Piece *> live; // taken off the queue, not finished
    unsigned submit_failures = 0;     // io_uring_submit_and_wait, in a row
    for (;;) {
      if (!wake_armed) {
        io_uring_sqe *sqe = io_uring_get_sqe(&ring);
        io_uring_prep_read(sqe, q.wake_fd, &wake_buf, sizeof wake_buf, 0);
        io_uring_sqe_set_data64(sqe, kWakeTag);
        wake_armed = true;
      }
      for (Piece *p : again)
        prep(ring, p, fixed);
      again.clear();
      bool stopping;
      {
        std::lock_guard<std::mutex> lk(q.mu);
        while (inflight < cfg.queue_depth) {
          Piece *p = q.pop_locked();
          if (!p)
            break;
          ++inflight;
          live.insert(p);
          prep(ring, p, fixed);
        }
        stopping = q.stop && inflight == 0 && q.empty_locked();
      }
      if (stopping)
        break;
      int ret = cfg.faults ? cfg.faults->submit_result() : 0;
      if (ret == 0)
        ret = io_uring_submit_and_wait(&ring, 1);
      if (ret >= 0) {
        submit_failures = 0;
      } else {
        // Bounded like a piece's retries: an error that keeps coming back
        // would otherwise spin this worker forever and hang drain().
        if (++submit_failures > std::max(cfg.retries, 1u)) {
          give_up(q, ring, live, ret, submit_failures);
          return;
        }
        if (ret != -EINTR && ret != -EAGAIN && ret != -EBUSY)
          say_once("submit", format("io_uring_submit_and_wait failed: %s",
                                    strerror(-ret)));
        // Back off (1, 2, 4, ... 128 ms) so the bound is also some time.
        std::this_thread::sleep_for(
            std::chrono::milliseconds(1u << std::min(submit_failures - 1, 7u)));
      }
      unsigned head, seen = 0;
      io_uring_cqe *cqe;
      io_uring_for_each_cqe(&ring, head, cqe) {
        ++seen;
        uint64_t tag = io_uring_cqe_get_data64(cqe);
        if (tag == kWakeTag) {
          wake_armed = false;
          q.wake_pending.store(false);
          continue;
        }
        Piece *p = reinterpret_cast<Piece *>(tag);
        std::string err;
        switch (check(*p, cqe->res, err)) {
        case Verdict::Again:
          again.push_back(p);
          break;
        case Verdict::Done:
        case Verdict::Failed:
          --inflight;
          live.erase(p);
          finish(p, err);
          break;
        }
      }
      io_uring_cq_advance(&ring, seen);
    }
    io_uring_queue_exit(&ring);
  }

  // The open files bound to queue `i`, quoted, for errors.
  std::string files_of(unsigned i) {
    std::string r;
    std::lock_guard<std::mutex> lk(files_mu);
    for (size_t k = 0; k < files.size(); ++k)
      if (open[k] && files[k].queue == i)
        r += (r.empty() ? "'" : ", '") + files[k].path + "'";
    return r.empty() ? "no open files" : r;
  }

  // The ring of `q` keeps refusing submissions: fail every piece the worker
  // holds and every waiting one with an error naming the queue, its files
  // and the errno, mark the queue broken (push() fails later pieces at
  // once) and drop the ring. Requests the kernel already took are abandoned
  // with it (ring teardown cancels or waits for them in the kernel); their
  // tokens fail here, so their buffers must not be trusted.
  void give_up(Queue &q, io_uring &ring, std::unordered_set<Piece *> &live,
               int ret, unsigned failures) {
    std::string why =
        format("io_uring_submit_and_wait on I/O queue %u failed %u times in "
               "a row (%s); the queue serves %s and has stopped",
               q.index, failures, strerror(-ret), files_of(q.index).c_str());
    std::vector<Piece *> doomed(live.begin(), live.end());
    live.clear();
    {
      std::lock_guard<std::mutex> lk(q.mu);
      q.broken = why;
      while (Piece *p = q.pop_locked())
        doomed.push_back(p);
    }
    io_uring_queue_exit(&ring);
    say_once("broken:" + std::to_string(q.index), why);
    for (Piece *p : doomed)
      finish(p, describe(*p) + " failed: " + why);
  }

  // ---- threads backend ----------------------------------------------------

  void thread_worker(Queue &q) {
    for (;;) {
      Piece *p;
      {
        std::unique_lock<std::mutex> lk(q.mu);
        q.cv.wait(lk, [&] { return q.stop || !q.empty_locked(); });
        p = q.pop_locked();
        if (!p)
          return; // stopping and nothing left
      }
      std::string err;
      for (;;) {
        char *buf = p->buf + p->done;
        size_t len = p->length - p->done;
        off_t off = off_t(p->offset + p->done);
        ++submissions;
        ssize_t n = p->req->op == IoOp::Read ? pread(p->file->fd, buf, len, off)
                                             : pwrite(p->file->fd, buf, len, off);
        int res = n < 0 ? -errno : int(n);
        if (check(*p, res, err) != Verdict::Again)
          break;
      }
      finish(p, err);
    }
  }

  // ---- start and stop -----------------------------------------------------

  void stop_queues() {
    for (auto &qp : queues) {
      Queue &q = *qp;
      {
        std::lock_guard<std::mutex> lk(q.mu);
        q.stop = true;
      }
      q.cv.notify_all();
      if (q.wake_fd >= 0) {
        uint64_t one = 1;
        (void)!::write(q.wake_fd, &one, sizeof one);
      }
      for (auto &t : q.threads)
        if (t.joinable())
          t.join();
      q.threads.clear();
      if (q.wake_fd >= 0)
        ::close(q.wake_fd);
      q.wake_fd = -1;
    }
  }

  // Starts one ring worker per queue; returns 0 or the first -errno of a
  // ring that could not be set up (the workers are then stopped again).
  int start_uring(unsigned n) {
    queues.clear();
    int first_error = 0;
    registered = cfg.pool && cfg.register_buffers;
    for (unsigned i = 0; i < n; ++i) {
      auto q = std::make_unique<Queue>();
      q->index = i;
      q->wake_fd = eventfd(0, EFD_CLOEXEC);
      if (q->wake_fd < 0) {
        int e = errno;
        queues.clear(); // closes the eventfds of the queues before it
        fail("eventfd for I/O queue %u failed: %s", i, strerror(e));
      }
      queues.push_back(std::move(q));
    }
    for (unsigned i = 0; i < n; ++i) {
      Queue &q = *queues[i];
      q.threads.emplace_back([this, &q] { uring_worker(q); });
    }
    for (auto &q : queues) {
      int r = q->ring_ready.get_future().get();
      if (r < 0 && !first_error)
        first_error = r;
    }
    if (first_error) {
      stop_queues();
      queues.clear();
      registered = false;
    }
    return first_error;
  }

  void start_threads(unsigned n) {
    queues.clear();
    registered = false;
    unsigned per_queue = std::min(cfg.queue_depth, 8u);
    for (unsigned i = 0; i < n; ++i) {
      queues.push_back(std::make_unique<Queue>());
      Queue &q = *queues.back();
      q.index = i;
      for (unsigned t = 0; t < per_queue; ++t)
        q.threads.emplace_back([this, &q] { thread_worker(q); });
    }
  }

  void push(const std::vector<Piece *> &pieces) {
    std::vector<bool> touched(queues.size());
    for (Piece *p : pieces)
      touched[p->file->queue] = true;
    for (size_t i = 0; i < queues.size(); ++i) {
      if (!touched[i])
        continue;
      Queue &q = *queues[i];
      std::string broken;
      {
        std::lock_guard<std::mutex> lk(q.mu);
        broken = q.broken;
        if (broken.empty())
          for (Piece *p : pieces)
            if (p->file->queue == i)
              q.waiting[int(p->req->prio)].push_back(p);
      }
      if (!broken.empty()) {
        for (Piece *p : pieces)
          if (p->file->queue == i)
            finish(p, describe(*p) + " failed: " + broken);
        continue;
      }
      if (backend == Backend::Threads) {
        q.cv.notify_all();
      } else if (!q.wake_pending.exchange(true)) {
        uint64_t one = 1;
        (void)!::write(q.wake_fd, &one, sizeof one);
      }
    }
  }
};

IoEngine::IoEngine(const EngineConfig &config, unsigned queues)
    : impl_(std::make_unique<Impl>()) {
  Impl &m = *impl_;
  m.cfg = config;
  if (!m.cfg.notice)
    m.cfg.notice = default_notice;
  if (m.cfg.request_bytes == 0 || m.cfg.request_bytes % 4096 ||
      m.cfg.request_bytes > kMaxRegisteredPiece)
    fail("I/O request size %zu is not a multiple of 4096 between 4 KiB and "
         "1 GiB",
         m.cfg.request_bytes);
  if (m.cfg.queue_depth == 0 || m.cfg.queue_depth > 4096)
    fail("I/O queue depth %u is not between 1 and 4096", m.cfg.queue_depth);
  if (!m.cfg.faults)
    if (const char *script = getenv("SPILLWAY_IO_FAULTS"); script && *script) {
      m.own_faults = std::make_unique<ScriptedFaults>(script);
      m.cfg.faults = m.own_faults.get();
    }
  queues = std::max(queues, 1u);

  if (m.cfg.backend == Backend::Threads) {
    m.backend = Backend::Threads;
    m.start_threads(queues);
    return;
  }
  int r = m.start_uring(queues);
  if (r == 0) {
    m.backend = Backend::Uring;
    return;
  }
  bool refused = r == -EPERM || r == -ENOSYS || r == -EACCES;
  if (m.cfg.backend == Backend::Uring)
    fail("io_uring is %s here (io_uring_queue_init: %s%s); use --io-backend "
         "threads",
         refused ? "refused" : "unavailable", strerror(-r),
         refused ? "; seccomp or kernel.io_uring_disabled?" : "");
  m.say_once("ring",
             format("io_uring is %s here (io_uring_queue_init: %s); using "
                    "pread/pwrite threads instead",
                    refused ? "refused" : "unavailable", strerror(-r)));
  m.backend = Backend::Threads;
  m.start_threads(queues);
}

IoEngine::~IoEngine() {
  drain();
  impl_->stop_queues();
  std::lock_guard<std::mutex> lk(impl_->files_mu);
  for (size_t i = 0; i < impl_->files.size(); ++i)
    if (impl_->open[i])
      ::close(impl_->files[i].fd);
}

FileId IoEngine::open(const std::string &path, bool create, unsigned queue,
                      bool read_only) {
  Impl &m = *impl_;
  if (read_only && create)
    fail("cannot open '%s' read-only and create it", path.c_str());
  int flags = (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | (create ? O_CREAT : 0);
  bool direct = m.cfg.direct;
  int injected = direct && m.cfg.faults ? m.cfg.faults->open_direct_result() : 0;
  int fd = injected ? (errno = -injected, -1)
                    : ::open(path.c_str(), flags | (direct ? O_DIRECT : 0), 0644);
  if (fd < 0 && direct && errno == EINVAL) {
    fd = ::open(path.c_str(), flags, 0644);
    if (fd >= 0) {
      direct = false;
      // Once per file system: a swap space striped over three tmpfs
      // directories needs saying only once.
      struct stat st;
      std::string fs = fstat(fd, &st) == 0
                           ? std::to_string(uint64_t(st.st_dev))
                           : path;
      m.say_once("direct:" + fs,
                 format("the file system of '%s' refuses O_DIRECT; using "
                        "buffered I/O there",
                        path.c_str()));
    }
  }
  if (fd < 0)
    fail("cannot open '%s'%s: %s", path.c_str(),
         read_only ? " for reading" : create ? " for writing" : "",
         strerror(errno));
  FileInfo info;
  info.path = path;
  info.fd = fd;
  info.queue = queue % unsigned(m.queues.size());
  info.direct = direct;
  info.read_only = read_only;
  info.align = direct ? direct_alignment(fd) : 1;
  std::lock_guard<std::mutex> lk(m.files_mu);
  m.files.push_back(std::move(info));
  m.open.push_back(true);
  return FileId(m.files.size() - 1);
}

void IoEngine::close(FileId id, bool sync) {
  Impl &m = *impl_;
  std::lock_guard<std::mutex> lk(m.files_mu);
  if (id >= m.files.size() || !m.open[id])
    fail("closing I/O file %u, which is not open", id);
  FileInfo &f = m.files[id];
  m.open[id] = false;
  int err = 0;
  if (sync && fsync(f.fd) != 0)
    err = errno;
  if (::close(f.fd) != 0 && !err)
    err = errno;
  f.fd = -1;
  if (err)
    fail("%s '%s' failed: %s", sync ? "fsync/close of" : "close of",
         f.path.c_str(), strerror(err));
}

const FileInfo &IoEngine::file(FileId id) const {
  std::lock_guard<std::mutex> lk(impl_->files_mu);
  if (id >= impl_->files.size())
    fail("no I/O file %u", id);
  return impl_->files[id];
}

Token IoEngine::submit(IoOp op, const std::vector<Segment> &segments,
                       Priority prio, const std::string &what) {
  Impl &m = *impl_;
  const char *opname = op == IoOp::Read ? "read" : "write";
  std::vector<const FileInfo *> infos;
  infos.reserve(segments.size());
  {
    std::lock_guard<std::mutex> lk(m.files_mu);
    for (const Segment &s : segments) {
      if (s.file >= m.files.size() || !m.open[s.file])
        fail("%s for tensor '%s': I/O file %u is not open", opname,
             what.c_str(), s.file);
      const FileInfo &f = m.files[s.file];
      if (op == IoOp::Write && f.read_only)
        fail("write of %llu bytes at offset %llu of '%s' (tensor '%s'): the "
             "file was opened read-only",
             (unsigned long long)s.length, (unsigned long long)s.offset,
             f.path.c_str(), what.c_str());
      infos.push_back(&f);
    }
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment &s = segments[i];
    const FileInfo &f = *infos[i];
    size_t a = f.align;
    if (s.offset % a || s.length % a || reinterpret_cast<uintptr_t>(s.buf) % a)
      fail("%s of %llu bytes at offset %llu of '%s' (tensor '%s'), buffer "
           "%p: offset, length and buffer address must be multiples of %zu "
           "for O_DIRECT",
           opname, (unsigned long long)s.length,
           (unsigned long long)s.offset, f.path.c_str(), what.c_str(), s.buf,
           a);
  }
  ++m.requests;

  auto req = std::make_shared<Request>();
  req->op = op;
  req->prio = prio;
  req->what = what;
  std::vector<Piece *> pieces;
  PinnedPool *pool = m.cfg.pool;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment &s = segments[i];
    char *buf = static_cast<char *>(s.buf);
    for (uint64_t done = 0; done < s.length;) {
      uint64_t len = std::min<uint64_t>(m.cfg.request_bytes, s.length - done);
      // A fixed buffer must lie inside one registered piece of the pool.
      if (pool && pool->contains(buf + done, 1)) {
        size_t rel = size_t(buf + done - pool->base());
        size_t to_edge = kMaxRegisteredPiece - rel % kMaxRegisteredPiece;
        len = std::min<uint64_t>(len, to_edge);
      }
      Piece *p = new Piece;
      p->req = req;
      p->file = infos[i];
      p->offset = s.offset + done;
      p->buf = buf + done;
      p->length = len;
      pieces.push_back(p);
      done += len;
    }
  }
  if (pieces.empty())
    return Token();
  req->completion = std::make_shared<Completion>(int64_t(pieces.size()));
  {
    std::lock_guard<std::mutex> lk(m.drain_mu);
    m.outstanding += int64_t(pieces.size());
  }
  Token token(req->completion);
  m.push(pieces);
  return token;
}

void IoEngine::drain() {
  std::unique_lock<std::mutex> lk(impl_->drain_mu);
  impl_->drain_cv.wait(lk, [&] { return impl_->outstanding == 0; });
}

Backend IoEngine::backend() const { return impl_->backend; }
bool IoEngine::buffers_registered() const { return impl_->registered; }
unsigned IoEngine::num_queues() const { return unsigned(impl_->queues.size()); }
const EngineConfig &IoEngine::config() const { return impl_->cfg; }

EngineStats IoEngine::stats() const {
  EngineStats s;
  s.bytes_read = impl_->bytes_read;
  s.bytes_written = impl_->bytes_written;
  s.requests = impl_->requests;
  s.submissions = impl_->submissions;
  s.resubmits = impl_->resubmits;
  return s;
}

} // namespace spw::storage
