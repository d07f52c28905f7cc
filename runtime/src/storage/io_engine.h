//===- io_engine.h - the asynchronous SSD I/O engine ----------------------===//
//
// Moves bytes between pinned host memory and files opened with O_DIRECT,
// as close to the device's bandwidth as the hardware allows:
//
//  - One I/O worker thread per *queue*; each worker owns one io_uring ring,
//    set up with SINGLE_ISSUER | DEFER_TASKRUN | COOP_TASKRUN where the
//    kernel takes them (flags are dropped one at a time on -EINVAL). A file
//    is bound to one queue when it is opened; striping a swap space over
//    several directories (SwapSpace) gives each directory its own queue.
//  - Requests are split into pieces of at most `request_bytes` and kept
//    `queue_depth` deep per queue. Waiting pieces are taken in priority
//    order: demand reads, then prefetches, then write-backs.
//  - Buffers inside the PinnedPool are registered with the ring (in pieces of
//    at most 1 GiB) and use read_fixed / write_fixed; other buffers use
//    plain reads and writes.
//  - Every completion is checked: a short transfer is resubmitted for the
//    remainder, -EAGAIN / -EINTR / -ECANCELED are retried (a bounded number
//    of times), anything else fails the request's token with an error naming
//    the file, offset, length and tensor.
//  - io_uring_submit_and_wait failing more than `retries` times in a row
//    stops that queue: everything it holds or is given later fails with an
//    error naming the queue, its files and the errno (never a hang).
//  - Where io_uring is refused (EPERM / ENOSYS / kernel.io_uring_disabled,
//    or buffer registration refused by the locked-memory limit), the engine
//    falls back to a pread/pwrite thread pool, or to unregistered buffers,
//    and says so once through EngineConfig::notice.
//
// A FaultInjector inside the engine can rewrite completions and refuse ring
// set-up or registration, so tests can prove that every failure either
// recovers or surfaces as a clear error. When EngineConfig::faults is null
// and the environment variable SPILLWAY_IO_FAULTS is set (to a ScriptedFaults
// script, e.g. SPILLWAY_IO_FAULTS=short@3,eio@10/write), the engine injects
// those faults itself, so whole programs can be tested against them.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_STORAGE_IO_ENGINE_H
#define SPILLWAY_RUNTIME_STORAGE_IO_ENGINE_H

#include "storage/completion.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace spw::storage {

enum class IoOp : uint8_t { Read, Write };

// Lower value = served first.
enum class Priority : uint8_t { Demand = 0, Prefetch = 1, WriteBack = 2 };
constexpr int kNumPriorities = 3;

enum class Backend : uint8_t {
  Auto,    // io_uring, falling back to threads where it is refused
  Uring,   // io_uring or an error
  Threads, // pread/pwrite worker threads
};
const char *backend_name(Backend b); // "auto", "io_uring", "threads"
// Parses "auto" | "io_uring" | "uring" | "threads"; throws spw::Error.
Backend parse_backend(const std::string &s);

// ---- fault injection ------------------------------------------------------

// What a piece of a request looked like when it completed.
struct PieceInfo {
  IoOp op;
  std::string path;    // the file
  uint64_t offset = 0; // file offset of this submission
  uint64_t length = 0; // bytes asked for in this submission
  std::string what;    // the tensor / object the request belongs to
};

// Hooks the engine calls at the points where the kernel can fail it. The
// default implementation changes nothing.
class FaultInjector {
public:
  virtual ~FaultInjector() = default;
  // Returns the completion result the engine should see instead of `res`
  // (bytes transferred, or -errno). Called on the I/O worker thread.
  virtual int rewrite_completion(const PieceInfo &piece, int res) {
    (void)piece;
    return res;
  }
  // Returns 0, or -errno to make io_uring_queue_init fail.
  virtual int ring_init_result() { return 0; }
  // Returns 0, or -errno to make io_uring_register_buffers fail.
  virtual int register_buffers_result() { return 0; }
  // Returns 0, or -errno to make opening a file with O_DIRECT fail (-EINVAL
  // is what a file system that refuses O_DIRECT answers).
  virtual int open_direct_result() { return 0; }
  // Returns 0, or -errno to make one io_uring_submit_and_wait call fail
  // (without submitting). Called on the I/O worker thread before each call.
  virtual int submit_result() { return 0; }
};

