//===- kernels.h - the CUDA backend's kernels ------------------------------===//
//
// Each op of the C ABI (device.h's Op, from kernels.def) that has a CUDA
// kernel is a function of this signature. Tensors are the runtime's
// spw_tensor structs: dtype, rank and dims on the host, `data` a device
// pointer. The layout of ins / outs / iattrs / fattrs is the C ABI's
// (kernels.def), and the results are the CPU kernels' (runtime/src/cpu/
// kernels_*.cpp, the reference) within the tolerances spillway-cuda-check
// states per dtype.
//
// A kernel checks dtypes and shapes on the host like its CPU twin and
// throws spw::Error (spw::fail) with the same kind of message; it launches
// on `l.stream` only, never synchronizes, and checks every CUDA call
// (SPW_CUDA, and SPW_CUDA(cudaGetLastError()) after each launch).
// Temporaries come from l.scratch(bytes): step-lifetime device memory.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_CUDA_KERNELS_H
#define SPILLWAY_RUNTIME_SRC_CUDA_KERNELS_H

#include "device.h"
#include "tensor.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

namespace spw::cuda {

struct Launch {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void *lt_workspace = nullptr; // cuBLASLt workspace, lt_workspace_bytes
  size_t lt_workspace_bytes = 0;
  // Precision::BF16: products (GEMMs, attention's QK^T and PV) take bf16
  // inputs with fp32 accumulation; tensors stay fp32 in memory.
  Precision precision = Precision::FP32;
  Device *device = nullptr;
  int sm_count = 132; // multiprocessors, for grid sizing
  void *scratch(int64_t bytes, const char *what) const {
    return device->step_alloc(bytes, what);
  }
};

using Kernel = void (*)(const Launch &l, spw_tensor *const *ins,
                        spw_tensor *const *outs, const int64_t *iattrs,
                        const double *fattrs);

// The kernel of `op`, or null (the op then runs on host copies). Each
// kernels_*.cu file answers for its own ops; kernel_for asks them in turn.
Kernel kernel_for(Op op);
Kernel elementwise_kernel_for(Op op); // kernels_elementwise.cu
Kernel shape_kernel_for(Op op);       // kernels_shape.cu
Kernel gemm_kernel_for(Op op);        // kernels_gemm.cu
Kernel nn_kernel_for(Op op);          // kernels_nn.cu
Kernel attention_kernel_for(Op op);   // kernels_attention.cu

} // namespace spw::cuda

#endif // SPILLWAY_RUNTIME_SRC_CUDA_KERNELS_H
