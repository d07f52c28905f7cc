//===- TrainToRuntime.cpp - train dialect to runtime calls ----------------===//
//
// Lowers the training step to LLVM-dialect calls against the runtime's C ABI
// (runtime/include/spillway/runtime/spillway_rt.h). Each SSA tensor becomes
// an opaque `!llvm.ptr` handle; every train op becomes one `spw_op_<name>`
// call whose outputs are allocated first with the static shapes the dialect
// inferred, so the runtime never re-derives shapes. Attributes travel as
// constant i64/f64 arrays, in the per-op layout of the runtime's kernel
// table (runtime/include/spillway/runtime/kernels.def), which every call is
// checked against. An offload plan's sched ops in the step are lowered in
// OffloadOps.cpp, with the same emitter (RuntimeEmitter.h).
//
//===----------------------------------------------------------------------===//

#include "spillway/Conversion/Passes.h"
#include "RuntimeEmitter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "spillway/Dialect/Sched/IR/SchedOps.h"
#include "spillway/Dialect/Train/IR/LayerTable.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

namespace spillway {
#define GEN_PASS_DEF_CONVERTTRAINTORUNTIMEPASS
#include "spillway/Conversion/Passes.h.inc"
} // namespace spillway

using namespace mlir;
using namespace spillway;
using namespace spillway::train;
using namespace spillway::runtime_lowering;

//===----------------------------------------------------------------------===//
// Constants and runtime declarations
//===----------------------------------------------------------------------===//

LLVM::LLVMFuncOp RuntimeEmitter::getRuntimeFunc(StringRef name, Type result,
                                                ArrayRef<Type> args) {
  // Cached: a module lookup scans every op of the module, and a long step
  // makes thousands of globals and calls.
  LLVM::LLVMFuncOp &fn = runtimeFuncs[name];
  if (fn)
    return fn;
  if ((fn = module.lookupSymbol<LLVM::LLVMFuncOp>(name)))
    return fn;
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToEnd(module.getBody());
  fn = LLVM::LLVMFuncOp::create(builder, loc, name,
                                LLVM::LLVMFunctionType::get(result, args));
  return fn;
}

Value RuntimeEmitter::callRuntime(StringRef name, Type result,
                                  ArrayRef<Type> argTypes, ValueRange args) {
  auto fn = getRuntimeFunc(name, result, argTypes);
  auto call = LLVM::CallOp::create(builder, loc, fn, args);
  return call.getNumResults() ? call.getResult() : Value();
}

Value RuntimeEmitter::globalAddress(StringRef prefix, Type type,
                                   Attribute value, std::string key) {
  LLVM::GlobalOp &global = globals[key];
  if (!global) {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(module.getBody());
    std::string name = (prefix + "_" + Twine(globalCounter++)).str();
    global = LLVM::GlobalOp::create(builder, loc, type, /*isConstant=*/true,
                                    LLVM::Linkage::Internal, name, value);
  }
  return LLVM::AddressOfOp::create(builder, loc, global);
}

Value RuntimeEmitter::stringConstant(StringRef s) {
  std::string withNul = s.str();
  withNul.push_back('\0');
  auto type = LLVM::LLVMArrayType::get(builder.getI8Type(), withNul.size());
  return globalAddress("spw_str", type, builder.getStringAttr(withNul),
                       "s:" + s.str());
}

Value RuntimeEmitter::i64Array(ArrayRef<int64_t> values) {
  if (values.empty())
    return nullPtr();
  auto tensorTy = RankedTensorType::get({(int64_t)values.size()}, i64Ty);
  auto attr = DenseElementsAttr::get(tensorTy, values);
  std::string key = "i:";
  for (int64_t v : values)
    key += std::to_string(v) + ",";
  return globalAddress("spw_i64", LLVM::LLVMArrayType::get(i64Ty, values.size()),
                       attr, key);
}

Value RuntimeEmitter::f64Array(ArrayRef<double> values) {
  if (values.empty())
    return nullPtr();
  auto tensorTy = RankedTensorType::get({(int64_t)values.size()}, f64Ty);
  auto attr = DenseElementsAttr::get(tensorTy, values);
  std::string key = "f:";
  for (double v : values) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    key += std::to_string(bits) + ",";
  }
  return globalAddress("spw_f64", LLVM::LLVMArrayType::get(f64Ty, values.size()),
                       attr, key);
}

Value RuntimeEmitter::dataConstant(DenseElementsAttr attr) {
  // A flat array global: the runtime copies numel * element-size bytes.
  int64_t n = attr.getNumElements();
  Type elt = attr.getElementType();
  DenseElementsAttr flat = attr.isSplat()
                               ? DenseElementsAttr::get(
                                     RankedTensorType::get({n}, elt),
                                     attr.getSplatValue<Attribute>())
                               : attr.reshape(RankedTensorType::get({n}, elt));
  // Each constant op gets its own global; identical constants are already
  // merged by CSE upstream.
  std::string key = "c:" + std::to_string(globalCounter);
  return globalAddress("spw_const", LLVM::LLVMArrayType::get(elt, n), flat,
                       key);
}

//===----------------------------------------------------------------------===//
// Op descriptions (the per-op layout of kernels.def)
//===----------------------------------------------------------------------===//

LogicalResult RuntimeEmitter::checkStatic(Operation *op) {
  for (Type t : llvm::concat<Type>(op->getOperandTypes(), op->getResultTypes()))
    if (auto rt = dyn_cast<RankedTensorType>(t); !rt || !rt.hasStaticShape())
      return op->emitOpError("needs statically shaped tensors to lower to "
                             "runtime calls; bind symbolic dimensions with "
                             "--bind NAME=INT");
  return success();
}

FailureOr<int32_t> RuntimeEmitter::dtypeOf(Operation *op, Type elementType) {
  if (elementType.isF32())
    return kF32;
  if (elementType.isInteger(64))
    return kI64;
  if (elementType.isInteger(32))
    return kI32;
  if (elementType.isInteger(1))
    return kBool;
  if (elementType.isBF16())
    return kBF16;
  return op->emitOpError("element type ")
         << elementType
         << " has no runtime representation (f32, i64, i32, i1, bf16)";
}

FailureOr<int32_t> RuntimeEmitter::boundaryDtypeOf(Operation *op,
                                                   Type elementType,
                                                   const Twine &what) {
  // bf16 is storage inside the step: inputs and outputs are read and
  // written as the f32, integer or bool arrays .npy files hold (parameters
  // are f32 by the dialect's types).
  if (elementType.isBF16())
    return op->emitOpError() << what
                             << " is bf16: inputs and outputs are f32, i64, "
                                "i32 or i1; cast to bf16 inside the step "
                                "(train.cast)";
  return dtypeOf(op, elementType);
}

static int64_t gemmOrZero(bool b) { return b ? 1 : 0; }

static void lossAttrs(KernelCall &k, StringRef reduction,
                      std::optional<int64_t> ignoreIndex) {
  k.iattrs = {reduction == "sum" ? 1 : 0, ignoreIndex ? 1 : 0,
              ignoreIndex.value_or(0)};
}

static int64_t axisOf(int64_t axis, Value v) {
  return normalizeAxis(axis, cast<RankedTensorType>(v.getType()).getRank());
}

