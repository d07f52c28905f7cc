//===- kernels_shape.cpp - shape ops, reductions, gather and rope ---------===//
//
// reshape, transpose, concat, slice(_grad), broadcast_to, the reductions
// (reduce_sum / reduce_mean / reduce_max / sum_to_shape), gather(_grad) and
// rope(_grad).
// The family's shared conventions (determinism, operand checks) are in
// cpu/kernels.h.
//
//===----------------------------------------------------------------------===//

#include "cpu/kernels.h"
#include "cpu/parallel.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

using namespace spw;

namespace {

using namespace spw::checks;
using spw::cpu::for_each_index;

// ---- gather ------------------------------------------------------------------

// Reads index j of an i64/i32 tensor, wrapping negatives into [0, n) and
// failing (naming the op's context) when out of range.
int64_t index_at(const spw_tensor &idx, int64_t j, int64_t n,
                 int64_t axis) {
  int64_t v = idx.dtype == SPW_I64 ? idx.as<int64_t>()[j]
                                   : int64_t(idx.as<int32_t>()[j]);
  if (v < -n || v >= n)
    fail("index %lld at position %lld of indices is out of range for axis "
         "%lld of size %lld (valid: %lld..%lld)",
         (long long)v, (long long)j, (long long)axis, (long long)n,
         (long long)-n, (long long)(n - 1));
  return v < 0 ? v + n : v;
}

std::vector<int64_t> gather_shape(const spw_tensor &data,
                                  const spw_tensor &idx, int64_t axis) {
  std::vector<int64_t> s(data.dims, data.dims + axis);
  s.insert(s.end(), idx.dims, idx.dims + idx.rank);
  s.insert(s.end(), data.dims + axis + 1, data.dims + data.rank);
  return s;
}

void gather(spw_tensor *const *ins, spw_tensor *const *outs,
            const int64_t *iattrs) {
  const spw_tensor &data = input(ins, 0, "data"),
                   &idx = input(ins, 1, "indices");
  spw_tensor &y = output(outs, 0, "y");
  expect_index_dtype(idx, "indices");
  if (data.rank < 1)
    fail("data must have rank >= 1");
  const int64_t axis = axis_of(data, need_iattrs(iattrs)[0]);
  expect_dtype(y, data.dtype, "result");
  expect_shape(y, gather_shape(data, idx, axis), "result");
  const int64_t outer = prod(data.dims, 0, axis), n = data.dims[axis];
  const int64_t inner = prod(data.dims, axis + 1, data.rank);
  const int64_t es = dtype_size(data.dtype), ni = idx.numel;
  std::vector<int64_t> rows(static_cast<size_t>(ni));
  for (int64_t j = 0; j < ni; ++j)
    rows[size_t(j)] = index_at(idx, j, n, axis);
  const char *src = static_cast<const char *>(data.data);
  char *dst = static_cast<char *>(y.data);
  const size_t chunk = size_t(inner * es);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < ni; ++j)
      std::memcpy(dst + (o * ni + j) * inner * es,
                  src + (o * n + rows[size_t(j)]) * inner * es, chunk);
}

void gather_grad(spw_tensor *const *ins, spw_tensor *const *outs,
                 const int64_t *iattrs) {
  const spw_tensor &idx = input(ins, 0, "indices"), &dy = input(ins, 1, "dy");
  spw_tensor &dd = output(outs, 0, "ddata");
  expect_index_dtype(idx, "indices");
  expect_dtype(dy, SPW_F32, "dy");
  expect_dtype(dd, SPW_F32, "result");
  if (dd.rank < 1)
    fail("result must have rank >= 1");
  const int64_t axis = axis_of(dd, need_iattrs(iattrs)[0]);
  expect_shape(dy, gather_shape(dd, idx, axis), "dy");
  const int64_t outer = prod(dd.dims, 0, axis), n = dd.dims[axis];
  const int64_t inner = prod(dd.dims, axis + 1, dd.rank), ni = idx.numel;
  std::vector<int64_t> rows(static_cast<size_t>(ni));
  for (int64_t j = 0; j < ni; ++j)
    rows[size_t(j)] = index_at(idx, j, n, axis);
  float *pd = dd.as<float>();
  const float *pg = dy.as<float>();
  std::fill(pd, pd + dd.numel, 0.0f);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < ni; ++j) {
      float *dst = pd + (o * n + rows[size_t(j)]) * inner;
      const float *src = pg + (o * ni + j) * inner;
      for (int64_t k = 0; k < inner; ++k)
        dst[k] += src[k];
    }
}

