//===- TrainOps.cpp - train dialect ops: verifiers, shape inference -------===//

#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "spillway/runtime/hyperparams.h"
#include "spillway/runtime/zero_shard.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;
using namespace spillway::train;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

FailureOr<SmallVector<int64_t>>
spillway::train::broadcastShapes(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  SmallVector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return failure();
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t spillway::train::normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
    return -1;
  return axis < 0 ? axis + rank : axis;
}

static std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  llvm::raw_string_ostream os(s);
  llvm::interleaveComma(shape, os);
  os << "]";
  return s;
}

static RankedTensorType rankedType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// Checks that `small` is numpy-broadcastable to `big` (one direction).
static bool broadcastsTo(ArrayRef<int64_t> small, ArrayRef<int64_t> big) {
  if (small.size() > big.size())
    return false;
  size_t off = big.size() - small.size();
  for (size_t i = 0; i < small.size(); ++i)
    if (small[i] != 1 && small[i] != big[off + i])
      return false;
  return true;
}

//===----------------------------------------------------------------------===//
// Parameters and optimizer
//===----------------------------------------------------------------------===//

int64_t ParamOp::getNumBytes() {
  RankedTensorType type = getTensorType();
  return type.getNumElements() * (type.getElementTypeBitWidth() / 8);
}

LogicalResult ParamOp::verify() {
  // I64Attr's accessor is unsigned; read the attribute as signed.
  int64_t offset = getOffsetAttr().getInt();
  if (offset < 0)
    return emitOpError("offset must be non-negative, got ") << offset;
  if (!getTensorType().hasStaticShape())
    return emitOpError("parameter '")
           << getSymName() << "' must have a static shape";
  int64_t end;
  if (llvm::AddOverflow(offset, getNumBytes(), end))
    return emitOpError("parameter '")
           << getSymName() << "' at offset " << offset
           << " ends past the largest file offset";
  // The parameters' byte ranges in the weights file must not overlap: two
  // parameters reading the same bytes start from one another's values. The
  // module's first parameter checks them all, sorted, once.
  Block *block = getOperation()->getBlock();
  auto params = block->getOps<ParamOp>();
  if (*params.begin() != *this)
    return success();
  SmallVector<std::pair<int64_t, ParamOp>> ranges;
  for (ParamOp p : params) {
    // The others' own verifiers refuse these; their sizes are unknown.
    if (p.getOffsetAttr().getInt() < 0 || !p.getTensorType().hasStaticShape())
      continue;
    if (p.getNumBytes() > 0)
      ranges.push_back({p.getOffsetAttr().getInt(), p});
  }
  llvm::stable_sort(ranges, [](const auto &a, const auto &b) {
    return a.first < b.first;
  });
  // Sorted by offset, a range overlaps an earlier one exactly when it
  // starts before the furthest end so far.
  ParamOp furthest;
  int64_t furthestEnd = 0;
  for (auto [offset, p] : ranges) {
    if (furthest && offset < furthestEnd) {
      int64_t fOffset = furthest.getOffsetAttr().getInt();
      return p.emitOpError("parameter '")
             << p.getSymName() << "' at bytes [" << offset << ", "
             << offset + p.getNumBytes() << ") of the weights file overlaps "
             << "parameter '" << furthest.getSymName() << "' at [" << fOffset
             << ", " << furthestEnd << "); each parameter needs its own bytes";
    }
    int64_t end = offset + p.getNumBytes();
    if (!furthest || end > furthestEnd) {
      furthest = p;
      furthestEnd = end;
    }
  }
  return success();
}

/// Resolves the parameter a param_value/param_grad/adamw op names and checks
/// that the tensor type it reads or writes is the parameter's type.
static LogicalResult verifyParamUse(Operation *op, FlatSymbolRefAttr ref,
                                    Type type,
                                    SymbolTableCollection &symbolTable) {
  auto param = symbolTable.lookupNearestSymbolFrom<ParamOp>(op, ref.getAttr());
  if (!param)
    return op->emitOpError("refers to unknown parameter ") << ref;
  if (param.getType() != type)
    return op->emitOpError("type ")
           << type << " does not match parameter " << ref << " of type "
           << param.getType();
  return success();
}

LogicalResult
ParamValueOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyParamUse(*this, getParamAttr(), getType(), symbolTable);
}

LogicalResult ParamGradOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyParamUse(*this, getParamAttr(), getGrad().getType(),
                        symbolTable);
}

LogicalResult AdamWOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyParamUse(*this, getParamAttr(), getGrad().getType(),
                        symbolTable);
}

