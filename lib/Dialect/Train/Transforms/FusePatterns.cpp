//===- FusePatterns.cpp - decomposed ONNX patterns -> fused train ops -----===//
//
// Each pattern is rooted at the last op of its chain and walks up through
// defining ops. A match is all or nothing: every constant is compared with
// the value the fused op assumes (1e-6 relative), every shape is checked, and
// every intermediate value of the chain must have no other user (otherwise
// the fused op would recompute what the graph keeps anyway). Ops the chain
// merely reads through (transposes of K, the grouped-KV expansion, the input
// reshape of a linear) may have other users; they then stay for those.
// Nothing is created before the whole chain has matched.
//
//===----------------------------------------------------------------------===//

#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "spillway/Dialect/Train/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <optional>

namespace spillway::train {
#define GEN_PASS_DEF_TRAINFUSEPATTERNSPASS
#include "spillway/Dialect/Train/Transforms/Passes.h.inc"
} // namespace spillway::train

using namespace mlir;
using namespace spillway::train;

namespace {

//===----------------------------------------------------------------------===//
// Matching helpers
//===----------------------------------------------------------------------===//

template <typename OpTy> OpTy defOf(Value v) {
  return v ? v.getDefiningOp<OpTy>() : OpTy();
}

/// `v` is produced by an OpTy whose result has no user but the chain.
template <typename OpTy> OpTy soleDef(Value v) {
  return v && v.hasOneUse() ? v.getDefiningOp<OpTy>() : OpTy();
}

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// The elements of a float `train.constant`, if `v` is one.
DenseFPElementsAttr constElements(Value v) {
  auto c = defOf<ConstantOp>(v);
  return c ? dyn_cast<DenseFPElementsAttr>(c.getValue())
           : DenseFPElementsAttr();
}

/// The value of a float constant whose elements are all equal (a scalar, or
/// a splat that broadcasts harmlessly; callers check the result shapes).
std::optional<double> splatValue(Value v) {
  DenseFPElementsAttr e = constElements(v);
  if (!e || e.getNumElements() == 0)
    return std::nullopt;
  if (e.isSplat())
    return e.getSplatValue<APFloat>().convertToDouble();
  auto values = e.getValues<APFloat>();
  double first = (*values.begin()).convertToDouble();
  for (APFloat x : values)
    if (x.convertToDouble() != first)
      return std::nullopt;
  return first;
}

bool near(double actual, double expected) {
  return std::fabs(actual - expected) <= 1e-6 * std::fabs(expected);
}

bool isSplat(Value v, double expected) {
  std::optional<double> x = splatValue(v);
  return x && near(*x, expected);
}

/// Tries `fn(a, b)` then `fn(b, a)`; `fn` must assign its outputs only when
/// it returns true.
bool eitherOrder(Value a, Value b, llvm::function_ref<bool(Value, Value)> fn) {
  return fn(a, b) || fn(b, a);
}

/// Whether `v` is computed from a `train.param_value` (so it has a gradient).
bool dependsOnParam(Value v) {
  SmallVector<Value> work{v};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!work.empty()) {
    Operation *op = work.pop_back_val().getDefiningOp();
    if (!op || !seen.insert(op).second)
      continue;
    if (isa<ParamValueOp>(op))
      return true;
    llvm::append_range(work, op->getOperands());
  }
  return false;
}

/// Counts a successful rewrite in the pass statistic given to the pattern.
template <typename OpTy> struct FusePattern : OpRewritePattern<OpTy> {
  FusePattern(MLIRContext *ctx, Pass::Statistic &count)
      : OpRewritePattern<OpTy>(ctx), count(count) {}
  Pass::Statistic &count;
};

//===----------------------------------------------------------------------===//
// SiLU: x * sigmoid(x)
//===----------------------------------------------------------------------===//

struct FuseSilu : FusePattern<MulOp> {
  using FusePattern::FusePattern;
  LogicalResult matchAndRewrite(MulOp root,
                                PatternRewriter &rewriter) const override {
    Value x;
    bool matched =
        eitherOrder(root.getLhs(), root.getRhs(), [&](Value a, Value s) {
          auto sig = soleDef<SigmoidOp>(s);
          if (!sig || sig.getInput() != a)
            return false;
          x = a;
          return true;
        });
    if (!matched || x.getType() != root.getType())
      return rewriter.notifyMatchFailure(root, "not x * sigmoid(x)");
    rewriter.replaceOp(root, SiluOp::create(rewriter, root.getLoc(), x));
    ++count;
    return success();
  }
};