// ---- shape ops -------------------------------------------------------------------

void reshape(spw_tensor *const *ins, spw_tensor *const *outs) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(y, x.dtype, "result");
  if (y.numel != x.numel)
    fail("cannot reshape %s (%lld elements) to %s (%lld elements)",
         x.shape().c_str(), (long long)x.numel, y.shape().c_str(),
         (long long)y.numel);
  if (y.data != x.data && x.numel > 0)
    std::memcpy(y.data, x.data, size_t(x.bytes()));
}

template <class T>
void gather_strided_at(const T *px, T *py, int rank, const int64_t *dims,
                       const int64_t *xs) {
  for_each_index<1>(rank, dims, {xs},
                    [&](int64_t i, const std::array<int64_t, 1> &o) {
                      py[i] = px[o[0]];
                    });
}

template <class T>
void gather_strided(const spw_tensor &x, spw_tensor &y, const int64_t *xs) {
  gather_strided_at<T>(x.as<T>(), y.as<T>(), y.rank, y.dims, xs);
}

// The fast kernels cut a large copy along y's first dimension: each chunk
// is the same copy of a slab (the same bits; copies only).
bool copy_in_slabs(const spw_tensor &x, spw_tensor &y, const int64_t *xs) {
  if (!cpu::fast_kernels() || y.rank < 1 || y.dims[0] < 2 ||
      y.numel < (int64_t(1) << 15) || cpu::threads() < 2)
    return false;
  const int64_t slab = y.numel / y.dims[0];
  const size_t esize = size_t(dtype_size(x.dtype));
  cpu::parallel_for(y.dims[0], 1, [&](int64_t lo, int64_t hi) {
    const char *px = static_cast<const char *>(x.data) +
                     size_t(lo * xs[0]) * esize;
    char *py = static_cast<char *>(y.data) + size_t(lo * slab) * esize;
    int64_t dims[kMaxRank];
    std::copy(y.dims, y.dims + y.rank, dims);
    dims[0] = hi - lo;
    switch (esize) {
    case 8:
      return gather_strided_at(reinterpret_cast<const int64_t *>(px),
                               reinterpret_cast<int64_t *>(py), y.rank, dims,
                               xs);
    case 4:
      return gather_strided_at(reinterpret_cast<const int32_t *>(px),
                               reinterpret_cast<int32_t *>(py), y.rank, dims,
                               xs);
    default:
      return gather_strided_at(reinterpret_cast<const uint8_t *>(px),
                               reinterpret_cast<uint8_t *>(py), y.rank, dims,
                               xs);
    }
  });
  return true;
}

void copy_strided(const spw_tensor &x, spw_tensor &y, const int64_t *xs) {
  const size_t es = dtype_size(x.dtype);
  if ((es == 8 || es == 4 || es == 1) && copy_in_slabs(x, y, xs))
    return;
  switch (dtype_size(x.dtype)) {
  case 8: return gather_strided<int64_t>(x, y, xs);
  case 4: return gather_strided<int32_t>(x, y, xs);
  case 1: return gather_strided<uint8_t>(x, y, xs);
  default: fail("unsupported dtype %s", dtype_name(x.dtype));
  }
}

void transpose(spw_tensor *const *ins, spw_tensor *const *outs,
               const int64_t *iattrs) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(y, x.dtype, "result");
  if (x.rank > 0)
    need_iattrs(iattrs);
  int64_t xstride[kMaxRank], ys[kMaxRank];
  bool seen[kMaxRank] = {};
  std::vector<int64_t> want(size_t(x.rank));
  int64_t s = 1;
  for (int i = x.rank - 1; i >= 0; --i) {
    xstride[i] = s;
    s *= x.dims[i];
  }
  for (int i = 0; i < x.rank; ++i) {
    int64_t p = iattrs[i];
    if (p < 0 || p >= x.rank || seen[p])
      fail("perm is not a permutation of 0..%d", x.rank - 1);
    seen[p] = true;
    want[size_t(i)] = x.dims[p];
    ys[i] = xstride[p];
  }
  expect_shape(y, want, "result");
  copy_strided(x, y, ys);
}

void broadcast_to(spw_tensor *const *ins, spw_tensor *const *outs) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(y, x.dtype, "result");
  auto s = broadcast_strides(x, y.rank, y.dims, "x");
  copy_strided(x, y, s.data());
}

