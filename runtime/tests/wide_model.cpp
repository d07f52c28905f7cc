//===- wide_model.cpp - a wider hand-written model for checkpoint tests ---===//
//
// test_model.cpp's classifier with wide layers:
//   logits = tanh(x w1^T + b1) w2 + b2,  loss = cross_entropy(logits, y)
// x: f32 [8,384], y: i64 [8], w1 [1024,384], b1 [1024], w2 [1024,3], b2 [3]:
// about 400k parameters, so a checkpoint (parameters and AdamW moments,
// ~4.7 MiB) spans two 4 MiB chunks and takes a few milliseconds, and the
// random-kill test catches processes inside checkpoint writes.
//
//===----------------------------------------------------------------------===//

#include "spillway/runtime/spillway_rt.h"

namespace {
constexpr int64_t N = 8, D = 384, H = 1024, C = 3;
int32_t x_in, y_in, w1, b1, w2, b2;
} // namespace

extern "C" void spw_model_declare(spw_ctx *ctx) {
  const int64_t x_dims[] = {N, D}, y_dims[] = {N};
  const int64_t w1_dims[] = {H, D}, b1_dims[] = {H}, w2_dims[] = {H, C},
                b2_dims[] = {C};
  spw_declare_weights(ctx, (H * D + H + H * C + C) * 4);
  w1 = spw_declare_param(ctx, "fc1.weight", SPW_F32, 2, w1_dims, 0);
  b1 = spw_declare_param(ctx, "fc1.bias", SPW_F32, 1, b1_dims, H * D * 4);
  w2 = spw_declare_param(ctx, "fc2.weight", SPW_F32, 2, w2_dims,
                         (H * D + H) * 4);
  b2 = spw_declare_param(ctx, "fc2.bias", SPW_F32, 1, b2_dims,
                         (H * D + H + H * C) * 4);
  x_in = spw_declare_input(ctx, "x", SPW_F32, 2, x_dims);
  y_in = spw_declare_input(ctx, "y", SPW_I64, 1, y_dims);
  spw_declare_adamw(ctx, 1e-3, 0.9, 0.999, 1e-8, 0.01);
}

extern "C" void spw_model_step(spw_ctx *ctx) {
  spw_tensor *x = spw_input(ctx, x_in), *y = spw_input(ctx, y_in);
  spw_tensor *W1 = spw_param(ctx, w1), *B1 = spw_param(ctx, b1),
             *W2 = spw_param(ctx, w2), *B2 = spw_param(ctx, b2);
  const int64_t dNH[] = {N, H}, dNC[] = {N, C}, dHN[] = {H, N},
                dCH[] = {C, H}, dHC[] = {H, C}, dHD[] = {H, D}, dH[] = {H},
                dC[] = {C};
  spw_tensor *pre = spw_alloc(ctx, SPW_F32, 2, dNH);
  {
    spw_tensor *ins[] = {x, W1, B1}, *outs[] = {pre};
    const int64_t ia[] = {0, 1};
    const double fa[] = {1.0, 1.0};
    spw_op_gemm(ctx, ins, outs, ia, fa);
  }
  spw_tensor *h = spw_alloc(ctx, SPW_F32, 2, dNH);
  {
    spw_tensor *ins[] = {pre}, *outs[] = {h};
    spw_op_tanh(ctx, ins, outs, nullptr, nullptr);
  }
  spw_tensor *l0 = spw_alloc(ctx, SPW_F32, 2, dNC);
  {
    spw_tensor *ins[] = {h, W2}, *outs[] = {l0};
    spw_op_matmul(ctx, ins, outs, nullptr, nullptr);
  }
  spw_tensor *logits = spw_alloc(ctx, SPW_F32, 2, dNC);
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
  spw_set_loss(ctx, loss);

  const float one = 1.0f;
  spw_tensor *dloss = spw_constant(ctx, SPW_F32, 0, nullptr, &one);
  spw_tensor *dlogits = spw_alloc(ctx, SPW_F32, 2, dNC);
  {
    spw_tensor *ins[] = {logits, y, dloss}, *outs[] = {dlogits};
    spw_op_softmax_cross_entropy_loss_grad(ctx, ins, outs, xent_attrs,
                                           nullptr);
  }
  spw_tensor *db2 = spw_alloc(ctx, SPW_F32, 1, dC);
  {
    spw_tensor *ins[] = {dlogits}, *outs[] = {db2};
    spw_op_sum_to_shape(ctx, ins, outs, nullptr, nullptr);
  }
  const int64_t perm[] = {1, 0};
  spw_tensor *hT = spw_alloc(ctx, SPW_F32, 2, dHN);
  {
    spw_tensor *ins[] = {h}, *outs[] = {hT};
    spw_op_transpose(ctx, ins, outs, perm, nullptr);
  }
  spw_tensor *dw2 = spw_alloc(ctx, SPW_F32, 2, dHC);
  {
    spw_tensor *ins[] = {hT, dlogits}, *outs[] = {dw2};
    spw_op_matmul(ctx, ins, outs, nullptr, nullptr);
  }
  spw_tensor *w2T = spw_alloc(ctx, SPW_F32, 2, dCH);
  {
    spw_tensor *ins[] = {W2}, *outs[] = {w2T};
    spw_op_transpose(ctx, ins, outs, perm, nullptr);
  }
  spw_tensor *dh = spw_alloc(ctx, SPW_F32, 2, dNH);
  {
    spw_tensor *ins[] = {dlogits, w2T}, *outs[] = {dh};
    spw_op_matmul(ctx, ins, outs, nullptr, nullptr);
  }
  spw_tensor *dpre = spw_alloc(ctx, SPW_F32, 2, dNH);
  {
    spw_tensor *ins[] = {h, dh}, *outs[] = {dpre};
    spw_op_tanh_grad(ctx, ins, outs, nullptr, nullptr);
  }
  spw_tensor *dw1 = spw_alloc(ctx, SPW_F32, 2, dHD);
  {
    spw_tensor *ins[] = {dpre, x, nullptr}, *outs[] = {dw1};
    const int64_t ia[] = {1, 0};
    const double fa[] = {1.0, 0.0};
    spw_op_gemm(ctx, ins, outs, ia, fa);
  }
  spw_tensor *db1 = spw_alloc(ctx, SPW_F32, 1, dH);
  {
    spw_tensor *ins[] = {dpre}, *outs[] = {db1};
    const int64_t ia[] = {1, 0};
    spw_op_reduce_sum(ctx, ins, outs, ia, nullptr);
  }
  spw_adamw(ctx, w1, dw1, 1e-3, 0.9, 0.999, 1e-8, 0.01);
  spw_adamw(ctx, b1, db1, 1e-3, 0.9, 0.999, 1e-8, 0.01);
  spw_adamw(ctx, w2, dw2, 1e-3, 0.9, 0.999, 1e-8, 0.01);
  spw_adamw(ctx, b2, db2, 1e-3, 0.9, 0.999, 1e-8, 0.01);
}

int main(int argc, char **argv) { return spw_main(argc, argv); }
