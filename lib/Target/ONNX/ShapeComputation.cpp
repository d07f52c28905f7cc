//===- ShapeComputation.cpp - Result shapes of shape ops ------------------===//
//
// What Reshape, Unsqueeze, Squeeze, Flatten, Expand, Transpose, Slice, Split
// and SplitToSequence produce from their input's shape and their (constant)
// shape operands and attributes, and Cast's target type. Both the constant
// folder and the op importers use them, so a folded and an emitted node
// agree, errors included.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

namespace spillway::onnx_import {

FailureOr<const ConstTensor *>
Importer::constInput(const onnxpb::NodeProto &node, int idx, StringRef role) {
  if (!hasInput(node, idx))
    return nodeError(node) << role << " (input " << idx << ") is missing",
           failure();
  if (const ConstTensor *c = getConst(node.input(idx)))
    return c;
  return nodeError(node) << role << " '" << node.input(idx)
                         << "' must be a compile-time constant (an "
                            "initializer, a Constant node, or shape "
                            "arithmetic on them that Spillway folds); "
                            "Spillway needs static shapes",
         failure();
}

FailureOr<SmallVector<int64_t>>
Importer::constInts(const onnxpb::NodeProto &node, int idx, StringRef role) {
  auto c = constInput(node, idx, role);
  if (failed(c))
    return failure();
  if ((*c)->isFloat() || (*c)->shape.size() > 1)
    return nodeError(node) << role << " '" << node.input(idx)
                           << "' must be a 1-D integer tensor, got "
                           << shapeStr((*c)->shape) << " of "
                           << dtypeName((*c)->dtype),
           failure();
  return SmallVector<int64_t>((*c)->ints.begin(), (*c)->ints.end());
}

/// `axes`: an attribute before opset `inputSince`, input `inputIdx` from it.
/// Empty when absent.
FailureOr<SmallVector<int64_t>>
Importer::axesOf(const onnxpb::NodeProto &node, int inputIdx,
                 int64_t inputSince) {
  if (opset >= inputSince) {
    if (!hasInput(node, inputIdx))
      return SmallVector<int64_t>();
    return constInts(node, inputIdx, "axes");
  }
  SmallVector<int64_t> axes;
  if (const auto *a = findAttr(node, "axes"))
    axes.assign(a->ints().begin(), a->ints().end());
  return axes;
}

LogicalResult normalizeAxes(SmallVectorImpl<int64_t> &axes, int64_t rank,
                            llvm::function_ref<InFlightDiagnostic()> err) {
  SmallVector<int64_t> seen;
  for (int64_t &a : axes) {
    int64_t n = a < 0 ? a + rank : a;
    if (n < 0 || n >= rank)
      return err() << "axis " << a << " out of range for rank " << rank;
    if (llvm::is_contained(seen, n))
      return err() << "axis " << a << " is repeated";
    seen.push_back(n);
    a = n;
  }
  return success();
}

FailureOr<SmallVector<int64_t>>
Importer::reshapeShape(const onnxpb::NodeProto &node, ArrayRef<int64_t> in) {
  auto target = constInts(node, 1, "shape");
  if (failed(target))
    return failure();
  bool allowZero = intAttr(node, "allowzero", 0) != 0;
  SmallVector<int64_t> shape;
  int64_t inferIdx = -1, known = 1;
  for (auto [i, entry] : llvm::enumerate(*target)) {
    int64_t d = entry;
    if (d == 0 && !allowZero) {
      if ((int64_t)i >= (int64_t)in.size())
        return nodeError(node) << "shape entry " << i
                               << " is 0 (copy) but the input has rank "
                               << in.size(),
               failure();
      d = in[i];
    } else if (d == -1) {
      if (inferIdx >= 0)
        return nodeError(node) << "shape " << shapeStr(*target)
                               << " has more than one -1",
               failure();
      inferIdx = i;
      shape.push_back(-1);
      continue;
    } else if (d < -1) {
      return nodeError(node) << "shape entry " << i << " is " << d, failure();
    }
    shape.push_back(d);
    if (llvm::MulOverflow(known, d, known))
      return nodeError(node) << "shape " << shapeStr(*target)
                             << " has more elements than fit in 64 bits",
             failure();
  }
  int64_t numel = *numElementsOf(in);
  if (inferIdx >= 0) {
    if (known == 0 || numel % known != 0)
      return nodeError(node) << "cannot reshape " << shapeStr(in) << " to "
                             << shapeStr(*target),
             failure();
    shape[inferIdx] = numel / known;
  } else if (known != numel) {
    return nodeError(node) << "cannot reshape " << shapeStr(in) << " ("
                           << numel << " elements) to " << shapeStr(shape)
                           << " (" << known << " elements)",
           failure();
  }
  return shape;
}

FailureOr<SmallVector<int64_t>>
Importer::unsqueezeShape(const onnxpb::NodeProto &node, ArrayRef<int64_t> in) {
  auto axes = axesOf(node, 1, 13);
  if (failed(axes))
    return failure();
  if (axes->empty())
    return nodeError(node) << "axes are missing", failure();
  int64_t rank = in.size() + axes->size();
  if (failed(normalizeAxes(*axes, rank, [&] { return nodeError(node); })))
    return failure();
  SmallVector<int64_t> shape;
  const int64_t *next = in.begin();
  for (int64_t d = 0; d < rank; ++d)
    shape.push_back(llvm::is_contained(*axes, d) ? 1 : *next++);
  return shape;
}

FailureOr<SmallVector<int64_t>>
Importer::squeezeShape(const onnxpb::NodeProto &node, ArrayRef<int64_t> in) {
  auto axes = axesOf(node, 1, 13);
  if (failed(axes) ||
      failed(normalizeAxes(*axes, in.size(), [&] { return nodeError(node); })))
    return failure();
  SmallVector<int64_t> shape;
  for (auto [d, size] : llvm::enumerate(in)) {
    bool listed = llvm::is_contained(*axes, (int64_t)d);
    if (listed && size != 1)
      return nodeError(node) << "cannot squeeze axis " << d << " of shape "
                             << shapeStr(in) << ": its size is " << size,
             failure();
    if (!listed && !(axes->empty() && size == 1))
      shape.push_back(size);
  }
  return shape;
}

FailureOr<SmallVector<int64_t>>
Importer::flattenShape(const onnxpb::NodeProto &node, ArrayRef<int64_t> in) {
  int64_t rank = in.size(), axis = intAttr(node, "axis", 1);
  if (axis < -rank || axis > rank)
    return nodeError(node) << "axis " << axis << " out of range for rank "
                           << rank,
           failure();
  if (axis < 0)
    axis += rank;
  return SmallVector<int64_t>{*numElementsOf(in.take_front(axis)),
                              *numElementsOf(in.drop_front(axis))};
}

/// Expand broadcasts bidirectionally: the result has the broadcast of the
/// input's shape and the shape operand.
FailureOr<SmallVector<int64_t>>
Importer::expandShape(const onnxpb::NodeProto &node, ArrayRef<int64_t> in) {
  auto target = constInts(node, 1, "shape");
  if (failed(target))
    return failure();
  auto shape = train::broadcastShapes(in, *target);
  if (failed(shape) || !numElementsOf(*shape))
    return nodeError(node) << "input shape " << shapeStr(in)
                           << " does not broadcast with " << shapeStr(*target),
           failure();
  return *shape;
}

FailureOr<SmallVector<int64_t>>
Importer::transposePerm(const onnxpb::NodeProto &node, int64_t rank) {
  SmallVector<int64_t> perm;
  if (const auto *a = findAttr(node, "perm"))
    perm.assign(a->ints().begin(), a->ints().end());
  else
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  SmallVector<int64_t> sorted(perm);
  llvm::sort(sorted);
  if (sorted != llvm::to_vector(llvm::seq<int64_t>(0, rank)))
    return nodeError(node) << "perm " << shapeStr(perm)
                           << " is not a permutation of 0.." << rank - 1,
           failure();
  return perm;
}

/// ONNX Slice in train.slice's form: negative starts/ends count from the end,
/// out-of-range ones clamp (to [0, d] going forward, [-1, d-1] going back),
/// and every dimension gets an explicit start and step.
FailureOr<SliceSpec> Importer::sliceSpec(const onnxpb::NodeProto &node,
                                         ArrayRef<int64_t> in) {
  int64_t rank = in.size();
  auto starts = constInts(node, 1, "starts");
  auto ends = constInts(node, 2, "ends");
  if (failed(starts) || failed(ends))
    return failure();
  size_t n = starts->size();
  if (ends->size() != n)
    return nodeError(node) << "starts has " << n << " entries but ends has "
                           << ends->size(),
           failure();
  SmallVector<int64_t> axes, steps(n, 1);
  if (hasInput(node, 3)) {
    auto a = constInts(node, 3, "axes");
    if (failed(a))
      return failure();
    axes = *a;
  } else {
    axes = llvm::to_vector(llvm::seq<int64_t>(0, n));
  }
  if (hasInput(node, 4)) {
    auto s = constInts(node, 4, "steps");
    if (failed(s))
      return failure();
    steps = *s;
  }
  if (axes.size() != n || steps.size() != n)
    return nodeError(node) << "starts, ends, axes and steps need the same "
                              "number of entries ("
                           << n << ", " << ends->size() << ", " << axes.size()
                           << ", " << steps.size() << ")",
           failure();
  if (failed(normalizeAxes(axes, rank, [&] { return nodeError(node); })))
    return failure();
  SliceSpec spec;
  spec.starts.assign(rank, 0);
  spec.steps.assign(rank, 1);
  spec.shape.assign(in.begin(), in.end());
  for (size_t i = 0; i < n; ++i) {
    int64_t d = in[axes[i]], step = steps[i];
    int64_t start = (*starts)[i], end = (*ends)[i];
    if (step == 0)
      return nodeError(node) << "step for axis " << axes[i] << " is 0",
             failure();
    if (start < 0)
      start += d;
    if (end < 0)
      end += d;
    int64_t count;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, d);
      end = std::clamp<int64_t>(end, 0, d);
      // Written so that no step, however large, overflows.
      count = end > start ? (end - start - 1) / step + 1 : 0;
    } else {
      start = std::clamp<int64_t>(start, 0, d - 1);
      end = std::clamp<int64_t>(end, -1, d - 1);
      count = start > end
                  ? (int64_t)((uint64_t)(start - end - 1) / -(uint64_t)step + 1)
                  : 0;
    }
    spec.starts[axes[i]] = count ? start : 0;
    spec.steps[axes[i]] = step;
    spec.shape[axes[i]] = count;
  }
  return spec;
}

