//===- Autodiff.cpp - reverse-mode gradients of the scalar loss -----------===//
//
// For each function: find the ops on a path from a parameter read to the
// returned loss, walk them in reverse and apply each op's gradient rule
// (`emitGradient`, the only place that knows the rules), then hand the
// parameter gradients to the runtime with `train.param_grad`.
//
//===----------------------------------------------------------------------===//

#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "spillway/Dialect/Train/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

namespace spillway::train {
#define GEN_PASS_DEF_TRAINAUTODIFFPASS
#include "spillway/Dialect/Train/Transforms/Passes.h.inc"
} // namespace spillway::train

using namespace mlir;
using namespace spillway::train;

namespace {

//===----------------------------------------------------------------------===//
// Small builders the rules share
//===----------------------------------------------------------------------===//

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

bool isFloatTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && isa<FloatType>(tensor.getElementType());
}

/// A `tensor<f32>` constant holding `value`.
Value scalarConstant(OpBuilder &b, Location loc, float value) {
  auto type = RankedTensorType::get({}, b.getF32Type());
  return ConstantOp::create(b, loc, DenseElementsAttr::get(type, value));
}

/// `g` summed down to `type` (numpy broadcasting in reverse); `g` itself when
/// it already has that type.
Value sumTo(OpBuilder &b, Location loc, Value g, Type type) {
  if (g.getType() == type)
    return g;
  return SumToShapeOp::create(b, loc, type, g);
}

/// a + b for two adjoints of one value. A bf16 value's adjoints are bf16
/// (the casts' gradients): added in f32 and stored as bf16 again, one
/// rounding, as torch accumulates a bf16 tensor's gradients.
Value addAdjoints(OpBuilder &b, Location loc, Value a, Value g) {
  auto type = tensorType(a);
  if (!type.getElementType().isBF16())
    return AddOp::create(b, loc, a, g);
  auto f32 = type.clone(b.getF32Type());
  Value sum = AddOp::create(b, loc, CastOp::create(b, loc, f32, a),
                            CastOp::create(b, loc, f32, g));
  return CastOp::create(b, loc, type, sum);
}

/// `g * factor` for a scalar factor; `g` itself when the factor is 1.
Value scale(OpBuilder &b, Location loc, Value g, double factor) {
  if (factor == 1.0)
    return g;
  return MulOp::create(b, loc, g, scalarConstant(b, loc, factor));
}

/// `x` with its last two dimensions swapped.
Value transposeLast2(OpBuilder &b, Location loc, Value x) {
  int64_t rank = tensorType(x).getRank();
  SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  std::swap(perm[rank - 2], perm[rank - 1]);
  return TransposeOp::create(b, loc, x, perm);
}

/// Adjoint of a reduction's input: dy reshaped to the keepdims shape (when
/// the reduction dropped the axes) and broadcast back to the input type.
Value unreduce(OpBuilder &b, Location loc, Value dy, RankedTensorType inType,
               ArrayRef<int64_t> axes) {
  int64_t rank = inType.getRank();
  SmallVector<int64_t> keptShape(inType.getShape());
  for (int64_t d = 0; d < rank; ++d)
    if (axes.empty() || llvm::is_contained(axes, d) ||
        llvm::is_contained(axes, d - rank))
      keptShape[d] = 1;
  auto keptType = RankedTensorType::get(keptShape, inType.getElementType());
  if (dy.getType() != keptType)
    dy = ReshapeOp::create(b, loc, keptType, dy);
  if (keptType != inType)
    dy = BroadcastToOp::create(b, loc, inType, dy);
  return dy;
}

/// `v` reshaped to `type`; `v` itself when it already has that type.
Value reshapeTo(OpBuilder &b, Location loc, Value v, RankedTensorType type) {
  if (v.getType() == type)
    return v;
  return ReshapeOp::create(b, loc, type, v);
}

