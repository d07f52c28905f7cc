//===- cuda_tier_memory.h - the CUDA backend's GPU tier -------------------===//
//
// The offload plan's GPU tier on a GPU (CudaDevice::make_tier_memory): one
// cudaMalloc arena, an H2D and a D2H copy stream, and the ordering the
// storage::DeviceMemory contract asks for, all without blocking the host:
//   - every copy first waits (on its stream) for an event recorded on the
//     compute stream when it is issued, so a D2H reads what earlier kernels
//     wrote and an H2D never overwrites what an earlier kernel still reads;
//   - its token completes from a stream callback after the copy;
//   - compute_waits(t) makes the compute stream wait for the event recorded
//     after t's copy: kernels issued later see the data, the host goes on.
// Host buffers should be page-locked (Device::register_host_memory) for
// the copies to be asynchronous DMA; pageable ones work, synchronously.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_CUDA_CUDA_TIER_MEMORY_H
#define SPILLWAY_RUNTIME_SRC_CUDA_CUDA_TIER_MEMORY_H

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace spw::storage {
class DeviceMemory;
}

namespace spw::cuda {

// `bytes` of GPU memory ordered against `compute` (the device's compute
// stream, which must outlive the memory). `launch_queued` launches the
// compute work the device has queued but not yet launched (CudaDevice's
// AdamW queue): every copy calls it first, so the copy is ordered after
// that work too (a D2H of updated weights reads the update). Throws
// spw::Error when the arena cannot be allocated.
std::unique_ptr<storage::DeviceMemory>
make_cuda_tier_memory(uint64_t bytes, cudaStream_t compute,
                      std::function<void()> launch_queued);

} // namespace spw::cuda

#endif // SPILLWAY_RUNTIME_SRC_CUDA_CUDA_TIER_MEMORY_H
