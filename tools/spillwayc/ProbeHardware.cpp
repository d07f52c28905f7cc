//===- ProbeHardware.cpp - spillwayc --probe-hw ---------------------------===//
//
// Measures this machine through the runtime's probe (its kernels and
// storage engine) and writes a hardware profile for the CPU backend.
//
//===----------------------------------------------------------------------===//

#include "ProbeHardware.h"

#include "spillway/Schedule/HardwareProfile.h"
#include "spillway/Support/OutputFile.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

// The runtime's probe (plain C++, no MLIR).
#include "spillway/runtime/hw_probe.h"

#include <ctime>
#include <unistd.h>

namespace {
int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "spillwayc") << message << "\n";
  return 1;
}
} // namespace

int spillwayc::probeHardware(const std::string &probeHw, uint64_t ssdBytes,
                             double probeSeconds,
                             const std::vector<std::string> &ssdDirs) {
  spw::probe::ProbeOptions options;
  options.ssd_bytes = ssdBytes;
  options.min_seconds = probeSeconds;
  std::vector<std::string> normalized;
  for (const std::string &d : ssdDirs) {
    llvm::SmallString<256> abs(d);
    llvm::sys::fs::make_absolute(abs);
    // One directory measured twice would count its SSD's bandwidth twice.
    llvm::SmallString<256> norm(abs);
    llvm::sys::path::remove_dots(norm, /*remove_dot_dot=*/true);
    while (norm.size() > 1 && llvm::sys::path::is_separator(norm.back()))
      norm.pop_back();
    if (llvm::is_contained(normalized, std::string(norm)))
      return fail("--ssd '" + d + "': the directory '" + std::string(norm) +
                  "' is already given; name each SSD once");
    normalized.push_back(std::string(norm));
    options.ssd_dirs.push_back(std::string(abs));
  }
  if (options.ssd_dirs.empty()) {
    llvm::SmallString<256> cwd;
    llvm::sys::fs::current_path(cwd);
    options.ssd_dirs.push_back(std::string(cwd));
  }
  options.progress = [](const std::string &s) {
    llvm::errs() << "spillwayc --probe-hw: " << s << "\n";
  };
  spw::probe::HostMeasurement m;
  std::string error;
  if (!spw::probe::probe_host(options, m, error))
    return fail("--probe-hw: " + error);

  // The CPU backend: the "GPU" is this CPU, running the runtime's kernels
  // (f32 whatever the model's precision), and host <-> "GPU" copies are
  // memcpys. Its memory is the arena --gpu-mem sizes; the profile records
  // the host's.
  spillway::schedule::HardwareProfile p;
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  p.name = host;
  p.backend = "cpu";
  p.gpuBf16TFlops = p.gpuFp32TFlops = m.matmul_gflops / 1e3;
  p.gpuMemoryBytes = m.memory_bytes;
  p.hostMemoryBytes = m.memory_bytes;
  p.hostMemcpyGBps = m.memcpy_gbps;
  p.cpuOptimizerParamsPerSec = m.adamw_params_per_s;
  p.h2dGBps = p.d2hGBps = p.bidirectionalGBps = m.memcpy_gbps;
  bool buffered = false;
  for (const spw::probe::SSDMeasurement &d : m.ssds) {
    p.ssds.push_back({d.dir, d.read_gbps, d.write_gbps, d.combined_gbps});
    buffered |= !d.direct;
  }
  p.source = llvm::formatv(
      "spillwayc --probe-hw on {0} ({1} CPUs), {2}: CPU backend. gpu = this "
      "CPU: the runtime's fast f32 matmul kernel (OpenBLAS sgemm cut "
      "across {1} kernel threads) on {3}x{3} matrices, "
      "used for bf16 and fp32 alike; gpu.memory_bytes = host memory (the "
      "arena's size is the --gpu-mem budget). pcie = one-thread memcpy of "
      "{4} MiB buffers, all three rates (bidirectional not measured "
      "separately). cpu_optimizer = the runtime's AdamW kernel. ssd: {5} MiB "
      "per pass, 1 MiB requests x 32 through the storage engine ({6}); "
      "combined = half read while the other half is written.",
      host, m.cores, date, m.matmul_size, options.memcpy_bytes >> 20,
      ssdBytes >> 20,
      buffered ? "BUFFERED on some directory: the page cache inflates it"
               : "O_DIRECT");
  std::string out = spillway::schedule::writeHardwareProfile(p);
  // What we wrote must be what the compiler reads.
  if (!spillway::schedule::parseHardwareProfile(out, probeHw, error))
    return fail("internal error: the probe wrote an invalid profile: " + error);
  std::string writeError;
  if (!spillway::writeOutputFile(
          probeHw, [&](llvm::raw_ostream &os) { os << out; }, writeError))
    return fail("--probe-hw: " + writeError);
  llvm::errs() << "spillwayc --probe-hw: wrote " << probeHw << "\n";
  return 0;
}