LogicalResult
AdamWDeferOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyParamUse(*this, getParamAttr(), getGrad().getType(),
                        symbolTable);
}

/// An element range [begin, end) of a parameter of `numel` elements: not
/// empty (an empty update is a bug in whoever split it) and inside it.
static LogicalResult verifyElementRange(Operation *op, int64_t begin,
                                        int64_t end, int64_t numel) {
  if (begin < 0 || begin >= end || end > numel)
    return op->emitOpError("element range [")
           << begin << ", " << end << ") must be non-empty and within the "
           << numel << " elements of the parameter";
  return success();
}

LogicalResult
AdamWApplyPendingOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto param =
      symbolTable.lookupNearestSymbolFrom<ParamOp>(*this, getParamAttr());
  if (!param)
    return emitOpError("refers to unknown parameter ") << getParamAttr();
  // I64Attr's accessor is unsigned; read the attributes as signed.
  return verifyElementRange(*this, getBeginAttr().getInt(),
                            getEndAttr().getInt(),
                            param.getTensorType().getNumElements());
}

/// The hyper-parameters of an AdamW update (train.adamw, train.adamw_defer).
/// The ranges are the executable's and spillwayc's (hyperparams.h); NaN and
/// the infinities fail them.
static LogicalResult verifyAdamWHparams(Operation *op, double lr, double beta1,
                                        double beta2, double eps,
                                        double weightDecay) {
  namespace hp = spillway::hyperparams;
  const std::pair<const hp::Range *, double> values[] = {
      {&hp::kLr, lr},   {&hp::kBeta1, beta1},
      {&hp::kBeta2, beta2}, {&hp::kEps, eps},
      {&hp::kWeightDecay, weightDecay}};
  for (const auto &[range, value] : values) {
    if (!hp::in_range(*range, value))
      return op->emitOpError()
             << range->attr << " must be " << hp::expected(*range) << ", not "
             << value;
    // The kernels compute in float32: the flags' rule, also for .mlir.
    if (std::string why = hp::float32_problem(*range, value); !why.empty())
      return op->emitOpError() << range->attr << " " << value << ": " << why;
  }
  return success();
}

/// The AdamW hyper-parameters of an update op (train.adamw,
/// train.adamw_defer, train.foam).
template <class Op> static LogicalResult verifyHparamsOf(Op op) {
  return verifyAdamWHparams(op, op.getLr().convertToDouble(),
                            op.getBeta1().convertToDouble(),
                            op.getBeta2().convertToDouble(),
                            op.getEps().convertToDouble(),
                            op.getWeightDecay().convertToDouble());
}

LogicalResult AdamWOp::verify() {
  if (failed(verifyHparamsOf(*this)))
    return failure();
  if (bool(getBeginAttr()) != bool(getEndAttr()))
    return emitOpError("needs both ends of the element range or neither");
  if (getBeginAttr())
    return verifyElementRange(*this, getBeginAttr().getInt(),
                              getEndAttr().getInt(),
                              getGrad().getType().getNumElements());
  return success();
}

LogicalResult AdamWDeferOp::verify() {
  if (failed(verifyHparamsOf(*this)))
    return failure();
  return verifyElementRange(*this, getBeginAttr().getInt(),
                            getEndAttr().getInt(),
                            getGrad().getType().getNumElements());
}

LogicalResult ClipGradNormOp::verify() {
  namespace hp = spillway::hyperparams;
  const double maxNorm = getMaxNorm().convertToDouble();
  if (!hp::in_range(hp::kGradClip, maxNorm) || maxNorm == 0)
    return emitOpError("max_norm must be positive and at most 1e6, not ")
           << maxNorm;
  if (std::string why = hp::float32_problem(hp::kGradClip, maxNorm);
      !why.empty())
    return emitOpError("max_norm ") << maxNorm << ": " << why;
  if (getGrads().empty())
    return emitOpError("needs the gradients of the updated parameters");
  return success();
}

LogicalResult FoamOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyParamUse(*this, getParamAttr(), getGrad().getType(),
                        symbolTable);
}

