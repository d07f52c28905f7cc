//===- ProbeHardware.h - spillwayc --probe-hw -------------------*- C++ -*-===//
#ifndef SPILLWAYC_PROBEHARDWARE_H
#define SPILLWAYC_PROBEHARDWARE_H

#include <cstdint>
#include <string>
#include <vector>

namespace spillwayc {

/// --probe-hw PROFILE.json: measures memcpy, the CPU backend's matmul and
/// AdamW kernels (each about `probeSeconds`) and `ssdBytes` through the
/// storage engine in each of `ssdDirs` (empty: the current directory), and
/// writes the profile. The exit status; errors are printed.
int probeHardware(const std::string &profilePath, uint64_t ssdBytes,
                  double probeSeconds, const std::vector<std::string> &ssdDirs);

} // namespace spillwayc

#endif