static SmallVector<int64_t> reduceAxes(ArrayRef<int64_t> axes, Value input) {
  int64_t rank = cast<RankedTensorType>(input.getType()).getRank();
  SmallVector<int64_t> out;
  if (axes.empty())
    for (int64_t d = 0; d < rank; ++d)
      out.push_back(d);
  else
    for (int64_t a : axes)
      out.push_back(normalizeAxis(a, rank));
  out.insert(out.begin(), (int64_t)out.size());
  return out;
}

FailureOr<KernelCall> RuntimeEmitter::describeKernel(Operation *op) {
  KernelCall k;
  auto result =
      llvm::TypeSwitch<Operation *, LogicalResult>(op)
          // Ops whose kernels take exactly their operands and no attributes.
          .Case<MatMulOp, AddOp, SubOp, MulOp, DivOp, PowOp, EqualOp, LessOp,
                LessOrEqualOp, GreaterOp, WhereOp, NegOp, ReluOp, TanhOp,
                ExpOp, LogOp, SqrtOp, ReciprocalOp, ErfOp, SigmoidOp, CosOp,
                SinOp, SiluOp, CastOp, ReshapeOp, SumToShapeOp, BroadcastToOp,
                ReluGradOp, TanhGradOp, SiluGradOp, RopeOp, RopeGradOp>(
              [&](auto o) {
                k.inputs = llvm::to_vector(o->getOperands());
                return success();
              })
          .Case([&](ConcatOp o) {
            k.inputs = llvm::to_vector(o.getInputs());
            k.iattrs = {axisOf(o.getAxis(), o.getResult()),
                        (int64_t)o.getInputs().size()};
            return success();
          })
          .Case<SliceOp, SliceGradOp>([&](auto o) {
            k.inputs = {o->getOperand(0)};
            k.iattrs = llvm::to_vector(o.getStarts());
            llvm::append_range(k.iattrs, o.getSteps());
            return success();
          })
          .Case([&](LinearOp o) {
            k.inputs = {o.getInput(), o.getWeight(), o.getBias()};
            return success();
          })
          .Case<RmsNormOp, RmsNormGradOp>([&](auto o) {
            k.inputs = llvm::to_vector(o->getOperands());
            k.iattrs = {axisOf(o.getAxis(), o.getInput())};
            k.fattrs = {o.getEpsilon().convertToDouble()};
            return success();
          })
          .Case<AttentionOp, AttentionGradOp>([&](auto o) {
            k.inputs = llvm::to_vector(o->getOperands());
            k.iattrs = {o.getCausal() ? 1 : 0};
            k.fattrs = {o.getScale().convertToDouble()};
            return success();
          })
          .Case([&](GemmOp o) {
            k.inputs = {o.getA(), o.getB(), o.getC()};
            k.iattrs = {gemmOrZero(o.getTransA()), gemmOrZero(o.getTransB())};
            k.fattrs = {o.getAlpha().convertToDouble(),
                        o.getBeta().convertToDouble()};
            return success();
          })
          .Case([&](GeluOp o) {
            k.inputs = {o.getInput()};
            k.iattrs = {o.getApproximate() == "tanh" ? 1 : 0};
            return success();
          })
          .Case([&](SoftmaxOp o) {
            k.inputs = {o.getInput()};
            k.iattrs = {axisOf(o.getAxis(), o.getInput())};
            return success();
          })
          .Case([&](LayerNormOp o) {
            k.inputs = {o.getInput(), o.getScale(), o.getBias()};
            k.iattrs = {axisOf(o.getAxis(), o.getInput())};
            k.fattrs = {o.getEpsilon().convertToDouble()};
            return success();
          })
          .Case([&](GatherOp o) {
            k.inputs = {o.getData(), o.getIndices()};
            k.iattrs = {axisOf(o.getAxis(), o.getData())};
            return success();
          })
          .Case([&](TransposeOp o) {
            k.inputs = {o.getInput()};
            k.iattrs = llvm::to_vector(o.getPerm());
            return success();
          })
          .Case<ReduceSumOp, ReduceMeanOp, ReduceMaxOp>([&](auto o) {
            k.inputs = {o.getInput()};
            // Reducing a scalar (e.g. ReduceMean of an already-reduced loss)
            // leaves it as it is.
            if (o.getInput().getType().getRank() == 0) {
              k.name = "reshape";
              return success();
            }
            k.iattrs = reduceAxes(o.getAxes(), o.getInput());
            return success();
          })
          .Case([&](SoftmaxCrossEntropyLossOp o) {
            k.inputs = {o.getLogits(), o.getLabels()};
            lossAttrs(k, o.getReduction(), o.getIgnoreIndex());
            return success();
          })
          .Case([&](GeluGradOp o) {
            k.inputs = {o.getInput(), o.getDy()};
            k.iattrs = {o.getApproximate() == "tanh" ? 1 : 0};
            return success();
          })
          .Case([&](SoftmaxGradOp o) {
            k.inputs = {o.getOutput(), o.getDy()};
            k.iattrs = {axisOf(o.getAxis(), o.getOutput())};
            return success();
          })
          .Case([&](LayerNormGradOp o) {
            k.inputs = {o.getInput(), o.getScale(), o.getDy()};
            k.iattrs = {axisOf(o.getAxis(), o.getInput())};
            k.fattrs = {o.getEpsilon().convertToDouble()};
            return success();
          })
          .Case([&](GatherGradOp o) {
            k.inputs = {o.getIndices(), o.getDy()};
            k.iattrs = {axisOf(o.getAxis(), o.getResult())};
            return success();
          })
          .Case([&](SoftmaxCrossEntropyLossGradOp o) {
            k.inputs = {o.getLogits(), o.getLabels(), o.getDloss()};
            lossAttrs(k, o.getReduction(), o.getIgnoreIndex());
            return success();
          })
          .Default([&](Operation *o) {
            return o->emitOpError(
                "has no runtime kernel; convert-train-to-runtime cannot "
                "lower it");
          });
  if (failed(result))
    return failure();
  // The call must be one the runtime has, with the layout it reads.
  StringRef name = k.name.empty() ? op->getName().stripDialect() : k.name;
  k.kernel = lookupRuntimeKernel(name);
  if (!k.kernel)
    return op->emitOpError("lowers to spw_op_")
           << name << ", which the runtime's kernel table (kernels.def) "
           << "does not list";
  auto mismatch = [&](StringRef what, int64_t emitted, int64_t listed) {
    return op->emitOpError("lowers to ")
           << k.kernel->symbol << " with " << emitted << " " << what
           << ", but the runtime's kernel table (kernels.def) lists "
           << listed;
  };
  int64_t ins = k.kernel->ins;
  if (ins < 0) {
    size_t at = SPW_KERNEL_INS_IATTR_INDEX(ins);
    ins = at < k.iattrs.size() ? k.iattrs[at] : -1;
  }
  if ((int64_t)k.inputs.size() != ins)
    return mismatch("inputs", k.inputs.size(), ins);
  if ((int64_t)op->getNumResults() != k.kernel->outs)
    return mismatch("outputs", op->getNumResults(), k.kernel->outs);
  if (k.kernel->iattrs != SPW_KERNEL_RANK_DEPENDENT &&
      (int64_t)k.iattrs.size() != k.kernel->iattrs)
    return mismatch("integer attributes", k.iattrs.size(), k.kernel->iattrs);
  if ((int64_t)k.fattrs.size() != k.kernel->fattrs)
    return mismatch("float attributes", k.fattrs.size(), k.kernel->fattrs);
  return k;
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

FailureOr<Value> RuntimeEmitter::allocFor(Operation *op,
                                          RankedTensorType type) {
  auto dtype = dtypeOf(op, type.getElementType());
  if (failed(dtype))
    return failure();
  return callRuntime("spw_alloc", ptrTy, {ptrTy, i32Ty, i32Ty, ptrTy},
                     {ctxArg, i32(*dtype), i32(type.getRank()),
                      i64Array(type.getShape())});
}

LogicalResult RuntimeEmitter::emitDeclare(func::FuncOp step,
                                          ArrayRef<ParamOp> params) {
  builder.setInsertionPointToEnd(module.getBody());
  auto fn = LLVM::LLVMFuncOp::create(
      builder, loc, "spw_model_declare",
      LLVM::LLVMFunctionType::get(voidTy, {ptrTy}));
  Block *entry = fn.addEntryBlock(builder);
  builder.setInsertionPointToStart(entry);
  ctxArg = entry->getArgument(0);

  if (cudaPrecision >= 0)
    callRuntime("spw_use_cuda", voidTy, {ptrTy, i32Ty},
                {ctxArg, i32(cudaPrecision)});

  int64_t totalBytes = 0;
  for (ParamOp p : params)
    totalBytes = std::max<int64_t>(totalBytes, p.getOffset() + p.getNumBytes());
  callRuntime("spw_declare_weights", voidTy, {ptrTy, i64Ty},
              {ctxArg, i64(totalBytes)});
  if (auto prefix =
          module->getAttrOfType<StringAttr>(train::kStateDictPrefixAttrName))
    callRuntime("spw_declare_state_dict_prefix", voidTy, {ptrTy, ptrTy},
                {ctxArg, stringConstant(prefix.getValue())});

  for (auto [index, param] : llvm::enumerate(params)) {
    ParamOp p = param;
    loc = p.getLoc();
    auto dtype = dtypeOf(p, p.getTensorType().getElementType());
    if (failed(dtype))
      return failure();
    callRuntime("spw_declare_param", i32Ty,
                {ptrTy, ptrTy, i32Ty, i32Ty, ptrTy, i64Ty},
                {ctxArg, stringConstant(p.getSymName()), i32(*dtype),
                 i32(p.getTensorType().getRank()),
                 i64Array(p.getTensorType().getShape()), i64(p.getOffset())});
    paramIndexByName[p.getSymName()] = index;
  }
  if (auto aliases =
          module->getAttrOfType<DictionaryAttr>(train::kParamAliasesAttrName))
    for (NamedAttribute entry : aliases) {
      auto it = paramIndexByName.find(entry.getName().getValue());
      auto names = dyn_cast<ArrayAttr>(entry.getValue());
      if (it == paramIndexByName.end() || !names)
        return module.emitError() << train::kParamAliasesAttrName
                                  << ": no parameter @"
                                  << entry.getName().getValue();
      for (Attribute a : names)
        if (auto s = dyn_cast<StringAttr>(a))
          callRuntime("spw_declare_param_alias", voidTy, {ptrTy, i32Ty, ptrTy},
                      {ctxArg, i32(it->second), stringConstant(s.getValue())});
    }
  if (auto folds =
          module->getAttrOfType<DictionaryAttr>(train::kParamFoldsAttrName))
    for (NamedAttribute entry : folds) {
      auto it = paramIndexByName.find(entry.getName().getValue());
      auto source = dyn_cast<StringAttr>(entry.getValue());
      if (it == paramIndexByName.end() || !source)
        return module.emitError() << train::kParamFoldsAttrName
                                  << ": no parameter @"
                                  << entry.getName().getValue();
      callRuntime("spw_declare_param_fold", voidTy, {ptrTy, i32Ty, ptrTy},
                  {ctxArg, i32(it->second),
                   stringConstant(source.getValue())});
    }

  // FOAM's folded state has its own size: declared before the tiers lay
  // out optimizer blocks and before a checkpoint is restored.
  WalkResult foams = step.walk([&](FoamOp f) {
    loc = f.getLoc();
    auto it = paramIndexByName.find(f.getParam());
    if (it == paramIndexByName.end()) {
      f.emitOpError("refers to unknown parameter @") << f.getParam();
      return WalkResult::interrupt();
    }
    callRuntime("spw_declare_foam", voidTy, {ptrTy, i32Ty, i64Ty, f64Ty},
                {ctxArg, i32(int32_t(it->second)),
                 i64(f.getLevelAttr().getInt()),
                 f64(f.getAlpha().convertToDouble())});
    return WalkResult::advance();
  });
  if (foams.wasInterrupted())
    return failure();

  // Gradient clipping: its barrier is in the plan, and --grad-clip may
  // override its max_norm only then. (Walked on the module: a task holding
  // only the norm is outlined.)
  // An offload plan's norm is sched.clip_grad_norm.
  std::optional<std::pair<Location, double>> clip;
  step->getParentOfType<ModuleOp>().walk([&](Operation *op) {
    if (auto c = dyn_cast<ClipGradNormOp>(op))
      clip = {c.getLoc(), c.getMaxNorm().convertToDouble()};
    else if (auto c = dyn_cast<sched::ClipGradNormOp>(op))
      clip = {c.getLoc(), c.getMaxNorm().convertToDouble()};
    return clip ? WalkResult::interrupt() : WalkResult::advance();
  });
  if (clip) {
    loc = clip->first;
    callRuntime("spw_declare_grad_clip", voidTy, {ptrTy, f64Ty},
                {ctxArg, f64(clip->second)});
  }
  auto module = step->getParentOfType<ModuleOp>();
  if (auto p = module->getAttrOfType<StringAttr>(kPrecisionAttrName);
      p && p.getValue() == "bf16-mixed") {
    loc = module.getLoc();
    callRuntime("spw_declare_bf16_mixed", voidTy, {ptrTy}, {ctxArg});
  }
  // bf16 optimizer state (train-attach-optimizer's state-dtype): the
  // runtime stores every moment as bf16 (SPW_BF16); fp32, the default, is
  // not declared.
  if (optimizerStateElementBytes(module) == 2) {
    loc = module.getLoc();
    callRuntime("spw_declare_optimizer_state_dtype", voidTy, {ptrTy, i32Ty},
                {ctxArg, i32(kBF16)});
  }

  // ZeRO over N ranks (train.optimizer_state_shards): the optimizer blocks
  // hold one rank's shards, cut where the runtime must cut them.
  if (int64_t shards = optimizerStateShards(module); shards > 1) {
    loc = module.getLoc();
    callRuntime(
        "spw_declare_optimizer_shards", voidTy, {ptrTy, i32Ty, i64Ty},
        {ctxArg, i32(int32_t(shards)), i64(optimizerStateShardAlign(module))});
    // ZeRO stage 2: the gradient blocks are cut for them too.
    if (gradientsSharded(module))
      callRuntime("spw_declare_gradient_shards", voidTy, {ptrTy}, {ctxArg});
  }

  if (failed(emitTiers()))
    return failure();

  for (BlockArgument arg : step.getArguments()) {
    loc = arg.getLoc();
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type || !type.hasStaticShape())
      return step.emitOpError("input #")
             << arg.getArgNumber()
             << " must be a statically shaped tensor; bind symbolic "
                "dimensions with --bind NAME=INT";
    auto dtype = boundaryDtypeOf(step, type.getElementType(),
                                 "input #" + Twine(arg.getArgNumber()));
    if (failed(dtype))
      return failure();
    auto name = step.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  kInputNameAttrName);
    std::string inputName =
        name ? name.str() : ("arg" + Twine(arg.getArgNumber())).str();
    callRuntime("spw_declare_input", i32Ty, {ptrTy, ptrTy, i32Ty, i32Ty, ptrTy},
                {ctxArg, stringConstant(inputName), i32(*dtype),
                 i32(type.getRank()), i64Array(type.getShape())});
  }

  if (step->hasAttr(kForwardOnlyAttrName)) {
    for (auto [i, type] : llvm::enumerate(step.getResultTypes())) {
      auto tensor = dyn_cast<RankedTensorType>(type);
      if (!tensor || !tensor.hasStaticShape())
        return step.emitOpError("output #")
               << i << " must be a statically shaped tensor";
      auto dtype =
          boundaryDtypeOf(step, tensor.getElementType(), "output #" + Twine(i));
      if (failed(dtype))
        return failure();
      auto name = step.getResultAttrOfType<StringAttr>(i, kInputNameAttrName);
      std::string outputName = name ? name.str() : ("output" + Twine(i)).str();
      callRuntime("spw_declare_output", i32Ty,
                  {ptrTy, ptrTy, i32Ty, i32Ty, ptrTy},
                  {ctxArg, stringConstant(outputName), i32(*dtype),
                   i32(tensor.getRank()), i64Array(tensor.getShape())});
    }
  }

  // The optimizer defaults the executable reports and falls back to.
  // (With the whole update deferred there is no train.adamw, only defers;
  // FOAM shares AdamW's hyper-parameters.)
  Operation *firstAdam = nullptr;
  step.walk([&](Operation *op) {
    if (!firstAdam && isa<AdamWOp, AdamWDeferOp, FoamOp>(op))
      firstAdam = op;
  });
  if (firstAdam) {
    loc = firstAdam->getLoc();
    auto hp = [&](StringRef name) {
      return f64(firstAdam->getAttrOfType<FloatAttr>(name).getValueAsDouble());
    };
    callRuntime("spw_declare_adamw", voidTy,
                {ptrTy, f64Ty, f64Ty, f64Ty, f64Ty, f64Ty},
                {ctxArg, hp("lr"), hp("beta1"), hp("beta2"), hp("eps"),
                 hp("weight_decay")});
  }
  loc = step.getLoc();
  LLVM::ReturnOp::create(builder, loc, ValueRange{});
  return success();
}

