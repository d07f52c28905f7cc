//===- checkpoint.h - crash-safe training checkpoints ---------------------===//
//
// A checkpoint is a consistent snapshot of named tensors (parameters, AdamW
// moments, ...) plus string metadata, taken at an iteration boundary:
//
//   ROOT/step-00000042/data           the tensors, chunked, O_DIRECT
//   ROOT/step-00000042/MANIFEST.json  what is where, with checksums
//
// Writing (write_checkpoint, or streamed: CheckpointWriter):
//   1. mkdir ROOT/.step-00000042.tmp-<pid>/
//   2. the tensors' bytes, concatenated in order (the "raw stream"), are cut
//      into chunks (default 4 MiB); each chunk is copied into an aligned
//      staging buffer, hashed (XXH3-64 of its raw bytes), optionally
//      compressed with zstd, padded to the file's alignment and written
//      through the IoEngine, several chunks in flight;
//   3. wait for every write, fsync the data file;
//   4. write MANIFEST.json, fsync it, fsync the tmp dir;
//   5. rename the tmp dir to ROOT/step-00000042, fsync ROOT; when a
//      step-00000042 is already there (a torn one the resume skipped, or the
//      same step written again), swap the two atomically instead
//      (renameat2 RENAME_EXCHANGE), fsync ROOT, then remove the old one, now
//      under the tmp name. Where RENAME_EXCHANGE is unsupported: move the
//      old one to .step-00000042.stale-<pid>, rename, and move it back if
//      that rename fails (a crash between the two leaves no step-00000042);
//   6. prune: keep the new one and the newest `keep`-1 older dirs that
//      look valid (only those count toward `keep`); remove the other older
//      ones, valid or not, every newer dir that is invalid (a newer dir can
//      only be a torn one the resume skipped: a valid one would have been
//      resumed from), and the tmp dirs of dead writers. A valid newer dir
//      (another run's in the same ROOT) is left alone, with a notice that
//      --resume would load it instead of the new one.
//      "Looks valid" agrees with the loader: a dir the loader skipped as
//      invalid in this run (options.verdicts: any reason, a chunk checksum
//      included) is invalid; any other must have a MANIFEST.json that
//      validates and a regular data file at least as long as the manifest
//      says. The chunks of a dir not read in this run are not re-hashed: that
//      would read every kept checkpoint in full at every checkpoint (keep
//      times the checkpoint's I/O); a flipped bit in one is found when a
//      resume reads it, which then falls back to the next older one.
// A crash before 5 leaves only a tmp dir, which loaders skip; the rename is
// atomic, and everything it publishes was fsynced before it. So the newest
// step-* dir is always complete, unless the storage itself lost or corrupted
// it, which the checksums catch.
//
// Loading (load_newest_checkpoint; streamed: open_newest_checkpoint and
// CheckpointReader, which verify each chunk as it is read, so a bad chunk is
// found mid-restore and the caller falls back to the next older one, restoring
// everything again): step-* dirs newest first; a dir is valid
// iff its name parses, MANIFEST.json parses and matches its own checksum, and
// every chunk matches its checksum when read. Invalid dirs are skipped with a
// one-line notice naming the dir and the reason, and the next older is tried.
// A dir that cannot be read (an I/O error, a FIFO or device where a file
// should be, a listing that fails) is not invalid: nothing is known about it,
// so loading stops with a CheckpointReadError instead of falling back to an
// older one (or to the weights), and pruning never removes it. Nor is
// anything but a directory (or a symlink to one) named step-NNNNNNNN: it
// stops the listing (list_checkpoints), the load and the writer, naming it.
//
// One run per ROOT: CheckpointDirLock holds flock(2) on ROOT/LOCK for the
// run, so a second run on the same ROOT is refused at start, naming the
// holder, instead of failing a rename mid-run.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_STORAGE_CHECKPOINT_H
#define SPILLWAY_RUNTIME_STORAGE_CHECKPOINT_H

#include "storage/io_engine.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace spw::storage {