LogicalResult FoamOp::verify() {
  if (failed(verifyHparamsOf(*this)))
    return failure();
  if (getGrad().getType().getRank() != 2)
    return emitOpError("folds only 2-D weight matrices; the gradient is ")
           << getGrad().getType() << " (use train.adamw for it)";
  // I64Attr's accessor is unsigned; read the level as signed.
  int64_t level = getLevelAttr().getInt();
  if (level < 0 || level > 16)
    return emitOpError("level ") << level << " must lie in [0, 16]";
  // A float32 kernel scales by alpha: below 1e-30 it would round towards 0.
  double alpha = getAlpha().convertToDouble();
  if (!spillway::hyperparams::in_range(spillway::hyperparams::kFoamAlpha,
                                       alpha))
    return emitOpError("alpha ") << alpha << " must lie in [1e-30, 1e6]";
  if (std::string why = spillway::hyperparams::float32_problem(
          spillway::hyperparams::kFoamAlpha, alpha);
      !why.empty())
    return emitOpError("alpha ") << alpha << ": " << why;
  return success();
}

int64_t FoamOp::getStateElements() {
  return foamStateElements(getGrad().getType().getShape(),
                           getLevelAttr().getInt());
}

int64_t spillway::train::foamStateElements(ArrayRef<int64_t> shape,
                                           int64_t level) {
  int64_t n = shape.back(), block = int64_t(1) << level;
  int64_t rows = 1;
  for (int64_t d : shape.drop_back())
    rows *= d;
  return rows * ((n + block - 1) / block);
}

/// The parameter and gradient of an optimizer update, or nothing.
static std::optional<std::pair<StringRef, Value>> updateParts(Operation *op) {
  return llvm::TypeSwitch<Operation *,
                          std::optional<std::pair<StringRef, Value>>>(op)
      .Case<AdamWOp, AdamWDeferOp, FoamOp>([](auto u) {
        return std::make_pair(u.getParam(), Value(u.getGrad()));
      })
      .Default([](Operation *) { return std::nullopt; });
}

spillway::train::Origin spillway::train::joinOrigins(Origin a, Origin b) {
  if (a == Origin::Const || a == b)
    return b;
  if (b == Origin::Const)
    return a;
  return Origin::Mixed; // Param and Input, or either with Mixed
}

bool spillway::train::isOptimizerUpdate(Operation *op) {
  return updateParts(op).has_value();
}

StringRef spillway::train::getUpdatedParam(Operation *op) {
  auto parts = updateParts(op);
  return parts ? parts->first : StringRef();
}

Value spillway::train::getUpdateGrad(Operation *op) {
  auto parts = updateParts(op);
  return parts ? parts->second : Value();
}

int64_t spillway::train::stateElementsPerMoment(Operation *op) {
  if (auto u = dyn_cast<FoamOp>(op))
    return u.getStateElements();
  if (Value g = getUpdateGrad(op))
    return cast<RankedTensorType>(g.getType()).getNumElements();
  return 0;
}

int64_t spillway::train::optimizerStateElementBytes(Operation *module) {
  auto dtype = module->getAttrOfType<StringAttr>(kOptimizerStateDtypeAttrName);
  return dtype && dtype.getValue() == "bf16" ? 2 : 4;
}

int64_t spillway::train::optimizerStateShards(Operation *module) {
  auto d = module->getAttrOfType<DictionaryAttr>(kOptimizerStateShardsAttrName);
  auto n = d ? d.getAs<IntegerAttr>("ranks") : IntegerAttr();
  return n ? n.getInt() : 1;
}

int64_t spillway::train::optimizerStateShardAlign(Operation *module) {
  auto d = module->getAttrOfType<DictionaryAttr>(kOptimizerStateShardsAttrName);
  auto a = d ? d.getAs<IntegerAttr>("align") : IntegerAttr();
  return a ? a.getInt() : SPW_ZERO_SHARD_ALIGN;
}

bool spillway::train::gradientsSharded(Operation *module) {
  auto d = module->getAttrOfType<DictionaryAttr>(kOptimizerStateShardsAttrName);
  auto g = d ? d.getAs<BoolAttr>("gradients") : BoolAttr();
  return g && g.getValue() && optimizerStateShards(module) > 1;
}

int64_t spillway::train::optimizerStateSlotElements(Operation *module,
                                                    int64_t n) {
  const int64_t ranks = optimizerStateShards(module);
  if (ranks <= 1)
    return n;
  return spw_zero_shard_slot(n, ranks, optimizerStateShardAlign(module));
}

//===----------------------------------------------------------------------===//
// Constants and shapes
//===----------------------------------------------------------------------===//

LogicalResult ConstantOp::inferReturnTypes(
    MLIRContext *, std::optional<Location>, ValueRange operands,
    DictionaryAttr attributes, OpaqueProperties properties, RegionRange regions,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, attributes, properties, regions);
  inferred.push_back(adaptor.getValue().getType());
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