// Sums x into y, where y's strides over x's index space are `ys` (0 on
// summed dims); y = sum * scale.
template <class T>
void sum_into(const spw_tensor &x, spw_tensor &y, const int64_t *ys,
              double scale) {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
  // Floats start at -0, the identity of IEEE addition: a sum of -0s is -0
  // (as onnxruntime's and numpy's), anything else is what +0 would give.
  std::vector<Acc> acc(size_t(y.numel), std::is_floating_point_v<T> && x.numel > 0
                                            ? Acc(-0.0)
                                            : Acc(0));
  const T *px = x.as<T>();
  // The fast kernels' common cases, each output element's sum in the
  // reference's order (the same bits), cut across threads: leading dims
  // summed into the trailing ones (a bias gradient: [R, C] -> [C]), or
  // trailing dims summed into the leading ones ([R, C] -> [R]).
  int k = 0;
  while (k < x.rank && ys[k] == 0)
    ++k;
  bool trailing_kept = k < x.rank, leading_kept = true;
  int64_t stride = 1;
  for (int d = x.rank - 1; d >= k; --d) {
    trailing_kept = trailing_kept && ys[d] == stride;
    stride *= x.dims[d];
  }
  int r = x.rank;
  while (r > 0 && ys[r - 1] == 0)
    --r;
  stride = 1;
  for (int d = r - 1; d >= 0; --d) {
    leading_kept = leading_kept && ys[d] == stride;
    stride *= x.dims[d];
  }
  const bool fast = cpu::fast_kernels() && x.numel >= (int64_t(1) << 15);
  if (fast && trailing_kept && k > 0) {
    const int64_t C = y.numel, R = x.numel / std::max<int64_t>(C, 1);
    cpu::parallel_for(C, 256, [&](int64_t lo, int64_t hi) {
      for (int64_t i = 0; i < R; ++i)
        for (int64_t j = lo; j < hi; ++j)
          acc[size_t(j)] += Acc(px[i * C + j]);
    });
  } else if (fast && leading_kept && r < x.rank && r > 0) {
    const int64_t R = y.numel, C = x.numel / std::max<int64_t>(R, 1);
    cpu::parallel_for(R, 16, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        for (int64_t j = 0; j < C; ++j)
          acc[size_t(i)] += Acc(px[i * C + j]);
    });
  } else {
    for_each_index<1>(x.rank, x.dims, {ys},
                      [&](int64_t i, const std::array<int64_t, 1> &o) {
                        acc[size_t(o[0])] += Acc(px[i]);
                      });
  }
  T *py = y.as<T>();
  for (int64_t i = 0; i < y.numel; ++i) {
    if constexpr (std::is_floating_point_v<T>)
      py[i] = T(acc[size_t(i)] * scale);
    else
      py[i] = scale == 1.0 ? T(acc[size_t(i)])
                           : T(double(acc[size_t(i)]) * scale);
  }
}

void sum_dispatch(const spw_tensor &x, spw_tensor &y, const int64_t *ys,
                  double scale) {
  switch (x.dtype) {
  case SPW_F32: return sum_into<float>(x, y, ys, scale);
  case SPW_I64: return sum_into<int64_t>(x, y, ys, scale);
  case SPW_I32: return sum_into<int32_t>(x, y, ys, scale);
  default: fail("unsupported dtype %s", dtype_name(x.dtype));
  }
}

// Validates reduce's i[n, axes] against x and the result y (keepdims or
// not); fills y's strides over x's index space (0 on reduced dims) and
// returns the number of elements reduced into each result element.
int64_t reduce_strides(const spw_tensor &x, const spw_tensor &y,
                       const int64_t *iattrs, int64_t *ys) {
  expect_dtype(y, x.dtype, "result");
  need_iattrs(iattrs);
  const int64_t n = iattrs[0];
  if (n <= 0 || n > x.rank)
    fail("axis count %lld is invalid for rank %d", (long long)n, x.rank);
  bool reduced[kMaxRank] = {};
  for (int64_t i = 0; i < n; ++i) {
    int64_t a = iattrs[1 + i];
    if (a < 0 || a >= x.rank)
      fail("axis %lld is out of range for rank %d", (long long)a, x.rank);
    reduced[a] = true;
  }
  std::vector<int64_t> keep, squeezed;
  int64_t count = 1;
  for (int i = 0; i < x.rank; ++i) {
    keep.push_back(reduced[i] ? 1 : x.dims[i]);
    if (!reduced[i])
      squeezed.push_back(x.dims[i]);
    else
      count *= x.dims[i];
  }
  if (!shape_is(y, keep) && !shape_is(y, squeezed))
    fail("result has shape %s, expected %s (keepdims) or %s", y.shape().c_str(),
         vec_str(keep).c_str(), vec_str(squeezed).c_str());
  int64_t s = 1;
  for (int i = x.rank - 1; i >= 0; --i) {
    ys[i] = reduced[i] ? 0 : s;
    if (!reduced[i])
      s *= x.dims[i];
  }
  return count;
}

