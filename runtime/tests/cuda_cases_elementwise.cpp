//===- cuda_cases_elementwise.cpp - elementwise cases for cuda-check -------===//
//
// Cases of kernels_elementwise.cu: every unary op and gradient on odd, long
// and large (2M elements, the grid-stride path) tensors; the binary ops,
// comparisons, pow and where over every dtype the CPU accepts, with the
// broadcasts that take each device path: same shape (vectorized), a row
// vector bias, a column, a scalar, and general ones up to rank 8 with inner
// dims that are not multiples of the vector width. Inputs are valid for the
// CPU kernel (no integer division by zero, no negative integer exponent,
// positive arguments of log and sqrt).
//
//===----------------------------------------------------------------------===//

#include "cuda_check_ops.h"

#include <cstring>
#include <string>
#include <vector>

namespace spw::check {
namespace {

using Dims = std::vector<int64_t>;

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

// Integers uniform in [lo, hi], zero excluded when nonzero is set.
HostTensor ints(Rng &rng, const Dims &dims, int64_t lo, int64_t hi,
                int32_t dtype, bool nonzero = false) {
  std::vector<int64_t> v(size_t(count(dims)));
  for (int64_t &x : v) {
    do
      x = lo + rng.below(hi - lo + 1);
    while (nonzero && x == 0);
  }
  if (dtype == SPW_I64)
    return from_values(SPW_I64, dims, v);
  std::vector<int32_t> w(v.begin(), v.end());
  return from_values(SPW_I32, dims, w);
}

// Operands of dtype `dtype` for an arithmetic/comparison case.
HostTensor operand(Rng &rng, const Dims &dims, int32_t dtype,
                   bool nonzero = false) {
  switch (dtype) {
  case SPW_I64: return ints(rng, dims, -1000, 1000, SPW_I64, nonzero);
  case SPW_I32: return ints(rng, dims, -1000, 1000, SPW_I32, nonzero);
  case SPW_BOOL: return rng.mask(dims, 0.5);
  default: return rng.uniform(dims, -2, 2);
  }
}

const char *dname(int32_t dtype) {
  switch (dtype) {
  case SPW_F32: return "f32";
  case SPW_I64: return "i64";
  case SPW_I32: return "i32";
  case SPW_BOOL: return "bool";
  case SPW_BF16: return "bf16";
  default: return "?";
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

// Broadcast pairs: (a dims, b dims, result dims). They cover the device
// paths: contiguous, row vector, column, scalar, general strided, rank 8.
struct Pair {
  Dims a, b, y;
};

std::vector<Pair> pairs() {
  return {
      {{7, 13}, {7, 13}, {7, 13}},                // same shape, odd
      {{1024, 2049}, {1024, 2049}, {1024, 2049}}, // 2M, vector + tail
      {{4, 5, 768}, {768}, {4, 5, 768}},          // bias row vector
      {{33}, {9, 33}, {9, 33}},                   // row vector on the left
      {{9, 7}, {7}, {9, 7}},                      // odd row (scalar path)
      {{6, 1}, {6, 36}, {6, 36}},                 // column
      {{3, 1, 5}, {4, 5}, {3, 4, 5}},             // both broadcast
      {{2, 3, 4, 5}, {3, 1, 5}, {2, 3, 4, 5}},    // general
      {{}, {6, 7}, {6, 7}},                       // rank-0 scalar
      {{5, 8}, {1}, {5, 8}},                      // [1] scalar
      {{1, 5}, {5}, {1, 5}},                      // same numel
      {{2, 1, 2, 1, 3, 1, 2, 3},
       {1, 2, 1, 2, 1, 3, 2, 1},
       {2, 2, 2, 2, 3, 3, 2, 3}},                 // rank 8
      {{512, 64, 1}, {1, 64, 37}, {512, 64, 37}}, // 1.2M, general strided
      {{64, 1, 4096}, {1, 8, 4096}, {64, 8, 4096}}, // 2M, vectors strided
  };
}

void add_binary(CaseList &cases, Rng &rng) {
  const std::pair<Op, const char *> ops[] = {
      {Op::add, "add"}, {Op::sub, "sub"}, {Op::mul, "mul"}, {Op::div, "div"}};
  for (auto [op, name] : ops)
    for (const Pair &p : pairs()) {
      for (int32_t dt : {SPW_F32, SPW_I64, SPW_I32}) {
        // Integers only on the small pairs (their paths are the same).
        if (dt != SPW_F32 && count(p.y) > 100000)
          continue;
        HostTensor a = operand(rng, p.a, dt);
        HostTensor b = op == Op::div && dt == SPW_F32
                           ? rng.magnitude(p.b, 0.5, 2)
                           : operand(rng, p.b, dt, op == Op::div);
        cases.push_back(make(std::string(name) + " " + dims_str(p.a) + "," +
                                 dims_str(p.b) + " " + dname(dt),
                             op, {a, b}, {dt, p.y}));
      }
    }
  // Integer division by -1 and by divisors that do not divide (truncation
  // toward zero of negative quotients).
  for (int32_t dt : {SPW_I64, SPW_I32}) {
    HostTensor b = ints(rng, {3, 11}, -3, 3, dt, true);
    cases.push_back(make(std::string("div [3,11],[3,11] small divisors ") +
                             dname(dt),
                         Op::div, {operand(rng, {3, 11}, dt), b},
                         {dt, {3, 11}}));
  }
}

void add_unary(CaseList &cases, Rng &rng) {
  struct U {
    Op op;
    const char *name;
    double lo, hi;
    bool positive; // the domain needs x > 0
  };
  const U ops[] = {
      {Op::relu, "relu", -3, 3, false},     {Op::tanh, "tanh", -4, 4, false},
      {Op::exp, "exp", -6, 6, false},       {Op::log, "log", 0.01, 100, true},
      {Op::sqrt, "sqrt", 0.01, 100, true},  {Op::reciprocal, "reciprocal",
                                             0.1, 10, false},
      {Op::erf, "erf", -3, 3, false},       {Op::sigmoid, "sigmoid", -8, 8,
                                             false},
      {Op::cos, "cos", -10, 10, false},     {Op::sin, "sin", -10, 10, false},
      {Op::silu, "silu", -8, 8, false},
  };
  const Dims shapes[] = {{7, 13}, {5000}, {3, 1, 5}, {}, {(1 << 21) + 3}};
  for (const U &u : ops)
    for (const Dims &d : shapes) {
      HostTensor x = u.positive || u.op == Op::reciprocal
                         ? rng.magnitude(d, u.lo, u.hi)
                         : rng.uniform(d, u.lo, u.hi);
      if (u.positive) { // |x|
        auto *p = reinterpret_cast<float *>(x.data.data());
        for (int64_t i = 0; i < count(d); ++i)
          p[i] = p[i] < 0 ? -p[i] : p[i];
      }
      cases.push_back(make(std::string(u.name) + " " + dims_str(d) + " f32",
                           u.op, {x}, {SPW_F32, d}));
    }
  for (int64_t approx : {0, 1})
    for (const Dims &d : shapes)
      cases.push_back(make("gelu " + dims_str(d) + " approx=" +
                               std::to_string(approx),
                           Op::gelu, {rng.uniform(d, -6, 6)}, {SPW_F32, d},
                           {approx}));
  for (int32_t dt : {SPW_F32, SPW_I64, SPW_I32})
    for (const Dims &d : {Dims{7, 13}, Dims{(1 << 20) + 1}})
      cases.push_back(make("neg " + dims_str(d) + " " + dname(dt), Op::neg,
                           {operand(rng, d, dt)}, {dt, d}));
}

void add_grads(CaseList &cases, Rng &rng) {
  const Dims shapes[] = {{7, 13}, {5000}, {2, 3, 1}, {(1 << 21) + 5}};
  for (const Dims &d : shapes) {
    const std::string s = " " + dims_str(d);
    cases.push_back(make("relu_grad" + s, Op::relu_grad,
                         {rng.uniform(d, -3, 3), rng.uniform(d)},
                         {SPW_F32, d}));
    // y = tanh(x) lies in (-1, 1).
    cases.push_back(make("tanh_grad" + s, Op::tanh_grad,
                         {rng.uniform(d, -0.99, 0.99), rng.uniform(d)},
                         {SPW_F32, d}));
    cases.push_back(make("silu_grad" + s, Op::silu_grad,
                         {rng.uniform(d, -8, 8), rng.uniform(d)},
                         {SPW_F32, d}));
    for (int64_t approx : {0, 1})
      cases.push_back(make("gelu_grad" + s + " approx=" +
                               std::to_string(approx),
                           Op::gelu_grad,
                           {rng.uniform(d, -6, 6), rng.uniform(d)},
                           {SPW_F32, d}, {approx}));
  }
}

void add_pow(CaseList &cases, Rng &rng) {
  for (const Pair &p : pairs()) {
    // Positive bases with any exponent (powf is within a few ulp).
    HostTensor a = rng.magnitude(p.a, 0.1, 3);
    auto *pa = reinterpret_cast<float *>(a.data.data());
    for (int64_t i = 0; i < count(p.a); ++i)
      pa[i] = pa[i] < 0 ? -pa[i] : pa[i];
    cases.push_back(make("pow " + dims_str(p.a) + "," + dims_str(p.b) +
                             " f32",
                         Op::pow, {a, rng.uniform(p.b, -2, 3)},
                         {SPW_F32, p.y}));
  }
  // Negative bases with integral exponents; x^3 as in exported GELUs.
  {
    Dims d{37, 65};
    std::vector<float> e(size_t(count(d)));
    for (float &v : e)
      v = float(rng.below(5)) - 1.0f; // -1..3
    cases.push_back(make("pow [37,65],[37,65] negative base, integral exp",
                         Op::pow, {rng.magnitude(d, 0.2, 3),
                                   from_values(SPW_F32, d, e)},
                         {SPW_F32, d}));
    cases.push_back(make("pow [8,1024],[] cube", Op::pow,
                         {rng.uniform({8, 1024}, -3, 3),
                          from_values(SPW_F32, {}, std::vector<float>{3})},
                         {SPW_F32, {8, 1024}}));
  }
  for (int32_t dt : {SPW_I64, SPW_I32}) {
    cases.push_back(make(std::string("pow [5,9],[5,9] ") + dname(dt),
                         Op::pow,
                         {ints(rng, {5, 9}, -6, 6, dt),
                          ints(rng, {5, 9}, 0, 7, dt)},
                         {dt, {5, 9}}));
    cases.push_back(make(std::string("pow [4,1,3],[6,1] ") + dname(dt),
                         Op::pow,
                         {ints(rng, {4, 1, 3}, -9, 9, dt),
                          ints(rng, {6, 1}, 0, 5, dt)},
                         {dt, {4, 6, 3}}));
    // Overflow wraps (numpy).
    cases.push_back(make(std::string("pow [64] overflow ") + dname(dt),
                         Op::pow,
                         {ints(rng, {64}, 100, 1000, dt),
                          ints(rng, {64}, 10, 40, dt)},
                         {dt, {64}}));
  }
}

void add_compare(CaseList &cases, Rng &rng) {
  const std::pair<Op, const char *> ops[] = {{Op::equal, "equal"},
                                             {Op::less, "less"},
                                             {Op::less_or_equal,
                                              "less_or_equal"},
                                             {Op::greater, "greater"}};
  const Pair shapes[] = {
      {{7, 13}, {7, 13}, {7, 13}},
      {{4, 5, 64}, {64}, {4, 5, 64}},
      {{3, 1, 5}, {4, 5}, {3, 4, 5}},
      {{6, 1}, {}, {6, 1}},
      {{1000, 1001}, {1000, 1001}, {1000, 1001}}, // 1M
  };
  for (auto [op, name] : ops)
    for (const Pair &p : shapes)
      for (int32_t dt : {SPW_F32, SPW_I64, SPW_I32, SPW_BOOL}) {
        HostTensor a, b;
        if (dt == SPW_F32) {
          // Values on a coarse grid so that equal holds often.
          std::vector<float> va(size_t(count(p.a))), vb(size_t(count(p.b)));
          for (float &v : va)
            v = float(rng.below(7)) * 0.5f - 1.25f;
          for (float &v : vb)
            v = float(rng.below(7)) * 0.5f - 1.25f;
          a = from_values(SPW_F32, p.a, va);
          b = from_values(SPW_F32, p.b, vb);
        } else if (dt == SPW_BOOL) {
          a = rng.mask(p.a);
          b = rng.mask(p.b);
        } else {
          a = ints(rng, p.a, -3, 3, dt);
          b = ints(rng, p.b, -3, 3, dt);
        }
        cases.push_back(make(std::string(name) + " " + dims_str(p.a) + "," +
                                 dims_str(p.b) + " " + dname(dt),
                             op, {a, b}, {SPW_BOOL, p.y}));
      }
}

void add_where(CaseList &cases, Rng &rng) {
  struct W {
    Dims c, a, b, y;
  };
  const W shapes[] = {
      {{7, 13}, {7, 13}, {7, 13}, {7, 13}},
      {{33, 33}, {2, 3, 33, 33}, {}, {2, 3, 33, 33}}, // causal mask fill
      {{5, 1}, {1, 6}, {5, 6}, {5, 6}},
      {{64}, {4, 64}, {4, 1}, {4, 64}},
      {{1, 1, 128, 128}, {4, 12, 128, 128}, {1}, {4, 12, 128, 128}}, // 786k
      {{2, 1, 2, 1, 3, 1, 2, 3},
       {1, 2, 1, 2, 1, 3, 2, 1},
       {2, 2, 2, 2, 3, 3, 2, 3},
       {2, 2, 2, 2, 3, 3, 2, 3}},
  };
  for (const W &w : shapes)
    for (int32_t dt : {SPW_F32, SPW_I64, SPW_I32, SPW_BOOL}) {
      if (dt != SPW_F32 && count(w.y) > 100000)
        continue;
      cases.push_back(make("where " + dims_str(w.c) + "," + dims_str(w.a) +
                               "," + dims_str(w.b) + " " + dname(dt),
                           Op::where,
                           {rng.mask(w.c, 0.3), operand(rng, w.a, dt),
                            operand(rng, w.b, dt)},
                           {dt, w.y}));
    }
}

void add_cast(CaseList &cases, Rng &rng) {
  const int32_t dts[] = {SPW_F32, SPW_I64, SPW_I32, SPW_BOOL};
  for (int32_t from : dts)
    for (int32_t to : dts)
      for (const Dims &d : {Dims{7, 13}, Dims{(1 << 20) + 7}}) {
        HostTensor x;
        if (from == SPW_F32)
          x = rng.uniform(d, -300, 300); // truncation of both signs
        else if (from == SPW_BOOL)
          x = rng.mask(d);
        else
          x = ints(rng, d, -5000, 5000, from);
        cases.push_back(make(std::string("cast ") + dims_str(d) + " " +
                                 dname(from) + "->" + dname(to),
                             Op::cast, {x}, {to, d}));
      }
  // float -> int saturation, i64 -> i32 wrapping.
  cases.push_back(make("cast [97] f32->i32 saturating", Op::cast,
                       {rng.magnitude({97}, 1e8, 1e11)}, {SPW_I32, {97}}));
  cases.push_back(make("cast [97] f32->i64 saturating", Op::cast,
                       {rng.magnitude({97}, 1e17, 1e20)}, {SPW_I64, {97}}));
  cases.push_back(make("cast [97] i64->i32 wrapping", Op::cast,
                       {ints(rng, {97}, -(int64_t(1) << 40),
                             int64_t(1) << 40, SPW_I64)},
                       {SPW_I32, {97}}));
  // bf16 storage (bf16.h), compared bit for bit: f32 -> bf16 over special
  // values, exact ties (low half 0x8000 above even and odd kept parts),
  // values rounding to infinity and subnormals; bf16 -> f32 from every kind
  // of bit pattern (NaNs of any payload included).
  for (const Dims &d : {Dims{7, 13}, Dims{(1 << 20) + 7}}) {
    HostTensor x = rng.special(d, -4, 4);
    auto *f = reinterpret_cast<uint32_t *>(x.data.data());
    for (int64_t i = 0; i < x.numel(); ++i)
      switch (rng.below(6)) {
      case 0: f[i] = (f[i] & 0xffff0000u) | 0x8000u; break; // a tie
      case 1: // the largest bf16 or, from the tie up, infinity
        f[i] = (uint32_t(rng.below(2)) << 31) |
               uint32_t(0x7f7f7fffu + rng.below(0x8001));
        break;
      case 2: f[i] = uint32_t(rng.below(0x800000)); break; // subnormal
      default: break;
      }
    cases.push_back(make("cast " + dims_str(d) + " f32->bf16", Op::cast,
                         {x}, {SPW_BF16, d}));
    std::vector<uint16_t> bits(size_t(count(d)));
    for (uint16_t &b : bits)
      b = uint16_t(rng.below(1 << 16));
    cases.push_back(make("cast " + dims_str(d) + " bf16->f32", Op::cast,
                         {from_values(SPW_BF16, d, bits)}, {SPW_F32, d}));
  }
}

} // namespace

void add_elementwise_cases(CaseList &cases, Rng &rng) {
  add_binary(cases, rng);
  add_unary(cases, rng);
  add_grads(cases, rng);
  add_pow(cases, rng);
  add_compare(cases, rng);
  add_where(cases, rng);
  add_cast(cases, rng);
}

} // namespace spw::check