LogicalResult RuntimeEmitter::emitStep(func::FuncOp step) {
  builder.setInsertionPointToEnd(module.getBody());
  loc = step.getLoc();
  auto fn =
      LLVM::LLVMFuncOp::create(builder, loc, "spw_model_step",
                               LLVM::LLVMFunctionType::get(voidTy, {ptrTy}));
  Block *entry = fn.addEntryBlock(builder);
  builder.setInsertionPointToStart(entry);
  ctxArg = entry->getArgument(0);
  // A step that calls task functions keeps its handles in the frame.
  framed = !step.getBody().front().getOps<func::CallOp>().empty();
  return emitBody(step, /*slotsArg=*/Value());
}

LogicalResult RuntimeEmitter::emitTask(func::FuncOp task) {
  builder.setInsertionPointToEnd(module.getBody());
  loc = task.getLoc();
  if (!task.getBody().hasOneBlock())
    return task.emitOpError("a task function must be a single block");
  // The shape sched-outline-tasks gives a task function, which the calling
  // step's releases rely on: train ops only (no calls), and each result a
  // fresh value of its own (an argument or a repeat would be released twice
  // by the caller, once as the argument and once as the result).
  Block &body = task.getBody().front();
  llvm::SmallPtrSet<Value, 8> returned;
  for (Operation &op : body) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (auto [i, v] : llvm::enumerate(ret.getOperands()))
        if (isa<BlockArgument>(v) || !returned.insert(v).second)
          return task.emitOpError("a task function must return values it "
                                  "computes, each once (as "
                                  "sched-outline-tasks writes it); result #")
                 << i << " is "
                 << (isa<BlockArgument>(v) ? "an argument"
                                           : "returned twice");
      continue;
    }
    if (!isa<TrainDialect>(op.getDialect()))
      return op.emitOpError("in task function @")
             << task.getSymName()
             << ": a task function holds train ops only (as "
                "sched-outline-tasks writes it)";
  }
  auto fn = LLVM::LLVMFuncOp::create(
      builder, loc, task.getSymName(),
      LLVM::LLVMFunctionType::get(voidTy, {ptrTy, ptrTy}),
      LLVM::Linkage::Internal);
  taskFuncs[task.getSymName()] = fn; // beside the func.func until run ends
  Block *entry = fn.addEntryBlock(builder);
  builder.setInsertionPointToStart(entry);
  ctxArg = entry->getArgument(0);
  framed = false; // a task function is short: its handles stay SSA values
  return emitBody(task, entry->getArgument(1));
}

