//===- support.h - errors, formatting, dtypes, buffers, files, memory -----===//
//
// What every part of the runtime uses, the storage layer included (which
// depends on this header only): the error type and printf-style formatting,
// the dtype codes' sizes and names, aligned buffers, reading and writing
// files, and the memory a new allocation may take. Defined in support.cpp.
// Plain C++20; nothing here crosses the C ABI.
//
// Errors: inside the runtime a failure is a spw::Error exception. Every C
// entry point catches it and records the message in the context (a sticky
// error, context.h's guarded); later entry points of the same step return at
// once, and spw_main reports the first error after spw_model_step returns.
// Exceptions therefore never unwind through generated code.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_SUPPORT_H
#define SPILLWAY_RUNTIME_SRC_SUPPORT_H

#include "spillway/runtime/spillway_rt.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace spw {

constexpr int kMaxRank = 8;

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Formats like printf and throws spw::Error.
[[noreturn]] void fail(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

int64_t dtype_size(int32_t dtype);      // 0 for an unknown dtype
const char *dtype_name(int32_t dtype);  // "f32", "i64", "i32", "bool", "?"
std::string shape_str(const int64_t *dims, int rank);  // "[2,3]"

// A 64-byte aligned heap buffer.
struct AlignedFree {
  void operator()(void *p) const;
};
using Buffer = std::unique_ptr<void, AlignedFree>;
Buffer alloc_buffer(int64_t bytes);

// A JSON string literal of `s` (quotes, backslashes and control characters
// escaped); the safetensors header and checkpoint manifests use it.
std::string json_string(const std::string &s);

// ---- writing files ----------------------------------------------------------
// Writes to `path` through a temporary file and rename. A symlink at `path`
// is followed: its target is replaced (the temporary is made beside it).
void write_file_atomic(const std::string &path, const std::string &bytes);
// Removes the regular files in `dir` named `prefix` + `<pid>` (followed by
// `sep` and anything, when `sep` is not '\0') whose process is gone: what a
// killed writer left, which it could not clean up itself.
void remove_files_of_dead_writers(const std::string &dir,
                                  const std::string &prefix, char sep);
// `path` with its symlinks followed (up to 40), the last one possibly
// dangling; `path` itself when it is not a symlink.
std::string resolve_symlinks(const std::string &path);
// Test only: SPILLWAY_TEST_ENOSPC=FILE[@N][,FILE[@N]...] makes the N-th
// (default: first) and later writes of FILE (the path as its flag gave it;
// each write_file_atomic, or each --log-json line) fail as if the disk were
// full, so the tests reach the end-of-run and mid-run output failures
// without a full file system.
bool test_write_fault(const std::string &path);
// Creates `path` (refusing an existing file when `exclusive`), writes all of
// `bytes`, fsyncs and closes it; on failure removes it and throws spw::Error
// naming the file (and the offset of a failed write).
void write_file_synced(const std::string &path, const std::string &bytes,
                       bool exclusive);

// ---- files ------------------------------------------------------------------
// Reads a regular file (opened as open_regular does).
std::string read_whole_file(const std::string &path, const char *what);
// "a FIFO (named pipe)", "a character device", ... for a stat st_mode.
const char *file_kind(unsigned mode);
// Opens `path` for reading without ever blocking (O_NONBLOCK: a FIFO would
// wait for a writer) and refuses anything but a regular file; errors name
// `what` and the path. Returns the descriptor (O_CLOEXEC; blocking again)
// and its size.
int open_regular(const std::string &path, const char *what, int64_t *size);

// ---- memory -----------------------------------------------------------------
// The memory a new allocation may take: the least of MemAvailable, the
// cgroup's limit less its use and the address-space limit less the process's
// size; bytes < 0 when none is known.
struct MemoryBudget {
  int64_t bytes = -1;
  std::string source; // which limit it is, for messages
};
MemoryBudget available_memory();
// Fails when `bytes` exceed available_memory(); `what` starts the message
// and ends in its verb ("the inputs need", "a f32 [8,8] tensor needs").
void check_memory(int64_t bytes, const std::string &what);

} // namespace spw

#endif // SPILLWAY_RUNTIME_SRC_SUPPORT_H
