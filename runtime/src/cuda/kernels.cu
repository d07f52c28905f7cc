//===- kernels.cu - which CUDA kernel runs each op -------------------------===//
//
// Asks each kernel family (kernels.h) in turn; an op none of them has runs
// on host copies (CudaDevice::run).
//
//===----------------------------------------------------------------------===//

#include "cuda/kernels.h"

namespace spw::cuda {

Kernel kernel_for(Op op) {
  for (Kernel (*family)(Op) :
       {elementwise_kernel_for, shape_kernel_for, gemm_kernel_for,
        nn_kernel_for, attention_kernel_for})
    if (Kernel k = family(op))
      return k;
  return nullptr;
}

} // namespace spw::cuda