//===----------------------------------------------------------------------===//
// GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), 0.5 x (1 + erf(x/sqrt
// 2))
//===----------------------------------------------------------------------===//

struct FuseGelu : FusePattern<MulOp> {
  using FusePattern::FusePattern;

  /// The three factors of a product spelled as two multiplications in any
  /// association ((a b) c, a (b c)); inner products must have no other use.
  static bool threeFactors(MulOp root, SmallVectorImpl<Value> &factors) {
    for (Value v : {root.getLhs(), root.getRhs()}) {
      if (auto inner = soleDef<MulOp>(v)) {
        factors.push_back(inner.getLhs());
        factors.push_back(inner.getRhs());
      } else {
        factors.push_back(v);
      }
    }
    return factors.size() == 3;
  }

  /// `t` is sqrt(2/pi) * (x + 0.044715 * x^3); returns x.
  static Value tanhArgument(Value t) {
    auto scaled = soleDef<MulOp>(t);
    if (!scaled)
      return {};
    Value x;
    eitherOrder(scaled.getLhs(), scaled.getRhs(), [&](Value inner, Value c) {
      if (!isSplat(c, std::sqrt(2.0 / M_PI)))
        return false;
      auto sum = soleDef<AddOp>(inner);
      if (!sum)
        return false;
      return eitherOrder(sum.getLhs(), sum.getRhs(), [&](Value a, Value cubic) {
        auto term = soleDef<MulOp>(cubic);
        if (!term)
          return false;
        return eitherOrder(term.getLhs(), term.getRhs(), [&](Value p, Value k) {
          auto pow = soleDef<PowOp>(p);
          if (!pow || pow.getLhs() != a || !isSplat(pow.getRhs(), 3.0) ||
              !isSplat(k, 0.044715))
            return false;
          x = a;
          return true;
        });
      });
    });
    return x;
  }

  /// `t` is x / sqrt(2) or x * (1 / sqrt(2)); returns x.
  static Value erfArgument(Value t) {
    if (auto div = soleDef<DivOp>(t))
      return isSplat(div.getRhs(), std::sqrt(2.0)) ? div.getLhs() : Value();
    Value x;
    if (auto mul = soleDef<MulOp>(t))
      eitherOrder(mul.getLhs(), mul.getRhs(), [&](Value a, Value c) {
        if (!isSplat(c, 1.0 / std::sqrt(2.0)))
          return false;
        x = a;
        return true;
      });
    return x;
  }

  LogicalResult matchAndRewrite(MulOp root,
                                PatternRewriter &rewriter) const override {
    SmallVector<Value, 3> factors;
    if (!threeFactors(root, factors))
      return rewriter.notifyMatchFailure(root, "not a product of three");
    // Which factor is 0.5, which is 1 + tanh/erf(..); the third is x.
    for (unsigned half = 0; half < 3; ++half) {
      if (!isSplat(factors[half], 0.5))
        continue;
      for (unsigned onePlus = 0; onePlus < 3; ++onePlus) {
        if (onePlus == half)
          continue;
        Value x = factors[3 - half - onePlus];
        auto add = soleDef<AddOp>(factors[onePlus]);
        if (!add)
          continue;
        StringRef approximate;
        bool matched =
            eitherOrder(add.getLhs(), add.getRhs(), [&](Value one, Value f) {
              if (!isSplat(one, 1.0))
                return false;
              if (auto t = soleDef<TanhOp>(f);
                  t && tanhArgument(t.getInput()) == x) {
                approximate = "tanh";
                return true;
              }
              if (auto e = soleDef<ErfOp>(f);
                  e && erfArgument(e.getInput()) == x) {
                approximate = "none";
                return true;
              }
              return false;
            });
        if (!matched || x.getType() != root.getType())
          continue;
        rewriter.replaceOp(
            root, GeluOp::create(rewriter, root.getLoc(), x, approximate));
        ++count;
        return success();
      }
    }
    return rewriter.notifyMatchFailure(root, "not a GELU");
  }
};