Value RuntimeEmitter::frameSlot(bool timepoint, Value index) {
  StringRef name = timepoint ? "spw_frame_timepoints" : "spw_frame";
  (timepoint ? timepointFrameUsed : frameUsed) = true;
  Value base = LLVM::AddressOfOp::create(builder, loc, ptrTy, name);
  return LLVM::GEPOp::create(builder, loc, ptrTy, timepoint ? i32Ty : ptrTy,
                             base, ArrayRef<LLVM::GEPArg>{index});
}

int64_t RuntimeEmitter::slotFor(Value v, bool timepoint) {
  auto [it, inserted] = slots.try_emplace(v, 0, timepoint);
  if (inserted)
    it->second.first = timepoint ? numTimepointSlots++ : numSlots++;
  return it->second.first;
}

void RuntimeEmitter::setHandle(Value v, Value h) {
  if (!framed) {
    handles.insert_or_assign(v, h);
    return;
  }
  bool timepoint = h.getType() == i32Ty;
  int64_t slot = slotFor(v, timepoint);
  LLVM::StoreOp::create(builder, loc, h, frameSlot(timepoint, i32(slot)));
}

Value RuntimeEmitter::handle(Value v) {
  if (!framed) {
    auto it = handles.find(v);
    return it == handles.end() ? Value() : it->second;
  }
  auto it = slots.find(v);
  if (it == slots.end())
    return Value();
  auto [slot, timepoint] = it->second;
  return LLVM::LoadOp::create(builder, loc, timepoint ? i32Ty : ptrTy,
                              frameSlot(timepoint, i32(slot)));
}

bool RuntimeEmitter::isParamOperand(OpOperand &use) {
  auto call = dyn_cast<func::CallOp>(use.getOwner());
  if (!call)
    return false;
  auto it = paramArgsOf.find(call.getCallee());
  unsigned i = use.getOperandNumber();
  return it != paramArgsOf.end() && i < it->second.size() && it->second[i];
}

