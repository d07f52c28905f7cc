//===- OutputFiles.h - the files a spillwayc compile writes ----*- C++ -*-===//
#ifndef SPILLWAYC_OUTPUTFILES_H
#define SPILLWAYC_OUTPUTFILES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Signals.h"

#include <cerrno>
#include <csignal>
#include <string>
#include <unistd.h>
#include <vector>

namespace spillwayc {
using mlir::failure;
using mlir::LogicalResult;
using mlir::ModuleOp;
using mlir::StringRef;
using mlir::success;
using mlir::Twine;

/// The files a compile writes (the executable or what --emit names, and the
/// weights), each first under a temporary name beside it, `DEST.tmp.<pid>`;
/// commit() renames them into place at the end. Until then every way out (a
/// failed stage, an exception, SIGINT or SIGTERM) removes them: a failed
/// compile leaves nothing behind, and an existing executable is replaced
/// only by a finished one. A SIGKILL cannot be caught: the next compile to
/// the same destination removes what that left (`removeStale`).
class PendingOutputs {
public:
  /// Where to write `dest`'s content until commit().
  std::string add(StringRef dest) {
    removeStale(dest);
    std::string temp = tempName(dest, ::getpid());
    llvm::sys::RemoveFileOnSignal(temp);
    entries.push_back({temp, dest.str()});
    return temp;
  }
  /// A scratch file for `dest`'s compile (the object file linked into the
  /// executable), `DEST.tmp.<pid><suffix>`: removed on every way out, never
  /// committed, and by the next compile to `dest` after a SIGKILL.
  std::string scratch(StringRef dest, StringRef suffix) {
    removeStale(dest);
    std::string temp = tempName(dest, ::getpid()) + suffix.str();
    llvm::sys::RemoveFileOnSignal(temp);
    entries.push_back({temp, "", /*committed=*/false, /*scratch=*/true});
    return temp;
  }
  LogicalResult commit(std::string &error) {
    // A SIGINT or SIGTERM between the renames would leave the new weights
    // beside the old executable: the signals wait until both are in place.
    // A handler that only records the signal (not a thread's signal mask:
    // any of MLIR's threads may receive it), re-raised afterwards so LLVM's
    // handler still cleans up and the process still dies of it.
    const int signals[] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction defer = {}, previous[3];
    defer.sa_handler = [](int sig) { deferredSignal = sig; };
    sigemptyset(&defer.sa_mask);
    deferredSignal = 0;
    for (int i = 0; i < 3; ++i)
      sigaction(signals[i], &defer, &previous[i]);
    LogicalResult result = success();
    for (Entry &e : entries) {
      if (e.scratch)
        continue;
      if (std::error_code ec = llvm::sys::fs::rename(e.temp, e.dest)) {
        error = "cannot move '" + e.temp + "' to '" + e.dest +
                "': " + ec.message();
        result = failure();
        break;
      }
      llvm::sys::DontRemoveFileOnSignal(e.temp);
      e.committed = true;
    }
    for (int i = 0; i < 3; ++i)
      sigaction(signals[i], &previous[i], nullptr);
    if (deferredSignal)
      ::raise(deferredSignal);
    return result;
  }
  ~PendingOutputs() {
    for (Entry &e : entries)
      if (!e.committed) {
        llvm::sys::fs::remove(e.temp);
        llvm::sys::DontRemoveFileOnSignal(e.temp);
      }
  }

private:
  static std::string tempName(StringRef dest, long pid) {
    return (dest + ".tmp." + Twine(pid)).str();
  }
  /// Removes `dest`'s temporaries whose compile no longer runs.
  static void removeStale(StringRef dest) {
    llvm::SmallString<256> dir(llvm::sys::path::parent_path(dest));
    if (dir.empty())
      dir = ".";
    std::string prefix = (llvm::sys::path::filename(dest) + ".tmp.").str();
    std::error_code ec;
    for (llvm::sys::fs::directory_iterator it(dir, ec), end; !ec && it != end;
         it.increment(ec)) {
      StringRef name = llvm::sys::path::filename(it->path());
      long pid;
      // DEST.tmp.<pid>, or a scratch file DEST.tmp.<pid>.o.
      if (!name.consume_front(prefix) || name.consumeInteger(10, pid) ||
          !(name.empty() || name == ".o") || pid <= 0 || pid == ::getpid())
        continue;
      if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH)
        llvm::sys::fs::remove(it->path());
    }
  }
  struct Entry {
    std::string temp, dest;
    bool committed = false;
    bool scratch = false;
  };
  static inline volatile std::sig_atomic_t deferredSignal = 0;
  std::vector<Entry> entries;
};

/// A file spillwayc writes: `what` ("-o 'x'") names it in messages. It
/// must be absent or a regular file (a rename onto a device node or a FIFO
/// would replace it, a write would block on a FIFO; the executable's --save
/// refuses them too), in an existing, writable directory. Checked before
/// anything compiles or measures; false with the message in `error`.
bool checkOutputFile(const std::string &what, StringRef path,
                     std::string &error);

/// Copies the weights file a .mlir input names (relative to the .mlir file)
/// to `dest`. A weights map is copied as it is (its sources are absolute
/// paths), after checking they are unchanged; with `materialize`, `dest`
/// gets the bytes it describes instead (streamed).
LogicalResult copyWeightsOfMLIR(ModuleOp module, StringRef mlirPath,
                                StringRef dest, bool materialize,
                                std::string &error);

} // namespace spillwayc

#endif