//===----------------------------------------------------------------------===//
// RMSNorm: weight * (x * 1/sqrt(mean(x^2) + eps))
//===----------------------------------------------------------------------===//

struct FuseRmsNorm : FusePattern<MulOp> {
  using FusePattern::FusePattern;

  struct Match {
    Value x;
    int64_t axis;
    double eps;
  };

  /// `r` is 1 / sqrt(reduce_mean(x^2, trailing axes, keepdims) + eps).
  static std::optional<Match> rsqrtOfMeanSquare(Value r, Value x) {
    Value s;
    if (auto rec = soleDef<ReciprocalOp>(r))
      s = rec.getInput();
    else if (auto div = soleDef<DivOp>(r); div && isSplat(div.getLhs(), 1.0))
      s = div.getRhs();
    auto sqrt = soleDef<SqrtOp>(s);
    if (!sqrt)
      return std::nullopt;
    auto add = soleDef<AddOp>(sqrt.getInput());
    if (!add || add.getType() != sqrt.getType())
      return std::nullopt;
    std::optional<Match> match;
    eitherOrder(add.getLhs(), add.getRhs(), [&](Value m, Value e) {
      std::optional<double> eps = splatValue(e);
      auto mean = soleDef<ReduceMeanOp>(m);
      if (!eps || !(*eps >= 0.0) || !mean || !mean.getKeepdims() ||
          mean.getType() != add.getType())
        return false;
      Value sq = mean.getInput();
      bool isSquare = false;
      if (auto pow = soleDef<PowOp>(sq))
        isSquare = pow.getLhs() == x && isSplat(pow.getRhs(), 2.0);
      else if (auto mul = soleDef<MulOp>(sq))
        isSquare = mul.getLhs() == x && mul.getRhs() == x;
      if (!isSquare || typeOf(sq) != typeOf(x))
        return false;
      // The reduced axes must be the trailing ones, each once.
      int64_t rank = typeOf(x).getRank();
      SmallVector<int64_t> axes;
      for (int64_t a : mean.getAxes())
        axes.push_back(normalizeAxis(a, rank));
      llvm::sort(axes);
      if (axes.empty() || axes.front() < 0)
        return false;
      for (auto [i, a] : llvm::enumerate(axes))
        if (a != rank - int64_t(axes.size()) + int64_t(i))
          return false;
      match = Match{x, axes.front() - rank, *eps};
      return true;
    });
    return match;
  }