constexpr int kCheckpointFormatVersion = 1;
constexpr const char *kCheckpointDataFile = "data";
constexpr const char *kCheckpointManifest = "MANIFEST.json";

// A tensor to write: `bytes` bytes at `data`.
struct CheckpointTensorRef {
  std::string name;
  int32_t dtype = SPW_F32;
  std::vector<int64_t> shape;
  const void *data = nullptr;
  uint64_t bytes = 0;
};

using Metadata = std::vector<std::pair<std::string, std::string>>;

// What load_newest_checkpoint found out about the checkpoint dirs it skipped
// as invalid (path -> why), for the pruning of the checkpoints written later
// in the same run, so that pruning never counts one the resume rejected
// (a damaged data file passes every check short of reading it all).
struct CheckpointVerdicts {
  std::vector<std::pair<std::string, std::string>> invalid;
};

struct CheckpointOptions {
  uint64_t chunk_bytes = uint64_t(4) << 20; // raw bytes per chunk
  unsigned in_flight = 4;                   // chunk writes in flight
  bool zstd = false;
  int zstd_level = 3;
  int keep = 2; // checkpoints kept after pruning (>= 1)
  // Where notices go (pruning, skipped dirs). Default: stderr, prefixed
  // "spillway: ".
  std::function<void(const std::string &)> notice;
  // Shared by the copies of these options: the loader records into it, the
  // writer's pruning reads it. Null: nothing is remembered.
  std::shared_ptr<CheckpointVerdicts> verdicts =
      std::make_shared<CheckpointVerdicts>();
};

struct CheckpointWriteResult {
  std::string dir;              // ROOT/step-NNNNNNNN
  uint64_t raw_bytes = 0;       // tensor bytes
  uint64_t stored_bytes = 0;    // data file bytes, padding included
  std::vector<std::string> pruned; // dirs removed afterwards
};

// A failure after the checkpoint was published (renamed into place): the
// message says what is in place; the checkpoint holds the weights, so the
// caller need not save them elsewhere.
struct CheckpointPublishedError : Error {
  using Error::Error;
};

// Writes the checkpoint of `step` (>= 0) under `root` (created if missing)
// and prunes. On any failure before publishing (any exception, not only
// spw::Error) removes its own tmp dir and throws spw::Error naming the
// checkpoint and the cause; the checkpoints already there are left as they
// were. After publishing: CheckpointPublishedError.
CheckpointWriteResult write_checkpoint(IoEngine &engine,
                                       const std::string &root, int64_t step,
                                       const std::vector<CheckpointTensorRef> &
                                           tensors,
                                       const Metadata &metadata,
                                       const CheckpointOptions &options);

// What a streamed checkpoint will hold of one tensor: no data, its bytes
// come through CheckpointWriter::append.
struct CheckpointTensorSpec {
  std::string name;
  int32_t dtype = SPW_F32;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
};