/// Consecutive slices of `in` along `axis` with the given sizes.
static SmallVector<SliceSpec> slicesAlong(ArrayRef<int64_t> in, int64_t axis,
                                         ArrayRef<int64_t> sizes) {
  SmallVector<SliceSpec> specs;
  int64_t offset = 0;
  for (int64_t s : sizes) {
    SliceSpec spec;
    spec.starts.assign(in.size(), 0);
    spec.steps.assign(in.size(), 1);
    spec.shape.assign(in.begin(), in.end());
    spec.starts[axis] = s ? offset : 0;
    spec.shape[axis] = s;
    offset += s;
    specs.push_back(std::move(spec));
  }
  return specs;
}

/// Split's outputs as slices: sizes from the `split` input (opset 13+) or
/// attribute, else `num_outputs` (opset 18+, the last part may be smaller),
/// else equal parts, one per output.
FailureOr<SmallVector<SliceSpec>>
Importer::splitSpecs(const onnxpb::NodeProto &node, ArrayRef<int64_t> in) {
  int64_t rank = in.size();
  SmallVector<int64_t> axisVec = {intAttr(node, "axis", 0)};
  if (failed(normalizeAxes(axisVec, rank, [&] { return nodeError(node); })))
    return failure();
  int64_t axis = axisVec[0], d = in[axis];
  int64_t numOutputs = node.output_size();
  SmallVector<int64_t> sizes;
  if (hasInput(node, 1)) {
    auto s = constInts(node, 1, "split");
    if (failed(s))
      return failure();
    sizes = *s;
  } else if (const auto *a = findAttr(node, "split")) {
    sizes.assign(a->ints().begin(), a->ints().end());
  } else {
    int64_t parts = intAttr(node, "num_outputs", numOutputs);
    if (parts != numOutputs)
      return nodeError(node) << "num_outputs is " << parts << " but the node "
                             << "has " << numOutputs << " outputs",
             failure();
    if (findAttr(node, "num_outputs")) {
      int64_t size = llvm::divideCeil(d, parts);
      for (int64_t i = 0, left = d; i < parts; ++i, left -= size)
        sizes.push_back(std::max<int64_t>(std::min(size, left), 0));
    } else {
      if (d % parts != 0)
        return nodeError(node) << "cannot split dimension " << axis
                               << " of size " << d << " into " << parts
                               << " equal parts",
               failure();
      sizes.assign(parts, d / parts);
    }
  }
  if ((int64_t)sizes.size() != numOutputs)
    return nodeError(node) << "split has " << sizes.size()
                           << " sizes for " << numOutputs << " outputs",
           failure();
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0)
      return nodeError(node) << "split size " << s << " is negative",
             failure();
    total += s;
  }
  if (total != d)
    return nodeError(node) << "split sizes " << shapeStr(sizes) << " sum to "
                           << total << ", but dimension " << axis
                           << " has size " << d,
           failure();
  return slicesAlong(in, axis, sizes);
}

