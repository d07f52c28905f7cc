//===- CompileTiming.cpp - wall time and memory of each compile phase -----===//

#include "spillway/Support/CompileTiming.h"
#include "spillway/Support/OutputFile.h"

#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"
#include <cstring>
#include <fstream>

using namespace spillway;
using Clock = std::chrono::steady_clock;

namespace {

/// VmRSS and VmHWM of /proc/self/status in MiB (0 where there is none).
std::pair<double, double> residentMB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  double rss = 0, peak = 0;
  while (std::getline(status, line)) {
    auto kb = [&](const char *key) {
      return line.rfind(key, 0) == 0 ? std::stod(line.substr(strlen(key))) /
                                           1024.0
                                     : -1.0;
    };
    if (double v = kb("VmRSS:"); v >= 0)
      rss = v;
    if (double v = kb("VmHWM:"); v >= 0)
      peak = v;
  }
  return {rss, peak};
}

struct PassTimer : mlir::PassInstrumentation {
  explicit PassTimer(CompileTiming &timing) : timing(timing) {}
  void runBeforePass(mlir::Pass *, mlir::Operation *) override {
    starts.push_back(CompileTiming::now());
  }
  void runAfterPass(mlir::Pass *pass, mlir::Operation *) override {
    timing.record(pass->getArgument(), starts.pop_back_val());
  }
  void runAfterPassFailed(mlir::Pass *pass, mlir::Operation *) override {
    timing.record(pass->getArgument(), starts.pop_back_val());
  }
  CompileTiming &timing;
  llvm::SmallVector<CompileTiming::Start> starts; // nested pass managers
};

} // namespace

void CompileTiming::attach(mlir::PassManager &pm) {
  if (enabled)
    pm.addInstrumentation(std::make_unique<PassTimer>(*this));
}

static double secondsSince(CompileTiming::Start start) {
  return std::chrono::duration<double>(Clock::now() - start.wall).count();
}
static double cpuSecondsSince(CompileTiming::Start start) {
  return double(std::clock() - start.cpu) / CLOCKS_PER_SEC;
}

void CompileTiming::record(llvm::StringRef name, Start start) {
  if (!enabled)
    return;
  auto [rss, peak] = residentMB();
  records.push_back({name.str(), secondsSince(start), cpuSecondsSince(start),
                     rss, peak});
}

bool CompileTiming::write(llvm::StringRef path, std::string &error) const {
  llvm::json::Array list;
  for (const Record &r : records)
    list.push_back(llvm::json::Object{{"name", r.name},
                                      {"seconds", r.seconds},
                                      {"cpu_seconds", r.cpuSeconds},
                                      {"rss_mb", r.rssMB},
                                      {"peak_rss_mb", r.peakRssMB}});
  auto [rss, peak] = residentMB();
  llvm::json::Object root{
      {"records", std::move(list)},
      {"seconds", secondsSince(created)},
      {"cpu_seconds", cpuSecondsSince(created)},
      {"peak_rss_mb", peak}};
  llvm::json::Value value(std::move(root));
  return writeOutputFile(
      path,
      [&](llvm::raw_ostream &os) {
        os << llvm::formatv("{0:2}", value) << "\n";
      },
      error);
}