/// `base ^ (exponent - 1)`. A splat constant exponent (x^2 in RMSNorm and
/// variance computations) folds to a constant, and to `base` itself for 2.
Value powerMinusOne(OpBuilder &b, Location loc, Value base, Value exponent) {
  DenseElementsAttr value;
  if (matchPattern(exponent, m_Constant(&value)) && value.isSplat()) {
    float e = value.getSplatValue<float>();
    if (e == 2.0f)
      return base;
    return PowOp::create(
        b, loc, base,
        ConstantOp::create(b, loc,
                           DenseElementsAttr::get(value.getType(), e - 1.0f)));
  }
  return PowOp::create(
      b, loc, base,
      SubOp::create(b, loc, exponent, scalarConstant(b, loc, 1.0f)));
}

/// Number of input elements each element of a reduction's result sums.
int64_t reducedCount(RankedTensorType inType, ArrayRef<int64_t> axes) {
  int64_t count = 1;
  for (int64_t d = 0; d < inType.getRank(); ++d)
    if (axes.empty() || llvm::is_contained(axes, d) ||
        llvm::is_contained(axes, d - inType.getRank()))
      count *= inType.getDimSize(d);
  return count;
}

//===----------------------------------------------------------------------===//
// The gradient rules
//===----------------------------------------------------------------------===//

