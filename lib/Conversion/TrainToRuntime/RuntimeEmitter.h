//===- RuntimeEmitter.h - the lowering to runtime calls, shared -*- C++ -*-===//
//
// Private to convert-train-to-runtime: the emitter both of its files use.
// TrainToRuntime.cpp lowers the train ops, the step and the calls of an
// outlined step; OffloadOps.cpp lowers an offload plan's sched ops (moves,
// binds, gradients, activations) and declares its tiers, which run
// interleaved with the train ops in the same step function.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_LIB_CONVERSION_TRAINTORUNTIME_RUNTIMEEMITTER_H
#define SPILLWAY_LIB_CONVERSION_TRAINTORUNTIME_RUNTIMEEMITTER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "spillway/Dialect/Sched/IR/SchedOps.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

namespace spillway::runtime_lowering {
using namespace mlir;
using namespace spillway::train;


// Mirrors enum spw_dtype in spillway_rt.h.
enum RuntimeDType : int32_t {
  kF32 = 1,
  kI64 = 2,
  kI32 = 3,
  kBool = 4,
  kBF16 = 5
};

// Block classes travel as their values: the sched dialect's (ODS) must be
// the runtime's (spillway/runtime/block_classes.def).
#define SPW_BLOCK_CLASS(ENUM, name, value)                                     \
  static_assert(int(sched::BlockClass::name) == value,                         \
                "sched::BlockClass::" #name " differs from block_classes.def");
#include "spillway/runtime/block_classes.def"

/// One row of the runtime's kernel table (spillway/runtime/kernels.def): its
/// entry point and how many values each of its arrays holds.
struct RuntimeKernel {
  StringLiteral name, symbol; // symbol: spw_op_<name>
  int ins, outs, iattrs, fattrs;
};
constexpr RuntimeKernel kRuntimeKernels[] = {
#define SPW_KERNEL(name, ins, outs, iattrs, fattrs)                            \
  {#name, "spw_op_" #name, ins, outs, iattrs, fattrs},
#include "spillway/runtime/kernels.def"
};

/// The table's row of kernel `name`, or null.
inline const RuntimeKernel *lookupRuntimeKernel(StringRef name) {
  for (const RuntimeKernel &k : kRuntimeKernels)
    if (k.name == name)
      return &k;
  return nullptr;
}

/// What one kernel call needs besides its outputs: the kernel, the operand
/// handles (null for an absent optional operand) and the attribute arrays.
struct KernelCall {
  const RuntimeKernel *kernel = nullptr;
  std::string name;          // the kernel; defaults to the op's mnemonic
  SmallVector<Value> inputs; // train values; null = absent optional
  SmallVector<int64_t> iattrs;
  SmallVector<double> fattrs;
};

/// Builds the runtime-call form of one module: constant globals (deduplicated
/// by content), runtime function declarations, and the three entry points.
class RuntimeEmitter {
public:
  RuntimeEmitter(ModuleOp module, int32_t cudaPrecision)
      : cudaPrecision(cudaPrecision), module(module),
        ctx(module.getContext()), builder(ctx),
        ptrTy(LLVM::LLVMPointerType::get(ctx)), i32Ty(builder.getI32Type()),
        i64Ty(builder.getI64Type()), f64Ty(builder.getF64Type()),
        voidTy(LLVM::LLVMVoidType::get(ctx)) {}

  LogicalResult run();
  // >= 0: target=cuda, spw_use_cuda's precision (0 fp32, 1 bf16).
  int32_t cudaPrecision;

private:
  LogicalResult checkStatic(Operation *op);
  FailureOr<int32_t> dtypeOf(Operation *op, Type elementType);
  /// dtypeOf for what crosses the step's boundary (`what`: an input or an
  /// output), which bf16 never does.
  FailureOr<int32_t> boundaryDtypeOf(Operation *op, Type elementType,
                                     const Twine &what);
  FailureOr<KernelCall> describeKernel(Operation *op);
  LogicalResult emitDeclare(func::FuncOp step, ArrayRef<ParamOp> params);
  LogicalResult emitStep(func::FuncOp step);
  /// A task function (sched-outline-tasks): an internal LLVM function of
  /// (ctx, slots) called by the step (emitCall).
  LogicalResult emitTask(func::FuncOp task);
  /// The ops of the step or of a task function (`slotsArg` its slot list).
  LogicalResult emitBody(func::FuncOp func, Value slotsArg);
  LogicalResult emitCall(func::CallOp call);
  LogicalResult emitTiers();
  /// An offload plan's op (sched dialect): lowered in place; false if `op`
  /// is not one.
  FailureOr<bool> emitSchedOp(Operation *op);

  // Handles. A value's handle (a tensor's ptr, a transfer's i32 timepoint)
  // is an SSA value, or in a framed step (one calling task functions) a
  // slot of a frame global, stored once and loaded at each use: then no
  // handle lives across the step in a register, and the register allocator
  // sees short live ranges however long the step is.
  void setHandle(Value v, Value handle);
  Value handle(Value v);
  int64_t slotFor(Value v, bool timepoint);
  Value frameSlot(bool timepoint, Value index);
  /// Whether `use` is a call operand the callee reads as a parameter.
  bool isParamOperand(OpOperand &use);
  /// spw_release of the handles in the frame slots `slots` lists, in order:
  /// one call of an internal helper (made on first use) for a framed
  /// step's releases after an op.
  void releaseSlots(ArrayRef<int64_t> slotList);
  LLVM::LLVMFuncOp releaseSlotsFunc;
  void emitMain();

  // Constants and declarations.
  LLVM::LLVMFuncOp getRuntimeFunc(StringRef name, Type result,
                                  ArrayRef<Type> args);
  Value callRuntime(StringRef name, Type result, ArrayRef<Type> argTypes,
                    ValueRange args);
  Value globalAddress(StringRef prefix, Type type, Attribute value,
                      std::string key);
  Value stringConstant(StringRef s);
  Value i64Array(ArrayRef<int64_t> values);
  Value f64Array(ArrayRef<double> values);
  Value dataConstant(DenseElementsAttr attr);
  Value i32(int64_t v) {
    return LLVM::ConstantOp::create(builder, loc, i32Ty,
                                    builder.getI32IntegerAttr(v));
  }
  Value i64(int64_t v) {
    return LLVM::ConstantOp::create(builder, loc, i64Ty,
                                    builder.getI64IntegerAttr(v));
  }
  Value f64(double v) {
    return LLVM::ConstantOp::create(builder, loc, f64Ty,
                                    builder.getF64FloatAttr(v));
  }
  Value nullPtr() { return LLVM::ZeroOp::create(builder, loc, ptrTy); }

  /// Handle of a tensor with the op's static type, from spw_alloc.
  FailureOr<Value> allocFor(Operation *op, RankedTensorType type);

  ModuleOp module;
  MLIRContext *ctx;
  OpBuilder builder;
  Location loc = UnknownLoc::get(ctx);
  Type ptrTy, i32Ty, i64Ty, f64Ty, voidTy;
  Value ctxArg;
  Value insArray, outsArray; // scratch [N x ptr] arrays in the step's entry
  int64_t numIns = 1, numOuts = 1; // their sizes: the most any call needs
  llvm::StringMap<LLVM::GlobalOp> globals;
  llvm::StringMap<int32_t> paramIndexByName;
  unsigned globalCounter = 0;
  bool viewsAllowed = true; // the step has no schedule ops
  // bf16-mixed: a parameter's rounding to bf16 reads the runtime's working
  // copy (spw_param_work), which the update keeps, instead of rounding the
  // weights at every read: the runtime's own copy without an offload plan,
  // the params block's with one (a plan with master blocks; one without
  // has no room for the copy, and the cast runs).
  bool workCopies = false;
  bool framed = false;
  DenseMap<Value, Value> handles;
  DenseMap<Value, std::pair<int64_t, bool>> slots; // slot, is a timepoint
  int64_t numSlots = 0, numTimepointSlots = 0;
  bool frameUsed = false, timepointFrameUsed = false;
  /// Per task function, which arguments are parameters: every call passes
  /// a train.param_value there, and the callee reads it (spw_param) by the
  /// index the call lists.
  llvm::StringMap<SmallVector<bool>> paramArgsOf;
  llvm::StringMap<LLVM::LLVMFuncOp> taskFuncs;
  llvm::StringMap<LLVM::LLVMFuncOp> runtimeFuncs;
};


} // namespace spillway::runtime_lowering

#endif // SPILLWAY_LIB_CONVERSION_TRAINTORUNTIME_RUNTIMEEMITTER_H
