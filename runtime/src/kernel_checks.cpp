//===- kernel_checks.cpp - operand checks every backend's kernels share ----===//

#include "kernel_checks.h"

#include <algorithm>

namespace spw::checks {

const spw_tensor &input(spw_tensor *const *ins, int i, const char *what) {
  if (!ins || !ins[i])
    fail("operand %d (%s) is NULL", i, what);
  return *ins[i];
}

spw_tensor &output(spw_tensor *const *outs, int i, const char *what) {
  if (!outs || !outs[i])
    fail("result %d (%s) is NULL", i, what);
  return *outs[i];
}

const int64_t *need_iattrs(const int64_t *iattrs) {
  if (!iattrs)
    fail("integer attributes are NULL");
  return iattrs;
}

void expect_dtype(const spw_tensor &t, int32_t dtype, const char *what) {
  if (t.dtype != dtype)
    fail("%s must be %s, got %s", what, dtype_name(dtype), dtype_name(t.dtype));
}

void expect_index_dtype(const spw_tensor &t, const char *what) {
  if (t.dtype != SPW_I64 && t.dtype != SPW_I32)
    fail("%s must be i64 or i32, got %s", what, dtype_name(t.dtype));
}

bool same_shape(const spw_tensor &a, const spw_tensor &b) {
  if (a.rank != b.rank)
    return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.dims[i] != b.dims[i])
      return false;
  return true;
}

bool shape_is(const spw_tensor &t, const std::vector<int64_t> &dims) {
  if (size_t(t.rank) != dims.size())
    return false;
  for (int i = 0; i < t.rank; ++i)
    if (t.dims[i] != dims[size_t(i)])
      return false;
  return true;
}

std::string vec_str(const std::vector<int64_t> &v) {
  return shape_str(v.data(), int(v.size()));
}

void expect_shape(const spw_tensor &t, const std::vector<int64_t> &dims,
                  const char *what) {
  if (!shape_is(t, dims))
    fail("%s has shape %s, expected %s", what, t.shape().c_str(),
         vec_str(dims).c_str());
}

void expect_like(const spw_tensor &t, const spw_tensor &ref, const char *what,
                 const char *refname) {
  if (t.dtype != ref.dtype || !same_shape(t, ref))
    fail("%s is %s %s, but %s is %s %s", what, dtype_name(t.dtype),
         t.shape().c_str(), refname, dtype_name(ref.dtype),
         ref.shape().c_str());
}

int64_t axis_of(const spw_tensor &t, int64_t axis) {
  if (axis < 0 || axis >= std::max<int64_t>(t.rank, 1) ||
      (t.rank == 0 && axis != 0))
    fail("axis %lld is out of range for rank %d", (long long)axis, t.rank);
  return axis;
}

int64_t prod(const int64_t *dims, int64_t from, int64_t to) {
  int64_t p = 1;
  for (int64_t i = from; i < to; ++i)
    p *= dims[i];
  return p;
}

std::array<int64_t, kMaxRank> broadcast_strides(const spw_tensor &t, int rank,
                                                const int64_t *dims,
                                                const char *what) {
  std::array<int64_t, kMaxRank> s{};
  if (t.rank > rank)
    fail("%s of shape %s cannot broadcast to %s", what, t.shape().c_str(),
         shape_str(dims, rank).c_str());
  int64_t stride = 1;
  for (int i = t.rank - 1; i >= 0; --i) {
    int d = rank - t.rank + i;
    if (t.dims[i] == dims[d])
      s[size_t(d)] = stride;
    else if (t.dims[i] == 1)
      s[size_t(d)] = 0;
    else
      fail("%s of shape %s cannot broadcast to %s", what, t.shape().c_str(),
           shape_str(dims, rank).c_str());
    stride *= t.dims[i];
  }
  return s;
}

std::vector<int64_t> broadcast_shape(const spw_tensor &a, const spw_tensor &b) {
  int r = std::max(a.rank, b.rank);
  std::vector<int64_t> out(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) {
    int ia = a.rank - r + i, ib = b.rank - r + i;
    int64_t da = ia >= 0 ? a.dims[ia] : 1, db = ib >= 0 ? b.dims[ib] : 1;
    if (da != db && da != 1 && db != 1)
      fail("shapes %s and %s are not broadcast-compatible", a.shape().c_str(),
           b.shape().c_str());
    out[size_t(i)] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t>
broadcast_all(std::initializer_list<const spw_tensor *> ts) {
  int r = 0;
  for (const spw_tensor *t : ts)
    r = std::max(r, t->rank);
  std::vector<int64_t> out(size_t(r), 1);
  for (const spw_tensor *t : ts)
    for (int i = 0; i < t->rank; ++i) {
      int64_t &o = out[size_t(r - t->rank + i)];
      const int64_t d = t->dims[i];
      if (d == o || d == 1)
        continue;
      if (o == 1) {
        o = d;
        continue;
      }
      std::string shapes;
      size_t k = 0;
      for (const spw_tensor *u : ts) {
        if (k)
          shapes += k + 1 == ts.size() ? " and " : ", ";
        shapes += u->shape();
        ++k;
      }
      fail("shapes %s are not broadcast-compatible", shapes.c_str());
    }
  return out;
}

} // namespace spw::checks