void reduce(spw_tensor *const *ins, spw_tensor *const *outs,
            const int64_t *iattrs, bool mean) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  int64_t ys[kMaxRank] = {};
  const int64_t count = reduce_strides(x, y, iattrs, ys);
  double scale = 1.0;
  if (mean) {
    if (x.dtype != SPW_F32)
      fail("reduce_mean supports only f32, got %s", dtype_name(x.dtype));
    scale = count > 0 ? 1.0 / double(count) : NAN;
  }
  sum_dispatch(x, y, ys, scale);
}

void sum_to_shape(spw_tensor *const *ins, spw_tensor *const *outs) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(y, x.dtype, "result");
  auto s = broadcast_strides(y, x.rank, x.dims, "result");
  sum_dispatch(x, y, s.data(), 1.0);
}

// ---- reduce_max ----------------------------------------------------------------

template <class T, bool IsBool>
void max_into(const spw_tensor &x, spw_tensor &y, const int64_t *ys) {
  T init;
  if constexpr (std::is_floating_point_v<T>)
    init = -std::numeric_limits<T>::infinity();
  else
    init = std::numeric_limits<T>::lowest();
  std::vector<T> acc(size_t(y.numel), init);
  const T *px = x.as<T>();
  for_each_index<1>(x.rank, x.dims, {ys},
                    [&](int64_t i, const std::array<int64_t, 1> &o) {
                      T v = px[i];
                      if constexpr (IsBool)
                        v = T(v != 0);
                      T &m = acc[size_t(o[0])];
                      if constexpr (std::is_floating_point_v<T>) {
                        if (v > m || std::isnan(v)) // NaN propagates
                          m = v;
                      } else if (v > m) {
                        m = v;
                      }
                    });
  if (y.numel > 0)
    std::memcpy(y.data, acc.data(), size_t(y.bytes()));
}

void reduce_max(spw_tensor *const *ins, spw_tensor *const *outs,
                const int64_t *iattrs) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  int64_t ys[kMaxRank] = {};
  reduce_strides(x, y, iattrs, ys);
  switch (x.dtype) {
  case SPW_F32: return max_into<float, false>(x, y, ys);
  case SPW_I64: return max_into<int64_t, false>(x, y, ys);
  case SPW_I32: return max_into<int32_t, false>(x, y, ys);
  case SPW_BOOL: return max_into<uint8_t, true>(x, y, ys);
  default: fail("unsupported dtype %s", dtype_name(x.dtype));
  }
}

// ---- concat, slice -------------------------------------------------------------

void concat(spw_tensor *const *ins, spw_tensor *const *outs,
            const int64_t *iattrs) {
  need_iattrs(iattrs);
  const int64_t axis = iattrs[0], n = iattrs[1];
  if (n < 1)
    fail("operand count %lld must be >= 1", (long long)n);
  spw_tensor &y = output(outs, 0, "y");
  const spw_tensor &x0 = input(ins, 0, "x0");
  if (x0.rank < 1)
    fail("operands must have rank >= 1, got x0 %s", x0.shape().c_str());
  axis_of(x0, axis);
  std::vector<const spw_tensor *> xs;
  int64_t total = 0;
  for (int64_t k = 0; k < n; ++k) {
    const std::string name = format("x%lld", (long long)k);
    const spw_tensor &xk = input(ins, int(k), name.c_str());
    bool ok = xk.dtype == x0.dtype && xk.rank == x0.rank;
    for (int d = 0; ok && d < x0.rank; ++d)
      ok = d == axis || xk.dims[d] == x0.dims[d];
    if (!ok)
      fail("%s is %s %s, but x0 is %s %s (only axis %lld may differ)",
           name.c_str(), dtype_name(xk.dtype), xk.shape().c_str(),
           dtype_name(x0.dtype), x0.shape().c_str(), (long long)axis);
    total += xk.dims[axis];
    xs.push_back(&xk);
  }
  std::vector<int64_t> want(x0.dims, x0.dims + x0.rank);
  want[size_t(axis)] = total;
  expect_dtype(y, x0.dtype, "result");
  expect_shape(y, want, "result");
  const int64_t outer = prod(x0.dims, 0, axis);
  const int64_t inner = prod(x0.dims, axis + 1, x0.rank) * dtype_size(x0.dtype);
  char *dst = static_cast<char *>(y.data);
  for (int64_t o = 0; o < outer; ++o)
    for (const spw_tensor *xk : xs) {
      const int64_t chunk = xk->dims[axis] * inner;
      if (chunk > 0)
        std::memcpy(dst, static_cast<const char *>(xk->data) + o * chunk,
                    size_t(chunk));
      dst += chunk;
    }
}