void RuntimeEmitter::releaseSlots(ArrayRef<int64_t> slotList) {
  if (!releaseSlotsFunc) {
    // void spw_release_slots(ctx, const int64_t *slots, int64_t n):
    //   for (i = 0; i < n; ++i) spw_release(ctx, frame[slots[i]]);
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToEnd(module.getBody());
    releaseSlotsFunc = LLVM::LLVMFuncOp::create(
        builder, loc, "spw_release_slots",
        LLVM::LLVMFunctionType::get(voidTy, {ptrTy, ptrTy, i64Ty}),
        LLVM::Linkage::Internal);
    Block *entry = releaseSlotsFunc.addEntryBlock(builder);
    Value ctx = entry->getArgument(0), list = entry->getArgument(1),
          n = entry->getArgument(2);
    Region &body = releaseSlotsFunc.getBody();
    Block *head = builder.createBlock(&body, body.end(), {i64Ty}, {loc});
    Block *step = builder.createBlock(&body, body.end());
    Block *done = builder.createBlock(&body, body.end());
    builder.setInsertionPointToEnd(entry);
    LLVM::BrOp::create(builder, loc, ValueRange{i64(0)}, head);
    builder.setInsertionPointToEnd(head);
    Value i = head->getArgument(0);
    Value more = LLVM::ICmpOp::create(builder, loc, LLVM::ICmpPredicate::slt,
                                      i, n);
    LLVM::CondBrOp::create(builder, loc, more, step, done);
    builder.setInsertionPointToEnd(step);
    Value at = LLVM::GEPOp::create(builder, loc, ptrTy, i64Ty, list,
                                   ArrayRef<LLVM::GEPArg>{i});
    Value slot = LLVM::LoadOp::create(builder, loc, i64Ty, at);
    Value h = LLVM::LoadOp::create(builder, loc, ptrTy, frameSlot(false, slot));
    callRuntime("spw_release", voidTy, {ptrTy, ptrTy}, {ctx, h});
    Value next = LLVM::AddOp::create(builder, loc, i, i64(1));
    LLVM::BrOp::create(builder, loc, ValueRange{next}, head);
    builder.setInsertionPointToEnd(done);
    LLVM::ReturnOp::create(builder, loc, ValueRange{});
  }
  LLVM::CallOp::create(builder, loc, releaseSlotsFunc,
                       ValueRange{ctxArg, i64Array(slotList),
                                  i64(int64_t(slotList.size()))});
}

LogicalResult RuntimeEmitter::emitCall(func::CallOp call) {
  // One call: the callee finds its arguments in the frame slots (or, for a
  // parameter, the index) the constant array lists, and puts its results
  // into the slots after them.
  SmallVector<int64_t> list;
  for (OpOperand &use : call->getOpOperands()) {
    if (isParamOperand(use)) {
      auto pv = use.get().getDefiningOp<ParamValueOp>();
      auto it = paramIndexByName.find(pv.getParam());
      if (it == paramIndexByName.end())
        return pv.emitOpError("refers to unknown parameter @")
               << pv.getParam();
      list.push_back(it->second);
      continue;
    }
    auto it = slots.find(use.get());
    if (it == slots.end())
      return call.emitOpError("reads a value the step has no handle for");
    list.push_back(it->second.first);
  }
  for (Value r : call.getResults())
    list.push_back(slotFor(r, /*timepoint=*/false));
  LLVM::CallOp::create(builder, loc, taskFuncs.lookup(call.getCallee()),
                       ValueRange{ctxArg, i64Array(list)});
  return success();
}