  LogicalResult matchAndRewrite(MulOp root,
                                PatternRewriter &rewriter) const override {
    std::optional<Match> match;
    Value weight;
    eitherOrder(root.getLhs(), root.getRhs(), [&](Value w, Value n) {
      auto normed = soleDef<MulOp>(n);
      if (!normed)
        return false;
      return eitherOrder(
          normed.getLhs(), normed.getRhs(), [&](Value x, Value r) {
            match = rsqrtOfMeanSquare(r, x);
            if (!match || typeOf(x) != root.getType() ||
                normed.getType() != root.getType())
              return false;
            // The weight covers exactly the normalized dimensions.
            ArrayRef<int64_t> shape = typeOf(x).getShape();
            if (typeOf(w).getShape() != shape.take_back(-match->axis))
              return false;
            weight = w;
            return true;
          });
    });
    if (!weight)
      return rewriter.notifyMatchFailure(root, "not an RMSNorm");
    rewriter.replaceOp(
        root,
        RmsNormOp::create(
            rewriter, root.getLoc(), root.getType(), match->x, weight,
            rewriter.getIntegerAttr(
                rewriter.getIntegerType(64, /*isSigned=*/true), match->axis),
            rewriter.getF32FloatAttr(match->eps)));
    ++count;
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Rotary embedding: x * cos + concat(-x[..., D/2:], x[..., :D/2]) * sin
//===----------------------------------------------------------------------===//

struct FuseRope : FusePattern<AddOp> {
  using FusePattern::FusePattern;

  /// `s` takes x[..., start : start + half] and nothing else of x.
  static bool isHalf(Value s, Value x, int64_t start) {
    auto slice = soleDef<SliceOp>(s);
    if (!slice || slice.getInput() != x)
      return false;
    ArrayRef<int64_t> xs = typeOf(x).getShape(),
                      ys = slice.getType().getShape();
    int64_t rank = xs.size(), d = xs.back();
    for (int64_t i = 0; i < rank; ++i) {
      int64_t expectSize = i == rank - 1 ? d / 2 : xs[i];
      int64_t expectStart = i == rank - 1 ? start : 0;
      if (ys[i] != expectSize || slice.getStarts()[i] != expectStart ||
          slice.getSteps()[i] != 1)
        return false;
    }
    return true;
  }

  /// `rot` is concat(-x2, x1) along the last axis; returns x.
  static Value rotateHalfInput(Value rot) {
    auto concat = soleDef<ConcatOp>(rot);
    if (!concat || concat.getInputs().size() != 2)
      return {};
    auto neg = soleDef<NegOp>(concat.getInputs()[0]);
    if (!neg)
      return {};
    auto upper = defOf<SliceOp>(neg.getInput());
    if (!upper)
      return {};
    Value x = upper.getInput();
    int64_t rank = typeOf(x).getRank();
    if (rank == 0 || typeOf(x).getShape().back() % 2 != 0 ||
        normalizeAxis(concat.getAxis(), rank) != rank - 1 ||
        concat.getType() != typeOf(x))
      return {};
    int64_t half = typeOf(x).getShape().back() / 2;
    if (!isHalf(neg.getInput(), x, half) ||
        !isHalf(concat.getInputs()[1], x, 0))
      return {};
    return x;
  }

  /// A cos/sin table: broadcasts to x without enlarging it, and has no
  /// gradient (train.rope has none for its tables).
  static bool isTable(Value t, Value x) {
    auto shape = broadcastShapes(typeOf(t).getShape(), typeOf(x).getShape());
    return succeeded(shape) &&
           ArrayRef<int64_t>(*shape) == typeOf(x).getShape() &&
           !dependsOnParam(t);
  }

  LogicalResult matchAndRewrite(AddOp root,
                                PatternRewriter &rewriter) const override {
    Value x, cos, sin;
    eitherOrder(root.getLhs(), root.getRhs(), [&](Value a, Value b) {
      auto xCos = soleDef<MulOp>(a), rotSin = soleDef<MulOp>(b);
      if (!xCos || !rotSin)
        return false;
      Value input, s;
      if (!eitherOrder(rotSin.getLhs(), rotSin.getRhs(),
                       [&](Value rot, Value t) {
                         input = rotateHalfInput(rot);
                         s = t;
                         return bool(input);
                       }))
        return false;
      Value c;
      if (!eitherOrder(xCos.getLhs(), xCos.getRhs(), [&](Value v, Value t) {
            c = t;
            return v == input;
          }))
        return false;
      if (typeOf(input) != root.getType() || !isTable(c, input) ||
          !isTable(s, input))
        return false;
      x = input, cos = c, sin = s;
      return true;
    });
    if (!x)
      return rewriter.notifyMatchFailure(root, "not a rotary embedding");
    rewriter.replaceOp(root, RopeOp::create(rewriter, root.getLoc(),
                                            root.getType(), x, cos, sin));
    ++count;
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Linear: gemm, matmul by a 2-D weight, + bias [N], reshapes around a gemm
//===----------------------------------------------------------------------===//

/// gemm(a, b, c) with alpha = 1, no transA, and c absent or [N] with beta = 1.
struct FuseGemm : FusePattern<GemmOp> {
  using FusePattern::FusePattern;
  LogicalResult matchAndRewrite(GemmOp root,
                                PatternRewriter &rewriter) const override {
    int64_t n = root.getType().getDimSize(1);
    Value c = root.getC();
    if (root.getAlpha().convertToDouble() != 1.0 || root.getTransA() ||
        (c && (root.getBeta().convertToDouble() != 1.0 ||
               typeOf(c).getShape() != ArrayRef<int64_t>{n})))
      return rewriter.notifyMatchFailure(root, "gemm is not x @ w + b[N]");
    Value w = root.getB();
    if (root.getTransB())
      w = TransposeOp::create(rewriter, root.getLoc(), w,
                              rewriter.getDenseI64ArrayAttr({1, 0}));
    rewriter.replaceOp(root,
                       LinearOp::create(rewriter, root.getLoc(), root.getType(),
                                        root.getA(), w, c));
    ++count;
    return success();
  }
};

/// matmul(x[..., K], w[K, N]) -> linear(x, w).
struct FuseMatMulLinear : FusePattern<MatMulOp> {
  using FusePattern::FusePattern;
  LogicalResult matchAndRewrite(MatMulOp root,
                                PatternRewriter &rewriter) const override {
    if (typeOf(root.getRhs()).getRank() != 2 ||
        typeOf(root.getLhs()).getRank() < 2)
      return rewriter.notifyMatchFailure(root, "not x @ w with a 2-D w");
    rewriter.replaceOp(root,
                       LinearOp::create(rewriter, root.getLoc(), root.getType(),
                                        root.getLhs(), root.getRhs(), Value()));
    ++count;
    return success();
  }
};

/// linear(x, w) + b[N] (or b + ...) -> linear(x, w, b). Also takes the
/// matmul before FuseMatMulLinear got to it (counted once either way).
struct FuseLinearBias : FusePattern<AddOp> {
  using FusePattern::FusePattern;
  LogicalResult matchAndRewrite(AddOp root,
                                PatternRewriter &rewriter) const override {
    Value x, w, bias;
    bool wasMatMul = false;
    eitherOrder(root.getLhs(), root.getRhs(), [&](Value y, Value b) {
      if (typeOf(y) != root.getType() ||
          typeOf(b).getShape() != root.getType().getShape().take_back(1) ||
          root.getType().getRank() < 2)
        return false;
      if (auto lin = soleDef<LinearOp>(y); lin && !lin.getBias()) {
        x = lin.getInput(), w = lin.getWeight(), bias = b;
        return true;
      }
      if (auto mm = soleDef<MatMulOp>(y);
          mm && typeOf(mm.getRhs()).getRank() == 2) {
        x = mm.getLhs(), w = mm.getRhs(), bias = b, wasMatMul = true;
        return true;
      }
      return false;
    });
    if (!bias)
      return rewriter.notifyMatchFailure(root, "not linear + bias[N]");
    rewriter.replaceOp(root, LinearOp::create(rewriter, root.getLoc(),
                                              root.getType(), x, w, bias));
    if (wasMatMul)
      ++count;
    return success();
  }
};

/// reshape(linear(reshape(x[..., K] -> [M, K])) -> [..., N]) -> linear(x):
/// GPT-2's Conv1D flattens to 2-D around its Gemm.
struct FuseLinearReshapes : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReshapeOp root,
                                PatternRewriter &rewriter) const override {
    auto lin = soleDef<LinearOp>(root.getInput());
    auto flatten = lin ? defOf<ReshapeOp>(lin.getInput()) : ReshapeOp();
    if (!flatten)
      return rewriter.notifyMatchFailure(root, "not reshape(linear(reshape))");
    ArrayRef<int64_t> in = typeOf(flatten.getInput()).getShape();
    ArrayRef<int64_t> out = root.getType().getShape();
    ArrayRef<int64_t> flat = flatten.getType().getShape();
    int64_t n = lin.getType().getShape().back();
    if (in.size() < 2 || flat.size() != 2 || in.size() != out.size() ||
        in.back() != flat.back() || out.back() != n ||
        in.drop_back() != out.drop_back())
      return rewriter.notifyMatchFailure(root, "the reshapes are not inverse");
    rewriter.replaceOp(root,
                       LinearOp::create(rewriter, root.getLoc(), root.getType(),
                                        flatten.getInput(), lin.getWeight(),
                                        lin.getBias()));
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Causal self-attention: softmax(scale * Q K^T + mask) V
//===----------------------------------------------------------------------===//

struct FuseAttention : FusePattern<MatMulOp> {
  using FusePattern::FusePattern;

  /// A constant [..., S, S] that broadcasts to [B, H, S, S] and holds 0 on and
  /// below the diagonal and a large negative value (<= -1e4 or -inf) above.
  static bool isCausalMask(Value m, ArrayRef<int64_t> scores) {
    DenseFPElementsAttr e = constElements(m);
    if (!e)
      return false;
    ArrayRef<int64_t> shape = typeOf(m).getShape();
    int64_t s = scores.back();
    auto b = broadcastShapes(shape, scores);
    if (shape.size() < 2 || shape.back() != s || shape[shape.size() - 2] != s ||
        failed(b) || ArrayRef<int64_t>(*b) != scores)
      return false;
    int64_t idx = 0;
    for (APFloat v : e.getValues<APFloat>()) {
      int64_t i = (idx / s) % s, j = idx % s;
      ++idx;
      double x = v.convertToDouble();
      if (j <= i ? x != 0.0 : !(x <= -1e4))
        return false;
    }
    return true;
  }

  /// Sees through repeat_kv: reshape [B, Hkv, S, D] -> [B, Hkv, 1, S, D],
  /// broadcast_to [B, Hkv, n, S, D], reshape [B, Hkv * n, S, D].
  static Value unexpandHeads(Value v) {
    auto merge = defOf<ReshapeOp>(v);
    auto bcast =
        merge ? defOf<BroadcastToOp>(merge.getInput()) : BroadcastToOp();
    auto split = bcast ? defOf<ReshapeOp>(bcast.getInput()) : ReshapeOp();
    if (!split)
      return v;
    ArrayRef<int64_t> kv = typeOf(split.getInput()).getShape();
    ArrayRef<int64_t> one = split.getType().getShape();
    ArrayRef<int64_t> rep = bcast.getType().getShape();
    ArrayRef<int64_t> full = merge.getType().getShape();
    if (kv.size() != 4 || one.size() != 5 || rep.size() != 5 ||
        full.size() != 4)
      return v;
    int64_t n = rep[2];
    SmallVector<int64_t> expectOne{kv[0], kv[1], 1, kv[2], kv[3]};
    SmallVector<int64_t> expectRep{kv[0], kv[1], n, kv[2], kv[3]};
    SmallVector<int64_t> expectFull{kv[0], kv[1] * n, kv[2], kv[3]};
    if (one != ArrayRef<int64_t>(expectOne) ||
        rep != ArrayRef<int64_t>(expectRep) ||
        full != ArrayRef<int64_t>(expectFull))
      return v;
    return split.getInput();
  }

  /// `where(isnan(p), 0, p)` as the importer spells IsNaN (float(p == p) ==
  /// 0): dynamo's SDPA decomposition zeroes softmax rows that are all masked.
  /// Returns p, or null.
  static Value unguardNaN(Value v) {
    auto where = soleDef<WhereOp>(v);
    if (!where || !isSplat(where.getLhs(), 0.0))
      return Value();
    Value p = where.getRhs();
    auto isNaN = defOf<EqualOp>(where.getCondition());
    if (!isNaN || !isSplat(isNaN.getRhs(), 0.0))
      return Value();
    auto asFloat = defOf<CastOp>(isNaN.getLhs());
    auto same = asFloat ? defOf<EqualOp>(asFloat.getInput()) : EqualOp();
    if (!same || same.getLhs() != p || same.getRhs() != p ||
        typeOf(p) != where.getType())
      return Value();
    // p feeds only the guard (the comparison, twice, and the where).
    for (OpOperand &use : p.getUses())
      if (use.getOwner() != where && use.getOwner() != same)
        return Value();
    return p;
  }

  /// K^T [B, H, D, S] spelled reshape([B*H, D, S] -> [B, H, D, S]) of a
  /// transpose [0, 2, 1] of reshape(k -> [B*H, S, D]) (dynamo's SDPA
  /// decomposition): returns k, whose leading dims multiply to B*H and whose
  /// last two are [S, D]; or null.
  static Value kThroughFlatTranspose(Value kT, ArrayRef<int64_t> qs) {
    auto unflat = defOf<ReshapeOp>(kT);
    auto t = unflat ? defOf<TransposeOp>(unflat.getInput()) : TransposeOp();
    auto flat = t ? defOf<ReshapeOp>(t.getInput()) : ReshapeOp();
    if (!flat || t.getPerm() != ArrayRef<int64_t>{0, 2, 1})
      return Value();
    int64_t bh = qs[0] * qs[1], s = qs[2], d = qs[3];
    if (typeOf(flat.getResult()).getShape() != ArrayRef<int64_t>{bh, s, d})
      return Value();
    Value k = flat.getInput();
    ArrayRef<int64_t> ks = typeOf(k).getShape();
    if (ks.size() < 3 || ks.take_back(2) != ArrayRef<int64_t>{s, d})
      return Value();
    int64_t lead = 1;
    for (int64_t x : ks.drop_back(2))
      lead *= x;
    if (lead != bh || ks[0] != qs[0])
      return Value();
    return k;
  }

  LogicalResult matchAndRewrite(MatMulOp root,
                                PatternRewriter &rewriter) const override {
    auto fail = [&](const char *why) {
      return rewriter.notifyMatchFailure(root, why);
    };
    RankedTensorType outType = root.getType();
    if (outType.getRank() != 4)
      return fail("not rank 4");
    Value probs = root.getLhs();
    bool guarded = false;
    if (Value inner = unguardNaN(probs)) {
      probs = inner;
      guarded = true;
    }
    auto softmax = guarded ? defOf<SoftmaxOp>(probs) : soleDef<SoftmaxOp>(probs);
    if (!softmax || normalizeAxis(softmax.getAxis(), 4) != 3)
      return fail("lhs is not a softmax over the keys");
    ArrayRef<int64_t> scores = softmax.getType().getShape();

    // Optional causal mask, then optional scale.
    Value scaled = softmax.getInput();
    bool causal = false;
    if (auto add = soleDef<AddOp>(scaled)) {
      Value rest;
      eitherOrder(add.getLhs(), add.getRhs(), [&](Value a, Value m) {
        if (!isCausalMask(m, scores) || typeOf(a) != add.getType())
          return false;
        rest = a;
        return true;
      });
      if (!rest)
        return fail("an added mask that is not causal");
      scaled = rest, causal = true;
    }
    double scale = 1.0;
    Value qk = scaled;
    if (auto mul = soleDef<MulOp>(scaled)) {
      qk = Value();
      eitherOrder(mul.getLhs(), mul.getRhs(), [&](Value a, Value c) {
        std::optional<double> s = splatValue(c);
        if (!s || !std::isfinite(*s) || typeOf(a) != mul.getType())
          return false;
        qk = a, scale = *s;
        return true;
      });
    } else if (auto div = soleDef<DivOp>(scaled)) {
      std::optional<double> s = splatValue(div.getRhs());
      qk = s && *s != 0.0 && std::isfinite(*s) &&
                   typeOf(div.getLhs()) == div.getType()
               ? div.getLhs()
               : Value();
      scale = s ? 1.0 / *s : 0.0;
    }
    auto scoresOp = soleDef<MatMulOp>(qk);
    if (!scoresOp)
      return fail("scores are not a scaled Q @ K^T");
    // A NaN guard never fires here: without a mask no row is all -inf, and
    // a causal mask keeps the diagonal.

    // Q [B, H, S, D], K^T [B, H, D, S], V [B, H, S, D], result [B, H, S, D].
    Value q = scoresOp.getLhs(), kT = scoresOp.getRhs();
    // Dynamo's SDPA decomposition scales Q and K^T by sqrt(scale) each.
    {
      auto scaledBy = [](Value v) -> std::pair<Value, std::optional<double>> {
        auto mul = soleDef<MulOp>(v);
        if (!mul)
          return {Value(), std::nullopt};
        for (auto [a, c] : {std::pair(mul.getLhs(), mul.getRhs()),
                            std::pair(mul.getRhs(), mul.getLhs())}) {
          std::optional<double> sc = splatValue(c);
          if (sc && std::isfinite(*sc) && typeOf(a) == mul.getType())
            return {a, sc};
        }
        return {Value(), std::nullopt};
      };
      auto [qIn, qScale] = scaledBy(q);
      auto [kIn, kScale] = scaledBy(kT);
      if (qScale && kScale) {
        q = qIn, kT = kIn;
        scale *= *qScale * *kScale;
      }
    }
    RankedTensorType qType = typeOf(q);
    ArrayRef<int64_t> qs = qType.getShape(), kts = typeOf(kT).getShape();
    if (qs.size() != 4 || kts.size() != 4 || qType != outType ||
        typeOf(root.getRhs()) != qType || kts[0] != qs[0] || kts[1] != qs[1] ||
        kts[2] != qs[3] || kts[3] != qs[2] || scores.size() != 4 ||
        scores[3] != qs[2])
      return fail("Q, K^T, V shapes are not those of self-attention");

    // K: undo the transpose that made K^T (or add one), then see through the
    // grouped-KV expansion of K and of V.
    Value kSource = kT;
    SmallVector<int64_t> kPerm{0, 1, 3, 2};
    Value kFlat = kThroughFlatTranspose(kT, qs);
    if (kFlat) {
      kSource = kFlat; // [B, H, S, D], or the [B, Hkv, n, S, D] expansion
      kPerm = {0, 1, 2, 3};
    } else if (auto t = defOf<TransposeOp>(kT)) {
      kSource = t.getInput();
      kPerm.assign(t.getPerm().begin(), t.getPerm().end());
      std::swap(kPerm[2], kPerm[3]);
    }
    Location loc = root.getLoc();
    bool kIsIdentity = kPerm == SmallVector<int64_t>{0, 1, 2, 3};
    if (kFlat && typeOf(kFlat).getRank() != 4)
      kSource = ReshapeOp::create(rewriter, loc, qType, kFlat);
    Value k = kIsIdentity ? unexpandHeads(kSource) : Value();
    Value v = unexpandHeads(root.getRhs());
    if (!k || typeOf(k) != typeOf(v)) {
      // Keep the expanded heads for both (the op needs K and V alike).
      v = root.getRhs();
      k = kIsIdentity ? kSource : Value();
    }

    if (!k)
      k = TransposeOp::create(rewriter, loc, kSource,
                              rewriter.getDenseI64ArrayAttr(kPerm));
    rewriter.replaceOp(root,
                       AttentionOp::create(rewriter, loc, outType, q, k, v,
                                           rewriter.getF64FloatAttr(scale),
                                           rewriter.getBoolAttr(causal)));
    ++count;
    return success();
  }
};

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

constexpr StringLiteral kPatternNames[] = {"attention", "rms_norm", "gelu",
                                           "rope",      "silu",     "linear"};

struct TrainFusePatternsPass
    : spillway::train::impl::TrainFusePatternsPassBase<TrainFusePatternsPass> {
  using Base::Base;

  void runOnOperation() override {
    llvm::StringSet<> enabled;
    SmallVector<StringRef> names;
    StringRef(patterns).split(names, ',', -1, /*KeepEmpty=*/false);
    for (StringRef raw : names) {
      StringRef name = raw.trim();
      if (name == "all") {
        for (StringRef n : kPatternNames)
          enabled.insert(n);
      } else if (name == "none") {
        continue;
      } else if (llvm::is_contained(kPatternNames, name)) {
        enabled.insert(name);
      } else {
        getOperation().emitError("train-fuse-patterns: unknown pattern '")
            << name
            << "'; expected a comma-separated subset of attention, rms_norm, "
               "gelu, rope, silu, linear, or all, or none";
        return signalPassFailure();
      }
    }
    if (enabled.empty())
      return;

    MLIRContext *ctx = &getContext();
    RewritePatternSet set(ctx);
    // The chains share no ops, so the patterns do not compete; larger
    // chains first only saves the driver a few failed attempts.
    if (enabled.contains("attention"))
      set.add<FuseAttention>(ctx, numAttention);
    if (enabled.contains("rms_norm"))
      set.add<FuseRmsNorm>(ctx, numRmsNorm);
    if (enabled.contains("gelu"))
      set.add<FuseGelu>(ctx, numGelu);
    if (enabled.contains("rope"))
      set.add<FuseRope>(ctx, numRope);
    if (enabled.contains("silu"))
      set.add<FuseSilu>(ctx, numSilu);
    if (enabled.contains("linear")) {
      set.add<FuseGemm, FuseMatMulLinear, FuseLinearBias>(ctx, numLinear);
      set.add<FuseLinearReshapes>(ctx);
    }

    // No folding: the pass only swaps chains for fused ops and leaves every
    // other op (constants included) where the importer put it.
    GreedyRewriteConfig config;
    config.enableFolding(false)
        .enableConstantCSE(false)
        .setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
    if (failed(applyPatternsGreedily(getOperation(), std::move(set), config))) {
      getOperation().emitError("train-fuse-patterns did not converge");
      return signalPassFailure();
    }
  }
};

} // namespace
