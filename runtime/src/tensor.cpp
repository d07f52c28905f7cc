//===- tensor.cpp - make_tensor -------------------------------------------===//

#include "tensor.h"

#include <cstdint>
#include <memory>

namespace spw {


std::unique_ptr<spw_tensor> make_tensor(int32_t dtype, int32_t rank,
                                        const int64_t *dims, const char *what,
                                        bool allocate) {
  if (dtype_size(dtype) == 0)
    fail("%s: unknown dtype %d", what, dtype);
  if (rank < 0 || rank > kMaxRank)
    fail("%s: rank %d is outside 0..%d", what, rank, kMaxRank);
  if (rank > 0 && !dims)
    fail("%s: dims is NULL for rank %d", what, rank);
  auto t = std::make_unique<spw_tensor>();
  t->dtype = dtype;
  t->rank = rank;
  int64_t numel = 1;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] < 0)
      fail("%s: negative dimension in shape %s", what,
           shape_str(dims, rank).c_str());
    t->dims[i] = dims[i];
    if (dims[i] != 0 && numel > (int64_t(1) << 46) / dims[i])
      fail("%s: shape %s is too large", what, shape_str(dims, rank).c_str());
    numel *= dims[i];
  }
  t->numel = numel;
  if (allocate) {
    // A large buffer is checked against the memory there is: with
    // overcommit the allocation would succeed and the kernel writing it
    // take the machine into the OOM killer. (Small ones skip the /proc
    // reads: they are most of a step's allocations.)
    if (t->bytes() >= kCheckedAllocation)
      check_memory(t->bytes(), format("%s %s %s needs", what,
                                      dtype_name(dtype),
                                      shape_str(dims, rank).c_str()));
    t->owned = alloc_buffer(t->bytes());
    t->data = t->owned.get();
  }
  return t;
}

} // namespace spw