// A FaultInjector driven by a small script, for tests and for the
// SPILLWAY_IO_FAULTS environment variable. Comma-separated rules:
//   short@N      the N-th completion (counted from 1) reports half its bytes
//                (rounded down to 512; at least 1 byte short)
//   short512@N   the N-th completion reports 512 bytes fewer (half, when it
//                moved 512 or less): a count that is no multiple of the
//                O_DIRECT alignment, so the engine must realign it down
//   zero@N       the N-th completion reports 0 bytes
//   eio@N, enospc@N, eagain@N, eintr@N, ecanceled@N
//                the N-th completion reports that error
//   X@N+         the rule applies to completions N, N+1, ... (every one)
//   X@N/read, X@N/write   count only reads (or writes) for this rule
//   ring=eperm   io_uring_queue_init fails with -EPERM (also: enosys)
//   register=enomem  buffer registration fails with -ENOMEM (also: eperm)
//   direct=einval    opening a file with O_DIRECT fails with -EINVAL
//   submit=E     every io_uring_submit_and_wait fails with -E (E: eagain,
//                eintr, ebusy, ebadf, eio, enomem)
//   submit=E@N   calls N, N+1, ... fail (counted from 1 over all queues;
//                call 1 of a queue is its first wait for work)
//   submit=E*K   only K calls fail (from call 1, or from N: submit=E@N*K)
// Throws spw::Error on a malformed script.
class ScriptedFaults : public FaultInjector {
public:
  explicit ScriptedFaults(const std::string &script);
  ~ScriptedFaults() override;
  int rewrite_completion(const PieceInfo &piece, int res) override;
  int ring_init_result() override;
  int register_buffers_result() override;
  int open_direct_result() override;
  int submit_result() override;
  // Completions rewritten so far.
  int64_t injected() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- pinned staging pool --------------------------------------------------

// Host memory allocated once (a 2 MiB-aligned anonymous mapping advised to
// use transparent huge pages, populated up front, then mlocked where the
// limit allows), carved into aligned blocks. Buffers from the pool are
// registered with every ring of the engine that owns it; the CUDA backend
// also cudaHostRegisters it. Thread-safe.
class PinnedPool {
public:
  // `bytes` is rounded up to the page size. Throws spw::Error when the
  // memory cannot be mapped or populated (out of memory).
  explicit PinnedPool(size_t bytes);
  ~PinnedPool();
  PinnedPool(const PinnedPool &) = delete;
  PinnedPool &operator=(const PinnedPool &) = delete;

  // A block of `bytes` aligned to `align` (a power of two, >= 4096), or
  // nullptr when no free range is large enough.
  void *allocate(size_t bytes, size_t align = 4096);
  void free(void *p);

  char *base() const { return base_; }
  size_t size() const { return size_; }
  size_t bytes_in_use() const;
  bool contains(const void *p, size_t n) const {
    auto *c = static_cast<const char *>(p);
    return c >= base_ && n <= size_ && c + n <= base_ + size_;
  }
  bool locked() const { return locked_; } // mlock succeeded

private:
  char *base_ = nullptr;     // 2 MiB aligned, inside the mapping
  size_t size_ = 0;
  char *map_base_ = nullptr; // the whole mapping (base_ rounded down)
  size_t map_size_ = 0;
  bool locked_ = false;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

namespace detail {
// Populates a fresh pool's pages with `advise` (madvise; tests pass their
// own) and MADV_POPULATE_WRITE. EINVAL (a kernel before 5.14) falls back to
// touching every page; anything else, ENOMEM above all, throws spw::Error
// rather than touching pages that are not there (the OOM killer).
void populate_pool(char *base, size_t size,
                   int (*advise)(void *, size_t, int));
} // namespace detail

// The most bytes registered as one fixed buffer.
constexpr size_t kMaxRegisteredPiece = size_t(1) << 30;

// ---- engine -----------------------------------------------------------------

struct EngineConfig {
  Backend backend = Backend::Auto;
  size_t request_bytes = size_t(1) << 20; // largest piece submitted at once
  unsigned queue_depth = 32;              // pieces in flight per queue
  bool direct = true;                     // O_DIRECT (see IoEngine::open)
  bool register_buffers = true;           // fixed buffers from the pool
  unsigned retries = 16; // per piece, for -EAGAIN/-EINTR/-ECANCELED/0 bytes
  // Optional; not owned. Must outlive the engine.
  PinnedPool *pool = nullptr;
  FaultInjector *faults = nullptr;
  // Where messages that are said once go (fallbacks). Default: stderr,
  // prefixed "spillway: ".
  std::function<void(const std::string &)> notice;
};

// A file the engine does I/O on. `align` is the O_DIRECT alignment of
// offsets, lengths and buffer addresses (1 for a buffered file).
struct FileInfo {
  std::string path;
  int fd = -1;
  unsigned queue = 0;
  size_t align = 4096;
  bool direct = false;
  bool read_only = false; // opened O_RDONLY: writes are refused
};
using FileId = uint32_t;

// One contiguous part of a request: `length` bytes at `offset` of `file`,
// to or from `buf`.
struct Segment {
  FileId file;
  uint64_t offset;
  void *buf;
  uint64_t length;
};

struct EngineStats {
  uint64_t bytes_read = 0, bytes_written = 0;
  uint64_t requests = 0;     // submit() calls
  uint64_t submissions = 0;  // pieces handed to the kernel, resubmits included
  uint64_t resubmits = 0;    // short transfers and retried errors
};

class IoEngine {
public:
  // Starts `queues` worker threads (at least 1). Throws spw::Error when the
  // requested backend cannot start (Backend::Uring refused), or on bad
  // configuration (request_bytes not a multiple of 4096, queue_depth 0).
  IoEngine(const EngineConfig &config, unsigned queues = 1);
  ~IoEngine(); // waits for everything in flight, then stops the workers
  IoEngine(const IoEngine &) = delete;
  IoEngine &operator=(const IoEngine &) = delete;

