//===- cuda_check.h - every CUDA call checked ------------------------------===//
//
// SPW_CUDA(call) runs a CUDA runtime call and throws spw::Error naming the
// call, where it was made and CUDA's own message when it fails; kernel
// launches are followed by SPW_CUDA(cudaGetLastError()).
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_CUDA_CUDA_CHECK_H
#define SPILLWAY_RUNTIME_SRC_CUDA_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace spw::cuda {

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void cuda_fail(cudaError_t e, const char *call,
                                   const char *file, int line) {
  throw CudaError(std::string(call) + " failed at " + file + ":" +
                  std::to_string(line) + ": " + cudaGetErrorName(e) + " (" +
                  cudaGetErrorString(e) + ")");
}

} // namespace spw::cuda

#define SPW_CUDA(call)                                                         \
  do {                                                                         \
    cudaError_t spw_cuda_e_ = (call);                                          \
    if (spw_cuda_e_ != cudaSuccess)                                            \
      ::spw::cuda::cuda_fail(spw_cuda_e_, #call, __FILE__, __LINE__);          \
  } while (0)

#endif