/// SplitToSequence's parts: sizes from the `split` input (a scalar: chunks of
/// that size, the last one smaller; 1-D: the sizes), else parts of size 1,
/// whose axis goes away unless `keepdims`.
FailureOr<Importer::Sequence>
Importer::splitToSequence(const onnxpb::NodeProto &node,
                          ArrayRef<int64_t> in) {
  SmallVector<int64_t> axisVec = {intAttr(node, "axis", 0)};
  if (failed(normalizeAxes(axisVec, in.size(), [&] { return nodeError(node); })))
    return failure();
  int64_t axis = axisVec[0], d = in[axis];
  Sequence seq;
  SmallVector<int64_t> sizes;
  if (!hasInput(node, 1)) {
    sizes.assign(d, 1);
    seq.squeezeAxis = intAttr(node, "keepdims", 1) == 0 ? axis : -1;
  } else {
    auto split = constInput(node, 1, "split");
    if (failed(split))
      return failure();
    const ConstTensor &c = **split;
    if (c.isFloat() || c.isBool() || c.shape.size() > 1)
      return nodeError(node) << "split '" << node.input(1)
                             << "' must be an integer scalar or 1-D tensor, "
                                "got "
                             << shapeStr(c.shape) << " of "
                             << dtypeName(c.dtype),
             failure();
    if (c.shape.empty()) {
      int64_t chunk = c.ints[0];
      if (chunk <= 0)
        return nodeError(node) << "split size " << chunk
                               << " must be positive",
               failure();
      for (int64_t left = d; left > 0; left -= chunk)
        sizes.push_back(std::min(chunk, left));
    } else {
      sizes.assign(c.ints.begin(), c.ints.end());
      int64_t total = 0;
      for (int64_t s : sizes) {
        if (s < 0)
          return nodeError(node) << "split size " << s << " is negative",
                 failure();
        total += s;
      }
      if (total != d)
        return nodeError(node) << "split sizes " << shapeStr(sizes)
                               << " sum to " << total << ", but dimension "
                               << axis << " has size " << d,
               failure();
    }
  }
  seq.parts = slicesAlong(in, axis, sizes);
  return seq;
}

FailureOr<int32_t> Importer::castTarget(const onnxpb::NodeProto &node) {
  int32_t to;
  if (node.op_type() == "CastLike") {
    auto t = inputType(node, 1);
    if (failed(t))
      return failure();
    Type e = t->getElementType();
    to = e.isF32()           ? onnxpb::TensorProto::FLOAT
         : e.isInteger(64)   ? onnxpb::TensorProto::INT64
         : e.isInteger(32)   ? onnxpb::TensorProto::INT32
                             : onnxpb::TensorProto::BOOL;
    return to;
  }
  const auto *a = findAttr(node, "to");
  if (!a)
    return nodeError(node) << "attribute 'to' is missing", failure();
  to = a->i();
  if (!elementType(to))
    return nodeError(node) << "cast to " << dtypeName(to)
                           << " is not supported; Spillway casts to FLOAT "
                              "(float32), INT64, INT32 and BOOL",
           failure();
  return to;
}

} // namespace spillway::onnx_import