// Validates i[starts[0..rank), steps[0..rank)] of a slice `small` of `big`
// (small[i] = big[starts + i * steps] per dim); fills `strides`, small's
// element strides into big, and returns the element offset of small[0].
int64_t slice_map(const spw_tensor &big, const spw_tensor &small,
                  const int64_t *iattrs, int64_t *strides,
                  const char *bigname, const char *smallname) {
  if (small.rank != big.rank)
    fail("%s has rank %d, but %s has rank %d", smallname, small.rank, bigname,
         big.rank);
  if (small.dtype != big.dtype)
    fail("%s is %s, but %s is %s", smallname, dtype_name(small.dtype),
         bigname, dtype_name(big.dtype));
  const int r = big.rank;
  if (r > 0)
    need_iattrs(iattrs);
  int64_t bs[kMaxRank];
  int64_t s = 1;
  for (int d = r - 1; d >= 0; --d) {
    bs[d] = s;
    s *= big.dims[d];
  }
  const bool empty = small.numel == 0;
  int64_t base = 0;
  for (int d = 0; d < r; ++d) {
    const int64_t start = iattrs[d], step = iattrs[r + d], n = small.dims[d];
    if (step == 0)
      fail("step of dim %d is 0", d);
    if (!empty) {
      int64_t span = 0, last = 0;
      const bool overflow = __builtin_mul_overflow(n - 1, step, &span) ||
                            __builtin_add_overflow(start, span, &last);
      if (overflow || start < 0 || start >= big.dims[d] || last < 0 ||
          last >= big.dims[d])
        fail("dim %d: %lld elements from %lld with step %lld do not fit in "
             "size %lld (%s %s, %s %s)",
             d, (long long)n, (long long)start, (long long)step,
             (long long)big.dims[d], smallname, small.shape().c_str(), bigname,
             big.shape().c_str());
      base += start * bs[d];
    }
    strides[d] = step * bs[d];
  }
  return base;
}

template <class U>
void slice_copy(const spw_tensor &x, spw_tensor &y, int64_t base,
                const int64_t *xs, bool scatter) {
  U *px = static_cast<U *>(x.data) + base;
  U *py = y.as<U>();
  if (scatter) // x[base + ...] = y
    for_each_index<1>(y.rank, y.dims, {xs},
                      [&](int64_t i, const std::array<int64_t, 1> &o) {
                        px[o[0]] = py[i];
                      });
  else
    for_each_index<1>(y.rank, y.dims, {xs},
                      [&](int64_t i, const std::array<int64_t, 1> &o) {
                        py[i] = px[o[0]];
                      });
}

void slice_bytes(const spw_tensor &big, spw_tensor &small, int64_t base,
                 const int64_t *xs, bool scatter) {
  if (small.numel == 0)
    return;
  switch (dtype_size(big.dtype)) {
  case 8: return slice_copy<uint64_t>(big, small, base, xs, scatter);
  case 4: return slice_copy<uint32_t>(big, small, base, xs, scatter);
  case 1: return slice_copy<uint8_t>(big, small, base, xs, scatter);
  default: fail("unsupported dtype %s", dtype_name(big.dtype));
  }
}

void slice(spw_tensor *const *ins, spw_tensor *const *outs,
           const int64_t *iattrs) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  int64_t xs[kMaxRank] = {};
  const int64_t base = slice_map(x, y, iattrs, xs, "x", "result");
  slice_bytes(x, y, base, xs, false);
}

void slice_grad(spw_tensor *const *ins, spw_tensor *const *outs,
                const int64_t *iattrs) {
  const spw_tensor &dy = input(ins, 0, "dy");
  spw_tensor &dx = output(outs, 0, "dx");
  int64_t xs[kMaxRank] = {};
  const int64_t base = slice_map(dx, dy, iattrs, xs, "result", "dy");
  if (dx.numel > 0)
    std::memset(dx.data, 0, size_t(dx.bytes()));
  // Distinct elements of dy land on distinct elements of dx (steps != 0):
  // assignment is the sum.
  slice_bytes(dx, const_cast<spw_tensor &>(dy), base, xs, true);
}