/// Emits the vector-Jacobian product of `op`: given the adjoints of its
/// results, returns the adjoint of each operand (null where `wanted` is false
/// or the operand is not differentiable). The single place that knows the
/// rules; fails with a diagnostic for ops that have none.
FailureOr<SmallVector<Value>> emitGradient(OpBuilder &b, Operation *op,
                                           ArrayRef<Value> resultAdjoints,
                                           ArrayRef<bool> wanted) {
  Location loc = op->getLoc();
  SmallVector<Value> d(op->getNumOperands());
  auto want = [&](unsigned i) { return wanted[i]; };
  Value dy = resultAdjoints.empty() ? Value() : resultAdjoints.front();

  LogicalResult handled =
      llvm::TypeSwitch<Operation *, LogicalResult>(op)
          // y = a + b
          .Case([&](AddOp o) {
            if (want(0))
              d[0] = sumTo(b, loc, dy, o.getLhs().getType());
            if (want(1))
              d[1] = sumTo(b, loc, dy, o.getRhs().getType());
            return success();
          })
          // y = a - b
          .Case([&](SubOp o) {
            if (want(0))
              d[0] = sumTo(b, loc, dy, o.getLhs().getType());
            if (want(1))
              d[1] = NegOp::create(b, loc,
                                   sumTo(b, loc, dy, o.getRhs().getType()));
            return success();
          })
          // y = a * b
          .Case([&](MulOp o) {
            if (want(0))
              d[0] = sumTo(b, loc, MulOp::create(b, loc, dy, o.getRhs()),
                           o.getLhs().getType());
            if (want(1))
              d[1] = sumTo(b, loc, MulOp::create(b, loc, dy, o.getLhs()),
                           o.getRhs().getType());
            return success();
          })
          // y = a / b: da = dy / b, db = -dy * a / b^2 = -(dy * y / b)
          .Case([&](DivOp o) {
            if (want(0))
              d[0] = sumTo(b, loc, DivOp::create(b, loc, dy, o.getRhs()),
                           o.getLhs().getType());
            if (want(1)) {
              Value t = MulOp::create(b, loc, dy, o.getResult());
              t = DivOp::create(b, loc, t, o.getRhs());
              d[1] = NegOp::create(b, loc,
                                   sumTo(b, loc, t, o.getRhs().getType()));
            }
            return success();
          })
          .Case([&](NegOp) {
            d[0] = NegOp::create(b, loc, dy);
            return success();
          })
          .Case([&](ReluOp o) {
            d[0] = ReluGradOp::create(b, loc, o.getType(), o.getInput(), dy);
            return success();
          })
          .Case([&](TanhOp o) {
            d[0] = TanhGradOp::create(b, loc, o.getType(), o.getResult(), dy);
            return success();
          })
          .Case([&](GeluOp o) {
            d[0] = GeluGradOp::create(b, loc, o.getType(), o.getInput(), dy,
                                      o.getApproximate());
            return success();
          })
          .Case([&](SoftmaxOp o) {
            d[0] = SoftmaxGradOp::create(b, loc, o.getType(), o.getResult(),
                                         dy, o.getAxis());
            return success();
          })
          // y[.., M, N] = a[.., M, K] b[.., K, N] with broadcast batch dims:
          // da = dy b^T, db = a^T dy, each summed over the batch dims its
          // operand was broadcast along.
          .Case([&](MatMulOp o) {
            if (want(0))
              d[0] = sumTo(b, loc,
                           MatMulOp::create(b, loc, dy,
                                            transposeLast2(b, loc, o.getRhs())),
                           o.getLhs().getType());
            if (want(1))
              d[1] = sumTo(b, loc,
                           MatMulOp::create(b, loc,
                                            transposeLast2(b, loc, o.getLhs()),
                                            dy),
                           o.getRhs().getType());
            return success();
          })
          // y = alpha op(A) op(B) + beta C. With G = dy:
          //   d op(A) = alpha G op(B)^T,  d op(B) = alpha op(A)^T G,
          // transposed back when the operand was used transposed; each case
          // is one gemm with the right transpose flags.
          .Case([&](GemmOp o) {
            bool tA = o.getTransA(), tB = o.getTransB();
            APFloat alpha = o.getAlpha(), one(1.0f);
            auto gemm = [&](Value x, Value y, bool tx, bool ty) -> Value {
              return GemmOp::create(b, loc, x, y, Value(), alpha, one, tx, ty);
            };
            if (want(0))
              d[0] = tA ? gemm(o.getB(), dy, tB, true)    // (G op(B)^T)^T
                        : gemm(dy, o.getB(), false, !tB); // G op(B)^T
            if (want(1))
              d[1] = tB ? gemm(dy, o.getA(), true, tA)    // (op(A)^T G)^T
                        : gemm(o.getA(), dy, !tA, false); // op(A)^T G
            if (o.getC() && want(2))
              d[2] = scale(b, loc, sumTo(b, loc, dy, o.getC().getType()),
                           o.getBeta().convertToDouble());
            return success();
          })
          .Case([&](LayerNormOp o) {
            auto grad = LayerNormGradOp::create(
                b, loc, o.getType(), o.getScale().getType(),
                o.getScale().getType(), o.getInput(), o.getScale(), dy,
                o.getAxisAttr(), o.getEpsilonAttr());
            d[0] = grad.getDinput();
            d[1] = grad.getDscale();
            if (o.getBias())
              d[2] = grad.getDbias();
            return success();
          })
          .Case([&](GatherOp o) {
            if (want(0))
              d[0] = GatherGradOp::create(b, loc, o.getData().getType(),
                                          o.getIndices(), dy, o.getAxis());
            return success();
          })
          .Case([&](ReshapeOp o) {
            d[0] = ReshapeOp::create(b, loc, o.getInput().getType(), dy);
            return success();
          })
          .Case([&](TransposeOp o) {
            ArrayRef<int64_t> perm = o.getPerm();
            SmallVector<int64_t> inverse(perm.size());
            for (auto [i, p] : llvm::enumerate(perm))
              inverse[p] = i;
            d[0] = TransposeOp::create(b, loc, dy, inverse);
            return success();
          })
          .Case([&](ReduceSumOp o) {
            d[0] = unreduce(b, loc, dy, o.getInput().getType(), o.getAxes());
            return success();
          })
          .Case([&](ReduceMeanOp o) {
            RankedTensorType inType = o.getInput().getType();
            int64_t count = reducedCount(inType, o.getAxes());
            Value g = scale(b, loc, dy, 1.0 / double(count));
            d[0] = unreduce(b, loc, g, inType, o.getAxes());
            return success();
          })
          .Case([&](SoftmaxCrossEntropyLossOp o) {
            if (want(0))
              d[0] = SoftmaxCrossEntropyLossGradOp::create(
                  b, loc, o.getLogits().getType(), o.getLogits(),
                  o.getLabels(), dy, o.getReductionAttr(),
                  o.getIgnoreIndexAttr());
            return success();
          })
          // y = a ^ b: da = dy * b * a^(b-1), db = dy * y * log(a). db is
          // skipped when b is inactive (the usual constant exponent).
          .Case([&](PowOp o) {
            Value a = o.getLhs(), e = o.getRhs();
            if (want(0)) {
              Value t = MulOp::create(b, loc, MulOp::create(b, loc, dy, e),
                                      powerMinusOne(b, loc, a, e));
              d[0] = sumTo(b, loc, t, a.getType());
            }
            if (want(1)) {
              Value t = MulOp::create(b, loc, dy, o.getResult());
              t = MulOp::create(b, loc, t, LogOp::create(b, loc, a));
              // At a = 0 with e >= 0, y * log a is 0 * -inf; torch defines
              // the gradient there as 0 (where(a == 0 and e >= 0, 0, t)).
              Value zero = scalarConstant(b, loc, 0.0f);
              Value negExp = LessOp::create(b, loc, e, zero);
              Value kept = WhereOp::create(b, loc, negExp, t, zero);
              t = WhereOp::create(b, loc, EqualOp::create(b, loc, a, zero),
                                  kept, t);
              d[1] = sumTo(b, loc, t, e.getType());
            }
            return success();
          })
          // y = e^x: dx = dy * y
          .Case([&](ExpOp o) {
            d[0] = MulOp::create(b, loc, dy, o.getResult());
            return success();
          })
          // y = log x: dx = dy / x
          .Case([&](LogOp o) {
            d[0] = DivOp::create(b, loc, dy, o.getInput());
            return success();
          })
          // y = sqrt x: dx = dy * 0.5 / y
          .Case([&](SqrtOp o) {
            d[0] = DivOp::create(b, loc, scale(b, loc, dy, 0.5), o.getResult());
            return success();
          })
          // y = 1 / x: dx = -dy * y * y
          .Case([&](ReciprocalOp o) {
            Value y = o.getResult();
            d[0] = NegOp::create(
                b, loc, MulOp::create(b, loc, MulOp::create(b, loc, dy, y), y));
            return success();
          })
          // y = erf x: dx = dy * 2/sqrt(pi) * exp(-x^2)
          .Case([&](ErfOp o) {
            Value x = o.getInput();
            Value g = ExpOp::create(
                b, loc, NegOp::create(b, loc, MulOp::create(b, loc, x, x)));
            d[0] = scale(b, loc, MulOp::create(b, loc, dy, g),
                         2.0 * llvm::numbers::inv_sqrtpi);
            return success();
          })
          // y = sigmoid x: dx = dy * y * (1 - y)
          .Case([&](SigmoidOp o) {
            Value y = o.getResult();
            Value oneMinusY =
                SubOp::create(b, loc, scalarConstant(b, loc, 1.0f), y);
            d[0] =
                MulOp::create(b, loc, dy, MulOp::create(b, loc, y, oneMinusY));
            return success();
          })
          // y = cos x: dx = -dy * sin x
          .Case([&](CosOp o) {
            Value s = SinOp::create(b, loc, o.getInput());
            d[0] = NegOp::create(b, loc, MulOp::create(b, loc, dy, s));
            return success();
          })
          // y = sin x: dx = dy * cos x
          .Case([&](SinOp o) {
            d[0] =
                MulOp::create(b, loc, dy, CosOp::create(b, loc, o.getInput()));
            return success();
          })
          .Case([&](SiluOp o) {
            d[0] = SiluGradOp::create(b, loc, o.getType(), o.getInput(), dy);
            return success();
          })
          // y = c ? l : r (all broadcast): each branch gets dy where it was
          // chosen and zero elsewhere, summed back to its shape. The
          // condition is boolean and has no adjoint.
          .Case([&](WhereOp o) {
            Value zero = scalarConstant(b, loc, 0.0f);
            Value c = o.getCondition();
            if (want(1))
              d[1] = sumTo(b, loc, WhereOp::create(b, loc, c, dy, zero),
                           o.getLhs().getType());
            if (want(2))
              d[2] = sumTo(b, loc, WhereOp::create(b, loc, c, zero, dy),
                           o.getRhs().getType());
            return success();
          })
          // Float to float: cast the adjoint back. Casts to or from integers
          // and booleans are not differentiable: an integer input has no
          // adjoint, and a float cast to an integer is never active (only
          // float values are), so the gradient simply stops there.
          .Case([&](CastOp o) {
            if (isFloatTensor(o.getInput().getType()) &&
                isFloatTensor(o.getType()))
              d[0] = o.getInput().getType() == dy.getType()
                         ? dy
                         : CastOp::create(b, loc, o.getInput().getType(), dy)
                               .getResult();
            return success();
          })
          // Comparisons yield booleans: never active, no adjoints.
          .Case<EqualOp, LessOp, LessOrEqualOp, GreaterOp>(
              [&](Operation *) { return success(); })
          // dy goes to the maxima, split evenly among ties (as torch.amax):
          //   mask = (x == broadcast(y)), dx = mask * broadcast(dy) /
          //   broadcast(sum(mask over the axes)).
          .Case([&](ReduceMaxOp o) {
            RankedTensorType inType = o.getInput().getType();
            ArrayRef<int64_t> axes = o.getAxes();
            Value isMax =
                EqualOp::create(b, loc, o.getInput(),
                                unreduce(b, loc, o.getResult(), inType, axes));
            Value mask = CastOp::create(b, loc, inType, isMax);
            Value ties = ReduceSumOp::create(b, loc, mask, axes, true);
            Value g =
                MulOp::create(b, loc, mask, unreduce(b, loc, dy, inType, axes));
            d[0] =
                DivOp::create(b, loc, g, unreduce(b, loc, ties, inType, axes));
            return success();
          })
          // Each input's adjoint is its slice of dy along the axis.
          .Case([&](ConcatOp o) {
            int64_t rank = tensorType(dy).getRank();
            int64_t axis = normalizeAxis(o.getAxis(), rank);
            SmallVector<int64_t> starts(rank, 0), steps(rank, 1);
            for (auto [i, input] : llvm::enumerate(o.getInputs())) {
              RankedTensorType type = tensorType(input);
              if (want(i))
                d[i] = SliceOp::create(b, loc, type, dy, starts, steps);
              starts[axis] += type.getDimSize(axis);
            }
            return success();
          })
          .Case([&](SliceOp o) {
            d[0] = SliceGradOp::create(b, loc, o.getInput().getType(), dy,
                                       o.getStarts(), o.getSteps());
            return success();
          })
          // y[..., N] = x[..., K] w[K, N] + b: dx = dy w^T; with x and dy
          // flattened to [M, K] and [M, N], dw = x^T dy; db sums dy to [N].
          .Case([&](LinearOp o) {
            RankedTensorType xType = o.getInput().getType();
            RankedTensorType wType = o.getWeight().getType();
            int64_t k = wType.getDimSize(0), n = wType.getDimSize(1);
            int64_t m = 1;
            for (int64_t s : xType.getShape().drop_back())
              m *= s;
            auto rows = [&](Value v, int64_t cols) {
              return reshapeTo(
                  b, loc, v,
                  RankedTensorType::get({m, cols}, xType.getElementType()));
            };
            if (want(0)) {
              Value wT = transposeLast2(b, loc, o.getWeight());
              Value dyM = xType.getRank() >= 2 ? dy : rows(dy, n);
              d[0] =
                  reshapeTo(b, loc, MatMulOp::create(b, loc, dyM, wT), xType);
            }
            if (want(1))
              d[1] = MatMulOp::create(
                  b, loc, transposeLast2(b, loc, rows(o.getInput(), k)),
                  rows(dy, n));
            if (o.getBias() && want(2))
              d[2] = sumTo(b, loc, dy, o.getBias().getType());
            return success();
          })
          .Case([&](RmsNormOp o) {
            auto grad = RmsNormGradOp::create(
                b, loc, o.getType(), o.getScale().getType(), o.getInput(),
                o.getScale(), dy, o.getAxisAttr(), o.getEpsilonAttr());
            d[0] = grad.getDinput();
            d[1] = grad.getDscale();
            return success();
          })
          .Case([&](RopeOp o) -> LogicalResult {
            if (want(1) || want(2))
              return o.emitOpError(
                  "gradient w.r.t. rope's cos/sin tables is not supported");
            d[0] = RopeGradOp::create(b, loc, o.getType(), dy, o.getCos(),
                                      o.getSin());
            return success();
          })
          .Case([&](AttentionOp o) {
            auto grad = AttentionGradOp::create(
                b, loc, o.getQuery().getType(), o.getKey().getType(),
                o.getValue().getType(), o.getQuery(), o.getKey(), o.getValue(),
                dy, o.getScaleAttr(), o.getCausalAttr());
            d[0] = grad.getDquery();
            d[1] = grad.getDkey();
            d[2] = grad.getDvalue();
            return success();
          })
          // Forward graphs may broadcast explicitly (ONNX Expand); the two
          // shape ops are each other's adjoint.
          .Case([&](BroadcastToOp o) {
            d[0] = sumTo(b, loc, dy, o.getInput().getType());
            return success();
          })
          .Case([&](SumToShapeOp o) {
            d[0] = BroadcastToOp::create(b, loc, o.getInput().getType(), dy);
            return success();
          })
          .Default([&](Operation *) {
            return op->emitOpError("has no gradient rule; train-autodiff "
                                   "cannot differentiate through it");
          });
  if (failed(handled))
    return failure();
  // Rules may compute adjoints nobody asked for (layer_norm_grad yields all
  // three at once); drop them so callers see only what they wanted.
  for (unsigned i = 0, e = d.size(); i < e; ++i)
    if (!wanted[i])
      d[i] = Value();
  return d;
}