LogicalResult RuntimeEmitter::emitBody(func::FuncOp func, Value slotsArg) {
  Block &block = func.getBody().front();
  const bool isTask = static_cast<bool>(slotsArg);
  ArrayRef<bool> paramArgs;
  if (auto it = paramArgsOf.find(func.getSymName());
      isTask && it != paramArgsOf.end())
    paramArgs = it->second;
  handles.clear();
  numIns = numOuts = 1;
  // Describe every kernel call first: the scratch arrays must hold the
  // longest input list, absent optional operands (null slots) included.
  // A reshape is a view of its operand (spw_view, no copy) unless the step
  // has schedule ops: an offload plan frees an activation's memory when it
  // puts it off the GPU (spw_put_activation), which a view would outlive.
  // Which reshapes are views, and the tensor each view's memory is (its
  // root). A parameter is not viewed: its optimizer update writes it in
  // place, and a reshape is a snapshot. A task function returns no view
  // (its caller releases what it returns) and views no parameter argument.
  DenseMap<Value, Value> rootOf;
  auto root = [&](Value v) { return rootOf.lookup(v) ? rootOf.lookup(v) : v; };
  auto isParamArg = [&](Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    return arg && arg.getArgNumber() < paramArgs.size() &&
           paramArgs[arg.getArgNumber()];
  };
  DenseSet<Operation *> viewOps;
  if (viewsAllowed)
    for (Operation &op : block)
      if (auto reshape = dyn_cast<ReshapeOp>(op)) {
        Value r = root(reshape.getInput());
        if (r.getDefiningOp<ParamValueOp>() || isParamArg(r))
          continue;
        if (isTask && llvm::any_of(reshape->getUsers(), [](Operation *user) {
              return isa<func::ReturnOp>(user);
            }))
          continue;
        viewOps.insert(&op);
        rootOf[reshape.getResult()] = r;
      }
  // The parameter roundings that read the working copy (workCopies).
  DenseSet<Operation *> workReads;
  if (workCopies)
    for (auto cast : block.getOps<CastOp>())
      if (cast.roundsToBf16() &&
          (cast.getInput().getDefiningOp<ParamValueOp>() ||
           isParamArg(cast.getInput())))
        workReads.insert(cast);
  DenseMap<Operation *, KernelCall> kernels;
  for (Operation &op : block) {
    if (workReads.contains(&op))
      continue;
    if (isa<func::ReturnOp, func::CallOp, ParamValueOp, ConstantOp,
            ParamGradOp, AdamWOp, AdamWDeferOp, AdamWApplyPendingOp, FoamOp>(
            op))
      continue;
    if (isa<ClipGradNormOp>(op)) {
      // Its gradients go through the inputs array.
      numIns = std::max<int64_t>(numIns, op.getNumOperands());
      continue;
    }
    if (viewOps.count(&op))
      continue;
    if (isa<sched::SchedDialect>(op.getDialect())) {
      // stage_grads passes its gradients through the inputs array.
      numIns = std::max<int64_t>(numIns, op.getNumOperands());
      continue;
    }
    auto kernel = describeKernel(&op);
    if (failed(kernel))
      return failure();
    numIns = std::max<int64_t>(numIns, kernel->inputs.size());
    numOuts = std::max<int64_t>(numOuts, op.getNumResults());
    kernels[&op] = std::move(*kernel);
  }
  // Step tensors are released after their last use (spw_release), so the
  // runtime can reuse their memory within the step: kernel results and
  // constants, except what the return hands to the runtime (the loss, the
  // outputs). A result nobody reads goes right after its op.
  // A view's uses are uses of the tensor it views (its root). The offload
  // plan's gradients and taken activations are copies too.
  DenseSet<Value> releasable;
  for (Operation &op : block)
    if (kernels.count(&op) ||
        isa<ConstantOp, func::CallOp, sched::GradientOp,
            sched::TakeActivationOp, ClipGradNormOp, sched::ClipGradNormOp>(
            op))
      for (Value r : op.getResults())
        releasable.insert(r);
  DenseMap<Value, Operation *> lastUse;
  for (Operation &op : block)
    for (Value v : op.getOperands())
      if (releasable.count(root(v)))
        lastUse[root(v)] = &op;
  DenseMap<Operation *, SmallVector<Value>> releaseAfter;
  for (Operation &op : block) {
    if (isa<func::ReturnOp>(op))
      continue;
    for (Value r : op.getResults())
      if (releasable.count(r) && !lastUse.count(r))
        releaseAfter[&op].push_back(r);
    for (Value v : op.getOperands())
      if (lastUse.lookup(root(v)) == &op &&
          !llvm::is_contained(releaseAfter[&op], root(v)))
        releaseAfter[&op].push_back(root(v));
  }

  auto allocScratch = [&] {
    Value one = i64(1);
    insArray = LLVM::AllocaOp::create(
        builder, loc, ptrTy, LLVM::LLVMArrayType::get(ptrTy, numIns), one);
    outsArray = LLVM::AllocaOp::create(
        builder, loc, ptrTy, LLVM::LLVMArrayType::get(ptrTy, numOuts), one);
  };
  // A framed step runs as parts of at most kPartOps ops, each an internal
  // function that the step calls in order: with every handle in the frame
  // nothing else crosses a part, so no function, and no live range (the
  // context pointer's included), grows with the step.
  constexpr int64_t kPartOps = 256;
  Block *stepBlock = builder.getInsertionBlock();
  Value stepCtx = ctxArg;
  int64_t partOps = 0, parts = 0;
  auto startPart = [&] {
    if (parts)
      LLVM::ReturnOp::create(builder, loc, ValueRange{});
    builder.setInsertionPointToEnd(module.getBody());
    auto part = LLVM::LLVMFuncOp::create(
        builder, loc, ("spw_model_step.part" + Twine(parts++)).str(),
        LLVM::LLVMFunctionType::get(voidTy, {ptrTy}), LLVM::Linkage::Internal);
    Block *entry = part.addEntryBlock(builder);
    builder.setInsertionPointToEnd(stepBlock);
    LLVM::CallOp::create(builder, loc, part, ValueRange{stepCtx});
    builder.setInsertionPointToStart(entry);
    ctxArg = entry->getArgument(0);
    allocScratch();
    partOps = 0;
  };
  if (framed)
    startPart();
  else
    allocScratch();

  // The step's inputs come from the runtime; a task function's arguments
  // from the frame slots, or for a parameter its index, that `slotsArg`
  // lists (then a slot for each result).
  auto slotIndex = [&](int64_t i) -> Value {
    Value at = LLVM::GEPOp::create(builder, loc, ptrTy, i64Ty, slotsArg,
                                   ArrayRef<LLVM::GEPArg>{(int32_t)i});
    return LLVM::LoadOp::create(builder, loc, i64Ty, at);
  };
  for (BlockArgument arg : block.getArguments()) {
    if (!isTask) {
      setHandle(arg, callRuntime("spw_input", ptrTy, {ptrTy, i32Ty},
                                 {ctxArg, i32(arg.getArgNumber())}));
      continue;
    }
    // A parameter read only rounded reads the working copy instead (an
    // offload plan's params block may hold only that).
    if (isParamArg(arg) && !arg.use_empty() &&
        llvm::all_of(arg.getUsers(), [&](Operation *user) {
          return workReads.contains(user);
        }))
      continue;
    Value index = slotIndex(arg.getArgNumber());
    if (isParamArg(arg)) {
      Value param = LLVM::TruncOp::create(builder, loc, i32Ty, index);
      setHandle(arg, callRuntime("spw_param", ptrTy, {ptrTy, i32Ty},
                                 {ctxArg, param}));
      continue;
    }
    setHandle(arg, LLVM::LoadOp::create(builder, loc, ptrTy,
                                        frameSlot(false, index)));
  }

  auto lookupParam = [&](Operation *op, StringRef name) -> FailureOr<int32_t> {
    auto it = paramIndexByName.find(name);
    if (it == paramIndexByName.end())
      return op->emitOpError("refers to unknown parameter @") << name;
    return it->second;
  };
  auto storeArray = [&](Value array, int64_t size, ArrayRef<Value> values) {
    for (auto [i, v] : llvm::enumerate(values)) {
      Value slot = LLVM::GEPOp::create(
          builder, loc, ptrTy, LLVM::LLVMArrayType::get(ptrTy, size), array,
          ArrayRef<LLVM::GEPArg>{0, (int32_t)i});
      LLVM::StoreOp::create(builder, loc, v, slot);
    }
  };

  Operation *previous = nullptr;
  // The task running: the train.task of the ops since its begin (a run of
  // ops with one value is one task; convert-sched-to-train tags a task's
  // call, or its optimizer updates). The runtime times and traces it.
  DenseI64ArrayAttr openTask;
  for (Operation &op : block) {
    if (framed && ++partOps > kPartOps)
      startPart();
    if (previous && framed && releaseAfter.lookup(previous).size() > 1) {
      SmallVector<int64_t> list;
      for (Value v : releaseAfter.lookup(previous))
        list.push_back(slots.lookup(v).first);
      releaseSlots(list);
    } else if (previous) {
      for (Value v : releaseAfter.lookup(previous))
        callRuntime("spw_release", voidTy, {ptrTy, ptrTy},
                    {ctxArg, handle(v)});
    }
    previous = &op;
    loc = op.getLoc();
    auto task = op.getAttrOfType<DenseI64ArrayAttr>(kTaskAttrName);
    if (op.hasAttr(kTaskAttrName) && (!task || task.size() != 3))
      return op.emitOpError("has a malformed ")
             << kTaskAttrName << " (expected array<i64: phase, layer, "
             << "micro-batch>)";
    if (openTask && task != openTask)
      callRuntime("spw_task_end", voidTy, {ptrTy}, {ctxArg});
    if (task && task != openTask)
      callRuntime("spw_task_begin", voidTy, {ptrTy, i32Ty, i32Ty, i32Ty},
                  {ctxArg, i32(task[0]), i32(task[1]), i32(task[2])});
    openTask = task;
    if (isa<sched::SchedDialect>(op.getDialect())) {
      auto done = emitSchedOp(&op);
      if (failed(done))
        return failure();
      if (*done)
        continue;
    }
    if (workReads.contains(&op)) {
      Value input = op.getOperand(0);
      Value index;
      if (auto pv = input.getDefiningOp<ParamValueOp>()) {
        auto i = lookupParam(&op, pv.getParam());
        if (failed(i))
          return failure();
        index = i32(*i);
      } else {
        index = LLVM::TruncOp::create(
            builder, loc, i32Ty,
            slotIndex(cast<BlockArgument>(input).getArgNumber()));
      }
      setHandle(op.getResult(0), callRuntime("spw_param_work", ptrTy,
                                             {ptrTy, i32Ty}, {ctxArg, index}));
      continue;
    }
    if (failed(checkStatic(&op)))
      return failure();
    if (auto call = dyn_cast<func::CallOp>(op)) {
      if (failed(emitCall(call)))
        return failure();
      continue;
    }
    if (auto ret = dyn_cast<func::ReturnOp>(op); ret && isTask) {
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        Value h = handle(v);
        LLVM::StoreOp::create(
            builder, loc, h,
            frameSlot(false, slotIndex(func.getNumArguments() + i)));
      }
      continue;
    }
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      if (func->hasAttr(kForwardOnlyAttrName)) {
        for (auto [i, v] : llvm::enumerate(ret.getOperands()))
          callRuntime("spw_set_output", voidTy, {ptrTy, i32Ty, ptrTy},
                      {ctxArg, i32(i), handle(v)});
        continue;
      }
      if (ret.getNumOperands() != 1)
        return ret.emitOpError("the training step must return exactly one "
                               "value, the scalar loss");
      callRuntime("spw_set_loss", voidTy, {ptrTy, ptrTy},
                  {ctxArg, handle(ret.getOperand(0))});
      continue;
    }
    if (auto pv = dyn_cast<ParamValueOp>(op)) {
      // Read by task functions only: they read it themselves; read only
      // rounded: the working copy is read instead.
      if (!pv->use_empty() && llvm::all_of(pv->getUses(), [&](OpOperand &use) {
            return (framed && isParamOperand(use)) ||
                   workReads.contains(use.getOwner());
          }))
        continue;
      auto index = lookupParam(&op, pv.getParam());
      if (failed(index))
        return failure();
      setHandle(pv.getResult(), callRuntime("spw_param", ptrTy, {ptrTy, i32Ty},
                                            {ctxArg, i32(*index)}));
      continue;
    }
    if (auto c = dyn_cast<ConstantOp>(op)) {
      auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
      if (!dense)
        return c.emitOpError("only dense constants can be lowered");
      auto type = cast<RankedTensorType>(c.getType());
      auto dtype = dtypeOf(&op, type.getElementType());
      if (failed(dtype))
        return failure();
      if (dense.isSplat() && type.getNumElements() > 1) {
        // A splat is filled at run time from its one value (broadcast_to of
        // a scalar): as a data global it would put every element into the
        // executable, gigabytes for a ConstantOfShape of a large shape.
        auto scalarType = RankedTensorType::get({}, type.getElementType());
        Value scalar = callRuntime(
            "spw_constant", ptrTy, {ptrTy, i32Ty, i32Ty, ptrTy, ptrTy},
            {ctxArg, i32(*dtype), i32(0), nullPtr(),
             dataConstant(DenseElementsAttr::get(
                 scalarType, dense.getSplatValue<Attribute>()))});
        auto h = allocFor(&op, type);
        if (failed(h))
          return failure();
        storeArray(insArray, numIns, {scalar});
        storeArray(outsArray, numOuts, {*h});
        callRuntime(lookupRuntimeKernel("broadcast_to")->symbol, voidTy,
                    {ptrTy, ptrTy, ptrTy, ptrTy, ptrTy},
                    {ctxArg, insArray, outsArray, nullPtr(), nullPtr()});
        callRuntime("spw_release", voidTy, {ptrTy, ptrTy}, {ctxArg, scalar});
        setHandle(c.getResult(), *h);
        continue;
      }
      setHandle(c.getResult(), callRuntime(
          "spw_constant", ptrTy, {ptrTy, i32Ty, i32Ty, ptrTy, ptrTy},
          {ctxArg, i32(*dtype), i32(type.getRank()), i64Array(type.getShape()),
           dataConstant(dense)}));
      continue;
    }
    if (auto reshape = dyn_cast<ReshapeOp>(op); reshape && viewOps.count(&op)) {
      auto type = cast<RankedTensorType>(reshape.getType());
      auto dtype = dtypeOf(&op, type.getElementType());
      if (failed(dtype))
        return failure();
      setHandle(reshape.getResult(), callRuntime(
          "spw_view", ptrTy, {ptrTy, ptrTy, i32Ty, i32Ty, ptrTy},
          {ctxArg, handle(reshape.getInput()), i32(*dtype),
           i32(type.getRank()), i64Array(type.getShape())}));
      continue;
    }
    if (auto pg = dyn_cast<ParamGradOp>(op)) {
      auto index = lookupParam(&op, pg.getParam());
      if (failed(index))
        return failure();
      callRuntime("spw_param_grad", voidTy, {ptrTy, i32Ty, ptrTy},
                  {ctxArg, i32(*index), handle(pg.getGrad())});
      continue;
    }
    if (auto clip = dyn_cast<ClipGradNormOp>(op)) {
      // The updates that take the coefficient as `clip` run after it; the
      // runtime applies the step's coefficient to them. Each gradient's
      // parameter is the one an update of it names (-1: none here), so
      // that the runtime can reduce-scatter it under ZeRO.
      SmallVector<Value> grads;
      SmallVector<int64_t> params;
      for (Value g : clip.getGrads()) {
        grads.push_back(handle(g));
        int64_t index = -1;
        for (Operation *user : clip.getCoef().getUsers()) {
          StringRef name;
          if (auto a = dyn_cast<AdamWOp>(user); a && a.getGrad() == g)
            name = a.getParam();
          else if (auto d = dyn_cast<AdamWDeferOp>(user); d && d.getGrad() == g)
            name = d.getParam();
          if (name.empty())
            continue;
          auto found = lookupParam(user, name);
          if (failed(found))
            return failure();
          index = *found;
          break;
        }
        params.push_back(index);
      }
      storeArray(insArray, numIns, grads);
      setHandle(clip.getCoef(),
                callRuntime("spw_clip_grad_norm_params", ptrTy,
                            {ptrTy, i32Ty, ptrTy, ptrTy, f64Ty},
                            {ctxArg, i32(int32_t(grads.size())), insArray,
                             i64Array(params),
                             f64(clip.getMaxNorm().convertToDouble())}));
      continue;
    }
    if (auto adam = dyn_cast<AdamWOp>(op)) {
      auto index = lookupParam(&op, adam.getParam());
      if (failed(index))
        return failure();
      Value hps[] = {f64(adam.getLr().convertToDouble()),
                     f64(adam.getBeta1().convertToDouble()),
                     f64(adam.getBeta2().convertToDouble()),
                     f64(adam.getEps().convertToDouble()),
                     f64(adam.getWeightDecay().convertToDouble())};
      if (adam.getBeginAttr()) {
        callRuntime("spw_adamw_range", voidTy,
                    {ptrTy, i32Ty, ptrTy, i64Ty, i64Ty, f64Ty, f64Ty, f64Ty,
                     f64Ty, f64Ty},
                    {ctxArg, i32(*index), handle(adam.getGrad()),
                     i64(adam.getBeginAttr().getInt()),
                     i64(adam.getEndAttr().getInt()), hps[0], hps[1], hps[2],
                     hps[3], hps[4]});
        continue;
      }
      callRuntime("spw_adamw", voidTy,
                  {ptrTy, i32Ty, ptrTy, f64Ty, f64Ty, f64Ty, f64Ty, f64Ty},
                  {ctxArg, i32(*index), handle(adam.getGrad()), hps[0],
                   hps[1], hps[2], hps[3], hps[4]});
      continue;
    }
    if (auto foam = dyn_cast<FoamOp>(op)) {
      auto index = lookupParam(&op, foam.getParam());
      if (failed(index))
        return failure();
      callRuntime("spw_foam", voidTy,
                  {ptrTy, i32Ty, ptrTy, f64Ty, f64Ty, f64Ty, f64Ty, f64Ty,
                   f64Ty},
                  {ctxArg, i32(*index), handle(foam.getGrad()),
                   f64(foam.getLr().convertToDouble()),
                   f64(foam.getBeta1().convertToDouble()),
                   f64(foam.getBeta2().convertToDouble()),
                   f64(foam.getEps().convertToDouble()),
                   f64(foam.getWeightDecay().convertToDouble()),
                   f64(foam.getAlpha().convertToDouble())});
      continue;
    }
    if (auto defer = dyn_cast<AdamWDeferOp>(op)) {
      auto index = lookupParam(&op, defer.getParam());
      if (failed(index))
        return failure();
      callRuntime("spw_adamw_defer", voidTy,
                  {ptrTy, i32Ty, ptrTy, i64Ty, i64Ty, f64Ty, f64Ty, f64Ty,
                   f64Ty, f64Ty},
                  {ctxArg, i32(*index), handle(defer.getGrad()),
                   i64(defer.getBeginAttr().getInt()),
                   i64(defer.getEndAttr().getInt()),
                   f64(defer.getLr().convertToDouble()),
                   f64(defer.getBeta1().convertToDouble()),
                   f64(defer.getBeta2().convertToDouble()),
                   f64(defer.getEps().convertToDouble()),
                   f64(defer.getWeightDecay().convertToDouble())});
      continue;
    }
    if (auto apply = dyn_cast<AdamWApplyPendingOp>(op)) {
      auto index = lookupParam(&op, apply.getParam());
      if (failed(index))
        return failure();
      callRuntime("spw_adamw_apply_pending", voidTy,
                  {ptrTy, i32Ty, i64Ty, i64Ty},
                  {ctxArg, i32(*index), i64(apply.getBeginAttr().getInt()),
                   i64(apply.getEndAttr().getInt())});
      continue;
    }

    KernelCall *kernel = &kernels[&op];
    SmallVector<Value> ins, outs;
    for (Value v : kernel->inputs)
      ins.push_back(v ? handle(v) : nullPtr());
    for (Value r : op.getResults()) {
      auto h = allocFor(&op, cast<RankedTensorType>(r.getType()));
      if (failed(h))
        return failure();
      setHandle(r, *h);
      outs.push_back(*h);
    }
    storeArray(insArray, numIns, ins);
    storeArray(outsArray, numOuts, outs);
    callRuntime(kernel->kernel->symbol, voidTy,
                {ptrTy, ptrTy, ptrTy, ptrTy, ptrTy},
                {ctxArg, insArray, outsArray, i64Array(kernel->iattrs),
                 f64Array(kernel->fattrs)});
  }
  LLVM::ReturnOp::create(builder, loc, ValueRange{});
  if (framed) {
    builder.setInsertionPointToEnd(stepBlock);
    LLVM::ReturnOp::create(builder, loc, ValueRange{});
  }
  return success();
}

