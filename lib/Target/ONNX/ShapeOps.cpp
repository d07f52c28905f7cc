//===- ShapeOps.cpp - Shape and layout ONNX ops ---------------------------===//
//
// Shape (a constant), Gather, the reshapes (Reshape, Unsqueeze, Squeeze,
// Flatten), Expand, Transpose, Slice, Split and Concat, with their result
// shapes from ShapeComputation.cpp. SplitToSequence's sequences exist only at
// import time: SequenceAt with a constant position picks one part as a slice.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace spillway::onnx_import {

/// The input's static shape (every shape is static in Spillway) is known at
/// import time: Shape is a constant, like a Constant node.
LogicalResult Importer::importShape(const onnxpb::NodeProto &node, Location) {
  auto type = inputType(node, 0);
  if (failed(type))
    return failure();
  int64_t rank = type->getRank();
  auto clampToRank = [&](int64_t v) {
    return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank);
  };
  int64_t start = clampToRank(intAttr(node, "start", 0));
  int64_t end = clampToRank(intAttr(node, "end", rank));
  ConstTensor c(onnxpb::TensorProto::INT64, {std::max<int64_t>(end - start, 0)});
  for (int64_t d = start; d < end; ++d)
    c.ints[d - start] = type->getDimSize(d);
  consts[node.output(0)] = std::move(c);
  return success();
}

LogicalResult Importer::importGather(const onnxpb::NodeProto &node,
                                     Location loc) {
  auto data = getValue(node, 0);
  auto indices = getValue(node, 1);
  if (failed(data) || failed(indices))
    return failure();
  Type et = cast<RankedTensorType>(data->getType()).getElementType();
  if (!et.isF32())
    return nodeError(node) << "data must be float32 unless it is a "
                              "compile-time constant, got "
                           << et << " from '" << node.input(0) << "'";
  Type it = cast<RankedTensorType>(indices->getType()).getElementType();
  if (!it.isInteger(64) && !it.isInteger(32))
    return nodeError(node) << "indices must be int64 or int32";
  return define(
      node, buildInferred<train::GatherOp>(
                node, loc, {*data, *indices},
                {builder.getNamedAttr("axis", builder.getI64IntegerAttr(
                                                  intAttr(node, "axis", 0)))}));
}

LogicalResult Importer::importReshape(const onnxpb::NodeProto &node,
                                      Location loc) {
  StringRef op = node.op_type();
  auto x = getValue(node, 0);
  if (failed(x))
    return failure();
  ArrayRef<int64_t> in = cast<RankedTensorType>(x->getType()).getShape();
  auto shape = op == "Reshape"     ? reshapeShape(node, in)
               : op == "Unsqueeze" ? unsqueezeShape(node, in)
               : op == "Squeeze"   ? squeezeShape(node, in)
                                   : flattenShape(node, in);
  if (failed(shape))
    return failure();
  return reshapeTo(node, loc, *x, *shape);
}

LogicalResult Importer::importExpand(const onnxpb::NodeProto &node,
                                     Location loc) {
  auto x = getValue(node, 0);
  if (failed(x))
    return failure();
  auto t = cast<RankedTensorType>(x->getType());
  auto shape = expandShape(node, t.getShape());
  if (failed(shape))
    return failure();
  if (t.getShape() == ArrayRef<int64_t>(*shape))
    return define(node, *x);
  if (!t.getElementType().isF32() && getConst(node.input(0)))
    return nodeError(node)
           << "the result " << shapeStr(*shape) << " of " << t.getElementType()
           << " is a constant larger than the "
           << opts.maxInlineConstantElements
           << " elements Spillway evaluates at compile time; raise "
              "--max-inline-constant-elements (Spillway expands only "
              "float32 tensors at run time)";
  if (!t.getElementType().isF32())
    return nodeError(node) << "Spillway expands float32 tensors, or "
                              "compile-time constants; '"
                           << node.input(0) << "' is " << t;
  return define(node,
                train::BroadcastToOp::create(builder, loc, t.clone(*shape), *x)
                    .getResult());
}

LogicalResult Importer::importTranspose(const onnxpb::NodeProto &node,
                                        Location loc) {
  auto x = getValue(node, 0);
  if (failed(x))
    return failure();
  auto perm =
      transposePerm(node, cast<RankedTensorType>(x->getType()).getRank());
  if (failed(perm))
    return failure();
  return define(
      node,
      buildInferred<train::TransposeOp>(
          node, loc, *x,
          {builder.getNamedAttr("perm", builder.getDenseI64ArrayAttr(*perm))}));
}