LogicalResult ReshapeOp::verify() {
  RankedTensorType in = getInput().getType(), out = getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError("element type changes from ")
           << in.getElementType() << " to " << out.getElementType();
  if (in.getNumElements() != out.getNumElements())
    return emitOpError("cannot reshape ")
           << shapeStr(in.getShape()) << " (" << in.getNumElements()
           << " elements) to " << shapeStr(out.getShape()) << " ("
           << out.getNumElements() << " elements)";
  return success();
}

LogicalResult TransposeOp::verify() {
  ArrayRef<int64_t> perm = getPerm();
  int64_t rank = getInput().getType().getRank();
  llvm::SmallSet<int64_t, 8> seen;
  for (int64_t p : perm)
    if (p < 0 || p >= rank || !seen.insert(p).second)
      return emitOpError("perm ") << shapeStr(perm)
                                  << " is not a permutation of 0.." << rank - 1;
  if ((int64_t)perm.size() != rank)
    return emitOpError("perm has ") << perm.size() << " entries for rank "
                                    << rank;
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr attributes, OpaqueProperties properties, RegionRange regions,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, attributes, properties, regions);
  auto in = rankedType(adaptor.getInput());
  ArrayRef<int64_t> perm = adaptor.getPerm();
  if ((int64_t)perm.size() != in.getRank())
    return emitOptionalError(loc, "transpose perm has ", perm.size(),
                             " entries for rank ", in.getRank());
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= in.getRank())
      return emitOptionalError(loc, "transpose perm entry ", p,
                               " out of range");
    shape.push_back(in.getDimSize(p));
  }
  inferred.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}

LogicalResult GatherOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr attributes, OpaqueProperties properties, RegionRange regions,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, attributes, properties, regions);
  auto data = rankedType(adaptor.getData());
  auto indices = rankedType(adaptor.getIndices());
  // I64Attr reads back unsigned; the axis is signed (ONNX allows -1).
  int64_t axisAttr = adaptor.getAxis();
  int64_t axis = normalizeAxis(axisAttr, data.getRank());
  if (axis < 0 || data.getRank() == 0)
    return emitOptionalError(loc, "gather axis ", axisAttr,
                             " out of range for rank ", data.getRank());
  SmallVector<int64_t> shape(data.getShape().take_front(axis));
  llvm::append_range(shape, indices.getShape());
  llvm::append_range(shape, data.getShape().drop_front(axis + 1));
  inferred.push_back(RankedTensorType::get(shape, data.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

static LogicalResult inferBroadcast(std::optional<Location> loc, Value lhs,
                                    Value rhs,
                                    SmallVectorImpl<Type> &inferred) {
  auto a = rankedType(lhs), b = rankedType(rhs);
  if (a.getElementType() != b.getElementType())
    return emitOptionalError(loc, "operand element types differ: ",
                             a.getElementType(), " vs ", b.getElementType());
  auto shape = broadcastShapes(a.getShape(), b.getShape());
  if (failed(shape))
    return emitOptionalError(loc, "shapes ", shapeStr(a.getShape()), " and ",
                             shapeStr(b.getShape()), " do not broadcast");
  inferred.push_back(RankedTensorType::get(*shape, a.getElementType()));
  return success();
}

#define TRAIN_BINARY_INFER(OP)                                                 \
  LogicalResult OP::inferReturnTypes(                                          \
      MLIRContext *, std::optional<Location> loc, ValueRange operands,         \
      DictionaryAttr attributes, OpaqueProperties properties,                  \
      RegionRange regions, SmallVectorImpl<Type> &inferred) {                  \
    Adaptor adaptor(operands, attributes, properties, regions);                \
    return inferBroadcast(loc, adaptor.getLhs(), adaptor.getRhs(), inferred);  \
  }
TRAIN_BINARY_INFER(AddOp)
TRAIN_BINARY_INFER(SubOp)
TRAIN_BINARY_INFER(MulOp)
TRAIN_BINARY_INFER(DivOp)
TRAIN_BINARY_INFER(PowOp)
#undef TRAIN_BINARY_INFER

/// Broadcast shape of `operands`, with the given element type.
static LogicalResult inferBroadcastMany(std::optional<Location> loc,
                                        ValueRange operands, Type elementType,
                                        SmallVectorImpl<Type> &inferred) {
  SmallVector<int64_t> shape;
  for (Value v : operands) {
    auto next = broadcastShapes(shape, rankedType(v).getShape());
    if (failed(next))
      return emitOptionalError(loc, "shapes ", shapeStr(shape), " and ",
                               shapeStr(rankedType(v).getShape()),
                               " do not broadcast");
    shape = *next;
  }
  inferred.push_back(RankedTensorType::get(shape, elementType));
  return success();
}

#define TRAIN_COMPARE_INFER(OP)                                                \
  LogicalResult OP::inferReturnTypes(                                          \
      MLIRContext *ctx, std::optional<Location> loc, ValueRange operands,      \
      DictionaryAttr attributes, OpaqueProperties properties,                  \
      RegionRange regions, SmallVectorImpl<Type> &inferred) {                  \
    Adaptor adaptor(operands, attributes, properties, regions);                \
    if (rankedType(adaptor.getLhs()).getElementType() !=                       \
        rankedType(adaptor.getRhs()).getElementType())                         \
      return emitOptionalError(loc, "compared element types differ");          \
    return inferBroadcastMany(loc, {adaptor.getLhs(), adaptor.getRhs()},       \
                              IntegerType::get(ctx, 1), inferred);             \
  }
TRAIN_COMPARE_INFER(EqualOp)
TRAIN_COMPARE_INFER(LessOp)
TRAIN_COMPARE_INFER(LessOrEqualOp)
TRAIN_COMPARE_INFER(GreaterOp)
#undef TRAIN_COMPARE_INFER

LogicalResult WhereOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr attributes, OpaqueProperties properties, RegionRange regions,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, attributes, properties, regions);
  Type elt = rankedType(adaptor.getLhs()).getElementType();
  if (elt != rankedType(adaptor.getRhs()).getElementType())
    return emitOptionalError(loc, "where branches have different element "
                                  "types");
  return inferBroadcastMany(
      loc, {adaptor.getCondition(), adaptor.getLhs(), adaptor.getRhs()}, elt,
      inferred);
}

