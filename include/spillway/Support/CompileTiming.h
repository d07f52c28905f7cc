//===- CompileTiming.h - wall time and memory of each compile phase -*- C++ -*-===//
//
// spillwayc --pass-timing=FILE: one record per MLIR pass run and per phase
// outside the pass managers (translation to LLVM IR, LLVM code generation,
// link), each with its wall time, the process's CPU time (what a loaded
// machine does not inflate) and its resident memory after it (current and
// peak), written as JSON. bench/compile-time.sh reads it.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_SUPPORT_COMPILETIMING_H
#define SPILLWAY_SUPPORT_COMPILETIMING_H

#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringRef.h"
#include <chrono>
#include <ctime>
#include <string>
#include <vector>

namespace spillway {

class CompileTiming {
public:
  /// Records nothing unless enabled.
  void enable() { enabled = true; }
  bool isEnabled() const { return enabled; }

  /// When something started: wall and process CPU time.
  struct Start {
    std::chrono::steady_clock::time_point wall;
    std::clock_t cpu;
  };
  static Start now() { return {std::chrono::steady_clock::now(), std::clock()}; }

  /// Records every pass `pm` runs (when enabled).
  void attach(mlir::PassManager &pm);

  /// A phase outside the pass managers, recorded when it goes out of scope.
  class Phase {
  public:
    Phase(CompileTiming &timing, llvm::StringRef name)
        : timing(timing), name(name.str()), start(now()) {}
    ~Phase() { timing.record(name, start); }

  private:
    CompileTiming &timing;
    std::string name;
    Start start;
  };
  Phase phase(llvm::StringRef name) { return Phase(*this, name); }

  /// One record: `name` ran from `start` to now.
  void record(llvm::StringRef name, Start start);

  /// {"records": [{"name", "seconds", "cpu_seconds", "rss_mb",
  ///  "peak_rss_mb"}...], "seconds" and "cpu_seconds" since this object was
  ///  made, "peak_rss_mb"}.
  /// False, with `error` set, if `path` cannot be written.
  bool write(llvm::StringRef path, std::string &error) const;

private:
  struct Record {
    std::string name;
    double seconds, cpuSeconds, rssMB, peakRssMB;
  };
  bool enabled = false;
  Start created = now();
  std::vector<Record> records;
};

} // namespace spillway

#endif
