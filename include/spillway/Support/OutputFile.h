//===- OutputFile.h - write a file a tool makes, errors named ---*- C++ -*-===//
//
// A raw_fd_ostream that failed a write (a full disk, a file that takes no
// writes such as /proc/version) ends the process with LLVM's fatal "IO
// failure on output stream" when it is destroyed. Every file the tools write
// goes through here instead: the failure is an error that names the file.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_SUPPORT_OUTPUTFILE_H
#define SPILLWAY_SUPPORT_OUTPUTFILE_H

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"
#include <string>

namespace spillway {

/// Closes `os` (flushes it when `path` is "-", stdout), which wrote `path`:
/// false, with "cannot write 'PATH': WHY" in `error`, if any write or the
/// close failed. The stream's error is cleared, so its destruction does not
/// abort.
bool finishOutput(llvm::raw_fd_ostream &os, llvm::StringRef path,
                  std::string &error);

/// Writes `path` ("-": stdout) with `write`. On failure the file is removed
/// and `error` says why.
bool writeOutputFile(llvm::StringRef path,
                     llvm::function_ref<void(llvm::raw_ostream &)> write,
                     std::string &error);

} // namespace spillway

#endif // SPILLWAY_SUPPORT_OUTPUTFILE_H
