//===- LossOps.cpp - Loss ONNX ops ----------------------------------------===//
//
// SoftmaxCrossEntropyLoss, fused or spelled out in existing ops.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace spillway::onnx_import {

/// SoftmaxCrossEntropyLoss. Without class weights and the log_prob output,
/// and with a scalar loss, it becomes the fused train.softmax_cross_entropy_loss
/// (N-d scores [N, C, d1..dk] are first laid out as [N*D, C] rows). Every
/// other variant is spelled out in existing ops, along the class axis 1:
///   log_prob = (x - max) - log(sum(exp(x - max)))
///   nll      = -sum(log_prob * onehot(label)) over C          [N, d1..dk]
///   w        = weights[label] (1 without weights), 0 where label is
///              ignore_index (labels equal to it are clamped to class 0
///              before the gather and the one-hot)
///   loss     = nll * w; "sum" sums it, "mean" divides that sum by sum(w)
///              (the ONNX definition; plain mean without weights or
///              ignore_index), "none" keeps it.
LogicalResult Importer::importSoftmaxCrossEntropy(const onnxpb::NodeProto &node,
                                                  Location loc) {
  std::string reduction = strAttr(node, "reduction", "mean");
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    return nodeError(node) << "reduction \"" << reduction
                           << "\" is not one of \"mean\", \"sum\", \"none\"";
  auto scores = requireFloat(node, 0, "scores");
  auto labels = getValue(node, 1);
  if (failed(scores) || failed(labels))
    return failure();
  auto st = cast<RankedTensorType>(scores->getType());
  auto lt = cast<RankedTensorType>(labels->getType());
  Type it = lt.getElementType();
  if (!it.isInteger(64) && !it.isInteger(32))
    return nodeError(node) << "labels must be int64 or int32, got " << it;
  int64_t rank = st.getRank();
  SmallVector<int64_t> lossShape;
  if (rank >= 2) {
    lossShape.push_back(st.getDimSize(0));
    llvm::append_range(lossShape, st.getShape().drop_front(2));
  }
  if (rank < 2 || lt.getShape() != ArrayRef<int64_t>(lossShape))
    return nodeError(node) << "expected scores [N, C, d1, ..., dk] with "
                              "labels [N, d1, ..., dk]; got "
                           << shapeStr(st.getShape()) << " and "
                           << shapeStr(lt.getShape());
  int64_t numClasses = st.getDimSize(1);
  const onnxpb::AttributeProto *ignoreAttr = findAttr(node, "ignore_index");
  bool hasWeights = hasInput(node, 2);
  bool wantLogProb = isOutputUsed(node, 1);
  Type f32 = builder.getF32Type();
  auto reduceAttrs = [&](ArrayRef<int64_t> axes, bool keepdims) {
    return SmallVector<NamedAttribute>{
        builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr(axes)),
        builder.getNamedAttr("keepdims", builder.getBoolAttr(keepdims))};
  };

  // Fast path: the fused op, on [N*D, C] rows.
  if (!hasWeights && !wantLogProb && reduction != "none") {
    Value x = *scores, y = *labels;
    if (rank > 2) {
      SmallVector<int64_t> perm = {0};
      llvm::append_range(perm, llvm::seq<int64_t>(2, rank));
      perm.push_back(1);
      auto moved = buildInferred<train::TransposeOp>(
          node, loc, x,
          {builder.getNamedAttr("perm", builder.getDenseI64ArrayAttr(perm))});
      if (failed(moved))
        return failure();
      int64_t rows = lt.getNumElements();
      x = train::ReshapeOp::create(builder, loc,
                                   st.clone({rows, numClasses}), *moved);
      y = train::ReshapeOp::create(builder, loc, lt.clone({rows}), y);
    }
    SmallVector<NamedAttribute> attrs = {builder.getNamedAttr(
        "reduction", builder.getStringAttr(reduction))};
    if (ignoreAttr)
      attrs.push_back(builder.getNamedAttr(
          "ignore_index", builder.getIntegerAttr(
                              builder.getIntegerType(64, true), ignoreAttr->i())));
    auto loss = buildInferred<train::SoftmaxCrossEntropyLossOp>(
        node, loc, {x, y}, attrs);
    if (failed(loss))
      return failure();
    values[node.output(0)] = *loss;
    return success();
  }

  Value weights;
  if (hasWeights) {
    auto w = requireFloat(node, 2, "weights");
    if (failed(w))
      return failure();
    auto wt = cast<RankedTensorType>(w->getType());
    if (wt.getShape() != ArrayRef<int64_t>{numClasses})
      return nodeError(node) << "weights must have shape [" << numClasses
                             << "] (one per class), got "
                             << shapeStr(wt.getShape());
    weights = *w;
  }
  auto constant = [&](DenseElementsAttr attr) {
    return prologueConstant(loc, attr);
  };
  auto scalarF32 = [&](float v) {
    return constant(DenseElementsAttr::get(RankedTensorType::get({}, f32), v));
  };
  auto scalarInt = [&](int64_t v) {
    auto type = RankedTensorType::get({}, it);
    return it.isInteger(64)
               ? constant(DenseElementsAttr::get(type, v))
               : constant(DenseElementsAttr::get(type, (int32_t)v));
  };

  // log_softmax along axis 1.
  auto max = buildInferred<train::ReduceMaxOp>(node, loc, *scores,
                                               reduceAttrs({1}, true));
  if (failed(max))
    return failure();
  auto shifted = buildInferred<train::SubOp>(node, loc, {*scores, *max});
  if (failed(shifted))
    return failure();
  Value exp = train::ExpOp::create(builder, loc, st, *shifted);
  auto sum =
      buildInferred<train::ReduceSumOp>(node, loc, exp, reduceAttrs({1}, true));
  if (failed(sum))
    return failure();
  Value logSum = train::LogOp::create(builder, loc, sum->getType(), *sum);
  auto logProb = buildInferred<train::SubOp>(node, loc, {*shifted, logSum});
  if (failed(logProb))
    return failure();
  if (wantLogProb)
    values[node.output(1)] = *logProb;

  // Labels that are ignore_index may lie outside [0, C): clamp them to 0.
  auto lossType = RankedTensorType::get(lossShape, f32);
  Value label = *labels, keep;
  if (ignoreAttr) {
    auto ignored = buildInferred<train::EqualOp>(
        node, loc, {label, scalarInt(ignoreAttr->i())});
    if (failed(ignored))
      return failure();
    auto clamped = buildInferred<train::WhereOp>(
        node, loc, {*ignored, scalarInt(0), label});
    auto kept = buildInferred<train::WhereOp>(
        node, loc, {*ignored, scalarF32(0.0f), scalarF32(1.0f)});
    if (failed(clamped) || failed(kept))
      return failure();
    label = *clamped;
    keep = *kept;
  }

  // nll = -sum(log_prob * onehot) over C.
  SmallVector<int64_t> unsqueezed(lossShape);
  unsqueezed.insert(unsqueezed.begin() + 1, 1);
  Value labelCol =
      train::ReshapeOp::create(builder, loc, lt.clone(unsqueezed), label);
  SmallVector<int64_t> iotaShape(rank - 1, 1);
  iotaShape[0] = numClasses;
  auto iotaType = RankedTensorType::get(iotaShape, it);
  Value iota;
  if (it.isInteger(64))
    iota = constant(DenseElementsAttr::get(
        iotaType, ArrayRef<int64_t>(llvm::to_vector(
                      llvm::seq<int64_t>(0, numClasses)))));
  else
    iota = constant(DenseElementsAttr::get(
        iotaType, ArrayRef<int32_t>(llvm::to_vector(
                      llvm::seq<int32_t>(0, (int32_t)numClasses)))));
  auto hit = buildInferred<train::EqualOp>(node, loc, {labelCol, iota});
  if (failed(hit))
    return failure();
  Value oneHot = train::CastOp::create(
      builder, loc, cast<RankedTensorType>(hit->getType()).clone(f32), *hit);
  auto picked = buildInferred<train::MulOp>(node, loc, {*logProb, oneHot});
  if (failed(picked))
    return failure();
  auto gathered = buildInferred<train::ReduceSumOp>(node, loc, *picked,
                                                    reduceAttrs({1}, false));
  if (failed(gathered))
    return failure();
  Value loss = train::NegOp::create(builder, loc, lossType, *gathered);

  // Per-element weights: weights[label], zero where ignored.
  Value weight = keep;
  if (weights) {
    auto w = buildInferred<train::GatherOp>(
        node, loc, {weights, label},
        {builder.getNamedAttr("axis", builder.getI64IntegerAttr(0))});
    if (failed(w))
      return failure();
    weight = *w;
    if (keep)
      weight = train::MulOp::create(builder, loc, lossType, weight, keep);
  }
  if (weight)
    loss = train::MulOp::create(builder, loc, lossType, loss, weight);

  if (reduction == "none") {
    values[node.output(0)] = loss;
    return success();
  }
  if (reduction == "mean" && !weight) {
    auto mean = buildInferred<train::ReduceMeanOp>(node, loc, loss,
                                                   reduceAttrs({}, false));
    if (failed(mean))
      return failure();
    values[node.output(0)] = *mean;
    return success();
  }
  auto total =
      buildInferred<train::ReduceSumOp>(node, loc, loss, reduceAttrs({}, false));
  if (failed(total))
    return failure();
  if (reduction == "sum") {
    values[node.output(0)] = *total;
    return success();
  }
  auto norm = buildInferred<train::ReduceSumOp>(node, loc, weight,
                                                reduceAttrs({}, false));
  if (failed(norm))
    return failure();
  auto mean = buildInferred<train::DivOp>(node, loc, {*total, *norm});
  if (failed(mean))
    return failure();
  values[node.output(0)] = *mean;
  return success();
}

ArrayRef<Importer::OpImporterEntry> Importer::lossOps() {
  static const OpImporterEntry kImporters[] = {
      {"SoftmaxCrossEntropyLoss", &Importer::importSoftmaxCrossEntropy},
  };
  return kImporters;
}

} // namespace spillway::onnx_import
