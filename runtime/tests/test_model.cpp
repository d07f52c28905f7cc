//===- test_model.cpp - a hand-written "generated" model for driver tests --===//
//
// What spillwayc would emit for a 2-layer classifier, written by hand against
// the C ABI:
//   logits = tanh(x w1^T + b1) w2 + b2,  loss = cross_entropy(logits, y)
// with x: f32 [4,3], y: i64 [4], w1 [5,3], b1 [5], w2 [5,3], b2 [3], and the
// backward pass spelled out with the gradient kernels.
//
// Fault injection for the tests (environment):
//   SPW_TEST_BAD_GRAD=1   report 2x the true gradient of w1
//   SPW_TEST_NAN_AT=K     the K-th call of the step returns a NaN loss
//
//===----------------------------------------------------------------------===//

#include "spillway/runtime/spillway_rt.h"

#include <cmath>
#include <cstdlib>

namespace {
int32_t x_in, y_in, w1, b1, w2, b2;
int step_calls = 0;
} // namespace

extern "C" void spw_model_declare(spw_ctx *ctx) {
  const int64_t x_dims[] = {4, 3}, y_dims[] = {4};
  const int64_t w1_dims[] = {5, 3}, b1_dims[] = {5}, w2_dims[] = {5, 3},
                b2_dims[] = {3};
  spw_declare_weights(ctx, 152);
  w1 = spw_declare_param(ctx, "fc1.weight", SPW_F32, 2, w1_dims, 0);
  b1 = spw_declare_param(ctx, "fc1.bias", SPW_F32, 1, b1_dims, 60);
  w2 = spw_declare_param(ctx, "fc2.weight", SPW_F32, 2, w2_dims, 80);
  b2 = spw_declare_param(ctx, "fc2.bias", SPW_F32, 1, b2_dims, 140);
  x_in = spw_declare_input(ctx, "x", SPW_F32, 2, x_dims);
  y_in = spw_declare_input(ctx, "y", SPW_I64, 1, y_dims);
  spw_declare_adamw(ctx, 1e-3, 0.9, 0.999, 1e-8, 0.01);
}

