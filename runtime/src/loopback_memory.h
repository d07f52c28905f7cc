//===- loopback_memory.h - the loopback device's GPU tier -----------------===//
//
// The offload plan's GPU tier on the loopback device: a storage::DeviceMemory
// over a buffer the LoopbackDevice allocated (so its kernels accept the
// addresses), with copies that behave like a GPU's copy engines where that
// can catch an executor bug:
//   - device-side bytes are stored XOR kLoopbackScramble, like every other
//     loopback device byte, so host code reading the arena directly sees
//     garbage;
//   - a copy's destination is poisoned when the copy is issued (NaN as f32)
//     and filled only later, by the direction's own thread after a seeded
//     random delay, so a consumer that does not wait for the copy's token
//     reads NaN instead of stale-but-right data;
//   - copies in one direction complete in issue order (one FIFO thread per
//     direction, as a GPU has one copy engine per direction).
// The device computes on the calling thread, so compute_waits() is a host
// wait. `EXE --device loopback --loopback-delays SEED` picks the seed.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_LOOPBACK_MEMORY_H
#define SPILLWAY_RUNTIME_SRC_LOOPBACK_MEMORY_H

#include <cstdint>
#include <memory>

namespace spw {

namespace storage {
class DeviceMemory;
}

// Device bytes are stored XOR kLoopbackScramble, fresh ones as kPoisonByte
// (device.h, shared with the LoopbackDevice).

// Seeded delays of the loopback tier's copies: copy n of a direction waits
// loopback_copy_delay_us(o, d2h, n) microseconds before it runs.
struct LoopbackCopyOptions {
  uint64_t seed = 1;          // 0: no delays (still asynchronous)
  int64_t max_delay_us = 200; // delays are uniform in [0, max_delay_us]
};

// The delay of the `index`-th copy (from 0, in issue order) of one direction
// (d2h false: host to device). A pure function of its arguments, so a run's
// delays are reproducible whatever the threads do.
int64_t loopback_copy_delay_us(const LoopbackCopyOptions &o, bool d2h,
                               uint64_t index);

// `device_base` must hold `bytes` and outlive the returned memory, which
// does not own it. Throws spw::Error for a null base, 0 bytes or a negative
// max_delay_us.
std::unique_ptr<storage::DeviceMemory>
make_loopback_tier_memory(char *device_base, uint64_t bytes,
                          const LoopbackCopyOptions &o);

} // namespace spw

#endif // SPILLWAY_RUNTIME_SRC_LOOPBACK_MEMORY_H
