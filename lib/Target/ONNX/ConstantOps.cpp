//===- ConstantOps.cpp - Constant and constant-only ONNX ops --------------===//
//
// Constant nodes become compile-time tensors (materialized only where real
// compute reads them). ConstantOfShape reaches its importer only when its
// result is too large to fold, and is emitted as a splat; Range, Trilu, Not,
// And and Or are evaluated only at compile time, so reaching their importer
// is an error that says which input kept them from folding.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace spillway::onnx_import {

LogicalResult Importer::importConstant(const onnxpb::NodeProto &node,
                                       Location) {
  if (node.attribute_size() != 1)
    return nodeError(node) << "expects exactly one value attribute";
  const auto &a = node.attribute(0);
  ConstTensor c;
  StringRef kind = a.name();
  if (kind == "value") {
    auto t = toConst(a.t(), "Constant value of node '" + nodeName(node) + "'");
    if (failed(t))
      return failure();
    c = std::move(*t);
  } else if (kind == "value_float") {
    c.dtype = onnxpb::TensorProto::FLOAT;
    c.floats.push_back(a.f());
  } else if (kind == "value_floats") {
    c.dtype = onnxpb::TensorProto::FLOAT;
    c.floats.assign(a.floats().begin(), a.floats().end());
    c.shape.push_back(a.floats_size());
  } else if (kind == "value_int") {
    c.dtype = onnxpb::TensorProto::INT64;
    c.ints.push_back(a.i());
  } else if (kind == "value_ints") {
    c.dtype = onnxpb::TensorProto::INT64;
    c.ints.assign(a.ints().begin(), a.ints().end());
    c.shape.push_back(a.ints_size());
  } else {
    return nodeError(node) << "attribute '" << kind
                           << "' is not supported (use value, value_float(s) "
                              "or value_int(s))";
  }
  consts[node.output(0)] = std::move(c);
  return success();
}

LogicalResult Importer::importConstantOfShape(const onnxpb::NodeProto &node,
                                              Location loc) {
  // Folding declined: too large to evaluate, but a splat costs nothing.
  auto shape = constInts(node, 0, "shape");
  if (failed(shape))
    return failure();
  ConstTensor value(onnxpb::TensorProto::FLOAT, {});
  if (const auto *a = findAttr(node, "value")) {
    auto v = toConst(a->t(), "ConstantOfShape value");
    if (failed(v))
      return failure();
    value = std::move(*v);
  }
  auto type = RankedTensorType::get(*shape, elementType(value.dtype));
  Attribute scalar =
      value.isFloat() ? (Attribute)builder.getF32FloatAttr(value.floats[0])
                      : (Attribute)builder.getIntegerAttr(
                            type.getElementType(), value.ints[0]);
  return define(node,
                prologueConstant(loc, DenseElementsAttr::get(type, scalar)));
}

LogicalResult Importer::importConstantOnly(const onnxpb::NodeProto &node,
                                           Location loc) {
  StringRef op = node.op_type();
  for (int i = 0; i < node.input_size(); ++i)
    if (hasInput(node, i) && unfoldedConstants.contains(node.input(i)))
      return nodeError(node)
             << "input '" << node.input(i)
             << "' is a constant too large to evaluate at compile time; "
                "raise --max-inline-constant-elements (now "
             << opts.maxInlineConstantElements << ")";
  for (int i = 0; i < node.input_size(); ++i)
    if (hasInput(node, i) && !getConst(node.input(i)))
      return nodeError(node)
             << "input '" << node.input(i)
             << "' is not a compile-time constant; Spillway evaluates "
             << op << " only at compile time (from initializers, Constant "
                      "nodes and shape arithmetic on them)";
  return nodeError(node) << "result is too large to evaluate at compile "
                            "time; raise --max-inline-constant-elements "
                            "(now "
                         << opts.maxInlineConstantElements << ")";
}

ArrayRef<Importer::OpImporterEntry> Importer::constantOps() {
  static const OpImporterEntry kImporters[] = {
      {"Constant", &Importer::importConstant},
      {"ConstantOfShape", &Importer::importConstantOfShape},
      {"And", &Importer::importConstantOnly, "constant"},
      {"Not", &Importer::importConstantOnly, "constant"},
      {"Or", &Importer::importConstantOnly, "constant"},
      {"Range", &Importer::importConstantOnly, "constant"},
      {"CumSum", &Importer::importConstantOnly, "constant"},
      {"Trilu", &Importer::importConstantOnly, "constant"},
  };
  return kImporters;
}

} // namespace spillway::onnx_import