LogicalResult CastOp::verify() {
  if (getInput().getType().getShape() != getType().getShape())
    return emitOpError("cast changes the shape from ")
           << shapeStr(getInput().getType().getShape()) << " to "
           << shapeStr(getType().getShape());
  // bf16 stores f32 values: one rounding, from f32 only, and back exactly.
  Type from = getInput().getType().getElementType(),
       to = getType().getElementType();
  if ((from.isBF16() || to.isBF16()) && from != to &&
      !(from.isF32() || to.isF32()))
    return emitOpError("casts ") << from << " to " << to
                                 << ": bf16 converts to and from f32 only";
  return success();
}

static LogicalResult verifyApproximate(Operation *op, StringRef approximate) {
  if (approximate != "none" && approximate != "tanh")
    return op->emitOpError("approximate must be \"none\" or \"tanh\", got \"")
           << approximate << "\"";
  return success();
}

static LogicalResult verifyAxis(Operation *op, int64_t axis, int64_t rank) {
  if (normalizeAxis(axis, rank) < 0)
    return op->emitOpError("axis ") << axis << " out of range for rank "
                                    << rank;
  return success();
}

LogicalResult GeluOp::verify() {
  return verifyApproximate(*this, getApproximate());
}
LogicalResult GeluGradOp::verify() {
  return verifyApproximate(*this, getApproximate());
}

LogicalResult SoftmaxOp::verify() {
  return verifyAxis(*this, getAxis(), getType().getRank());
}
LogicalResult SoftmaxGradOp::verify() {
  return verifyAxis(*this, getAxis(), getType().getRank());
}

//===----------------------------------------------------------------------===//
// Contractions, normalization, reductions, loss
//===----------------------------------------------------------------------===//

LogicalResult MatMulOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr attributes, OpaqueProperties properties, RegionRange regions,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, attributes, properties, regions);
  auto a = rankedType(adaptor.getLhs()), b = rankedType(adaptor.getRhs());
  if (a.getRank() < 2 || b.getRank() < 2)
    return emitOptionalError(loc, "matmul operands must have rank >= 2 (got ",
                             a.getRank(), " and ", b.getRank(),
                             "); reshape 1-D operands first");
  ArrayRef<int64_t> as = a.getShape(), bs = b.getShape();
  int64_t m = as[as.size() - 2], k = as.back();
  int64_t k2 = bs[bs.size() - 2], n = bs.back();
  if (k != k2)
    return emitOptionalError(loc, "matmul contraction mismatch: ",
                             shapeStr(as), " x ", shapeStr(bs));
  auto batch = broadcastShapes(as.drop_back(2), bs.drop_back(2));
  if (failed(batch))
    return emitOptionalError(loc, "matmul batch dimensions do not broadcast: ",
                             shapeStr(as), " x ", shapeStr(bs));
  SmallVector<int64_t> shape = *batch;
  shape.push_back(m);
  shape.push_back(n);
  inferred.push_back(RankedTensorType::get(shape, a.getElementType()));
  return success();
}