// write_checkpoint, streamed: the tensors' bytes come in pieces, in the
// order of `tensors` (append), and never all at once. Memory: the staging
// slots (checkpoint_staging_bytes), whatever the checkpoint's size. The
// constructor makes the tmp dir and opens the data file; finish() does steps
// 3-6 of the protocol above. Any failure before publishing (in the
// constructor, append or finish: any exception) removes the tmp dir and
// throws spw::Error naming the checkpoint and the cause, as write_checkpoint
// does; so does destroying an unfinished writer (silently: the caller's own
// failure is the error). After publishing: CheckpointPublishedError.
class CheckpointWriter {
public:
  CheckpointWriter(IoEngine &engine, const std::string &root, int64_t step,
                   const std::vector<CheckpointTensorSpec> &tensors,
                   const Metadata &metadata, const CheckpointOptions &options);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter &) = delete;
  CheckpointWriter &operator=(const CheckpointWriter &) = delete;
  // The next `bytes` bytes of the tensors (a piece may end inside a tensor
  // and continue in the next call, or span several tensors). More bytes
  // than the tensors hold is an error.
  void append(const void *data, uint64_t bytes);
  // Every tensor's bytes must have been appended.
  CheckpointWriteResult finish();
  // The tensor the next append continues (tensors.size() when all are in).
  size_t next_tensor() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The staging memory write_checkpoint uses for `raw_bytes` of tensors (at
// 4 KiB alignment): the size of a PinnedPool to give the engine so that the
// chunk writes use registered buffers.
uint64_t checkpoint_staging_bytes(uint64_t raw_bytes,
                                  const CheckpointOptions &options);

// One tensor of a loaded checkpoint; its bytes are at data() + offset.
struct CheckpointTensor {
  std::string name;
  int32_t dtype = SPW_F32;
  std::vector<int64_t> shape;
  uint64_t offset = 0, bytes = 0; // in the raw stream
};

struct LoadedCheckpoint {
  std::string dir;
  int64_t step = 0;
  std::vector<CheckpointTensor> tensors;
  Metadata metadata;
  Buffer raw; // the raw stream, verified
  const CheckpointTensor *find(const std::string &name) const;
  const void *data(const CheckpointTensor &t) const {
    return static_cast<const char *>(raw.get()) + t.offset;
  }
  const std::string *meta(const std::string &key) const;
};

// One checkpoint dir opened for streamed reading: the manifest read and
// checked (as load_checkpoint checks it before reading chunks), the data
// file's presence and size checked; the chunks are read when asked for,
// each verified (XXH3, and decompressed) when read, one decoded chunk cached
// and a few reads ahead in flight. Memory: a few chunks, whatever the
// checkpoint's size. The constructor throws CheckpointReadError when the
// dir cannot be read, else spw::Error saying why it is invalid; read()
// throws spw::Error naming the chunk when one fails its checksum or does not
// decompress (the checkpoint is invalid: reject_checkpoint, then the next
// older one), CheckpointReadError on an I/O error.
class CheckpointReader {
public:
  CheckpointReader(IoEngine &engine, const std::string &dir);
  ~CheckpointReader();
  CheckpointReader(CheckpointReader &&) noexcept;
  CheckpointReader &operator=(CheckpointReader &&) noexcept;
  const std::string &dir() const;
  int64_t step() const;
  const std::vector<CheckpointTensor> &tensors() const;
  const Metadata &metadata() const;
  uint64_t raw_bytes() const;
  const CheckpointTensor *find(const std::string &name) const;
  const std::string *meta(const std::string &key) const;
  // Bytes [offset, offset + n) of tensor t (or of the raw stream) into dst.
  void read(const CheckpointTensor &t, uint64_t offset, uint64_t n,
            void *dst);
  void read_raw(uint64_t offset, uint64_t n, void *dst);

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The newest checkpoint under `root` older than step `below` whose manifest
// is valid (its chunks are verified as they are read), or nullopt. Skips and
// reports invalid dirs as load_newest_checkpoint does (and leftover tmp dirs
// when `below` is unset); a dir that cannot be read stops the search with
// CheckpointReadError naming it.
std::optional<CheckpointReader>
open_newest_checkpoint(IoEngine &engine, const std::string &root,
                       const CheckpointOptions &options,
                       int64_t below = INT64_MAX);
// A checkpoint found invalid while it was read (a chunk that fails its
// checksum): the notice load_newest_checkpoint gives ("skipping checkpoint
// 'DIR': WHY; trying the next older one") and the verdict pruning reads.
void reject_checkpoint(const CheckpointOptions &options,
                       const std::string &dir, const std::string &why);
// The message of a CheckpointReadError from reading checkpoint `dir`, with
// what to do (it is not skipped).
std::string unreadable_checkpoint_message(const std::string &root,
                                          const std::string &dir,
                                          const std::string &why);

// A checkpoint (or ROOT) that could not be read: an I/O error, a file that
// is not a regular file, a failed listing. Unlike a plain spw::Error from
// load_checkpoint (the checkpoint read fine and is invalid), it says nothing
// about whether the checkpoint is intact.
struct CheckpointReadError : Error {
  using Error::Error;
};

// Reads and verifies one checkpoint dir; throws CheckpointReadError when it
// cannot be read, else spw::Error saying why it is invalid.
LoadedCheckpoint load_checkpoint(IoEngine &engine, const std::string &dir);

// The newest valid checkpoint under `root`, or nullopt when there is none
// (root missing or empty, or every dir invalid). Invalid dirs and leftover
// tmp dirs are reported through options.notice and skipped; the invalid ones
// are recorded in options.verdicts. A dir that cannot
// be read stops the search: CheckpointReadError naming it and the cause.
std::optional<LoadedCheckpoint>
load_newest_checkpoint(IoEngine &engine, const std::string &root,
                       const CheckpointOptions &options);

// "step-00000042" for 42; the step of such a name, or -1.
std::string checkpoint_dir_name(int64_t step);
int64_t parse_checkpoint_dir_name(const std::string &name);
// The checkpoint dirs (step-*) under `root`, newest first, as (step, path);
// none when `root` does not exist. Throws CheckpointReadError when `root`
// cannot be listed, or when something other than a directory (or a symlink
// to one) has a checkpoint's name: "'ROOT/step-N' is a regular file, not a
// checkpoint directory; move it out of 'ROOT'".
std::vector<std::pair<int64_t, std::string>>
list_checkpoints(const std::string &root);

// Holds an exclusive flock(2) on ROOT/LOCK (ROOT is created if missing) until
// destroyed, with "pid N on host H since T" written in the file for the
// message another run gets. A lock left by a dead process is no holder: the
// kernel drops a flock with its last descriptor. Throws spw::Error naming the
// holder when another process holds it, or why ROOT/LOCK cannot be used.
// Where the file system has no flock (ENOLCK, EOPNOTSUPP), says so through
// `notice` and holds nothing.
class CheckpointDirLock {
public:
  explicit CheckpointDirLock(
      const std::string &root,
      const std::function<void(const std::string &)> &notice = {});
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock &) = delete;
  CheckpointDirLock &operator=(const CheckpointDirLock &) = delete;
  bool held() const { return fd_ >= 0; }

private:
  int fd_ = -1;
};
constexpr const char *kCheckpointLockFile = "LOCK";

// Parses and checks MANIFEST.json's text as load_checkpoint does (its own
// checksum, then the structure) without touching files; returns its step.
// Throws spw::Error saying what is wrong. (The manifest fuzzer's entry.)
int64_t check_checkpoint_manifest(const std::string &text);

// ---- test-only crash hook -------------------------------------------------
// SPILLWAY_TEST_CRASH_AT=<phase> (and optionally SPILLWAY_TEST_CRASH_STEP=N)
// make the writer raise(SIGKILL) at that phase of the checkpoint of step N
// (of any step without SPILLWAY_TEST_CRASH_STEP), so tests can prove that a
// kill at any point leaves a loadable newest checkpoint. Phases, in order:
//   data-partial      after the first chunk write completed
//   data-written      every chunk written, data file not yet fsynced
//   data-synced       data fsynced, no manifest yet
//   manifest-written  manifest written and fsynced, tmp dir not yet synced
//   renamed           renamed (or swapped) to step-N, ROOT not fsynced,
//                     a replaced step-N not yet removed, nothing pruned
//   pruned            everything done
// With SPILLWAY_TEST_CRASH_HOW=bad_alloc the phase throws std::bad_alloc
// instead (in-process tests of the cleanup). SPILLWAY_TEST_RENAME=fallback
// acts as if renameat2(RENAME_EXCHANGE) were unsupported, =fallback-fail also
// fails the rename into place with EIO.
// SPILLWAY_TEST_CHECKPOINT_CHUNK=BYTES sets the executable's chunk size
// (driver/checkpoints.cpp), so that a small model's checkpoint spans many.
// Only for tests: never set these in production.
extern const char *const kCrashPhases[];
extern const size_t kNumCrashPhases;

} // namespace spw::storage

#endif
