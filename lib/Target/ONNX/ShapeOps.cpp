//===- ShapeOps.cpp - Shape and layout ONNX ops ---------------------------===//
//
// Shape (a constant), Gather, the reshapes (Reshape, Unsqueeze, Squeeze,
// Flatten), Expand, Transpose, Slice, Split, Concat and Pad, with their result
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

/// The source index along an axis of length n for output position i - p0 of
/// an "edge", "reflect" or "wrap" pad (numpy's modes of the same names).
static int64_t padSource(StringRef mode, int64_t i, int64_t n) {
  if (mode == "edge")
    return std::clamp<int64_t>(i, 0, n - 1);
  if (mode == "wrap")
    return ((i % n) + n) % n;
  if (n == 1) // reflect
    return 0;
  int64_t period = 2 * (n - 1);
  int64_t m = ((i % period) + period) % period;
  return m < n ? m : period - m;
}

/// Pad (opset 11 on: pads, constant_value and axes are inputs). Negative pads
/// crop with a slice first. "constant" (what torch's F.pad(x, pads, value=v)
/// exports; Hugging Face's causal-LM loss shifts its labels with one) makes
/// each padded axis concat(fill, x, fill), the fill being where(x0 == x0, v,
/// v) for a one-wide slice x0 of x, broadcast with a constant p wide along
/// the axis: made from x's own rows, so a batched x stays batched for
/// sched-microbatch (a constant of the batch's size would not split), and
/// both branches are v, so a NaN in x0 changes nothing. A constant_value
/// that is not a compile-time constant is added to a zero fill, so it gets
/// its gradient. "edge", "reflect" and "wrap" gather along the axis.
LogicalResult Importer::importPad(const onnxpb::NodeProto &node,
                                  Location loc) {
  std::string mode = strAttr(node, "mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect" &&
      mode != "wrap")
    return nodeError(node) << "mode \"" << mode
                           << "\" is not one of \"constant\", \"edge\", "
                              "\"reflect\", \"wrap\"";
  auto x = getValue(node, 0);
  if (failed(x))
    return failure();
  auto t = cast<RankedTensorType>(x->getType());
  Type et = t.getElementType();
  if (!et.isF32() && !et.isInteger(64) && !et.isInteger(32))
    return nodeError(node) << "data must be float32, int64 or int32, got "
                           << et;
  if (mode != "constant" && !et.isF32())
    return nodeError(node) << "mode \"" << mode
                           << "\" pads float32 data only, got " << et;
  int64_t rank = t.getRank();
  auto pads = constInts(node, 1, "pads");
  if (failed(pads))
    return failure();
  SmallVector<int64_t> axes;
  if (hasInput(node, 3)) {
    auto a = constInts(node, 3, "axes");
    if (failed(a))
      return failure();
    axes = *a;
    if (failed(normalizeAxes(axes, rank, [&] { return nodeError(node); })))
      return failure();
  } else {
    axes = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  }
  int64_t k = axes.size();
  if ((int64_t)pads->size() != 2 * k)
    return nodeError(node) << "pads has " << pads->size()
                           << " values; expected " << 2 * k
                           << " (a begin and an end for each of " << k
                           << " axes)";

  // The fill value (constant mode): input 2, a scalar of x's type, or 0.
  double fillF = 0;
  int64_t fillI = 0;
  Value fillValue; // a constant_value known only at run time
  if (mode == "constant" && hasInput(node, 2)) {
    if (const ConstTensor *v = getConst(node.input(2))) {
      if (v->numElements() != 1 || v->isFloat() != et.isF32() || v->isBool())
        return nodeError(node) << "constant_value must be one value of the "
                                  "data's type ("
                               << et << "), got " << shapeStr(v->shape)
                               << " of " << dtypeName(v->dtype);
      if (v->isFloat())
        fillF = v->floats[0];
      else
        fillI = v->ints[0];
    } else {
      auto rv = getValue(node, 2);
      if (failed(rv))
        return failure();
      auto vt = cast<RankedTensorType>(rv->getType());
      if (vt.getNumElements() != 1 || vt.getElementType() != et ||
          !et.isF32())
        return nodeError(node) << "constant_value must be one value of the "
                                  "data's type ("
                               << et << "), got " << vt;
      fillValue = train::ReshapeOp::create(
          builder, loc, vt.clone(SmallVector<int64_t>(rank, 1)), *rv);
    }
  }

  SmallVector<int64_t> shape(t.getShape());
  // Crop first: negative pads remove elements.
  SliceSpec crop;
  crop.starts.assign(rank, 0);
  crop.steps.assign(rank, 1);
  crop.shape = shape;
  for (auto [i, a] : llvm::enumerate(axes)) {
    int64_t begin = (*pads)[i], end = (*pads)[i + k];
    int64_t cut = std::max<int64_t>(-begin, 0) + std::max<int64_t>(-end, 0);
    if (cut > shape[a])
      return nodeError(node) << "pads " << begin << ", " << end
                             << " crop more than the " << shape[a]
                             << " elements of axis " << a;
    crop.starts[a] = std::max<int64_t>(-begin, 0);
    crop.shape[a] -= cut;
  }
  Value v = sliceValue(loc, *x, crop);
  shape = crop.shape;

  for (auto [i, a] : llvm::enumerate(axes)) {
    int64_t begin = std::max<int64_t>((*pads)[i], 0);
    int64_t end = std::max<int64_t>((*pads)[i + k], 0);
    if (!begin && !end)
      continue;
    int64_t n = shape[a];
    if (n == 0)
      return nodeError(node) << "axis " << a
                             << " is empty after cropping; Spillway pads "
                                "only non-empty axes";
    if (mode != "constant") {
      SmallVector<int64_t> idx;
      for (int64_t j = 0; j < n + begin + end; ++j)
        idx.push_back(padSource(mode, j - begin, n));
      Value indices = prologueConstant(loc, DenseElementsAttr::get(
          RankedTensorType::get({(int64_t)idx.size()},
                                builder.getIntegerType(64)),
          ArrayRef<int64_t>(idx)));
      auto g = buildInferred<train::GatherOp>(
          node, loc, {v, indices},
          {builder.getNamedAttr("axis", builder.getI64IntegerAttr(a))});
      if (failed(g))
        return failure();
      v = *g;
      shape[a] += begin + end;
      continue;
    }
    SliceSpec first;
    first.starts.assign(rank, 0);
    first.steps.assign(rank, 1);
    first.shape = shape;
    first.shape[a] = 1;
    Value x0 = sliceValue(loc, v, first);
    auto same = buildInferred<train::EqualOp>(node, loc, {x0, x0});
    if (failed(same))
      return failure();
    auto fill = [&](int64_t width) -> FailureOr<Value> {
      SmallVector<int64_t> cshape(rank, 1);
      cshape[a] = width;
      auto ct = RankedTensorType::get(cshape, et);
      Value c = prologueConstant(
          loc,
          et.isF32()         ? DenseElementsAttr::get(ct, (float)fillF)
          : et.isInteger(64) ? DenseElementsAttr::get(ct, fillI)
                             : DenseElementsAttr::get(ct, (int32_t)fillI));
      auto w = buildInferred<train::WhereOp>(node, loc, {*same, c, c});
      if (failed(w) || !fillValue)
        return w;
      return buildInferred<train::AddOp>(node, loc, {*w, fillValue});
    };
    SmallVector<Value> parts;
    if (begin) {
      auto f = fill(begin);
      if (failed(f))
        return failure();
      parts.push_back(*f);
    }
    parts.push_back(v);
    if (end) {
      auto f = fill(end);
      if (failed(f))
        return failure();
      parts.push_back(*f);
    }
    auto joined = buildInferred<train::ConcatOp>(
        node, loc, parts,
        {builder.getNamedAttr("axis", builder.getI64IntegerAttr(a))});
    if (failed(joined))
      return failure();
    v = *joined;
    shape[a] += begin + end;
  }
  return define(node, v);
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
      {"Pad", &Importer::importPad},
      {"SplitToSequence", &Importer::importSplitToSequence},
      {"SequenceAt", &Importer::importSequenceAt},
  };
  return kImporters;
}

} // namespace spillway::onnx_import
