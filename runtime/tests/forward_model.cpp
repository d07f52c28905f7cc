//===- forward_model.cpp - a hand-written forward-only "generated" model --===//
//
// What spillwayc --forward would emit for a linear layer with a few derived
// outputs of every dtype, written by hand against the C ABI:
//   "logits/out" f32 [2,3]  = linear(x, w, b)         (file logits_out.npy)
//   "mask"       bool [2,3] = logits > 0
//   "count"      i32 []     = sum(cast<i32>(mask))
//   "rowmax"     i64 [2]    = cast<i64>(reduce_max(logits, axis 1))
// with x: f32 [2,4], w [4,3] (weights offset 0), b [3] (offset 48).
//
// Fault injection for the tests (environment):
//   SPW_TEST_SKIP_OUTPUT=1   the step does not set "mask"
//
//===----------------------------------------------------------------------===//

#include "spillway/runtime/spillway_rt.h"

#include <cstdlib>

namespace {
int32_t x_in, w_p, b_p, o_logits, o_mask, o_count, o_rowmax;
} // namespace

extern "C" void spw_model_declare(spw_ctx *ctx) {
  const int64_t x_dims[] = {2, 4}, w_dims[] = {4, 3}, b_dims[] = {3},
                l_dims[] = {2, 3}, r_dims[] = {2};
  spw_declare_weights(ctx, 60);
  w_p = spw_declare_param(ctx, "fc.weight", SPW_F32, 2, w_dims, 0);
  b_p = spw_declare_param(ctx, "fc.bias", SPW_F32, 1, b_dims, 48);
  x_in = spw_declare_input(ctx, "x", SPW_F32, 2, x_dims);
  o_logits = spw_declare_output(ctx, "logits/out", SPW_F32, 2, l_dims);
  o_mask = spw_declare_output(ctx, "mask", SPW_BOOL, 2, l_dims);
  o_count = spw_declare_output(ctx, "count", SPW_I32, 0, nullptr);
  o_rowmax = spw_declare_output(ctx, "rowmax", SPW_I64, 1, r_dims);
}

extern "C" void spw_model_step(spw_ctx *ctx) {
  spw_tensor *x = spw_input(ctx, x_in);
  spw_tensor *W = spw_param(ctx, w_p), *B = spw_param(ctx, b_p);
  const int64_t d23[] = {2, 3}, d2[] = {2};
  spw_tensor *logits = spw_alloc(ctx, SPW_F32, 2, d23);
  {
    spw_tensor *ins[] = {x, W, B}, *outs[] = {logits};
    spw_op_linear(ctx, ins, outs, nullptr, nullptr);
  }
  const float zero = 0.0f;
  spw_tensor *z = spw_constant(ctx, SPW_F32, 0, nullptr, &zero);
  spw_tensor *mask = spw_alloc(ctx, SPW_BOOL, 2, d23);
  {
    spw_tensor *ins[] = {logits, z}, *outs[] = {mask};
    spw_op_greater(ctx, ins, outs, nullptr, nullptr);
  }
  spw_tensor *mask32 = spw_alloc(ctx, SPW_I32, 2, d23);
  {
    spw_tensor *ins[] = {mask}, *outs[] = {mask32};
    spw_op_cast(ctx, ins, outs, nullptr, nullptr);
  }
  spw_tensor *count = spw_alloc(ctx, SPW_I32, 0, nullptr);
  {
    spw_tensor *ins[] = {mask32}, *outs[] = {count};
    const int64_t ia[] = {2, 0, 1};
    spw_op_reduce_sum(ctx, ins, outs, ia, nullptr);
  }
  spw_tensor *mx = spw_alloc(ctx, SPW_F32, 1, d2);
  {
    spw_tensor *ins[] = {logits}, *outs[] = {mx};
    const int64_t ia[] = {1, 1};
    spw_op_reduce_max(ctx, ins, outs, ia, nullptr);
  }
  spw_tensor *mx64 = spw_alloc(ctx, SPW_I64, 1, d2);
  {
    spw_tensor *ins[] = {mx}, *outs[] = {mx64};
    spw_op_cast(ctx, ins, outs, nullptr, nullptr);
  }
  spw_set_output(ctx, o_logits, logits);
  const char *skip = std::getenv("SPW_TEST_SKIP_OUTPUT");
  if (!(skip && *skip == '1'))
    spw_set_output(ctx, o_mask, mask);
  spw_set_output(ctx, o_count, count);
  spw_set_output(ctx, o_rowmax, mx64);
}

int main(int argc, char **argv) { return spw_main(argc, argv); }
