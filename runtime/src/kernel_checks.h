//===- kernel_checks.h - operand checks every backend's kernels share ------===//
//
// The CPU kernels (cpu/kernels_*.cpp) and the CUDA kernels (cuda/kernels_*.cu)
// check their operands on the host the same way and fail with the same
// messages (spw::Error via spw::fail): these are those checks. Plain C++17
// (nvcc compiles the CUDA files' host code with it).
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_KERNEL_CHECKS_H
#define SPILLWAY_RUNTIME_SRC_KERNEL_CHECKS_H

#include "tensor.h"

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace spw::checks {

// ins[i] / outs[i], failing when the array or the slot is NULL.
const spw_tensor &input(spw_tensor *const *ins, int i, const char *what);
spw_tensor &output(spw_tensor *const *outs, int i, const char *what);
const int64_t *need_iattrs(const int64_t *iattrs);

void expect_dtype(const spw_tensor &t, int32_t dtype, const char *what);
void expect_index_dtype(const spw_tensor &t, const char *what); // i64 or i32
bool same_shape(const spw_tensor &a, const spw_tensor &b);
bool shape_is(const spw_tensor &t, const std::vector<int64_t> &dims);
std::string vec_str(const std::vector<int64_t> &v); // "[2,3]"
void expect_shape(const spw_tensor &t, const std::vector<int64_t> &dims,
                  const char *what);
// Same dtype and shape as `ref`.
void expect_like(const spw_tensor &t, const spw_tensor &ref, const char *what,
                 const char *refname);
// `axis` (already non-negative) within t's rank (0 for a scalar).
int64_t axis_of(const spw_tensor &t, int64_t axis);
// dims[from] * ... * dims[to - 1].
int64_t prod(const int64_t *dims, int64_t from, int64_t to);

// Row-major strides of `t` aligned to the last dims of an iteration space of
// rank `rank` and dims `dims`; broadcast dims get stride 0. `t` must be
// numpy-broadcastable to `dims`.
std::array<int64_t, kMaxRank> broadcast_strides(const spw_tensor &t, int rank,
                                                const int64_t *dims,
                                                const char *what);
// numpy's broadcast of two shapes.
std::vector<int64_t> broadcast_shape(const spw_tensor &a, const spw_tensor &b);
// numpy's broadcast of all of `ts`' shapes (for two, broadcast_shape's
// message).
std::vector<int64_t>
broadcast_all(std::initializer_list<const spw_tensor *> ts);

} // namespace spw::checks

#endif // SPILLWAY_RUNTIME_SRC_KERNEL_CHECKS_H