//===----------------------------------------------------------------------===//
// The reverse sweep
//===----------------------------------------------------------------------===//

/// Values the op reads: its operands and, for ops with regions, values from
/// above that its regions use.
SmallVector<Value> readValues(Operation *op) {
  SmallVector<Value> values(op->getOperands());
  if (op->getNumRegions()) {
    llvm::SetVector<Value> above;
    getUsedValuesDefinedAbove(op->getRegions(), above);
    llvm::append_range(values, above);
  }
  return values;
}

struct TrainAutodiffPass
    : spillway::train::impl::TrainAutodiffPassBase<TrainAutodiffPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<ParamOp> params(module.getOps<ParamOp>());
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      if (failed(differentiate(func, params)))
        return signalPassFailure();
    }
  }

  LogicalResult differentiate(func::FuncOp func, ArrayRef<ParamOp> params);
};

LogicalResult TrainAutodiffPass::differentiate(func::FuncOp func,
                                               ArrayRef<ParamOp> params) {
  if (!func.getBody().hasOneBlock())
    return func.emitOpError("train-autodiff expects a single-block function");
  Block &body = func.getBody().front();
  auto ret = dyn_cast<func::ReturnOp>(body.getTerminator());
  if (!ret)
    return func.emitOpError("train-autodiff expects a func.return terminator");
  auto scalarF32 = RankedTensorType::get({}, Float32Type::get(&getContext()));
  if (ret.getNumOperands() != 1 ||
      ret.getOperand(0).getType() != scalarF32) {
    InFlightDiagnostic diag = ret.emitOpError(
        "train-autodiff expects the function to return one scalar f32 loss, "
        "got ");
    if (ret.getNumOperands() == 0)
      diag << "no value";
    llvm::interleave(
        ret.getOperandTypes(), [&](Type t) { diag << t; },
        [&] { diag << ", "; });
    return diag;
  }
  Value loss = ret.getOperand(0);
  // Differentiating a training step again would add a second set of updates.
  for (Operation &op : body)
    if (isa<ParamGradOp>(op) || isOptimizerUpdate(&op))
      return op.emitOpError("the function is already differentiated; "
                            "train-autodiff runs once, on the forward graph "
                            "and its loss");

  // Varied: float values that depend on a parameter read.
  llvm::DenseSet<Value> varied;
  for (Operation &op : body.without_terminator()) {
    bool isVaried = isa<ParamValueOp>(op) ||
                    llvm::any_of(readValues(&op), [&](Value v) {
                      return varied.contains(v);
                    });
    if (isVaried)
      for (Value r : op.getResults())
        if (isFloatTensor(r.getType()))
          varied.insert(r);
  }
  // Useful: values the loss depends on.
  llvm::DenseSet<Value> useful{loss};
  for (Operation &op : llvm::reverse(body.without_terminator()))
    if (llvm::any_of(op.getResults(),
                     [&](Value r) { return useful.contains(r); }))
      for (Value v : readValues(&op))
        useful.insert(v);
  auto isActive = [&](Value v) {
    return varied.contains(v) && useful.contains(v);
  };

  OpBuilder b(ret);
  size_t opsBefore = body.getOperations().size();
  llvm::DenseMap<Value, Value> adjoint;
  auto accumulate = [&](Value v, Value g, Location loc) -> LogicalResult {
    if (g.getType() != v.getType())
      return emitError(loc, "train-autodiff internal error: gradient of type ")
             << g.getType() << " for a value of type " << v.getType();
    Value &slot = adjoint[v];
    slot = slot ? addAdjoints(b, loc, slot, g) : g;
    return success();
  };

  if (isActive(loss))
    adjoint[loss] = scalarConstant(b, ret.getLoc(), 1.0f);
  for (Operation &op : llvm::reverse(body.without_terminator())) {
    if (isa<ParamValueOp>(op) ||
        !llvm::any_of(op.getResults(), [&](Value r) { return isActive(r); }))
      continue;
    SmallVector<Value> resultAdjoints;
    for (Value r : op.getResults())
      resultAdjoints.push_back(adjoint.lookup(r));
    // Reaching the loss only through non-float values: zero gradient.
    if (llvm::all_of(resultAdjoints, [](Value g) { return !g; }))
      continue;
    SmallVector<bool> wanted;
    for (Value v : op.getOperands())
      wanted.push_back(varied.contains(v));
    FailureOr<SmallVector<Value>> operandAdjoints =
        emitGradient(b, &op, resultAdjoints, wanted);
    if (failed(operandAdjoints))
      return failure();
    for (auto [operand, g] : llvm::zip(op.getOperands(), *operandAdjoints))
      if (g && failed(accumulate(operand, g, op.getLoc())))
        return failure();
  }

  // One gradient per parameter the function reads, in declaration order;
  // several reads of one parameter add up.
  llvm::DenseMap<StringAttr, SmallVector<ParamValueOp>> reads;
  for (auto read : body.getOps<ParamValueOp>())
    reads[read.getParamAttr().getAttr()].push_back(read);
  for (ParamOp param : params) {
    auto it = reads.find(param.getSymNameAttr());
    if (it == reads.end() || !isFloatTensor(param.getTensorType()))
      continue;
    Location loc = it->second.front().getLoc();
    Value grad;
    for (ParamValueOp read : it->second)
      if (Value g = adjoint.lookup(read.getResult()))
        grad = grad ? AddOp::create(b, loc, grad, g).getResult() : g;
    // No differentiable path to the loss: like a torch parameter whose .grad
    // stays None, it gets no gradient and so no optimizer update (weight
    // decay included).
    if (!grad)
      continue;
    ParamGradOp::create(b, loc, FlatSymbolRefAttr::get(param.getSymNameAttr()),
                        grad);
    ++numParams;
  }
  numGradOps += body.getOperations().size() - opsBefore;
  return success();
}

} // namespace