LogicalResult Importer::importSlice(const onnxpb::NodeProto &node,
                                    Location loc) {
  auto x = getValue(node, 0);
  if (failed(x))
    return failure();
  auto spec =
      sliceSpec(node, cast<RankedTensorType>(x->getType()).getShape());
  if (failed(spec))
    return failure();
  return define(node, sliceValue(loc, *x, *spec));
}

LogicalResult Importer::importSplit(const onnxpb::NodeProto &node,
                                    Location loc) {
  auto x = getValue(node, 0);
  if (failed(x))
    return failure();
  auto specs =
      splitSpecs(node, cast<RankedTensorType>(x->getType()).getShape());
  if (failed(specs))
    return failure();
  for (auto [i, spec] : llvm::enumerate(*specs))
    if (isOutputUsed(node, i))
      values[node.output(i)] = sliceValue(loc, *x, spec);
  return success();
}

LogicalResult Importer::importConcat(const onnxpb::NodeProto &node,
                                     Location loc) {
  SmallVector<Value> vs;
  for (int i = 0; i < node.input_size(); ++i) {
    auto v = getValue(node, i);
    if (failed(v))
      return failure();
    vs.push_back(*v);
  }
  return define(
      node, buildInferred<train::ConcatOp>(
                node, loc, vs,
                {builder.getNamedAttr("axis", builder.getI64IntegerAttr(
                                                  intAttr(node, "axis", 0)))}));
}

LogicalResult Importer::importSplitToSequence(const onnxpb::NodeProto &node,
                                              Location loc) {
  auto type = inputType(node, 0);
  if (failed(type))
    return failure();
  auto seq = splitToSequence(node, type->getShape());
  if (failed(seq))
    return failure();
  seq->source = node.input(0);
  sequences[node.output(0)] = std::move(*seq);
  return success();
}

LogicalResult Importer::importSequenceAt(const onnxpb::NodeProto &node,
                                         Location loc) {
  auto it = hasInput(node, 0) ? sequences.find(node.input(0)) : sequences.end();
  if (it == sequences.end())
    return nodeError(node) << "input sequence '"
                           << (hasInput(node, 0) ? node.input(0) : "")
                           << "' is not the output of a SplitToSequence node "
                              "(the only sequences Spillway imports)";
  const Sequence &seq = it->second;
  auto pos = constInput(node, 1, "position");
  if (failed(pos))
    return failure();
  int64_t n = seq.parts.size();
  if ((*pos)->isFloat() || (*pos)->isBool() || (*pos)->numElements() != 1)
    return nodeError(node) << "position must be an integer scalar";
  int64_t p = (*pos)->ints[0];
  if (p < -n || p >= n)
    return nodeError(node) << "position " << p
                           << " out of range for a sequence of " << n
                           << " tensors";
  const SliceSpec &spec = seq.parts[p < 0 ? p + n : p];
  SmallVector<int64_t> shape(spec.shape);
  if (seq.squeezeAxis >= 0)
    shape.erase(shape.begin() + seq.squeezeAxis);
  StringRef out = node.output(0);
  if (const ConstTensor *c = getConst(seq.source)) {
    ConstTensor part = sliceConst(*c, spec);
    part.shape = shape;
    consts[out] = std::move(part);
    return success();
  }
  auto x = getValue(node, seq.source);
  if (failed(x))
    return failure();
  auto t = cast<RankedTensorType>(x->getType());
  Value v = *x;
  if (t.getShape() != ArrayRef<int64_t>(spec.shape))
    v = train::SliceOp::create(builder, loc, t.clone(spec.shape), v,
                               builder.getDenseI64ArrayAttr(spec.starts),
                               builder.getDenseI64ArrayAttr(spec.steps));
  if (shape != spec.shape)
    v = train::ReshapeOp::create(builder, loc, t.clone(shape), v);
  values[out] = v;
  return success();
}

ArrayRef<Importer::OpImporterEntry> Importer::shapeOps() {
  static const OpImporterEntry kImporters[] = {
      {"Shape", &Importer::importShape},
      {"Gather", &Importer::importGather},
      {"Reshape", &Importer::importReshape},
      {"Unsqueeze", &Importer::importReshape},
      {"Squeeze", &Importer::importReshape},
      {"Flatten", &Importer::importReshape},
      {"Expand", &Importer::importExpand},
      {"Transpose", &Importer::importTranspose},
      {"Slice", &Importer::importSlice},
      {"Split", &Importer::importSplit},
      {"Concat", &Importer::importConcat},
      {"SplitToSequence", &Importer::importSplitToSequence},
      {"SequenceAt", &Importer::importSequenceAt},
  };
  return kImporters;
}

} // namespace spillway::onnx_import
