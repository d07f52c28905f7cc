//===- cuda_cases_nn.cpp - softmax, norm and loss cases for cuda-check ----===//
//
// The shapes reach every path of kernels_nn.cu: rows of at most 1024
// elements (a warp per row) and longer ones (a block per row, e.g. 5000),
// float4 rows (length % 4 == 0) and scalar ones, softmax over an axis with
// inner dims (the column kernels, one big enough for their grid-stride
// loop), size-1 and rank-0 cases, norms over several trailing axes, norm
// gradients with some results absent and with no rows at all, a normalized
// size over a million (the parameter-gradient kernels' grid-stride loop),
// and 1-4M element cases. Cross entropy: i64 and i32 labels, mean and sum,
// ignore_index inside and outside [0, C), all labels ignored (the mean
// loss then is NaN, which the relative norm cannot check: gradient only).
//
// Tolerances (relative norm): fp32 1e-5 throughout. Row statistics are fp32
// tree sums (error ~ log2(n) ulp, the CPU's double sums exact by
// comparison); the norm parameter gradients sum over rows in fp32 in chunks,
// ~sqrt(rows) ulp, 3e-6 at 4096 rows. None of these ops has GEMM products,
// so bf16 precision changes nothing and bf16 keeps the same bound.
//
// Inputs: layer norm's x is drawn from [-1, 3] so the mean is far from 0
// (a one-pass E[x^2] - E[x]^2 variance would show); softmax_grad's y is a
// probability-like [0, 1]; logits from [-4, 4].
//
//===----------------------------------------------------------------------===//

#include "cuda_check_ops.h"

#include <cstring>
#include <string>
#include <vector>

