//===- tensor.h - the runtime's tensor ------------------------------------===//
//
// spw_tensor, the struct behind the C ABI's opaque tensor handle: dtype,
// shape and data (host memory, or the context's device memory), and
// make_tensor, which checks a dtype and shape and gives the tensor its
// storage. Defined in tensor.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_TENSOR_H
#define SPILLWAY_RUNTIME_SRC_TENSOR_H

#include "spillway/runtime/spillway_rt.h"
#include "support.h"

#include <cstdint>
#include <memory>
#include <string>

struct spw_tensor {
  int32_t dtype = SPW_F32;
  int32_t rank = 0;
  int64_t dims[spw::kMaxRank] = {};
  int64_t numel = 1;
  void *data = nullptr;
  spw::Buffer owned; // null when data points into storage owned elsewhere
  // data is the context's device memory (device.h), not host memory.
  bool on_device = false;
  // A step tensor of spw_alloc / spw_constant: spw_release may free it.
  bool releasable = false;

  int64_t bytes() const { return numel * spw::dtype_size(dtype); }
  std::string shape() const { return spw::shape_str(dims, rank); }
  template <class T> T *as() const { return static_cast<T *>(data); }
};

namespace spw {

// The size from which make_tensor (and alloc_step_tensor on host memory)
// checks available_memory() first.
constexpr int64_t kCheckedAllocation = int64_t(256) << 20;

// Makes a tensor with owned, uninitialized storage; validates dtype and dims.
// allocate = false: no storage (data null), only the checks and the shape.
std::unique_ptr<spw_tensor> make_tensor(int32_t dtype, int32_t rank,
                                        const int64_t *dims, const char *what,
                                        bool allocate = true);

} // namespace spw

#endif // SPILLWAY_RUNTIME_SRC_TENSOR_H
