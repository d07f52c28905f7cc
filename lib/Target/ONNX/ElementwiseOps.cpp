//===- ElementwiseOps.cpp - Elementwise ONNX ops --------------------------===//
//
// Arithmetic, comparisons, Where, casts and the float activations, each one
// train op (GreaterOrEqual is LessOrEqual with its operands swapped), plus
// Identity and inference-mode Dropout, which forward their input.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace spillway::onnx_import {

LogicalResult Importer::importIdentity(const onnxpb::NodeProto &node,
                                       Location) {
  return define(node, getValue(node, 0));
}

LogicalResult Importer::importDropout(const onnxpb::NodeProto &node,
                                      Location loc) {
  if (hasInput(node, 2)) {
    const ConstTensor *t = getConst(node.input(2));
    if (!t || !t->isBool() || t->numElements() != 1)
      return nodeError(node) << "training_mode '" << node.input(2)
                             << "' must be a constant bool scalar";
    const ConstTensor *r = hasInput(node, 1) ? getConst(node.input(1))
                                             : nullptr;
    bool zeroRatio = r && r->isFloat() && r->numElements() == 1 &&
                     r->floats[0] == 0.0f;
    if (t->ints[0] && !zeroRatio)
      return nodeError(node) << "training-mode dropout is not supported; "
                                "export with dropout disabled "
                                "(model.eval() or p=0)";
  }
  auto x = getValue(node, 0);
  if (failed(x))
    return failure();
  if (isOutputUsed(node, 1)) {
    // The identity drops nothing: the mask is all true.
    auto type = cast<RankedTensorType>(x->getType())
                    .clone(builder.getI1Type());
    values[node.output(1)] =
        prologueConstant(loc, DenseElementsAttr::get(type, true));
  }
  return define(node, *x);
}

template <typename OpTy, bool Swap>
LogicalResult Importer::importBinary(const onnxpb::NodeProto &node,
                                     Location loc) {
  auto vs = elementwiseOperands(node, 2);
  if (failed(vs))
    return failure();
  if (Swap)
    std::swap((*vs)[0], (*vs)[1]);
  return define(node, buildInferred<OpTy>(node, loc, *vs));
}

LogicalResult Importer::importPow(const onnxpb::NodeProto &node, Location loc) {
  // ONNX lets the exponent's type differ from the base's; the result has
  // the base's type. The reference computes np.power(base, exponent) and
  // casts to the base type, so an integer base with a float exponent is
  // computed in float and truncated, and otherwise the exponent is cast to
  // the base's type.
  auto base = getValue(node, 0);
  auto expType = inputType(node, 1);
  if (failed(base) || failed(expType))
    return failure();
  Type be = cast<RankedTensorType>(base->getType()).getElementType();
  Type ee = expType->getElementType();
  if (be.isInteger(1) || ee.isInteger(1))
    return nodeError(node) << "base and exponent must be numbers, got "
                           << be << " and " << ee;
  auto castTo = [&](Value v, Type elt) -> Value {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getElementType() == elt)
      return v;
    return train::CastOp::create(builder, loc, t.clone(elt), v);
  };
  bool floatPower = !be.isF32() && ee.isF32();
  std::string expName = node.input(1);
  if (const ConstTensor *e = getConst(expName);
      e && ee != be && !floatPower) {
    // A constant exponent (x ** 2) is cast here, not at run time.
    int32_t to = be.isF32()         ? onnxpb::TensorProto::FLOAT
                 : be.isInteger(64) ? onnxpb::TensorProto::INT64
                                    : onnxpb::TensorProto::INT32;
    expName += ".";
    expName += dtypeName(to);
    if (!isKnown(expName))
      consts[expName] = castConst(*e, to);
  }
  auto exp = getValue(node, expName);
  if (failed(exp))
    return failure();
  if (floatPower) {
    auto power = buildInferred<train::PowOp>(node, loc,
                                             {castTo(*base, ee), *exp});
    if (failed(power))
      return failure();
    return define(node, castTo(*power, be));
  }
  return define(
      node, buildInferred<train::PowOp>(node, loc, {*base, castTo(*exp, be)}));
}

LogicalResult Importer::importWhere(const onnxpb::NodeProto &node,
                                    Location loc) {
  auto vs = elementwiseOperands(node, 3);
  if (failed(vs))
    return failure();
  Type ct = cast<RankedTensorType>((*vs)[0].getType()).getElementType();
  if (!ct.isInteger(1))
    return nodeError(node) << "condition must be bool, got " << ct;
  return define(node, buildInferred<train::WhereOp>(node, loc, *vs));
}