LogicalResult GemmOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr attributes, OpaqueProperties properties, RegionRange regions,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, attributes, properties, regions);
  auto a = rankedType(adaptor.getA()), b = rankedType(adaptor.getB());
  if (a.getRank() != 2 || b.getRank() != 2)
    return emitOptionalError(loc, "gemm operands must be 2-D");
  int64_t m = adaptor.getTransA() ? a.getDimSize(1) : a.getDimSize(0);
  int64_t k = adaptor.getTransA() ? a.getDimSize(0) : a.getDimSize(1);
  int64_t k2 = adaptor.getTransB() ? b.getDimSize(1) : b.getDimSize(0);
  int64_t n = adaptor.getTransB() ? b.getDimSize(0) : b.getDimSize(1);
  if (k != k2)
    return emitOptionalError(loc, "gemm contraction mismatch: ",
                             shapeStr(a.getShape()), " x ",
                             shapeStr(b.getShape()));
  if (Value c = adaptor.getC())
    if (!broadcastsTo(rankedType(c).getShape(), {m, n}))
      return emitOptionalError(loc, "gemm C of shape ",
                               shapeStr(rankedType(c).getShape()),
                               " does not broadcast to [", m, ", ", n, "]");
  inferred.push_back(RankedTensorType::get({m, n}, a.getElementType()));
  return success();
}

/// Checks a normalization's axis and that `scale` has the normalized shape
/// (the dimensions from axis on).
static LogicalResult verifyNormScale(Operation *op, RankedTensorType input,
                                     int64_t axisAttr, RankedTensorType scale) {
  int64_t axis = normalizeAxis(axisAttr, input.getRank());
  if (axis < 0)
    return op->emitOpError("axis ") << axisAttr << " out of range for rank "
                                    << input.getRank();
  ArrayRef<int64_t> normShape = input.getShape().drop_front(axis);
  if (scale.getShape() != normShape)
    return op->emitOpError("scale shape ")
           << shapeStr(scale.getShape()) << " must equal the normalized shape "
           << shapeStr(normShape);
  return success();
}

LogicalResult LayerNormGradOp::verify() {
  return verifyNormScale(*this, getInput().getType(), getAxis(),
                         getScale().getType());
}

LogicalResult RmsNormGradOp::verify() {
  return verifyNormScale(*this, getInput().getType(), getAxis(),
                         getScale().getType());
}

LogicalResult LayerNormOp::verify() {
  if (failed(verifyNormScale(*this, getType(), getAxis(),
                             getScale().getType())))
    return failure();
  ArrayRef<int64_t> normShape = getType().getShape().drop_front(
      normalizeAxis(getAxis(), getType().getRank()));
  if (getBias() && getBias().getType().getShape() != normShape)
    return emitOpError("bias shape ")
           << shapeStr(getBias().getType().getShape())
           << " must equal the normalized shape " << shapeStr(normShape);
  return success();
}

static LogicalResult inferReduce(std::optional<Location> loc, Value input,
                                 ArrayRef<int64_t> axes, bool keepdims,
                                 SmallVectorImpl<Type> &inferred) {
  auto in = rankedType(input);
  int64_t rank = in.getRank();
  llvm::SmallSet<int64_t, 8> reduced;
  for (int64_t a : axes) {
    int64_t n = normalizeAxis(a, rank);
    if (n < 0 || rank == 0)
      return emitOptionalError(loc, "reduction axis ", a,
                               " out of range for rank ", rank);
    if (!reduced.insert(n).second)
      return emitOptionalError(loc, "reduction axis ", a, " repeated");
  }
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d) {
    bool r = axes.empty() || reduced.contains(d);
    if (!r)
      shape.push_back(in.getDimSize(d));
    else if (keepdims)
      shape.push_back(1);
  }
  inferred.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}

#define TRAIN_REDUCE(OP)                                                       \
  LogicalResult OP::inferReturnTypes(                                          \
      MLIRContext *, std::optional<Location> loc, ValueRange operands,         \
      DictionaryAttr attributes, OpaqueProperties properties,                  \
      RegionRange regions, SmallVectorImpl<Type> &inferred) {                  \
    Adaptor adaptor(operands, attributes, properties, regions);                \
    return inferReduce(loc, adaptor.getInput(), adaptor.getAxes(),             \
                       adaptor.getKeepdims(), inferred);                       \
  }                                                                            \
  LogicalResult OP::verify() {                                                 \
    SmallVector<Type> inferred;                                                \
    return inferReduce(getLoc(), getInput(), getAxes(), getKeepdims(),         \
                       inferred);                                              \
  }