namespace spw::check {
namespace {

constexpr double kTol = 1e-5;

std::vector<int64_t> tail(const std::vector<int64_t> &d, int64_t axis) {
  return std::vector<int64_t>(d.begin() + axis, d.end());
}

void set_tols(OpCase &c) {
  c.tol_fp32 = kTol;
  c.tol_bf16 = kTol;
}

void add_softmax(CaseList &cases, Rng &rng, const std::vector<int64_t> &x,
                 int64_t axis) {
  OpCase c;
  c.label = "softmax " + dims_str(x) + " axis " + std::to_string(axis) +
            " f32";
  c.op = Op::softmax;
  c.ins.push_back(rng.uniform(x, -5, 5));
  c.outs.push_back({SPW_F32, x});
  c.iattrs = {axis};
  set_tols(c);
  cases.push_back(std::move(c));
}

void add_softmax_grad(CaseList &cases, Rng &rng,
                      const std::vector<int64_t> &x, int64_t axis) {
  OpCase c;
  c.label = "softmax_grad " + dims_str(x) + " axis " + std::to_string(axis) +
            " f32";
  c.op = Op::softmax_grad;
  c.ins.push_back(rng.uniform(x, 0, 1));
  c.ins.push_back(rng.uniform(x));
  c.outs.push_back({SPW_F32, x});
  c.iattrs = {axis};
  set_tols(c);
  cases.push_back(std::move(c));
}

void add_layer_norm(CaseList &cases, Rng &rng, const std::vector<int64_t> &x,
                    int64_t axis, bool bias, double eps) {
  OpCase c;
  c.label = "layer_norm " + dims_str(x) + " axis " + std::to_string(axis) +
            (bias ? " + bias" : " no bias") + " eps " + std::to_string(eps) +
            " f32";
  c.op = Op::layer_norm;
  c.ins.push_back(rng.uniform(x, -1, 3));
  c.ins.push_back(rng.uniform(tail(x, axis), 0.5, 1.5));
  if (bias)
    c.ins.push_back(rng.uniform(tail(x, axis)));
  else
    c.ins.push_back(std::nullopt);
  c.outs.push_back({SPW_F32, x});
  c.iattrs = {axis};
  c.fattrs = {eps};
  set_tols(c);
  cases.push_back(std::move(c));
}

// want: which of dx, dscale (, dbias) are requested; the others absent.
void add_layer_norm_grad(CaseList &cases, Rng &rng,
                         const std::vector<int64_t> &x, int64_t axis,
                         bool want_dx = true, bool want_ds = true,
                         bool want_db = true) {
  OpCase c;
  c.label = "layer_norm_grad " + dims_str(x) + " axis " +
            std::to_string(axis) + (want_dx ? " dx" : "") +
            (want_ds ? " dscale" : "") + (want_db ? " dbias" : "") + " f32";
  c.op = Op::layer_norm_grad;
  const std::vector<int64_t> p = tail(x, axis);
  c.ins.push_back(rng.uniform(x, -1, 3));
  c.ins.push_back(rng.uniform(p, 0.5, 1.5));
  c.ins.push_back(rng.uniform(x));
  const OutSpec absent{0, {}};
  c.outs.push_back(want_dx ? OutSpec{SPW_F32, x} : absent);
  c.outs.push_back(want_ds ? OutSpec{SPW_F32, p} : absent);
  c.outs.push_back(want_db ? OutSpec{SPW_F32, p} : absent);
  c.iattrs = {axis};
  c.fattrs = {1e-5};
  set_tols(c);
  cases.push_back(std::move(c));
}

void add_rms_norm(CaseList &cases, Rng &rng, const std::vector<int64_t> &x,
                  int64_t axis, double eps) {
  OpCase c;
  c.label = "rms_norm " + dims_str(x) + " axis " + std::to_string(axis) +
            " eps " + std::to_string(eps) + " f32";
  c.op = Op::rms_norm;
  c.ins.push_back(rng.uniform(x, -2, 2));
  c.ins.push_back(rng.uniform(tail(x, axis), 0.5, 1.5));
  c.outs.push_back({SPW_F32, x});
  c.iattrs = {axis};
  c.fattrs = {eps};
  set_tols(c);
  cases.push_back(std::move(c));
}

void add_rms_norm_grad(CaseList &cases, Rng &rng,
                       const std::vector<int64_t> &x, int64_t axis,
                       bool want_dx = true, bool want_ds = true) {
  OpCase c;
  c.label = "rms_norm_grad " + dims_str(x) + " axis " +
            std::to_string(axis) + (want_dx ? " dx" : "") +
            (want_ds ? " dscale" : "") + " f32";
  c.op = Op::rms_norm_grad;
  const std::vector<int64_t> p = tail(x, axis);
  c.ins.push_back(rng.uniform(x, -2, 2));
  c.ins.push_back(rng.uniform(p, 0.5, 1.5));
  c.ins.push_back(rng.uniform(x));
  const OutSpec absent{0, {}};
  c.outs.push_back(want_dx ? OutSpec{SPW_F32, x} : absent);
  c.outs.push_back(want_ds ? OutSpec{SPW_F32, p} : absent);
  c.iattrs = {axis};
  c.fattrs = {1e-6};
  set_tols(c);
  cases.push_back(std::move(c));
}

// Labels in [0, C) as `dtype`; with ignore_frac > 0, about that fraction
// of them (all of them when >= 1) set to ignore_index.
HostTensor make_labels(Rng &rng, int64_t N, int64_t C, int32_t dtype,
                       double ignore_frac, int64_t ignore_index) {
  HostTensor t = rng.index({N}, C > 0 ? C : 1, dtype);
  for (int64_t i = 0; i < N; ++i) {
    const bool ignore = ignore_frac >= 1.0 ||
                        (ignore_frac > 0.0 &&
                         double(rng.below(1000)) < ignore_frac * 1000.0);
    if (!ignore)
      continue;
    if (dtype == SPW_I64) {
      const int64_t v = ignore_index;
      std::memcpy(t.data.data() + i * 8, &v, 8);
    } else {
      const int32_t v = int32_t(ignore_index);
      std::memcpy(t.data.data() + i * 4, &v, 4);
    }
  }
  return t;
}

struct XentSpec {
  int64_t N, C;
  int32_t dtype;
  int64_t reduction;     // 0 mean, 1 sum
  bool has_ignore;
  int64_t ignore_index;
  double ignore_frac;    // fraction of labels set to ignore_index
};

std::string xent_label(const XentSpec &s) {
  return "[" + std::to_string(s.N) + "," + std::to_string(s.C) + "] " +
         (s.dtype == SPW_I64 ? "i64" : "i32") +
         (s.reduction ? " sum" : " mean") +
         (s.has_ignore ? " ignore " + std::to_string(s.ignore_index) +
                             (s.ignore_frac >= 1.0 ? " (all)" : "")
                       : "") +
         " f32";
}

void add_xent(CaseList &cases, Rng &rng, const XentSpec &s) {
  OpCase c;
  c.label = "softmax_cross_entropy_loss " + xent_label(s);
  c.op = Op::softmax_cross_entropy_loss;
  c.ins.push_back(rng.uniform({s.N, s.C}, -4, 4));
  c.ins.push_back(make_labels(rng, s.N, s.C, s.dtype,
                              s.has_ignore ? s.ignore_frac : 0.0,
                              s.ignore_index));
  c.outs.push_back({SPW_F32, {}});
  c.iattrs = {s.reduction, s.has_ignore ? 1 : 0, s.ignore_index};
  set_tols(c);
  cases.push_back(std::move(c));
}

void add_xent_grad(CaseList &cases, Rng &rng, const XentSpec &s) {
  OpCase c;
  c.label = "softmax_cross_entropy_loss_grad " + xent_label(s);
  c.op = Op::softmax_cross_entropy_loss_grad;
  c.ins.push_back(rng.uniform({s.N, s.C}, -4, 4));
  c.ins.push_back(make_labels(rng, s.N, s.C, s.dtype,
                              s.has_ignore ? s.ignore_frac : 0.0,
                              s.ignore_index));
  c.ins.push_back(rng.uniform({}, 0.5, 2));
  c.outs.push_back({SPW_F32, {s.N, s.C}});
  c.iattrs = {s.reduction, s.has_ignore ? 1 : 0, s.ignore_index};
  set_tols(c);
  cases.push_back(std::move(c));
}

} // namespace

void add_nn_cases(CaseList &cases, Rng &rng) {
  // ---- softmax / softmax_grad: last axis (rows), inner axes (columns).
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> soft = {
      {{6, 37}, 1},         // warp per row, scalar
      {{5, 64}, 1},         // warp per row, float4
      {{9, 1024}, 1},       // the longest warp row
      {{3, 1025}, 1},       // the shortest block row
      {{3, 5000}, 1},       // block per row, float4
      {{2, 4999}, 1},       // block per row, scalar
      {{3, 1}, 1},          // rows of one
      {{1000}, 0},          // rank 1
      {{}, 0},              // rank 0
      {{4, 7, 9}, 1},       // inner 9
      {{4, 7, 9}, 0},       // inner 63
      {{2, 3, 5, 1}, 2},    // inner 1 through a size-1 dim
      {{4096, 1024}, 1},    // 4M, warp rows
      {{2, 3, 600000}, 1},  // columns past one grid: grid-stride
  };
  for (const auto &[x, axis] : soft)
    add_softmax(cases, rng, x, axis);
  for (const auto &[x, axis] : soft)
    add_softmax_grad(cases, rng, x, axis);
  add_softmax(cases, rng, {512, 8192}, 1); // 4M, block rows

  // ---- layer_norm.
  add_layer_norm(cases, rng, {6, 37}, 1, true, 1e-5);
  add_layer_norm(cases, rng, {6, 37}, 1, false, 1e-5);
  add_layer_norm(cases, rng, {4, 8, 64}, 2, true, 1e-6);
  add_layer_norm(cases, rng, {4, 8, 64}, 1, true, 1e-5); // 2 trailing axes
  add_layer_norm(cases, rng, {2, 3, 5, 7}, 1, false, 1e-5);
  add_layer_norm(cases, rng, {3, 5000}, 1, true, 1e-5);
  add_layer_norm(cases, rng, {2, 4999}, 1, false, 1e-5);
  add_layer_norm(cases, rng, {5, 1}, 1, true, 1e-5); // n = 1: y = bias
  add_layer_norm(cases, rng, {768}, 0, true, 1e-5);
  add_layer_norm(cases, rng, {4096, 768}, 1, true, 1e-5); // 3M
  // ---- layer_norm_grad: every result, some absent, no rows.
  add_layer_norm_grad(cases, rng, {6, 37}, 1);
  add_layer_norm_grad(cases, rng, {5, 64}, 1);
  add_layer_norm_grad(cases, rng, {4, 8, 64}, 1);
  add_layer_norm_grad(cases, rng, {3, 5000}, 1);
  add_layer_norm_grad(cases, rng, {2, 4999}, 1);
  add_layer_norm_grad(cases, rng, {5, 1}, 1);
  add_layer_norm_grad(cases, rng, {37, 100}, 1, true, false, false);
  add_layer_norm_grad(cases, rng, {37, 100}, 1, false, true, false);
  add_layer_norm_grad(cases, rng, {37, 100}, 1, false, false, true);
  add_layer_norm_grad(cases, rng, {0, 8}, 1); // dscale, dbias zeros
  add_layer_norm_grad(cases, rng, {4096, 768}, 1); // 3M, many row chunks
  add_layer_norm_grad(cases, rng, {3, 1100000}, 1); // columns: grid-stride

  // ---- rms_norm / rms_norm_grad.
  add_rms_norm(cases, rng, {6, 37}, 1, 1e-6);
  add_rms_norm(cases, rng, {5, 64}, 1, 1e-5);
  add_rms_norm(cases, rng, {4, 8, 64}, 1, 1e-6);
  add_rms_norm(cases, rng, {3, 5000}, 1, 1e-6);
  add_rms_norm(cases, rng, {2, 4999}, 1, 1e-6);
  add_rms_norm(cases, rng, {5, 1}, 1, 1e-6);
  add_rms_norm(cases, rng, {4096, 768}, 1, 1e-6);
  add_rms_norm_grad(cases, rng, {6, 37}, 1);
  add_rms_norm_grad(cases, rng, {5, 64}, 1);
  add_rms_norm_grad(cases, rng, {4, 8, 64}, 1);
  add_rms_norm_grad(cases, rng, {3, 5000}, 1);
  add_rms_norm_grad(cases, rng, {2, 4999}, 1);
  add_rms_norm_grad(cases, rng, {37, 100}, 1, true, false);
  add_rms_norm_grad(cases, rng, {37, 100}, 1, false, true);
  add_rms_norm_grad(cases, rng, {0, 8}, 1);
  add_rms_norm_grad(cases, rng, {4096, 768}, 1);
  add_rms_norm_grad(cases, rng, {3, 1100000}, 1);

  // ---- cross entropy: N, C, labels, reduction, ignore, ignore_index,
  // fraction ignored.
  const std::vector<XentSpec> xent = {
      {16, 10, SPW_I64, 0, false, 0, 0.0},
      {16, 10, SPW_I32, 1, false, 0, 0.0},
      {16, 12, SPW_I64, 0, true, 3, 0.0},     // ignore_index a real class
      {33, 12, SPW_I32, 1, true, -100, 0.3},
      {37, 5000, SPW_I64, 0, true, -100, 0.25}, // block rows, float4
      {7, 4999, SPW_I32, 0, false, 0, 0.0},   // block rows, scalar
      {9, 1, SPW_I64, 0, false, 0, 0.0},      // one class
      {8, 50257, SPW_I64, 0, true, -100, 0.2}, // GPT-2's vocabulary
      {1024, 4096, SPW_I64, 0, true, -100, 0.1}, // 4M
      {6, 10, SPW_I64, 1, true, -100, 1.0},   // all ignored, sum: 0
      {6, 10, SPW_I32, 0, true, 7, 1.0},     // all ignored, mean
  };
  for (const XentSpec &s : xent) {
    // All ignored with mean: the loss is 0/0 = NaN on both sides, which a
    // relative norm cannot compare; the gradient (zeros) is checked.
    if (!(s.reduction == 0 && s.ignore_frac >= 1.0))
      add_xent(cases, rng, s);
    add_xent_grad(cases, rng, s);
  }
  // No rows: the loss is still written (sum: 0).
  add_xent(cases, rng, {0, 10, SPW_I64, 1, false, 0, 0.0});
}

} // namespace spw::check
