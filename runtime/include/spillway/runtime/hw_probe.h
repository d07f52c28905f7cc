//===- hw_probe.h - measure this machine for the cost model ----------------===//
//
// What `spillwayc --probe-hw` measures, through the runtime's own code so
// the cost model predicts what this runtime does: memcpy between host
// buffers, the CPU backend's matmul kernel, its AdamW kernel, and sequential
// O_DIRECT reads, writes and both at once through the storage engine.
// Plain C++; nothing here throws (errors come back as text).
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_HW_PROBE_H
#define SPILLWAY_RUNTIME_HW_PROBE_H

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace spw::probe {

struct SSDMeasurement {
  std::string dir;
  uint64_t bytes = 0;       // per pass
  double read_gbps = 0;     // sequential read alone
  double write_gbps = 0;    // sequential write alone
  double combined_gbps = 0; // a read and a write at once, both counted
  bool direct = true;       // O_DIRECT (false: the page cache was involved)
  std::string backend;      // "io_uring" or "threads"
};

struct HostMeasurement {
  uint64_t memory_bytes = 0;       // physical memory
  unsigned cores = 0;              // online CPUs
  double memcpy_gbps = 0;          // bytes copied per second, one thread
  double matmul_gflops = 0;        // the CPU backend's f32 matmul kernel
  unsigned matmul_size = 0;        // square matrices of this size
  double adamw_params_per_s = 0;   // the CPU backend's AdamW kernel
  std::vector<SSDMeasurement> ssds;
};

struct ProbeOptions {
  std::vector<std::string> ssd_dirs;           // measured one after another
  uint64_t ssd_bytes = uint64_t(256) << 20;    // per pass and directory
  uint64_t memcpy_bytes = uint64_t(256) << 20; // buffer size
  unsigned matmul_size = 512;
  uint64_t adamw_params = uint64_t(8) << 20;
  double min_seconds = 0.5; // each compute measurement repeats this long
  std::function<void(const std::string &)> progress; // optional
};

// Fills `out`; on failure returns false with `error` saying what failed.
bool probe_host(const ProbeOptions &options, HostMeasurement &out,
                std::string &error);

} // namespace spw::probe

#endif