extern "C" void spw_model_step(spw_ctx *ctx) {
  ++step_calls;
  spw_tensor *x = spw_input(ctx, x_in), *y = spw_input(ctx, y_in);
  spw_tensor *W1 = spw_param(ctx, w1), *B1 = spw_param(ctx, b1),
             *W2 = spw_param(ctx, w2), *B2 = spw_param(ctx, b2);
  const int64_t d45[] = {4, 5}, d43[] = {4, 3}, d54[] = {5, 4},
                d35[] = {3, 5}, d53[] = {5, 3}, d5[] = {5}, d3[] = {3};

  // forward
  spw_tensor *pre = spw_alloc(ctx, SPW_F32, 2, d45);
  {
    spw_tensor *ins[] = {x, W1, B1}, *outs[] = {pre};
    const int64_t ia[] = {0, 1};
    const double fa[] = {1.0, 1.0};
    spw_op_gemm(ctx, ins, outs, ia, fa);
  }
  spw_tensor *h = spw_alloc(ctx, SPW_F32, 2, d45);
  {
    spw_tensor *ins[] = {pre}, *outs[] = {h};
    spw_op_tanh(ctx, ins, outs, nullptr, nullptr);
  }
  spw_tensor *l0 = spw_alloc(ctx, SPW_F32, 2, d43);
  {
    spw_tensor *ins[] = {h, W2}, *outs[] = {l0};
    spw_op_matmul(ctx, ins, outs, nullptr, nullptr);
  }
  spw_tensor *logits = spw_alloc(ctx, SPW_F32, 2, d43);
  {
    spw_tensor *ins[] = {l0, B2}, *outs[] = {logits};
    spw_op_add(ctx, ins, outs, nullptr, nullptr);
  }
  spw_tensor *loss = spw_alloc(ctx, SPW_F32, 0, nullptr);
  const int64_t xent_attrs[] = {0, 0, -100};
  {
    spw_tensor *ins[] = {logits, y}, *outs[] = {loss};
    spw_op_softmax_cross_entropy_loss(ctx, ins, outs, xent_attrs, nullptr);
  }
  const char *nan_at = std::getenv("SPW_TEST_NAN_AT");
  if (nan_at && std::atoi(nan_at) == step_calls) {
    const float nan = NAN;
    spw_tensor *c = spw_constant(ctx, SPW_F32, 0, nullptr, &nan);
    spw_tensor *bad = spw_alloc(ctx, SPW_F32, 0, nullptr);
    spw_tensor *ins[] = {loss, c}, *outs[] = {bad};
    spw_op_mul(ctx, ins, outs, nullptr, nullptr);
    loss = bad;
  }
  spw_set_loss(ctx, loss);

  // backward
  const float one = 1.0f;
  spw_tensor *dloss = spw_constant(ctx, SPW_F32, 0, nullptr, &one);
  spw_tensor *dlogits = spw_alloc(ctx, SPW_F32, 2, d43);
  {
    spw_tensor *ins[] = {logits, y, dloss}, *outs[] = {dlogits};
    spw_op_softmax_cross_entropy_loss_grad(ctx, ins, outs, xent_attrs,
                                           nullptr);
  }
  spw_tensor *db2 = spw_alloc(ctx, SPW_F32, 1, d3);
  {
    spw_tensor *ins[] = {dlogits}, *outs[] = {db2};
    spw_op_sum_to_shape(ctx, ins, outs, nullptr, nullptr);
  }
  const int64_t perm[] = {1, 0};
  spw_tensor *hT = spw_alloc(ctx, SPW_F32, 2, d54);
  {
    spw_tensor *ins[] = {h}, *outs[] = {hT};
    spw_op_transpose(ctx, ins, outs, perm, nullptr);
  }
  spw_tensor *dw2 = spw_alloc(ctx, SPW_F32, 2, d53);
  {
    spw_tensor *ins[] = {hT, dlogits}, *outs[] = {dw2};
    spw_op_matmul(ctx, ins, outs, nullptr, nullptr);
  }
  spw_tensor *w2T = spw_alloc(ctx, SPW_F32, 2, d35);
  {
    spw_tensor *ins[] = {W2}, *outs[] = {w2T};
    spw_op_transpose(ctx, ins, outs, perm, nullptr);
  }
  spw_tensor *dh = spw_alloc(ctx, SPW_F32, 2, d45);
  {
    spw_tensor *ins[] = {dlogits, w2T}, *outs[] = {dh};
    spw_op_matmul(ctx, ins, outs, nullptr, nullptr);
  }
  spw_tensor *dpre = spw_alloc(ctx, SPW_F32, 2, d45);
  {
    spw_tensor *ins[] = {h, dh}, *outs[] = {dpre};
    spw_op_tanh_grad(ctx, ins, outs, nullptr, nullptr);
  }
  spw_tensor *dw1 = spw_alloc(ctx, SPW_F32, 2, d53);
  {
    spw_tensor *ins[] = {dpre, x, nullptr}, *outs[] = {dw1};
    const int64_t ia[] = {1, 0};
    const double fa[] = {1.0, 0.0};
    spw_op_gemm(ctx, ins, outs, ia, fa);
  }
  const char *bad_grad = std::getenv("SPW_TEST_BAD_GRAD");
  if (bad_grad && *bad_grad == '1') {
    const float two = 2.0f;
    spw_tensor *c = spw_constant(ctx, SPW_F32, 0, nullptr, &two);
    spw_tensor *scaled = spw_alloc(ctx, SPW_F32, 2, d53);
    spw_tensor *ins[] = {dw1, c}, *outs[] = {scaled};
    spw_op_mul(ctx, ins, outs, nullptr, nullptr);
    dw1 = scaled;
  }
  spw_tensor *db1 = spw_alloc(ctx, SPW_F32, 1, d5);
  {
    spw_tensor *ins[] = {dpre}, *outs[] = {db1};
    const int64_t ia[] = {1, 0};
    spw_op_reduce_sum(ctx, ins, outs, ia, nullptr);
  }

  // optimizer: compile-time defaults as spillwayc would pass them
  spw_adamw(ctx, w1, dw1, 1e-3, 0.9, 0.999, 1e-8, 0.01);
  spw_adamw(ctx, b1, db1, 1e-3, 0.9, 0.999, 1e-8, 0.01);
  spw_adamw(ctx, w2, dw2, 1e-3, 0.9, 0.999, 1e-8, 0.01);
  spw_adamw(ctx, b2, db2, 1e-3, 0.9, 0.999, 1e-8, 0.01);
}

int main(int argc, char **argv) { return spw_main(argc, argv); }
