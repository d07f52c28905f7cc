//===- LinearOps.cpp - Matrix products ------------------------------------===//
//
// MatMul (numpy semantics, 1-D operands included) and Gemm.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace spillway::onnx_import {

LogicalResult Importer::importMatMul(const onnxpb::NodeProto &node,
                                     Location loc) {
  auto a = requireFloat(node, 0, "A"), b = requireFloat(node, 1, "B");
  if (failed(a) || failed(b))
    return failure();
  // numpy semantics for 1-D operands: A [K] is a row [1, K], B [K] a
  // column [K, 1], and the added dimension leaves the result.
  auto at = cast<RankedTensorType>(a->getType());
  auto bt = cast<RankedTensorType>(b->getType());
  bool rowA = at.getRank() == 1, colB = bt.getRank() == 1;
  if (!rowA && !colB)
    return define(node, buildInferred<train::MatMulOp>(node, loc, {*a, *b}));
  if (at.getRank() == 0 || bt.getRank() == 0)
    return nodeError(node) << "operands must not be scalars (got "
                           << shapeStr(at.getShape()) << " and "
                           << shapeStr(bt.getShape()) << ")";
  Value a2 = *a, b2 = *b;
  if (rowA)
    a2 = train::ReshapeOp::create(builder, loc,
                                  at.clone({1, at.getDimSize(0)}), *a);
  if (colB)
    b2 = train::ReshapeOp::create(builder, loc,
                                  bt.clone({bt.getDimSize(0), 1}), *b);
  auto product = buildInferred<train::MatMulOp>(node, loc, {a2, b2});
  if (failed(product))
    return failure();
  SmallVector<int64_t> shape(
      cast<RankedTensorType>(product->getType()).getShape());
  if (colB)
    shape.pop_back();
  if (rowA) // [..., 1, N], or [..., 1] once B's column is gone
    shape.erase(shape.end() - (colB ? 1 : 2));
  return reshapeTo(node, loc, *product, shape);
}

LogicalResult Importer::importGemm(const onnxpb::NodeProto &node,
                                   Location loc) {
  auto a = requireFloat(node, 0, "A"), b = requireFloat(node, 1, "B");
  if (failed(a) || failed(b))
    return failure();
  SmallVector<Value> ops = {*a, *b};
  if (hasInput(node, 2)) {
    auto c = requireFloat(node, 2, "C");
    if (failed(c))
      return failure();
    ops.push_back(*c);
  }
  SmallVector<NamedAttribute> attrs = {
      builder.getNamedAttr("alpha", builder.getF32FloatAttr(
                                        floatAttr(node, "alpha", 1.0f))),
      builder.getNamedAttr("beta", builder.getF32FloatAttr(
                                       floatAttr(node, "beta", 1.0f))),
      builder.getNamedAttr(
          "transA", builder.getBoolAttr(intAttr(node, "transA", 0) != 0)),
      builder.getNamedAttr(
          "transB", builder.getBoolAttr(intAttr(node, "transB", 0) != 0))};
  return define(node, buildInferred<train::GemmOp>(node, loc, ops, attrs));
}

ArrayRef<Importer::OpImporterEntry> Importer::linearOps() {
  static const OpImporterEntry kImporters[] = {
      {"MatMul", &Importer::importMatMul},
      {"Gemm", &Importer::importGemm},
  };
  return kImporters;
}

} // namespace spillway::onnx_import
