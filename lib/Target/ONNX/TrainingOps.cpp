//===- TrainingOps.cpp - The ONNX training domain -------------------------===//
//
// Ops of domain ai.onnx.preview.training, imported in --forward mode: Adam.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace spillway::onnx_import {

/// ONNX Adam (domain ai.onnx.preview.training, version 1), imported in
/// forward mode only, as the elementwise ops of the reference's apply_adam,
/// in its order: per tensor i of n,
///   g' = norm_coefficient * X + G
///   V' = alpha * V + (1 - alpha) * g'
///   H' = beta * H + (1 - beta) * (g' * g')
///   r  = T > 0 ? R * sqrt(1 - beta^T) / (1 - alpha^T) : R
///   X' = (1 - norm_coefficient_post) * (X - r * (V' / (sqrt(H') + epsilon)))
/// Inputs: R, T, X1..Xn, G1..Gn, V1..Vn, H1..Hn; outputs X'1..X'n,
/// V'1..V'n, H'1..H'n.
LogicalResult Importer::importAdam(const onnxpb::NodeProto &node,
                                   Location loc) {
  if (!opts.forwardOnly)
    return nodeError(node)
           << "the ONNX Adam op is an optimizer step; Spillway attaches its "
              "own optimizer: export the forward graph and loss (or import "
              "with --forward to run the step as a computation)";
  if (auto it = opsets.find(node.domain());
      it == opsets.end() || it->second != 1)
    return nodeError(node)
           << "Adam needs opset_import of domain 'ai.onnx.preview.training' "
              "version 1"
           << (it == opsets.end()
                   ? std::string(" (not imported)")
                   : " (got " + std::to_string(it->second) + ")");
  int nin = node.input_size();
  if (nin < 6 || (nin - 2) % 4 != 0)
    return nodeError(node) << "expects R, T and n each of X, G, V, H (2 + 4n "
                              "inputs), got "
                           << nin << " inputs";
  int n = (nin - 2) / 4;
  if (node.output_size() != 3 * n)
    return nodeError(node) << "expects " << 3 * n << " outputs (X_new, V_new, "
                              "H_new for each of "
                           << n << " tensors), got " << node.output_size();
  double alpha = floatAttr(node, "alpha", 0.9f);
  double beta = floatAttr(node, "beta", 0.999f);
  double epsilon = floatAttr(node, "epsilon", 1e-6f);
  double normCoef = floatAttr(node, "norm_coefficient", 0.0f);
  double normCoefPost = floatAttr(node, "norm_coefficient_post", 0.0f);

  Type f32 = builder.getF32Type();
  auto scalarF32 = [&](double v) -> Value {
    return prologueConstant(
        loc, DenseElementsAttr::get(RankedTensorType::get({}, f32),
                                    static_cast<float>(v)));
  };
  auto r = requireFloat(node, 0, "R (learning rate)");
  auto t = getValue(node, 1);
  if (failed(r) || failed(t))
    return failure();
  auto rt = cast<RankedTensorType>(r->getType());
  auto tt = cast<RankedTensorType>(t->getType());
  if (rt.getRank() != 0 || !rt.getElementType().isF32())
    return nodeError(node) << "R (learning rate) must be a float scalar, got "
                           << rt;
  if (tt.getRank() != 0 || !tt.getElementType().isInteger(64))
    return nodeError(node) << "T (step count) must be an int64 scalar, got "
                           << tt;

  // Scalar learning rate, bias-corrected when T > 0.
  Value tf = train::CastOp::create(builder, loc, tt.clone(f32), *t);
  auto positive =
      buildInferred<train::GreaterOp>(node, loc, {tf, scalarF32(0.0)});
  auto alphaT = buildInferred<train::PowOp>(node, loc, {scalarF32(alpha), tf});
  auto betaT = buildInferred<train::PowOp>(node, loc, {scalarF32(beta), tf});
  if (failed(positive) || failed(alphaT) || failed(betaT))
    return failure();
  auto oneMinusBetaT =
      buildInferred<train::SubOp>(node, loc, {scalarF32(1.0), *betaT});
  if (failed(oneMinusBetaT))
    return failure();
  Value sqrtBetaT =
      train::SqrtOp::create(builder, loc, rt, *oneMinusBetaT).getResult();
  auto oneMinusAlphaT =
      buildInferred<train::SubOp>(node, loc, {scalarF32(1.0), *alphaT});
  auto scaled = buildInferred<train::MulOp>(node, loc, {*r, sqrtBetaT});
  if (failed(oneMinusAlphaT) || failed(scaled))
    return failure();
  auto corrected =
      buildInferred<train::DivOp>(node, loc, {*scaled, *oneMinusAlphaT});
  if (failed(corrected))
    return failure();
  auto rAdjusted =
      buildInferred<train::WhereOp>(node, loc, {*positive, *corrected, *r});
  if (failed(rAdjusted))
    return failure();

  for (int i = 0; i < n; ++i) {
    auto x = requireFloat(node, 2 + i, "X");
    auto g = requireFloat(node, 2 + n + i, "G");
    auto v = requireFloat(node, 2 + 2 * n + i, "V");
    auto h = requireFloat(node, 2 + 3 * n + i, "H");
    if (failed(x) || failed(g) || failed(v) || failed(h))
      return failure();
    for (Value other : {*g, *v, *h})
      if (other.getType() != x->getType())
        return nodeError(node) << "X, G, V and H of tensor " << i
                               << " must have one type, got " << x->getType()
                               << " and " << other.getType();
    auto mul = [&](Value a, Value b) {
      return buildInferred<train::MulOp>(node, loc, {a, b});
    };
    auto add = [&](Value a, Value b) {
      return buildInferred<train::AddOp>(node, loc, {a, b});
    };
    // g' = norm_coefficient * X + G
    auto nx = mul(scalarF32(normCoef), *x);
    if (failed(nx))
      return failure();
    auto gReg = add(*nx, *g);
    if (failed(gReg))
      return failure();
    // V' = alpha * V + (1 - alpha) * g'
    auto av = mul(scalarF32(alpha), *v);
    auto ag = mul(scalarF32(1.0 - alpha), *gReg);
    if (failed(av) || failed(ag))
      return failure();
    auto vNew = add(*av, *ag);
    // H' = beta * H + (1 - beta) * (g' * g')
    auto bh = mul(scalarF32(beta), *h);
    auto gg = mul(*gReg, *gReg);
    if (failed(vNew) || failed(bh) || failed(gg))
      return failure();
    auto bgg = mul(scalarF32(1.0 - beta), *gg);
    if (failed(bgg))
      return failure();
    auto hNew = add(*bh, *bgg);
    if (failed(hNew))
      return failure();
    // X' = (1 - norm_coefficient_post) * (X - r * (V' / (sqrt(H') + eps)))
    Value hSqrt =
        train::SqrtOp::create(builder, loc, hNew->getType(), *hNew).getResult();
    auto denom = add(hSqrt, scalarF32(epsilon));
    if (failed(denom))
      return failure();
    auto ratio = buildInferred<train::DivOp>(node, loc, {*vNew, *denom});
    if (failed(ratio))
      return failure();
    auto step = mul(*rAdjusted, *ratio);
    if (failed(step))
      return failure();
    auto xNew = buildInferred<train::SubOp>(node, loc, {*x, *step});
    if (failed(xNew))
      return failure();
    auto xFinal = mul(scalarF32(1.0 - normCoefPost), *xNew);
    if (failed(xFinal))
      return failure();
    values[node.output(i)] = *xFinal;
    values[node.output(n + i)] = *vNew;
    values[node.output(2 * n + i)] = *hNew;
  }
  return success();
}

} // namespace spillway::onnx_import