  // Opens (creating it when `create`) a file on `queue` (modulo the number
  // of queues). O_DIRECT when config.direct and the file system takes it;
  // where it does not (tmpfs), falls back to buffered I/O and says so once.
  // Alignment comes from statx(STATX_DIOALIGN), else the block size, with a
  // 4 KiB floor. Throws spw::Error naming the file.
  //
  // `read_only` opens O_RDONLY (O_DIRECT as above), so files without write
  // permission (chmod 0444, a read-only mount) can be read; `create` must be
  // false with it (spw::Error otherwise), and submit() refuses writes to the
  // file with a spw::Error naming it.
  FileId open(const std::string &path, bool create, unsigned queue = 0,
              bool read_only = false);
  // fsyncs (when `sync`) and closes. Waits for nothing: the caller waits on
  // its tokens first.
  void close(FileId file, bool sync = false);
  const FileInfo &file(FileId id) const;

  // Queues a read or write of all `segments` as one operation. Offsets,
  // lengths and buffer addresses must be multiples of the file's alignment,
  // and a write must not touch a file opened read-only (spw::Error
  // otherwise, before anything is submitted). `what` names the
  // tensor or object in errors. Returns at once.
  Token submit(IoOp op, const std::vector<Segment> &segments, Priority prio,
               const std::string &what);
  Token read(FileId f, uint64_t offset, void *buf, uint64_t len, Priority prio,
             const std::string &what) {
    return submit(IoOp::Read, {{f, offset, buf, len}}, prio, what);
  }
  Token write(FileId f, uint64_t offset, const void *buf, uint64_t len,
              Priority prio, const std::string &what) {
    return submit(IoOp::Write, {{f, offset, const_cast<void *>(buf), len}},
                  prio, what);
  }
  // Waits until every submitted request has completed (successfully or not).
  void drain();

  Backend backend() const;        // Uring or Threads, after fallback
  bool buffers_registered() const;
  unsigned num_queues() const;
  const EngineConfig &config() const;
  EngineStats stats() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- swap space -------------------------------------------------------------

// One logical byte range striped over one preallocated file per directory
// (`--ssd DIR1,DIR2,...`), each on its own engine queue. Stripe unit: the
// engine's request size. Files are created, fallocated and unlinked at once
// (so a crash leaves nothing behind) unless `keep_files`.
class SwapSpace {
public:
  // Checks free space (statvfs) before allocating anything: too little is a
  // spw::Error saying how much each directory needs and has. Throws on a
  // missing directory or a failed fallocate, naming the directory.
  SwapSpace(IoEngine &engine, const std::vector<std::string> &dirs,
            uint64_t bytes, bool keep_files = false);
  ~SwapSpace();

  uint64_t size() const { return size_; }
  size_t align() const { return align_; } // offsets/lengths must be multiples
  const std::vector<std::string> &paths() const { return paths_; }

  Token read(uint64_t offset, void *buf, uint64_t len, Priority prio,
             const std::string &what);
  Token write(uint64_t offset, const void *buf, uint64_t len, Priority prio,
              const std::string &what);
  // The segments a logical range maps to (exposed for tests).
  std::vector<Segment> map(uint64_t offset, void *buf, uint64_t len) const;

private:
  IoEngine &engine_;
  std::vector<FileId> files_;
  std::vector<std::string> paths_;
  uint64_t size_ = 0, stripe_ = 0;
  size_t align_ = 4096;
};

// "1.5 GiB", "512 MiB", "4 KiB", "17 B".
std::string human_bytes(uint64_t bytes);
// Parses "4G", "512M", "1MiB", "4096", "1.5GiB" (binary units); throws
// spw::Error naming `flag` on anything else.
uint64_t parse_size(const std::string &s, const std::string &flag);

} // namespace spw::storage

#endif