// ---- rope ------------------------------------------------------------------------

// `t` (f32) numpy-broadcast to the shape of `like`, materialized.
std::vector<float> expand_to(const spw_tensor &t, const spw_tensor &like,
                             const char *what) {
  expect_dtype(t, SPW_F32, what);
  std::vector<float> out(static_cast<size_t>(like.numel));
  auto s = broadcast_strides(t, like.rank, like.dims, what);
  const float *pt = t.as<float>();
  for_each_index<1>(like.rank, like.dims, {s.data()},
                    [&](int64_t i, const std::array<int64_t, 1> &o) {
                      out[size_t(i)] = pt[o[0]];
                    });
  return out;
}

// rope (grad = false): y = x cos + rotate_half(x) sin, with
// rotate_half(x) = concat(-x[h:], x[:h]), h = D/2.
// rope_grad (grad = true), its transpose: with u = dy sin,
// dx = dy cos + concat(u[h:], -u[:h]).
void rope(spw_tensor *const *ins, spw_tensor *const *outs, bool grad) {
  const char *xname = grad ? "dy" : "x";
  const spw_tensor &x = input(ins, 0, xname), &c = input(ins, 1, "cos"),
                   &s = input(ins, 2, "sin");
  spw_tensor &y = output(outs, 0, grad ? "dx" : "y");
  expect_dtype(x, SPW_F32, xname);
  expect_like(y, x, "result", xname);
  if (x.rank < 1)
    fail("%s must have rank >= 1, got %s", xname, x.shape().c_str());
  const int64_t D = x.dims[x.rank - 1];
  if (D % 2 != 0)
    fail("the last dim of %s %s must be even", xname, x.shape().c_str());
  std::vector<float> cv = expand_to(c, x, "cos"), sv = expand_to(s, x, "sin");
  const int64_t h = D / 2, rows = D > 0 ? x.numel / D : 0;
  const float *px = x.as<float>();
  float *py = y.as<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = px + r * D, *cr = cv.data() + r * D,
                *sr = sv.data() + r * D;
    float *yr = py + r * D;
    for (int64_t d = 0; d < D; ++d) {
      double rot;
      if (!grad)
        rot = d < h ? -double(xr[d + h]) : double(xr[d - h]);
      else
        rot = d < h ? double(xr[d + h]) * sr[d + h]
                    : -double(xr[d - h]) * sr[d - h];
      const double v = double(xr[d]) * cr[d] + (grad ? rot : rot * sr[d]);
      yr[d] = float(v);
    }
  }
}

} // namespace

SPW_KERNEL_DEF(gather) {
  (void)fattrs;
  guarded(ctx, "gather", [&] { gather(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(reshape) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "reshape", [&] { reshape(ins, outs); });
}
SPW_KERNEL_DEF(transpose) {
  (void)fattrs;
  guarded(ctx, "transpose", [&] { transpose(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(reduce_sum) {
  (void)fattrs;
  guarded(ctx, "reduce_sum", [&] { reduce(ins, outs, iattrs, false); });
}
SPW_KERNEL_DEF(reduce_mean) {
  (void)fattrs;
  guarded(ctx, "reduce_mean", [&] { reduce(ins, outs, iattrs, true); });
}
SPW_KERNEL_DEF(sum_to_shape) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "sum_to_shape", [&] { sum_to_shape(ins, outs); });
}
SPW_KERNEL_DEF(broadcast_to) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "broadcast_to", [&] { broadcast_to(ins, outs); });
}
SPW_KERNEL_DEF(gather_grad) {
  (void)fattrs;
  guarded(ctx, "gather_grad", [&] { gather_grad(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(reduce_max) {
  (void)fattrs;
  guarded(ctx, "reduce_max", [&] { reduce_max(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(concat) {
  (void)fattrs;
  guarded(ctx, "concat", [&] { concat(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(slice) {
  (void)fattrs;
  guarded(ctx, "slice", [&] { slice(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(slice_grad) {
  (void)fattrs;
  guarded(ctx, "slice_grad", [&] { slice_grad(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(rope) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "rope", [&] { rope(ins, outs, false); });
}
SPW_KERNEL_DEF(rope_grad) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "rope_grad", [&] { rope(ins, outs, true); });
}
