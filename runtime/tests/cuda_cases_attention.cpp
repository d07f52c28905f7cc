//===- cuda_cases_attention.cpp - attention cases for spillway-cuda-check -===//
//
// attention and attention_grad on q [B,H,S,D], k / v [B,Hkv,S,D], inputs
// uniform in [-1, 1], scale 1/sqrt(D), causal and not. The shapes reach
// every path of kernels_attention.cu: the tiled kernels for DMAX 64
// (D 7, 16, 33, 64), 128 (D 80, 128) and 256 (D 256, key blocks of 32),
// float4 and scalar tile loads (D % 4), the one-warp-per-row kernels
// (D 300), S below, at and past the 64-row tile (1, 2, 17, 64, 65, 100,
// 257, 1024), H == Hkv and grouped heads (H = 2, 4 * Hkv), B > 1, and the
// gradient with dq, dk or dv absent. At bf16, D 16, 64, 80, 96, 112 and 128
// take the tensor-core kernels (DH 64, 80, 96, 128; 16 and 112 zero-padded
// to 64 and 128) and the other D the fp32 ones.
//
// Tolerances (relative norm). The GPU computes in fp32, the CPU in double.
// Each score and product is off by a few ulp, and the error of a sum of n
// terms grows like sqrt(n) ulp: ~1e-6 here even at S = 1024 (the kernels
// run on a CPU emulation of CUDA gave 1e-7 to 1e-6 on these shapes). The
// forward gets 2e-5 for the online softmax's rescaling order; the
// gradients 5e-5, since dS = P (dP - Delta) subtracts a Delta recomputed in
// fp32 and dk / dv sum over S rows and the group's heads. A real bug (a key
// masked wrongly, a row or head mixed up) moves the norm by >= ~1/S = 1e-3
// at S = 1024, far above either. bf16 products: 2e-2 (the kernels run on
// a CPU emulation of CUDA and wmma gave 1e-3 to 4e-3, 7e-3 on S = 2).
//
// S = 1 has no gradient case: there dq = dk = 0 exactly on the CPU (one
// key, softmax is constant) and fp32 leaves a residue of ~1e-7, which has
// no relative norm against 0; S = 2 covers the tiny case instead.
//
//===----------------------------------------------------------------------===//

#include "cuda_check_ops.h"

#include <cmath>
#include <string>

namespace spw::check {
namespace {

struct AttnShape {
  int64_t B, H, Hkv, S, D;
};

std::string shape_label(const AttnShape &s, int64_t causal) {
  return "[" + std::to_string(s.B) + "," + std::to_string(s.H) + "," +
         std::to_string(s.S) + "," + std::to_string(s.D) + "] kv " +
         std::to_string(s.Hkv) + (causal ? " causal" : " full") + " f32";
}

void add_forward(CaseList &cases, Rng &rng, const AttnShape &s,
                 int64_t causal, double tol) {
  OpCase c;
  c.label = "attention " + shape_label(s, causal);
  c.op = Op::attention;
  c.ins.push_back(rng.uniform({s.B, s.H, s.S, s.D}));
  c.ins.push_back(rng.uniform({s.B, s.Hkv, s.S, s.D}));
  c.ins.push_back(rng.uniform({s.B, s.Hkv, s.S, s.D}));
  c.outs.push_back({SPW_F32, {s.B, s.H, s.S, s.D}});
  c.iattrs = {causal};
  c.fattrs = {1.0 / std::sqrt(double(s.D))};
  c.tol_fp32 = tol;
  c.tol_bf16 = 2e-2;
  cases.push_back(std::move(c));
}

// want: which of dq, dk, dv are requested (the others absent: dtype 0, no
// dims).
void add_grad(CaseList &cases, Rng &rng, const AttnShape &s, int64_t causal,
              bool want_dq = true, bool want_dk = true, bool want_dv = true) {
  OpCase c;
  c.label = "attention_grad " + shape_label(s, causal);
  if (!(want_dq && want_dk && want_dv))
    c.label += std::string(" only") + (want_dq ? " dq" : "") +
               (want_dk ? " dk" : "") + (want_dv ? " dv" : "");
  c.op = Op::attention_grad;
  c.ins.push_back(rng.uniform({s.B, s.H, s.S, s.D}));
  c.ins.push_back(rng.uniform({s.B, s.Hkv, s.S, s.D}));
  c.ins.push_back(rng.uniform({s.B, s.Hkv, s.S, s.D}));
  c.ins.push_back(rng.uniform({s.B, s.H, s.S, s.D}));
  const OutSpec absent{0, {}};
  c.outs.push_back(want_dq ? OutSpec{SPW_F32, {s.B, s.H, s.S, s.D}} : absent);
  c.outs.push_back(want_dk ? OutSpec{SPW_F32, {s.B, s.Hkv, s.S, s.D}}
                           : absent);
  c.outs.push_back(want_dv ? OutSpec{SPW_F32, {s.B, s.Hkv, s.S, s.D}}
                           : absent);
  c.iattrs = {causal};
  c.fattrs = {1.0 / std::sqrt(double(s.D))};
  c.tol_fp32 = 5e-5;
  c.tol_bf16 = 2e-2;
  cases.push_back(std::move(c));
}

} // namespace

void add_attention_cases(CaseList &cases, Rng &rng) {
  for (int64_t causal : {0, 1}) // one row: it sees only key 0
    add_forward(cases, rng, {1, 1, 1, 1, 16}, causal, 2e-5);
  const AttnShape shapes[] = {
      {1, 1, 1, 2, 16},   // two rows
      {2, 2, 2, 17, 64},  // B > 1, S below one tile
      {1, 4, 1, 100, 80}, // 4 query heads per kv head, D padded to 128
      {2, 2, 1, 65, 16},  // one row past a tile
      {1, 2, 2, 64, 33},  // odd D: scalar tile loads
      {1, 3, 3, 40, 7},   // tiny odd D
      {1, 4, 2, 70, 256}, // DMAX 256: key blocks of 32
      {1, 2, 1, 37, 300}, // D > 256: one warp per row
      {2, 8, 2, 257, 128}, // GQA, S one past 4 tiles
      {1, 4, 2, 129, 96},  // bf16: DH 96, S one past 2 tiles
      {2, 2, 1, 50, 112},  // bf16: D padded to DH 128
  };
  for (const AttnShape &s : shapes)
    for (int64_t causal : {0, 1}) {
      add_forward(cases, rng, s, causal, 2e-5);
      add_grad(cases, rng, s, causal);
    }
  // The big case: many tiles, long rows, causal block skipping.
  const AttnShape big{2, 8, 8, 1024, 64};
  for (int64_t causal : {0, 1}) {
    add_forward(cases, rng, big, causal, 2e-5);
    add_grad(cases, rng, big, causal);
  }
  add_forward(cases, rng, {2, 8, 2, 1024, 64}, 1, 2e-5);
  add_grad(cases, rng, {2, 8, 2, 1024, 64}, 1);
  // Absent results: only the kernels whose outputs are wanted run, and a
  // missing dk must not disturb dv (they share a kernel).
  const AttnShape part{2, 4, 2, 100, 64};
  add_grad(cases, rng, part, 1, true, false, false);
  add_grad(cases, rng, part, 1, false, true, true);
  add_grad(cases, rng, part, 0, false, false, true);
  add_grad(cases, rng, part, 0, false, true, false);
  add_grad(cases, rng, {1, 2, 1, 37, 300}, 1, false, false, true);
  add_grad(cases, rng, {1, 2, 1, 37, 300}, 0, true, false, false);
}

} // namespace spw::check
