//===- ReductionOps.cpp - Reductions and normalizations -------------------===//
//
// ReduceSum, ReduceMean and ReduceMax, and the ops that normalize over
// axes: Softmax (with its opset < 13 coercion to 2-D) and
// LayerNormalization (whose saved Mean and InvStdDev outputs are spelled out
// in reductions when a later node reads them).
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "llvm/ADT/Sequence.h"

namespace spillway::onnx_import {

LogicalResult Importer::importReduce(const onnxpb::NodeProto &node,
                                     Location loc) {
  StringRef op = node.op_type();
  // ReduceMax takes every element type (bool since opset 20); the others
  // reduce float32.
  auto input = op == "ReduceMax" ? getValue(node, 0)
                                 : requireFloat(node, 0, "input");
  if (failed(input))
    return failure();
  // ReduceSum takes axes as an input from opset 13, the others from 18.
  auto axes = axesOf(node, 1, op == "ReduceSum" ? 13 : 18);
  if (failed(axes))
    return failure();
  bool keepdims = intAttr(node, "keepdims", 1) != 0;
  if (axes->empty() && intAttr(node, "noop_with_empty_axes", 0) != 0) {
    values[node.output(0)] = *input;
    return success();
  }
  SmallVector<NamedAttribute> attrs = {
      builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr(*axes)),
      builder.getNamedAttr("keepdims", builder.getBoolAttr(keepdims))};
  FailureOr<Value> v =
      op == "ReduceMean"  ? buildInferred<train::ReduceMeanOp>(node, loc, *input, attrs)
      : op == "ReduceMax" ? buildInferred<train::ReduceMaxOp>(node, loc, *input, attrs)
                          : buildInferred<train::ReduceSumOp>(node, loc, *input, attrs);
  if (failed(v))
    return failure();
  values[node.output(0)] = *v;
  return success();
}

LogicalResult Importer::importSoftmax(const onnxpb::NodeProto &node,
                                      Location loc) {
  auto x = requireFloat(node, 0, "input");
  if (failed(x))
    return failure();
  auto xType = cast<RankedTensorType>(x->getType());
  int64_t rank = xType.getRank();
  // Before opset 13 Softmax coerces its input to 2-D [prod(d0..axis-1),
  // prod(axis..)] (default axis 1) and normalizes the rows.
  bool coerced = opset < 13;
  int64_t axis = intAttr(node, "axis", coerced ? 1 : -1);
  int64_t n = train::normalizeAxis(axis, rank);
  if (n < 0)
    return nodeError(node) << "axis " << axis << " out of range for rank "
                           << rank;
  auto softmax = [&](Value v, int64_t a) -> Value {
    return train::SoftmaxOp::create(
        builder, loc, v.getType(), v,
        builder.getIntegerAttr(builder.getIntegerType(64, true), a));
  };
  if (!coerced || n == rank - 1)
    return define(node, softmax(*x, axis));
  ArrayRef<int64_t> shape = xType.getShape();
  SmallVector<int64_t> flat = {*numElementsOf(shape.take_front(n)),
                               *numElementsOf(shape.drop_front(n))};
  Value rows = train::ReshapeOp::create(builder, loc, xType.clone(flat), *x);
  return reshapeTo(node, loc, softmax(rows, 1), shape);
}

LogicalResult Importer::importLayerNormalization(const onnxpb::NodeProto &node,
                                                 Location loc) {
  if (intAttr(node, "stash_type", 1) != 1)
    return nodeError(node) << "stash_type must be 1 (float32), got "
                           << intAttr(node, "stash_type", 1);
  auto x = requireFloat(node, 0, "X"), scale = requireFloat(node, 1, "Scale");
  if (failed(x) || failed(scale))
    return failure();
  Value bias;
  if (hasInput(node, 2)) {
    auto b = requireFloat(node, 2, "B");
    if (failed(b))
      return failure();
    bias = *b;
  }
  auto xType = cast<RankedTensorType>(x->getType());
  int64_t axis = intAttr(node, "axis", -1);
  int64_t n = train::normalizeAxis(axis, xType.getRank());
  if (n < 0)
    return nodeError(node) << "axis " << axis << " out of range for rank "
                           << xType.getRank();
  ArrayRef<int64_t> normShape = xType.getShape().drop_front(n);
  auto checkShape = [&](Value v, StringRef role) -> LogicalResult {
    ArrayRef<int64_t> s = cast<RankedTensorType>(v.getType()).getShape();
    if (s != normShape)
      return nodeError(node) << role << " shape " << shapeStr(s)
                             << " must equal the normalized shape "
                             << shapeStr(normShape)
                             << " (Spillway does not broadcast it)";
    return success();
  };
  if (failed(checkShape(*scale, "Scale")) ||
      (bias && failed(checkShape(bias, "B"))))
    return failure();
  float epsilon = floatAttr(node, "epsilon", 1e-5f);
  if (failed(define(node, train::LayerNormOp::create(
                              builder, loc, xType, *x, *scale, bias,
                              builder.getIntegerAttr(
                                  builder.getIntegerType(64, true), axis),
                              builder.getF32FloatAttr(epsilon))
                              .getResult())))
    return failure();
  // The saved statistics (outputs 1 and 2), when a later node reads them,
  // are computed apart from the fused op: Mean = mean(x) and InvStdDev =
  // 1 / sqrt(mean((x - Mean)^2) + epsilon) over the normalized axes, kept
  // as size-1 dimensions.
  if (!isOutputUsed(node, 1) && !isOutputUsed(node, 2))
    return success();
  SmallVector<NamedAttribute> reduceAttrs = {
      builder.getNamedAttr(
          "axes", builder.getDenseI64ArrayAttr(
                      llvm::to_vector(llvm::seq<int64_t>(n, xType.getRank())))),
      builder.getNamedAttr("keepdims", builder.getBoolAttr(true))};
  auto mean = buildInferred<train::ReduceMeanOp>(node, loc, *x, reduceAttrs);
  if (failed(mean))
    return failure();
  values[node.output(1)] = *mean;
  if (!isOutputUsed(node, 2))
    return success();
  Value centered = train::SubOp::create(builder, loc, xType, *x, *mean);
  Value square =
      train::MulOp::create(builder, loc, xType, centered, centered);
  auto var =
      buildInferred<train::ReduceMeanOp>(node, loc, square, reduceAttrs);
  if (failed(var))
    return failure();
  Type statType = var->getType();
  Value eps = prologueConstant(
      loc, DenseElementsAttr::get(
               RankedTensorType::get({}, builder.getF32Type()), epsilon));
  Value shifted = train::AddOp::create(builder, loc, statType, *var, eps);
  Value stddev = train::SqrtOp::create(builder, loc, statType, shifted);
  values[node.output(2)] =
      train::ReciprocalOp::create(builder, loc, statType, stddev);
  return success();
}

ArrayRef<Importer::OpImporterEntry> Importer::reductionOps() {
  static const OpImporterEntry kImporters[] = {
      {"ReduceSum", &Importer::importReduce},
      {"ReduceMean", &Importer::importReduce},
      {"ReduceMax", &Importer::importReduce},
      {"Softmax", &Importer::importSoftmax},
      {"LayerNormalization", &Importer::importLayerNormalization},
  };
  return kImporters;
}

} // namespace spillway::onnx_import