void RuntimeEmitter::emitMain() {
  builder.setInsertionPointToEnd(module.getBody());
  auto fn = LLVM::LLVMFuncOp::create(
      builder, loc, "main", LLVM::LLVMFunctionType::get(i32Ty, {i32Ty, ptrTy}));
  Block *entry = fn.addEntryBlock(builder);
  builder.setInsertionPointToStart(entry);
  Value rc = callRuntime("spw_main", i32Ty, {i32Ty, ptrTy},
                         {entry->getArgument(0), entry->getArgument(1)});
  LLVM::ReturnOp::create(builder, loc, rc);
}

LogicalResult RuntimeEmitter::run() {
  // The step, and the private task functions it calls (sched-outline-tasks).
  SmallVector<func::FuncOp> funcs, tasks;
  for (func::FuncOp f : module.getOps<func::FuncOp>())
    (f.isPrivate() && !f.isExternal() ? tasks : funcs).push_back(f);
  if (funcs.size() != 1)
    return module.emitError("convert-train-to-runtime expects exactly one "
                            "func.func (the training step), found ")
           << funcs.size();
  func::FuncOp step = funcs.front();
  if (!step.getBody().hasOneBlock())
    return step.emitOpError("the training step must be a single block");
  SmallVector<ParamOp> params(module.getOps<ParamOp>());

  viewsAllowed = llvm::none_of(step.getBody().front(), [](Operation &op) {
    return isa<sched::SchedDialect>(op.getDialect());
  });
  // An offload plan keeps the working copies in its params blocks when it
  // has master blocks (sched-assign-buffers under bf16-mixed).
  auto precision = module->getAttrOfType<StringAttr>(kPrecisionAttrName);
  bool planHasMasters = false;
  if (auto buffers = module->getAttrOfType<DictionaryAttr>("sched.buffers"))
    if (auto blocks = buffers.getAs<ArrayAttr>("blocks"))
      planHasMasters = llvm::any_of(blocks, [](Attribute a) {
        auto b = dyn_cast<DictionaryAttr>(a);
        auto cls = b ? b.getAs<StringAttr>("class") : StringAttr();
        return cls && cls.getValue() == "master";
      });
  workCopies = (viewsAllowed || planHasMasters) && precision &&
               precision.getValue() == "bf16-mixed";
  llvm::StringMap<func::FuncOp> taskByName;
  for (func::FuncOp t : tasks)
    taskByName[t.getSymName()] = t;
  for (auto call : step.getBody().front().getOps<func::CallOp>()) {
    auto it = taskByName.find(call.getCallee());
    if (it == taskByName.end())
      return call.emitOpError("calls @")
             << call.getCallee()
             << ", which is not a task function of the module";
    auto [at, first] = paramArgsOf.try_emplace(
        call.getCallee(), SmallVector<bool>(call.getNumOperands(), true));
    for (auto [i, v] : llvm::enumerate(call.getOperands()))
      if (!v.getDefiningOp<ParamValueOp>())
        at->second[i] = false;
  }

  if (failed(emitDeclare(step, params)))
    return failure();
  // The task functions first: the step's calls refer to them.
  for (func::FuncOp t : tasks)
    if (failed(emitTask(t)))
      return failure();
  if (failed(emitStep(step)))
    return failure();
  emitMain();

  // The frames: zero-initialized slot arrays of the step.
  auto frame = [&](StringRef name, Type elt, int64_t n) {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(module.getBody());
    auto global = LLVM::GlobalOp::create(
        builder, loc, LLVM::LLVMArrayType::get(elt, std::max<int64_t>(n, 1)),
        /*isConstant=*/false, LLVM::Linkage::Internal, name, Attribute());
    Block *init = builder.createBlock(&global.getInitializerRegion());
    builder.setInsertionPointToStart(init);
    Value zero = LLVM::ZeroOp::create(builder, loc, global.getType());
    LLVM::ReturnOp::create(builder, loc, zero);
  };
  if (frameUsed)
    frame("spw_frame", ptrTy, numSlots);
  if (timepointFrameUsed)
    frame("spw_frame_timepoints", i32Ty, numTimepointSlots);

  step.erase();
  for (func::FuncOp t : tasks)
    t.erase();
  for (ParamOp p : params)
    p.erase();
  module->removeAttr("sched.buffers");
  module->removeAttr("sched.prediction");
  // The layer table names the parameters just erased, and its #train.layer
  // entries would tie the LLVM module to the train dialect.
  module->removeAttr(kLayersAttrName);
  return success();
}

namespace {
struct ConvertTrainToRuntimePass
    : spillway::impl::ConvertTrainToRuntimePassBase<ConvertTrainToRuntimePass> {
  using Base::Base;
  void runOnOperation() override {
    if (target != "cpu" && target != "cuda") {
      getOperation().emitError() << "convert-train-to-runtime: unknown target '"
                                 << target << "' (expected cpu or cuda)";
      return signalPassFailure();
    }
    if (precision != "fp32" && precision != "bf16") {
      getOperation().emitError()
          << "convert-train-to-runtime: unknown precision '" << precision
          << "' (expected fp32 or bf16)";
      return signalPassFailure();
    }
    if (precision == "bf16" && target != "cuda") {
      getOperation().emitError()
          << "convert-train-to-runtime: precision=bf16 needs target=cuda "
             "(the CPU kernels compute in fp32)";
      return signalPassFailure();
    }
    RuntimeEmitter emitter(getOperation(),
                           target == "cuda" ? (precision == "bf16" ? 1 : 0)
                                            : -1);
    if (failed(emitter.run()))
      signalPassFailure();
  }
};
} // namespace