LogicalResult Importer::importCast(const onnxpb::NodeProto &node,
                                   Location loc) {
  auto to = castTarget(node);
  auto x = getValue(node, 0);
  if (failed(to) || failed(x))
    return failure();
  auto t = cast<RankedTensorType>(x->getType());
  Type elt = elementType(*to);
  if (t.getElementType() == elt)
    return define(node, *x);
  return define(
      node, train::CastOp::create(builder, loc, t.clone(elt), *x).getResult());
}

template <typename OpTy>
LogicalResult Importer::importUnary(const onnxpb::NodeProto &node,
                                    Location loc) {
  auto x = requireFloat(node, 0, "input");
  if (failed(x))
    return failure();
  return define(node,
                OpTy::create(builder, loc, x->getType(), *x).getResult());
}

LogicalResult Importer::importGelu(const onnxpb::NodeProto &node,
                                   Location loc) {
  auto x = requireFloat(node, 0, "input");
  if (failed(x))
    return failure();
  std::string approx = strAttr(node, "approximate", "none");
  if (approx != "none" && approx != "tanh")
    return nodeError(node) << "approximate must be \"none\" or \"tanh\", "
                              "got \""
                           << approx << "\"";
  return define(node, train::GeluOp::create(builder, loc, x->getType(), *x,
                                            builder.getStringAttr(approx))
                          .getResult());
}

/// IsNaN(x) is float(x == x) == 0: NaN is the only value unequal to itself,
/// and the runtime has comparisons and casts but no logical not. Dynamo's
/// scaled_dot_product_attention decomposition reads it (softmax rows that
/// are all masked give NaN, which it replaces by 0). Comparisons carry no
/// gradient.
LogicalResult Importer::importIsNaN(const onnxpb::NodeProto &node,
                                    Location loc) {
  auto x = requireFloat(node, 0, "input");
  if (failed(x))
    return failure();
  auto same = buildInferred<train::EqualOp>(node, loc, {*x, *x});
  if (failed(same))
    return failure();
  auto t = cast<RankedTensorType>(same->getType());
  Type f32 = builder.getF32Type();
  Value asFloat = train::CastOp::create(builder, loc, t.clone(f32), *same);
  Value zero = prologueConstant(
      loc, DenseElementsAttr::get(RankedTensorType::get({}, f32), 0.0f));
  return define(node, buildInferred<train::EqualOp>(node, loc, {asFloat, zero}));
}

ArrayRef<Importer::OpImporterEntry> Importer::elementwiseOps() {
  static const OpImporterEntry kImporters[] = {
      {"Identity", &Importer::importIdentity},
      {"Dropout", &Importer::importDropout, "inference"},
      {"Add", &Importer::importBinary<train::AddOp>},
      {"Sub", &Importer::importBinary<train::SubOp>},
      {"Mul", &Importer::importBinary<train::MulOp>},
      {"Div", &Importer::importBinary<train::DivOp>},
      {"Pow", &Importer::importPow},
      {"Equal", &Importer::importBinary<train::EqualOp>},
      {"Less", &Importer::importBinary<train::LessOp>},
      {"LessOrEqual", &Importer::importBinary<train::LessOrEqualOp>},
      {"Greater", &Importer::importBinary<train::GreaterOp>},
      // a >= b is b <= a
      {"GreaterOrEqual",
       &Importer::importBinary<train::LessOrEqualOp, /*Swap=*/true>},
      {"Where", &Importer::importWhere},
      {"IsNaN", &Importer::importIsNaN},
      {"Cast", &Importer::importCast},
      {"CastLike", &Importer::importCast},
      {"Neg", &Importer::importUnary<train::NegOp>},
      {"Relu", &Importer::importUnary<train::ReluOp>},
      {"Tanh", &Importer::importUnary<train::TanhOp>},
      {"Sqrt", &Importer::importUnary<train::SqrtOp>},
      {"Reciprocal", &Importer::importUnary<train::ReciprocalOp>},
      {"Exp", &Importer::importUnary<train::ExpOp>},
      {"Log", &Importer::importUnary<train::LogOp>},
      {"Erf", &Importer::importUnary<train::ErfOp>},
      {"Sigmoid", &Importer::importUnary<train::SigmoidOp>},
      {"Cos", &Importer::importUnary<train::CosOp>},
      {"Sin", &Importer::importUnary<train::SinOp>},
      {"Gelu", &Importer::importGelu},
  };
  return kImporters;
}

} // namespace spillway::onnx_import
