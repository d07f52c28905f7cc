//===- cuda_cases_shape.cpp - shape-op cases for cuda-check ----------------===//
//
// Cases of kernels_shape.cu: reshape, transpose (vector copies and the tiled
// path, dims below the tile size), concat (16-byte and 1-byte units),
// slice / slice_grad (negative steps, column splits), broadcast_to, the
// reductions through each of their paths (a thread, a warp or a block per
// row, long rows split in chunks, column sums split in chunks, chains of
// non-adjacent axes, size-1 reduced dims), gather / gather_grad along every
// axis with i64 and i32 (and negative) indices, and rope / rope_grad with
// the broadcasts of cos and sin a model uses. Every dtype the CPU op
// accepts appears; large cases (1-4M elements) run the grid-stride loops.
//
//===----------------------------------------------------------------------===//

#include "cuda_check_ops.h"

#include <cstring>
#include <string>
#include <vector>

namespace spw::check {
namespace {

using Dims = std::vector<int64_t>;

std::string list_str(const std::vector<int64_t> &v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? "," : "") + std::to_string(v[i]);
  return s + ")";
}

const char *dname(int32_t dtype) {
  switch (dtype) {
  case SPW_F32: return "f32";
  case SPW_I64: return "i64";
  case SPW_I32: return "i32";
  case SPW_BOOL: return "bool";
  default: return "?";
  }
}

template <class T>
HostTensor from_values(int32_t dtype, const Dims &dims,
                       const std::vector<T> &v) {
  HostTensor t;
  t.dtype = dtype;
  t.dims = dims;
  t.data.resize(v.size() * sizeof(T));
  if (!v.empty())
    std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

// Integers uniform in [lo, hi].
HostTensor ints(Rng &rng, const Dims &dims, int64_t lo, int64_t hi,
                int32_t dtype) {
  std::vector<int64_t> v(size_t(count(dims)));
  for (int64_t &x : v)
    x = lo + rng.below(hi - lo + 1);
  if (dtype == SPW_I64)
    return from_values(SPW_I64, dims, v);
  std::vector<int32_t> w(v.begin(), v.end());
  return from_values(SPW_I32, dims, w);
}

// A random tensor of any dtype.
HostTensor random(Rng &rng, const Dims &dims, int32_t dtype) {
  switch (dtype) {
  case SPW_I64: return ints(rng, dims, -100000, 100000, SPW_I64);
  case SPW_I32: return ints(rng, dims, -100000, 100000, SPW_I32);
  case SPW_BOOL: return rng.mask(dims, 0.5);
  default: return rng.uniform(dims);
  }
}

OpCase make(std::string label, Op op, std::vector<HostTensor> ins,
            OutSpec out, std::vector<int64_t> iattrs = {}) {
  OpCase c;
  c.label = std::move(label);
  c.op = op;
  for (HostTensor &t : ins)
    c.ins.emplace_back(std::move(t));
  c.outs.push_back(std::move(out));
  c.iattrs = std::move(iattrs);
  return c;
}

const int32_t kAll[] = {SPW_F32, SPW_I64, SPW_I32, SPW_BOOL};

void add_reshape(CaseList &cases, Rng &rng) {
  struct R {
    Dims x, y;
  };
  const R shapes[] = {{{6, 35}, {210}}, {{4, 5}, {2, 10}}, {{3, 7}, {21, 1}},
                      {{}, {1, 1}},     {{2048, 1024}, {2, 1024, 1024}}};
  for (const R &r : shapes)
    for (int32_t dt : kAll) {
      if (dt != SPW_F32 && count(r.x) > 100000)
        continue;
      cases.push_back(make("reshape " + dims_str(r.x) + "->" + dims_str(r.y) +
                               " " + dname(dt),
                           Op::reshape, {random(rng, r.x, dt)}, {dt, r.y}));
    }
}

void add_transpose(CaseList &cases, Rng &rng) {
  struct T {
    Dims x;
    std::vector<int64_t> perm;
  };
  const T shapes[] = {
      {{2, 33, 4, 64}, {0, 2, 1, 3}},   // heads split: vector copy
      {{2, 4, 33, 64}, {0, 1, 3, 2}},   // K^T: tiled
      {{33, 65}, {1, 0}},               // tiled, partial tiles
      {{5, 6, 7}, {2, 0, 1}},           // tiled with a batch dim
      {{3, 1, 4}, {1, 2, 0}},           // size-1 dims
      {{3, 100}, {1, 0}},               // below the tile size
      {{2, 3}, {1, 0}},
      {{10}, {0}},
      {{}, {}},
      {{2, 3, 4, 5, 6}, {4, 2, 0, 3, 1}}, // general
      {{2048, 1024}, {1, 0}},             // 2M, tiled
      {{4, 256, 12, 64}, {0, 2, 1, 3}},   // 786k, vector copy
  };
  for (const T &t : shapes)
    for (int32_t dt : kAll) {
      if (dt != SPW_F32 && count(t.x) > 100000)
        continue;
      Dims y;
      for (int64_t p : t.perm)
        y.push_back(t.x[size_t(p)]);
      cases.push_back(make("transpose " + dims_str(t.x) + " perm " +
                               list_str(t.perm) + " " + dname(dt),
                           Op::transpose, {random(rng, t.x, dt)}, {dt, y},
                           t.perm));
    }
}

void add_concat(CaseList &cases, Rng &rng) {
  struct C {
    std::vector<Dims> xs;
    int64_t axis;
  };
  const C shapes[] = {
      {{{3, 4}, {3, 5}}, 1},
      {{{2, 4}, {3, 4}, {1, 4}}, 0},
      {{{2, 3, 5}, {2, 1, 5}}, 1},
      {{{3, 5}, {3, 7}}, 1},
      {{{4, 6}}, 0},
      {{{2, 3, 8}, {2, 3, 4}, {2, 3, 12}}, 2},
      {{{8, 12, 128, 32}, {8, 12, 128, 32}}, 3}, // 786k, rotate_half-like
  };
  for (const C &c : shapes)
    for (int32_t dt : kAll) {
      int64_t total = 0;
      for (const Dims &d : c.xs)
        total += d[size_t(c.axis)];
      if (dt != SPW_F32 && total * count(c.xs[0]) / c.xs[0][size_t(c.axis)] >
                               100000)
        continue;
      Dims y = c.xs[0];
      y[size_t(c.axis)] = total;
      std::vector<HostTensor> ins;
      std::string label = "concat";
      for (const Dims &d : c.xs) {
        ins.push_back(random(rng, d, dt));
        label += " " + dims_str(d);
      }
      label += " axis " + std::to_string(c.axis) + " " + dname(dt);
      cases.push_back(make(label, Op::concat, ins, {dt, y},
                           {c.axis, int64_t(c.xs.size())}));
    }
}

// starts and steps of a slice `small` of `big`.
struct S {
  Dims big, small;
  std::vector<int64_t> starts, steps;
};

std::vector<S> slices() {
  return {
      {{10, 20}, {4, 7}, {1, 2}, {2, 2}},
      {{10, 20}, {5, 20}, {9, 0}, {-2, 1}},          // negative step
      {{4, 64, 96}, {4, 64, 32}, {0, 0, 32}, {1, 1, 1}}, // qkv split
      {{6, 7}, {3, 7}, {1, 0}, {1, 1}},
      {{9, 11}, {3, 4}, {0, 10}, {3, -3}},
      {{5, 6, 13}, {2, 6, 4}, {3, 0, 1}, {1, 1, 3}},
      {{8}, {8}, {7}, {-1}},                         // reversal
      {{2048, 2304}, {2048, 768}, {0, 768}, {1, 1}}, // 1.5M
  };
}

std::vector<int64_t> slice_attrs(const S &s) {
  std::vector<int64_t> a = s.starts;
  a.insert(a.end(), s.steps.begin(), s.steps.end());
  return a;
}

void add_slice(CaseList &cases, Rng &rng) {
  for (const S &s : slices())
    for (int32_t dt : kAll) {
      if (dt != SPW_F32 && count(s.big) > 100000)
        continue;
      const std::string what = dims_str(s.big) + "->" + dims_str(s.small) +
                               " starts " + list_str(s.starts) + " steps " +
                               list_str(s.steps) + " " + dname(dt);
      cases.push_back(make("slice " + what, Op::slice,
                           {random(rng, s.big, dt)}, {dt, s.small},
                           slice_attrs(s)));
      cases.push_back(make("slice_grad " + what, Op::slice_grad,
                           {random(rng, s.small, dt)}, {dt, s.big},
                           slice_attrs(s)));
    }
}

void add_broadcast_to(CaseList &cases, Rng &rng) {
  struct B {
    Dims x, y;
  };
  const B shapes[] = {{{768}, {4, 5, 768}}, {{6, 1}, {6, 37}},
                      {{}, {3, 4}},         {{1, 5, 1}, {2, 3, 5, 7}},
                      {{3, 1}, {3, 4}},     {{5}, {2, 5}},
                      {{7}, {7}},           {{1024}, {2048, 1024}}};
  for (const B &b : shapes)
    for (int32_t dt : kAll) {
      if (dt != SPW_F32 && count(b.y) > 100000)
        continue;
      cases.push_back(make("broadcast_to " + dims_str(b.x) + "->" +
                               dims_str(b.y) + " " + dname(dt),
                           Op::broadcast_to, {random(rng, b.x, dt)},
                           {dt, b.y}));
    }
}

// Small integers for integer sums (no overflow either way; exact).
HostTensor sum_input(Rng &rng, const Dims &d, int32_t dt, bool positive) {
  if (dt == SPW_F32)
    return positive ? rng.uniform(d, 0.1, 1) : rng.uniform(d);
  return ints(rng, d, -50, 50, dt);
}

void add_sum_to_shape(CaseList &cases, Rng &rng) {
  struct T {
    Dims x, y;
  };
  const T shapes[] = {
      {{4096, 768}, {768}},       // bias gradient: column sums, 3.1M
      {{4, 5, 6}, {5, 1}},        // leading and trailing
      {{4, 5, 6}, {4, 1, 1}},     // trailing rows
      {{2, 3, 4}, {}},            // everything
      {{7, 5000}, {7, 1}},        // long rows: a block per row
      {{3, 1 << 20}, {3, 1}},     // few long rows: chunks, 3M
      {{5, 6}, {5, 6}},           // nothing reduced
      {{2, 3, 4, 5}, {3, 1, 5}},  // two reduced runs
      {{8, 33, 3}, {1, 3}},       // narrow columns
      {{1000, 17}, {17}},         // columns, partial warp
  };
  for (const T &t : shapes)
    for (int32_t dt : {SPW_F32, SPW_I64, SPW_I32}) {
      if (dt != SPW_F32 && count(t.x) > 100000)
        continue;
      cases.push_back(make("sum_to_shape " + dims_str(t.x) + "->" +
                               dims_str(t.y) + " " + dname(dt),
                           Op::sum_to_shape,
                           {sum_input(rng, t.x, dt, count(t.y) == 1)},
                           {dt, t.y}));
    }
}

struct Red {
  Dims x;
  std::vector<int64_t> axes;
  bool keepdims;
};

std::vector<Red> reductions() {
  return {
      {{7, 5000}, {1}, false},       // block per row
      {{33, 100}, {1}, true},        // warp per row, R % 4 == 0
      {{33, 101}, {1}, false},       // warp per row, scalar loads
      {{2, 17}, {1}, false},         // thread per row
      {{33, 100}, {0}, false},       // columns
      {{2, 3, 4, 5}, {0, 2}, false}, // two runs
      {{2, 3, 4, 5}, {1, 3}, true},
      {{3, 4, 5}, {0, 1, 2}, false}, // all
      {{5, 1, 3}, {1}, false},       // a size-1 axis only
      {{300, 4099}, {1}, false},     // 1.2M, long odd rows
      {{1 << 22}, {0}, false},       // 4M to one: chunked rows
      {{2048, 1024}, {0}, true},     // 2M column sums
  };
}

Dims reduced_dims(const Red &r) {
  Dims y;
  for (size_t d = 0; d < r.x.size(); ++d) {
    bool red = false;
    for (int64_t a : r.axes)
      red = red || a == int64_t(d);
    if (!red)
      y.push_back(r.x[d]);
    else if (r.keepdims)
      y.push_back(1);
  }
  return y;
}

void add_reduce(CaseList &cases, Rng &rng) {
  struct O {
    Op op;
    const char *name;
  };
  const O ops[] = {{Op::reduce_sum, "reduce_sum"},
                   {Op::reduce_mean, "reduce_mean"},
                   {Op::reduce_max, "reduce_max"}};
  for (const O &o : ops)
    for (const Red &r : reductions())
      for (int32_t dt : kAll) {
        if (o.op == Op::reduce_mean && dt != SPW_F32)
          continue;
        if (o.op != Op::reduce_max && dt == SPW_BOOL)
          continue;
        if (dt != SPW_F32 && count(r.x) > 100000)
          continue;
        const Dims y = reduced_dims(r);
        HostTensor x = o.op == Op::reduce_max
                           ? random(rng, r.x, dt)
                           : sum_input(rng, r.x, dt, count(y) == 1);
        std::vector<int64_t> attrs{int64_t(r.axes.size())};
        attrs.insert(attrs.end(), r.axes.begin(), r.axes.end());
        cases.push_back(make(std::string(o.name) + " " + dims_str(r.x) +
                                 " axes " + list_str(r.axes) +
                                 (r.keepdims ? " keepdims " : " ") +
                                 dname(dt),
                             o.op, {x}, {dt, y}, attrs));
      }
}

struct G {
  Dims data, idx;
  int64_t axis;
  int64_t lo; // indices in [lo, n): lo < 0 draws negative ones
};

std::vector<G> gathers() {
  return {
      {{1000, 768}, {4, 33}, 0, 0},  // embedding rows: vectors
      {{1000, 768}, {4, 33}, 0, -1000},
      {{50, 6}, {7, 9}, 0, 0},       // rows of 6: 8-byte units
      {{5, 7, 9}, {4}, 1, -7},
      {{5, 7, 9}, {3, 2}, 2, -9},    // the last axis
      {{10, 6}, {}, 0, 0},           // a scalar index
      {{12, 5}, {40}, 0, 0},         // many duplicates (gather_grad)
      {{5000, 512}, {4096}, 0, 0},   // 2M
  };
}

void add_gather(CaseList &cases, Rng &rng) {
  for (const G &g : gathers())
    for (int32_t it : {SPW_I64, SPW_I32}) {
      const int64_t n = g.data[size_t(g.axis)];
      Dims y(g.data.begin(), g.data.begin() + g.axis);
      y.insert(y.end(), g.idx.begin(), g.idx.end());
      y.insert(y.end(), g.data.begin() + g.axis + 1, g.data.end());
      const std::string what = dims_str(g.data) + " idx " +
                               dims_str(g.idx) + " " + dname(it) + " axis " +
                               std::to_string(g.axis) +
                               (g.lo < 0 ? " negative" : "");
      for (int32_t dt : kAll) {
        if ((dt != SPW_F32 || it != SPW_I64) && count(y) > 200000)
          continue;
        cases.push_back(make("gather " + what + " " + dname(dt), Op::gather,
                             {random(rng, g.data, dt),
                              ints(rng, g.idx, g.lo, n - 1, it)},
                             {dt, y}, {g.axis}));
      }
      // Scatter-add with atomics: the order of a row's additions varies.
      cases.push_back(make("gather_grad " + what, Op::gather_grad,
                           {ints(rng, g.idx, g.lo, n - 1, it),
                            rng.uniform(y)},
                           {SPW_F32, g.data}, {g.axis}));
    }
}

void add_rope(CaseList &cases, Rng &rng) {
  struct R {
    Dims x, c, s;
  };
  const R shapes[] = {
      {{2, 4, 33, 64}, {33, 64}, {33, 64}},
      {{2, 33, 4, 64}, {33, 1, 64}, {33, 1, 64}},
      {{2, 4, 33, 64}, {1, 1, 33, 64}, {33, 64}},
      {{2, 3, 6}, {2, 1, 6}, {1, 3, 6}},
      {{8}, {8}, {8}},
      {{2, 33, 64}, {33, 1}, {33, 64}}, // cos constant along the row
      {{3, 5, 2}, {5, 2}, {5, 2}},      // D = 2
      {{8, 12, 512, 64}, {512, 64}, {512, 64}}, // 3.1M
  };
  for (const R &r : shapes)
    for (bool grad : {false, true}) {
      const std::string label = std::string(grad ? "rope_grad " : "rope ") +
                                dims_str(r.x) + " cos " + dims_str(r.c) +
                                " sin " + dims_str(r.s);
      cases.push_back(make(label, grad ? Op::rope_grad : Op::rope,
                           {rng.uniform(r.x), rng.uniform(r.c),
                            rng.uniform(r.s)},
                           {SPW_F32, r.x}));
    }
}

} // namespace

void add_shape_cases(CaseList &cases, Rng &rng) {
  add_reshape(cases, rng);
  add_transpose(cases, rng);
  add_concat(cases, rng);
  add_slice(cases, rng);
  add_broadcast_to(cases, rng);
  add_sum_to_shape(cases, rng);
  add_reduce(cases, rng);
  add_gather(cases, rng);
  add_rope(cases, rng);
}

} // namespace spw::check
