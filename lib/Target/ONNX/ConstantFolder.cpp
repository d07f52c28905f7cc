//===- ConstantFolder.cpp - Evaluating ONNX nodes at import ---------------===//
//
// Nodes whose inputs are all compile-time constants (integer and bool
// initializers, Constant nodes, frozen float initializers and what folds from
// them) are evaluated here, with the runtime kernels' integer wrapping and
// float-to-int saturation, so that exporters' shape arithmetic never reaches
// the IR. A result larger than --max-inline-constant-elements is left to the
// op's importer (which says so where it cannot emit the op).
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "llvm/ADT/StringExtras.h"

#include <cmath>

namespace spillway::onnx_import {

/// Ops the importer evaluates when all their inputs are constants. (Shape
/// needs no constant input: its importer makes it a constant.)
static const llvm::StringSet<> kFoldableOps = {
    "Identity", "Dropout", "Cast", "CastLike", "Neg", "Sqrt", "Reciprocal",
    "Exp", "Log", "Erf", "Sigmoid", "Cos", "Sin", "Tanh", "Relu", "Not",
    "Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "LessOrEqual",
    "Greater", "GreaterOrEqual", "And", "Or", "Where", "Concat", "Gather",
    "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Slice", "Split",
    "Transpose", "Expand", "Range", "ConstantOfShape", "Trilu", "IsNaN",
    "CumSum"};

FailureOr<bool> Importer::fold(const onnxpb::NodeProto &node) {
  StringRef op = node.op_type();
  if (!kFoldableOps.contains(op))
    return false;
  SmallVector<const ConstTensor *> in;
  for (const std::string &name : node.input()) {
    if (name.empty()) {
      in.push_back(nullptr);
      continue;
    }
    const ConstTensor *c = getConst(name);
    if (!c)
      return false;
    in.push_back(c);
  }
  SmallVector<ConstTensor> out;
  bool declined = false;
  if (failed(evaluate(node, in, out, declined)))
    return failure();
  if (declined) {
    for (const std::string &name : node.output())
      unfoldedConstants.insert(name);
    return false;
  }
  for (auto [i, c] : llvm::enumerate(out))
    if (!node.output(i).empty())
      consts[node.output(i)] = std::move(c);
  return true;
}

enum class BinaryKind {
  Add, Sub, Mul, Div, Pow, Equal, Less, LessOrEqual, Greater, GreaterOrEqual,
  And, Or
};

static std::optional<BinaryKind> binaryKind(StringRef op) {
  return llvm::StringSwitch<std::optional<BinaryKind>>(op)
      .Case("Add", BinaryKind::Add)
      .Case("Sub", BinaryKind::Sub)
      .Case("Mul", BinaryKind::Mul)
      .Case("Div", BinaryKind::Div)
      .Case("Pow", BinaryKind::Pow)
      .Case("Equal", BinaryKind::Equal)
      .Case("Less", BinaryKind::Less)
      .Case("LessOrEqual", BinaryKind::LessOrEqual)
      .Case("Greater", BinaryKind::Greater)
      .Case("GreaterOrEqual", BinaryKind::GreaterOrEqual)
      .Case("And", BinaryKind::And)
      .Case("Or", BinaryKind::Or)
      .Default(std::nullopt);
}

static bool isComparison(BinaryKind k) {
  return k >= BinaryKind::Equal && k <= BinaryKind::GreaterOrEqual;
}

template <typename T>
static std::optional<T> applyBinary(BinaryKind k, T a, T b) {
  // Integers wrap like the runtime's kernels (two's complement), computed
  // unsigned so that folding never overflows a signed type.
  constexpr bool wraps = std::is_integral_v<T> && !std::is_same_v<T, bool>;
  using U = std::conditional_t<wraps, std::make_unsigned_t<
                                          std::conditional_t<wraps, T, int>>,
                               T>;
  switch (k) {
  case BinaryKind::Add:
    return (T)((U)a + (U)b);
  case BinaryKind::Sub:
    return (T)((U)a - (U)b);
  case BinaryKind::Mul:
    return (T)((U)a * (U)b);
  case BinaryKind::Div:
    if constexpr (wraps) {
      if (b == 0)
        return std::nullopt;
      if (b == -1) // INT_MIN / -1 traps; it wraps to INT_MIN
        return (T)((U)0 - (U)a);
    }
    return a / b;
  case BinaryKind::Pow:
    if constexpr (std::is_integral_v<T>) {
      // By squaring, wrapping like the runtime; numpy refuses b < 0.
      if (b < 0)
        return std::nullopt;
      uint64_t r = 1, base = (uint64_t)a;
      for (uint64_t e = (uint64_t)b; e; e >>= 1) {
        if (e & 1)
          r *= base;
        base *= base;
      }
      return (T)r;
    } else {
      return (T)std::pow(a, b);
    }
  case BinaryKind::Equal:
    return a == b;
  case BinaryKind::Less:
    return a < b;
  case BinaryKind::LessOrEqual:
    return a <= b;
  case BinaryKind::Greater:
    return a > b;
  case BinaryKind::GreaterOrEqual:
    return a >= b;
  case BinaryKind::And:
    return a && b;
  case BinaryKind::Or:
    return a || b;
  }
  return std::nullopt;
}

static std::optional<float (*)(float)> unaryFloatFn(StringRef op) {
  using Fn = float (*)(float);
  return llvm::StringSwitch<std::optional<Fn>>(op)
      .Case("Sqrt", [](float x) { return std::sqrt(x); })
      .Case("Reciprocal", [](float x) { return 1.0f / x; })
      .Case("Exp", [](float x) { return std::exp(x); })
      .Case("Log", [](float x) { return std::log(x); })
      .Case("Erf", [](float x) { return std::erf(x); })
      .Case("Sigmoid", [](float x) { return 1.0f / (1.0f + std::exp(-x)); })
      .Case("Cos", [](float x) { return std::cos(x); })
      .Case("Sin", [](float x) { return std::sin(x); })
      .Case("Tanh", [](float x) { return std::tanh(x); })
      .Case("Relu", [](float x) { return x > 0.0f ? x : 0.0f; })
      .Default(std::nullopt);
}

ConstTensor sliceConst(const ConstTensor &x, const SliceSpec &spec) {
  SmallVector<int64_t> strides = stridesOf(x.shape), step(strides);
  int64_t base = 0;
  for (size_t d = 0; d < strides.size(); ++d) {
    base += spec.starts[d] * strides[d];
    step[d] = spec.steps[d] * strides[d];
  }
  return x.take(spec.shape, stridedSources(spec.shape, base, step));
}

/// A float converted to the integer type `to` as the runtime's cast kernel
/// does: truncated toward zero, NaN -> 0, out-of-range values saturate (a C
/// cast of those is undefined behaviour).
static int64_t saturatingFloatToInt(int32_t to, float f) {
  if (!std::isfinite(f) && !std::isinf(f))
    return 0;
  bool i32 = to == onnxpb::TensorProto::INT32;
  double lo = i32 ? (double)INT32_MIN : -9223372036854775808.0;
  double hi = i32 ? (double)INT32_MAX : 9223372036854775807.0;
  double t = std::trunc((double)f);
  if (t <= lo)
    return i32 ? INT32_MIN : INT64_MIN;
  if (t >= hi)
    return i32 ? INT32_MAX : INT64_MAX;
  return (int64_t)t;
}

ConstTensor castConst(const ConstTensor &c, int32_t to) {
  ConstTensor r(to, c.shape);
  for (int64_t k = 0, n = c.numElements(); k < n; ++k) {
    if (r.isFloat())
      r.floats[k] = c.isFloat() ? c.floats[k] : (float)c.ints[k];
    else if (!c.isFloat())
      r.ints[k] = wrapInt(to, c.ints[k]);
    else if (r.isBool())
      r.ints[k] = c.floats[k] != 0.0f;
    else
      r.ints[k] = saturatingFloatToInt(to, c.floats[k]);
  }
  return r;
}

LogicalResult Importer::evaluate(const onnxpb::NodeProto &node,
                                 ArrayRef<const ConstTensor *> in,
                                 SmallVectorImpl<ConstTensor> &out,
                                 bool &declined) {
  StringRef op = node.op_type();
  auto arg = [&](size_t i) -> const ConstTensor * {
    return i < in.size() ? in[i] : nullptr;
  };
  auto need = [&](size_t i) -> LogicalResult {
    if (!arg(i))
      return nodeError(node) << "input " << i << " is missing";
    return success();
  };
  auto decline = [&]() {
    declined = true;
    return success();
  };
  auto tooBig = [&](ArrayRef<int64_t> shape) { return !fitsFoldLimit(shape); };
  if (failed(need(0)))
    return failure();
  if ((binaryKind(op) || op == "Where" || op == "Range" || op == "Gather") &&
      failed(need(1)))
    return failure();
  if ((op == "Where" || op == "Range") && failed(need(2)))
    return failure();
  const ConstTensor &x = *in[0];

  if (op == "Identity") {
    out.push_back(x);
    return success();
  }
  if (op == "Dropout") {
    // Inference (the default) or a zero ratio: the identity.
    if (const ConstTensor *t = arg(2); t && t->numElements() == 1 &&
                                       t->ints.size() == 1 && t->ints[0])
      if (const ConstTensor *r = arg(1);
          !r || !r->isFloat() || r->floats.size() != 1 || r->floats[0] != 0)
        return decline();
    out.push_back(x);
    if (node.output_size() > 1) { // the mask: nothing dropped
      out.emplace_back(onnxpb::TensorProto::BOOL, x.shape);
      std::fill(out.back().ints.begin(), out.back().ints.end(), 1);
    }
    return success();
  }
  if (op == "Cast" || op == "CastLike") {
    auto to = castTarget(node);
    if (failed(to))
      return failure();
    out.push_back(x.dtype == *to ? x : castConst(x, *to));
    return success();
  }
  if (op == "Neg") {
    ConstTensor r = x;
    if (r.isBool())
      return decline();
    for (float &f : r.floats)
      f = -f;
    for (int64_t &i : r.ints)
      i = wrapInt(r.dtype, -i);
    out.push_back(std::move(r));
    return success();
  }
  if (auto fn = unaryFloatFn(op)) {
    if (!x.isFloat())
      return decline();
    ConstTensor r = x;
    for (float &f : r.floats)
      f = (*fn)(f);
    out.push_back(std::move(r));
    return success();
  }
  if (op == "IsNaN") {
    if (!x.isFloat())
      return nodeError(node) << "input must be float, got "
                             << dtypeName(x.dtype);
    ConstTensor r(onnxpb::TensorProto::BOOL, x.shape);
    for (auto [i, f] : llvm::enumerate(x.floats))
      r.ints[i] = std::isnan(f);
    out.push_back(std::move(r));
    return success();
  }
  if (op == "Not") {
    if (!x.isBool())
      return nodeError(node) << "input must be bool, got "
                             << dtypeName(x.dtype);
    ConstTensor r = x;
    for (int64_t &i : r.ints)
      i = !i;
    out.push_back(std::move(r));
    return success();
  }
  if (auto kind = binaryKind(op)) {
    ConstTensor a = x, b = *in[1];
    // Pow's exponent may have another type (see importPow); an integer
    // base with a float exponent is computed in float and truncated.
    int32_t powResult = a.dtype;
    if (*kind == BinaryKind::Pow && !a.isBool() && !b.isBool() &&
        a.dtype != b.dtype) {
      if (b.isFloat())
        a = castConst(a, onnxpb::TensorProto::FLOAT);
      else
        b = castConst(b, a.dtype);
    }
    if (a.dtype != b.dtype)
      return nodeError(node) << "operand element types differ ("
                             << dtypeName(a.dtype) << " vs "
                             << dtypeName(b.dtype)
                             << "); ONNX requires them to match";
    if ((*kind == BinaryKind::And || *kind == BinaryKind::Or) != a.isBool())
      return decline();
    auto shape = train::broadcastShapes(a.shape, b.shape);
    if (failed(shape))
      return nodeError(node) << "shapes " << shapeStr(a.shape) << " and "
                             << shapeStr(b.shape) << " do not broadcast";
    if (tooBig(*shape))
      return decline();
    std::vector<int64_t> sa = stridedSources(
        *shape, 0, broadcastStrides(a.shape, *shape));
    std::vector<int64_t> sb = stridedSources(
        *shape, 0, broadcastStrides(b.shape, *shape));
    ConstTensor r(isComparison(*kind) ? onnxpb::TensorProto::BOOL : a.dtype,
                  *shape);
    for (size_t k = 0; k < sa.size(); ++k) {
      if (a.isFloat()) {
        float v = *applyBinary<float>(*kind, a.floats[sa[k]], b.floats[sb[k]]);
        if (r.isFloat())
          r.floats[k] = v;
        else
          r.ints[k] = v != 0.0f;
        continue;
      }
      auto v = applyBinary<int64_t>(*kind, a.ints[sa[k]], b.ints[sb[k]]);
      if (!v)
        return nodeError(node)
               << (*kind == BinaryKind::Pow
                       ? "integers to negative integer powers are not allowed"
                       : "integer division by zero");
      r.ints[k] = wrapInt(r.dtype, *v);
    }
    if (r.dtype != powResult && *kind == BinaryKind::Pow)
      r = castConst(r, powResult);
    out.push_back(std::move(r));
    return success();
  }
  if (op == "Where") {
    const ConstTensor &c = x, &a = *in[1], &b = *in[2];
    if (!c.isBool())
      return nodeError(node) << "condition must be bool, got "
                             << dtypeName(c.dtype);
    if (a.dtype != b.dtype)
      return nodeError(node) << "branches differ in element type ("
                             << dtypeName(a.dtype) << " vs "
                             << dtypeName(b.dtype) << ")";
    auto shape = train::broadcastShapes(c.shape, a.shape);
    if (succeeded(shape))
      shape = train::broadcastShapes(*shape, b.shape);
    if (failed(shape))
      return nodeError(node) << "shapes " << shapeStr(c.shape) << ", "
                             << shapeStr(a.shape) << " and "
                             << shapeStr(b.shape) << " do not broadcast";
    if (tooBig(*shape))
      return decline();
    auto sc = stridedSources(*shape, 0, broadcastStrides(c.shape, *shape));
    auto sa = stridedSources(*shape, 0, broadcastStrides(a.shape, *shape));
    auto sb = stridedSources(*shape, 0, broadcastStrides(b.shape, *shape));
    ConstTensor r(a.dtype, *shape);
    for (size_t k = 0; k < sc.size(); ++k) {
      bool pick = c.ints[sc[k]];
      if (r.isFloat())
        r.floats[k] = pick ? a.floats[sa[k]] : b.floats[sb[k]];
      else
        r.ints[k] = pick ? a.ints[sa[k]] : b.ints[sb[k]];
    }
    out.push_back(std::move(r));
    return success();
  }
  if (op == "Concat") {
    int64_t rank = x.shape.size();
    SmallVector<int64_t> axisVec = {intAttr(node, "axis", 0)};
    if (failed(normalizeAxes(axisVec, rank, [&] { return nodeError(node); })))
      return failure();
    int64_t axis = axisVec[0];
    SmallVector<int64_t> shape(x.shape);
    shape[axis] = 0;
    for (auto [i, t] : llvm::enumerate(in)) {
      if (!t)
        return nodeError(node) << "input " << i << " is missing";
      bool same = t->dtype == x.dtype && (int64_t)t->shape.size() == rank;
      for (int64_t d = 0; same && d < rank; ++d)
        same = d == axis || t->shape[d] == x.shape[d];
      if (!same)
        return nodeError(node)
               << "inputs " << shapeStr(x.shape) << " of "
               << dtypeName(x.dtype) << " and " << shapeStr(t->shape) << " of "
               << dtypeName(t->dtype) << " do not concatenate along axis "
               << axis;
      shape[axis] += t->shape[axis];
    }
    if (tooBig(shape))
      return decline();
    int64_t outer = *numElementsOf(ArrayRef<int64_t>(shape).take_front(axis));
    int64_t inner = *numElementsOf(ArrayRef<int64_t>(shape).drop_front(axis + 1));
    ConstTensor r(x.dtype, shape);
    int64_t k = 0;
    for (int64_t o = 0; o < outer; ++o)
      for (const ConstTensor *t : in) {
        int64_t chunk = t->shape[axis] * inner;
        for (int64_t j = 0; j < chunk; ++j, ++k) {
          if (r.isFloat())
            r.floats[k] = t->floats[o * chunk + j];
          else
            r.ints[k] = t->ints[o * chunk + j];
        }
      }
    out.push_back(std::move(r));
    return success();
  }
  if (op == "Gather") {
    const ConstTensor &idx = *in[1];
    if (idx.isFloat() || idx.isBool())
      return nodeError(node) << "indices must be int64 or int32";
    int64_t rank = x.shape.size();
    SmallVector<int64_t> axisVec = {intAttr(node, "axis", 0)};
    if (failed(normalizeAxes(axisVec, rank, [&] { return nodeError(node); })))
      return failure();
    int64_t axis = axisVec[0], d = x.shape[axis];
    SmallVector<int64_t> shape(x.shape.begin(), x.shape.begin() + axis);
    shape.append(idx.shape.begin(), idx.shape.end());
    shape.append(x.shape.begin() + axis + 1, x.shape.end());
    if (tooBig(shape))
      return decline();
    int64_t outer = *numElementsOf(ArrayRef<int64_t>(x.shape).take_front(axis));
    int64_t inner =
        *numElementsOf(ArrayRef<int64_t>(x.shape).drop_front(axis + 1));
    std::vector<int64_t> sources;
    sources.reserve(outer * idx.numElements() * inner);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i : idx.ints) {
        if (i < -d || i >= d)
          return nodeError(node) << "index " << i << " out of range for axis "
                                 << axis << " of size " << d;
        int64_t row = i < 0 ? i + d : i;
        for (int64_t j = 0; j < inner; ++j)
          sources.push_back((o * d + row) * inner + j);
      }
    out.push_back(x.take(shape, sources));
    return success();
  }
  if (op == "Unsqueeze" || op == "Squeeze" || op == "Reshape" ||
      op == "Flatten") {
    auto shape = op == "Unsqueeze" ? unsqueezeShape(node, x.shape)
                 : op == "Squeeze" ? squeezeShape(node, x.shape)
                 : op == "Reshape" ? reshapeShape(node, x.shape)
                                   : flattenShape(node, x.shape);
    if (failed(shape))
      return failure();
    ConstTensor r = x;
    r.shape = *shape;
    out.push_back(std::move(r));
    return success();
  }
  if (op == "Slice") {
    auto spec = sliceSpec(node, x.shape);
    if (failed(spec))
      return failure();
    out.push_back(sliceConst(x, *spec));
    return success();
  }
  if (op == "Split") {
    auto specs = splitSpecs(node, x.shape);
    if (failed(specs))
      return failure();
    for (const SliceSpec &spec : *specs)
      out.push_back(sliceConst(x, spec));
    return success();
  }
  if (op == "Transpose") {
    auto perm = transposePerm(node, x.shape.size());
    if (failed(perm))
      return failure();
    SmallVector<int64_t> strides = stridesOf(x.shape), shape, step;
    for (int64_t p : *perm) {
      shape.push_back(x.shape[p]);
      step.push_back(strides[p]);
    }
    out.push_back(x.take(shape, stridedSources(shape, 0, step)));
    return success();
  }
  if (op == "Expand") {
    auto shape = expandShape(node, x.shape);
    if (failed(shape))
      return failure();
    if (tooBig(*shape))
      return decline();
    out.push_back(x.take(*shape, stridedSources(*shape, 0,
                                                broadcastStrides(x.shape, *shape))));
    return success();
  }
  if (op == "Range") {
    const ConstTensor &limit = *in[1], &delta = *in[2];
    for (const ConstTensor *t : {&x, &limit, &delta})
      if (t->numElements() != 1 || t->dtype != x.dtype || t->isBool())
        return nodeError(node) << "start, limit and delta must be scalars of "
                                  "one numeric type";
    int64_t count;
    if (x.isFloat()) {
      float d = delta.floats[0];
      if (d == 0.0f)
        return nodeError(node) << "delta is 0";
      double n = std::ceil(((double)limit.floats[0] - x.floats[0]) / d);
      if (!std::isfinite(n) || n > (double)(int64_t(1) << 53))
        return nodeError(node) << "start, limit and delta give no finite "
                                  "element count";
      count = (int64_t)std::max(n, 0.0);
    } else {
      int64_t d = delta.ints[0];
      if (d == 0)
        return nodeError(node) << "delta is 0";
      // In 128 bits: limit - start and -delta overflow 64.
      __int128 span = (__int128)limit.ints[0] - x.ints[0], step = d;
      if (step < 0) {
        span = -span;
        step = -step;
      }
      __int128 n = span > 0 ? (span + step - 1) / step : 0;
      count = n > INT64_MAX ? INT64_MAX : (int64_t)n;
    }
    if (tooBig({count}))
      return nodeError(node) << "produces " << count
                             << " elements; Spillway evaluates Range at "
                                "compile time up to "
                             << opts.maxInlineConstantElements
                             << " (--max-inline-constant-elements)";
    ConstTensor r(x.dtype, {count});
    for (int64_t k = 0; k < count; ++k) {
      if (r.isFloat())
        r.floats[k] = x.floats[0] + k * delta.floats[0];
      else
        // start + k * delta is in range (count guarantees it); k * delta
        // alone may not be, so compute modulo 2^64.
        r.ints[k] = wrapInt(r.dtype, (int64_t)((uint64_t)x.ints[0] +
                                                (uint64_t)k *
                                                    (uint64_t)delta.ints[0]));
    }
    out.push_back(std::move(r));
    return success();
  }
  if (op == "ConstantOfShape") {
    auto shape = constInts(node, 0, "shape");
    if (failed(shape))
      return failure();
    ConstTensor value(onnxpb::TensorProto::FLOAT, {1});
    if (const auto *a = findAttr(node, "value")) {
      auto v = toConst(a->t(), "ConstantOfShape value of node '" +
                                   nodeName(node) + "'");
      if (failed(v))
        return failure();
      if (v->numElements() != 1)
        return nodeError(node) << "value must have one element, got "
                               << v->numElements();
      value = std::move(*v);
    }
    if (llvm::any_of(*shape, [](int64_t d) { return d < 0; }))
      return nodeError(node) << "shape " << shapeStr(*shape)
                             << " has a negative dimension";
    if (!numElementsOf(*shape))
      return nodeError(node) << "shape " << shapeStr(*shape)
                             << " has more elements than fit in 64 bits";
    if (tooBig(*shape))
      return decline(); // emitted as a splat train.constant
    out.push_back(value.take(*shape, std::vector<int64_t>(
                                         *numElementsOf(*shape), 0)));
    return success();
  }
  if (op == "CumSum") {
    // Transformers' packed-sequence check ((diff(position_ids) != 1)
    // .cumsum(-1)) on position ids that are a constant arange.
    const ConstTensor *ac = arg(1);
    if (!ac || ac->isFloat() || ac->numElements() != 1)
      return nodeError(node) << "axis must be an integer scalar";
    int64_t rank = x.shape.size(), axis = ac->ints[0];
    if (axis < -rank || axis >= rank)
      return nodeError(node) << "axis " << axis << " out of range for rank "
                             << rank;
    if (axis < 0)
      axis += rank;
    if (x.isBool())
      return decline();
    bool exclusive = intAttr(node, "exclusive", 0) != 0;
    bool reverse = intAttr(node, "reverse", 0) != 0;
    int64_t n = x.shape[axis], inner = 1;
    for (int64_t d = axis + 1; d < rank; ++d)
      inner *= x.shape[d];
    ConstTensor r = x;
    int64_t total = x.numElements();
    for (int64_t base = 0; n && base < total; base += n * inner)
      for (int64_t in = 0; in < inner; ++in) {
        double fsum = 0;
        int64_t isum = 0;
        for (int64_t t = 0; t < n; ++t) {
          int64_t i = reverse ? n - 1 - t : t;
          int64_t e = base + i * inner + in;
          double fv = x.isFloat() ? x.floats[e] : 0.0;
          int64_t iv = x.isFloat() ? 0 : x.ints[e];
          if (exclusive) {
            if (r.isFloat())
              r.floats[e] = float(fsum);
            else
              r.ints[e] = isum;
          }
          fsum += fv;
          isum = wrapInt(x.dtype, isum + iv);
          if (!exclusive) {
            if (r.isFloat())
              r.floats[e] = float(fsum);
            else
              r.ints[e] = isum;
          }
        }
      }
    out.push_back(std::move(r));
    return success();
  }
  if (op == "Trilu") {
    int64_t rank = x.shape.size();
    if (rank < 2)
      return nodeError(node) << "input must have rank >= 2, got " << rank;
    int64_t k = 0;
    if (const ConstTensor *kc = arg(1)) {
      if (kc->isFloat() || kc->numElements() != 1)
        return nodeError(node) << "k must be an integer scalar";
      k = kc->ints[0];
    }
    bool upper = intAttr(node, "upper", 1) != 0;
    int64_t rows = x.shape[rank - 2], cols = x.shape[rank - 1];
    ConstTensor r = x;
    for (int64_t e = 0, n = r.numElements(); e < n; ++e) {
      int64_t i = (e / cols) % rows, j = e % cols;
      bool keep = upper ? j - i >= k : j - i <= k;
      if (keep)
        continue;
      if (r.isFloat())
        r.floats[e] = 0.0f;
      else
        r.ints[e] = 0;
    }
    out.push_back(std::move(r));
    return success();
  }
  return decline();
}

} // namespace spillway::onnx_import
