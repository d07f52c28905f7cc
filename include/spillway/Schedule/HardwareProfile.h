//===- HardwareProfile.h - what the machine can do, for the cost model ----===//
//
// The measured ceilings the roofline cost model (CostModel.h) divides bytes
// and FLOPs by. A profile is a JSON file (docs/cost-model.md gives the
// schema): written by `spillwayc --probe-hw FILE` from measurements of this
// machine, or by hand from someone else's (profiles/h200.json). Rates are
// what a real workload achieves, not datasheet peaks.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_SCHEDULE_HARDWAREPROFILE_H
#define SPILLWAY_SCHEDULE_HARDWAREPROFILE_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace spillway::schedule {

/// One SSD (a directory of `--ssd`). Reads and writes share the device:
/// `combinedGBps` is what a read and a write running at once achieve
/// together, and it is less than readGBps + writeGBps.
struct SSDProfile {
  std::string path;
  double readGBps = 0;
  double writeGBps = 0;
  double combinedGBps = 0;
};

/// All rates in decimal units: GB/s = 1e9 bytes/s, TFLOP/s = 1e12 FLOP/s.
struct HardwareProfile {
  std::string name;   ///< "h200", "cpu-ci", a host name
  std::string source; ///< how and where it was measured (free text)
  /// "cuda" or "cpu": on the CPU backend the "GPU" is the host CPU and its
  /// memory is an arena in host memory.
  std::string backend = "cuda";

  // The accelerator (the CPU itself on the CPU backend).
  double gpuBf16TFlops = 0; ///< achievable bf16 training rate
  double gpuFp32TFlops = 0; ///< achievable fp32 rate
  uint64_t gpuMemoryBytes = 0;

  // Host.
  uint64_t hostMemoryBytes = 0;
  double hostMemcpyGBps = 0; ///< bytes copied per second (each read + written once)
  double cpuOptimizerParamsPerSec = 0; ///< AdamW parameters updated per second

  // Host <-> GPU (pinned memory).
  double h2dGBps = 0;
  double d2hGBps = 0;
  double bidirectionalGBps = 0; ///< H2D + D2H at once, both directions together

  std::vector<SSDProfile> ssds;

  /// Between ranks of a data-parallel job: the bytes each rank sends per
  /// second while it also receives as many (an all-reduce's steady rate);
  /// 0: not given ("network" is optional; spillwayc --ranks N > 1 needs it).
  double networkGBps = 0;

  /// Striping over every SSD: the rates add up across devices (each device
  /// has its own queue), never across a device's reads and writes.
  double ssdReadGBps() const;
  double ssdWriteGBps() const;
  double ssdCombinedGBps() const;
};

/// Parses a profile. On failure returns nothing and sets `error` to a
/// message naming `what` (the file) and the offending key: a missing key, a
/// value of the wrong type, a rate or size that is not positive, a key the
/// schema does not know.
std::optional<HardwareProfile> parseHardwareProfile(const std::string &json,
                                                    const std::string &what,
                                                    std::string &error);
/// Reads and parses a profile file.
std::optional<HardwareProfile> readHardwareProfile(const std::string &path,
                                                   std::string &error);
/// The profile as JSON (the schema parseHardwareProfile reads).
std::string writeHardwareProfile(const HardwareProfile &profile);

} // namespace spillway::schedule

#endif
