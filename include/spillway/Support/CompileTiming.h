//===- CompileTiming.h - wall time and memory of each compile phase -*- C++ -*-===//
//
// spillwayc --pass-timing=FILE: one record per MLIR pass run and per phase
// outside the pass managers (translation to LLVM IR, LLVM code generation,
// link), each with its wall time and the process's resident memory after it
// (current and peak), written as JSON. bench/compile-time.sh reads it.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_SUPPORT_COMPILETIMING_H
#define SPILLWAY_SUPPORT_COMPILETIMING_H

#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringRef.h"
#include <chrono>
#include <string>
#include <vector>

namespace spillway {

class CompileTiming {
public:
  /// Records nothing unless enabled.
  void enable() { enabled = true; }
  bool isEnabled() const { return enabled; }

  /// Records every pass `pm` runs (when enabled).
  void attach(mlir::PassManager &pm);

  /// A phase outside the pass managers, recorded when it goes out of scope.
  class Phase {
  public:
    Phase(CompileTiming &timing, llvm::StringRef name)
        : timing(timing), name(name.str()),
          start(std::chrono::steady_clock::now()) {}
    ~Phase() { timing.record(name, start); }

  private:
    CompileTiming &timing;
    std::string name;
    std::chrono::steady_clock::time_point start;
  };
  Phase phase(llvm::StringRef name) { return Phase(*this, name); }

  /// One record: `name` ran from `start` to now.
  void record(llvm::StringRef name,
              std::chrono::steady_clock::time_point start);

  /// {"records": [{"name", "seconds", "rss_mb", "peak_rss_mb"}...],
  ///  "seconds": since enable... (the first record's start), "peak_rss_mb"}.
  /// False, with `error` set, if `path` cannot be written.
  bool write(llvm::StringRef path, std::string &error) const;

private:
  struct Record {
    std::string name;
    double seconds, rssMB, peakRssMB;
  };
  bool enabled = false;
  std::chrono::steady_clock::time_point created =
      std::chrono::steady_clock::now();
  std::vector<Record> records;
};

} // namespace spillway

#endif