TRAIN_REDUCE(ReduceSumOp)
TRAIN_REDUCE(ReduceMeanOp)
TRAIN_REDUCE(ReduceMaxOp)
#undef TRAIN_REDUCE

static LogicalResult verifyLossOperands(Operation *op, RankedTensorType logits,
                                        RankedTensorType labels,
                                        StringRef reduction) {
  if (reduction != "mean" && reduction != "sum")
    return op->emitOpError("reduction must be \"mean\" or \"sum\", got \"")
           << reduction << "\"";
  if (logits.getRank() != 2 || labels.getRank() != 1 ||
      logits.getDimSize(0) != labels.getDimSize(0))
    return op->emitOpError("expects logits [N, C] and labels [N], got ")
           << shapeStr(logits.getShape()) << " and "
           << shapeStr(labels.getShape());
  return success();
}

LogicalResult SoftmaxCrossEntropyLossOp::inferReturnTypes(
    MLIRContext *ctx, std::optional<Location>, ValueRange, DictionaryAttr,
    OpaqueProperties, RegionRange, SmallVectorImpl<Type> &inferred) {
  inferred.push_back(RankedTensorType::get({}, Float32Type::get(ctx)));
  return success();
}

LogicalResult SoftmaxCrossEntropyLossOp::verify() {
  return verifyLossOperands(*this, getLogits().getType(),
                            getLabels().getType(), getReduction());
}

LogicalResult SoftmaxCrossEntropyLossGradOp::verify() {
  return verifyLossOperands(*this, getLogits().getType(),
                            getLabels().getType(), getReduction());
}

LogicalResult ConcatOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr attributes, OpaqueProperties properties, RegionRange regions,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, attributes, properties, regions);
  if (adaptor.getInputs().empty())
    return emitOptionalError(loc, "concat needs at least one input");
  auto first = rankedType(adaptor.getInputs().front());
  int64_t axis = normalizeAxis(adaptor.getAxis(), first.getRank());
  if (axis < 0 || first.getRank() == 0)
    return emitOptionalError(loc, "concat axis ", adaptor.getAxis(),
                             " out of range for rank ", first.getRank());
  SmallVector<int64_t> shape(first.getShape());
  shape[axis] = 0;
  for (Value v : adaptor.getInputs()) {
    auto t = rankedType(v);
    if (t.getElementType() != first.getElementType() ||
        t.getRank() != first.getRank())
      return emitOptionalError(loc, "concat inputs differ in element type or "
                                    "rank");
    for (int64_t d = 0; d < t.getRank(); ++d)
      if (d != axis && t.getDimSize(d) != first.getDimSize(d))
        return emitOptionalError(loc, "concat inputs ", shapeStr(t.getShape()),
                                 " and ", shapeStr(first.getShape()),
                                 " differ outside axis ", axis);
    shape[axis] += t.getDimSize(axis);
  }
  inferred.push_back(RankedTensorType::get(shape, first.getElementType()));
  return success();
}

/// Checks a slice of `full` with `starts`/`steps` producing `part`.
static LogicalResult verifySlice(Operation *op, ArrayRef<int64_t> full,
                                 ArrayRef<int64_t> part,
                                 ArrayRef<int64_t> starts,
                                 ArrayRef<int64_t> steps) {
  size_t rank = full.size();
  if (part.size() != rank || starts.size() != rank || steps.size() != rank)
    return op->emitOpError("starts and steps need one entry per dimension "
                           "of a rank-")
           << rank << " tensor";
  for (size_t d = 0; d < rank; ++d) {
    if (steps[d] == 0)
      return op->emitOpError("step of dimension ") << d << " is zero";
    if (part[d] == 0)
      continue;
    int64_t last;
    bool overflow = llvm::MulOverflow(part[d] - 1, steps[d], last) ||
                    llvm::AddOverflow(last, starts[d], last);
    if (overflow || starts[d] < 0 || starts[d] >= full[d] || last < 0 ||
        last >= full[d])
      return op->emitOpError("dimension ")
             << d << ": elements " << starts[d] << ", " << starts[d] + steps[d]
             << ", ... " << last << " fall outside [0, " << full[d] << ")";
  }
  return success();
}

LogicalResult SliceOp::verify() {
  if (getInput().getType().getElementType() != getType().getElementType())
    return emitOpError("slice changes the element type");
  return verifySlice(*this, getInput().getType().getShape(),
                     getType().getShape(), getStarts(), getSteps());
}

LogicalResult SliceGradOp::verify() {
  return verifySlice(*this, getType().getShape(), getDy().getType().getShape(),
                     getStarts(), getSteps());
}

//===----------------------------------------------------------------------===//
// Fused ops
//===----------------------------------------------------------------------===//

LogicalResult LinearOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, ValueRange operands,
    DictionaryAttr attributes, OpaqueProperties properties, RegionRange regions,
    SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, attributes, properties, regions);
  auto x = rankedType(adaptor.getInput()), w = rankedType(adaptor.getWeight());
  if (x.getRank() < 1 || w.getRank() != 2 || x.getShape().back() != w.getDimSize(0))
    return emitOptionalError(loc, "linear expects x [..., K] and w [K, N], got ",
                             shapeStr(x.getShape()), " and ",
                             shapeStr(w.getShape()));
  if (Value b = adaptor.getBias())
    if (rankedType(b).getShape() != ArrayRef<int64_t>{w.getDimSize(1)})
      return emitOptionalError(loc, "linear bias must be [", w.getDimSize(1),
                               "], got ", shapeStr(rankedType(b).getShape()));
  SmallVector<int64_t> shape(x.getShape());
  shape.back() = w.getDimSize(1);
  inferred.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

LogicalResult RmsNormOp::verify() {
  return verifyNormScale(*this, getType(), getAxis(), getScale().getType());
}

LogicalResult RopeOp::verify() {
  ArrayRef<int64_t> x = getType().getShape();
  if (x.empty() || x.back() % 2 != 0)
    return emitOpError("the last dimension must be even, got ")
           << shapeStr(x);
  for (Value table : {getCos(), getSin()})
    if (!broadcastsTo(rankedType(table).getShape(), x))
      return emitOpError("cos/sin table of shape ")
             << shapeStr(rankedType(table).getShape())
             << " does not broadcast to " << shapeStr(x);
  return success();
}

LogicalResult AttentionOp::verify() {
  ArrayRef<int64_t> q = getQuery().getType().getShape();
  ArrayRef<int64_t> k = getKey().getType().getShape();
  if (q.size() != 4 || getKey().getType() != getValue().getType() ||
      k.size() != 4 || q[0] != k[0] || q[2] != k[2] || q[3] != k[3])
    return emitOpError("expects Q [B, H, S, D] and K, V [B, Hkv, S, D], got ")
           << shapeStr(q) << ", " << shapeStr(k) << ", "
           << shapeStr(getValue().getType().getShape());
  if (k[1] == 0 || q[1] % k[1] != 0)
    return emitOpError("query heads (") << q[1]
                                        << ") must be a multiple of KV heads ("
                                        << k[1] << ")";
  return success();
}

//===----------------------------------------------------------------------===//
// Gradient ops
//===----------------------------------------------------------------------===//

LogicalResult SumToShapeOp::verify() {
  if (!broadcastsTo(getType().getShape(), getInput().getType().getShape()))
    return emitOpError("result shape ")
           << shapeStr(getType().getShape())
           << " does not broadcast to the input shape "
           << shapeStr(getInput().getType().getShape());
  return success();
}

LogicalResult BroadcastToOp::verify() {
  if (!broadcastsTo(getInput().getType().getShape(), getType().getShape()))
    return emitOpError("input shape ")
           << shapeStr(getInput().getType().getShape())
           << " does not broadcast to " << shapeStr(getType().getShape());
  return success();
}

LogicalResult GatherGradOp::verify() {
  RankedTensorType data = getType();
  int64_t axisAttr = getAxis();
  int64_t axis = normalizeAxis(axisAttr, data.getRank());
  if (axis < 0 || data.getRank() == 0)
    return emitOpError("axis ") << axisAttr << " out of range for rank "
                                << data.getRank();
  SmallVector<int64_t> expect(data.getShape().take_front(axis));
  llvm::append_range(expect, getIndices().getType().getShape());
  llvm::append_range(expect, data.getShape().drop_front(axis + 1));
  if (ArrayRef<int64_t>(expect) != getDy().getType().getShape())
    return emitOpError("dy shape ") << shapeStr(getDy().getType().getShape())
                                    << " is not the gather result shape "
                                    << shapeStr(expect);
  return success();
}

#define GET_OP_CLASSES
#include "spillway/Dialect/Train/IR/TrainOps.cpp.inc"
