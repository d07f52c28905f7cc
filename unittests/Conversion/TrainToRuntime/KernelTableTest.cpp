//===- KernelTableTest.cpp - the lowering against the runtime's tables ----===//
//
// convert-train-to-runtime's kernel calls against runtime/include/spillway/
// runtime/kernels.def, the table the runtime declares and dispatches its
// kernels from: a step with an op for every kernel the table lists is
// lowered, and each spw_op_* call is read back from the LLVM dialect (the
// tensors it stores into the ins and outs arrays, the lengths of its iattrs
// and fattrs constants) and compared with the kernel's row. A kernel added
// to the table without a lowering, or a lowering whose layout differs from
// the row, fails here. The block classes' names and values are compared
// with block_classes.def the same way.
//
//===----------------------------------------------------------------------===//

#include "spillway/Conversion/Passes.h"
#include "spillway/Dialect/Sched/IR/SchedOps.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringMap.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

using namespace mlir;

namespace {

struct Row {
  const char *name;
  int ins, outs, iattrs, fattrs;
};
constexpr Row kRows[] = {
#define SPW_KERNEL(name, ins, outs, iattrs, fattrs)                            \
  {#name, ins, outs, iattrs, fattrs},
#include "spillway/runtime/kernels.def"
};

// A training step with at least one op lowering to each kernel of the table
// (reshape: a reduction of a scalar; a reshape op itself becomes a view).
constexpr const char *kEveryKernel = R"mlir(
func.func @main(%x: tensor<8x3xf32>, %dy: tensor<8x3xf32>, %y: tensor<8xi64>,
                %dl: tensor<f32>, %s: tensor<3xf32>, %w: tensor<3x3xf32>,
                %e: tensor<10x3xf32>, %ids: tensor<2x5xi64>,
                %dg: tensor<2x5x3xf32>, %x3: tensor<2x3x4xf32>,
                %w45: tensor<4x5xf32>, %b5: tensor<5xf32>, %s4: tensor<4xf32>,
                %t: tensor<3x4xf32>, %q: tensor<1x4x3x2xf32>,
                %k: tensor<1x2x3x2xf32>) -> tensor<f32> {
  %0 = train.matmul %x, %w : tensor<8x3xf32>, tensor<3x3xf32> -> tensor<8x3xf32>
  %1 = train.gemm %x, %w, %s {alpha = 0.5 : f32, beta = 2.0 : f32} : tensor<8x3xf32>, tensor<3x3xf32>, tensor<3xf32> -> tensor<8x3xf32>
  %2 = train.add %x, %s : tensor<8x3xf32>, tensor<3xf32> -> tensor<8x3xf32>
  %3 = train.sub %x, %s : tensor<8x3xf32>, tensor<3xf32> -> tensor<8x3xf32>
  %4 = train.mul %x, %s : tensor<8x3xf32>, tensor<3xf32> -> tensor<8x3xf32>
  %5 = train.div %x, %s : tensor<8x3xf32>, tensor<3xf32> -> tensor<8x3xf32>
  %6 = train.neg %x : tensor<8x3xf32>
  %7 = train.relu %x : tensor<8x3xf32>
  %8 = train.tanh %x : tensor<8x3xf32>
  %9 = train.gelu %x {approximate = "tanh"} : tensor<8x3xf32>
  %10 = train.softmax %x {axis = 0 : si64} : tensor<8x3xf32>
  %11 = train.layer_norm %x, %s, %s : tensor<8x3xf32>, tensor<3xf32>, tensor<3xf32>
  %12 = train.gather %e, %ids : tensor<10x3xf32>, tensor<2x5xi64> -> tensor<2x5x3xf32>
  %13 = train.reduce_sum %dl, [] : tensor<f32> -> tensor<f32>
  %14 = train.transpose %x, [1, 0] : tensor<8x3xf32> -> tensor<3x8xf32>
  %15 = train.reduce_sum %x, [1] : tensor<8x3xf32> -> tensor<8x1xf32>
  %16 = train.reduce_mean %x, [] {keepdims = false} : tensor<8x3xf32> -> tensor<f32>
  %17 = train.softmax_cross_entropy_loss %x, %y {ignore_index = -100 : si64} : tensor<8x3xf32>, tensor<8xi64>
  %18 = train.sum_to_shape %dy : tensor<8x3xf32> -> tensor<3xf32>
  %19 = train.broadcast_to %s : tensor<3xf32> -> tensor<8x3xf32>
  %20 = train.relu_grad %x, %dy : tensor<8x3xf32>
  %21 = train.tanh_grad %x, %dy : tensor<8x3xf32>
  %22 = train.gelu_grad %x, %dy {approximate = "tanh"} : tensor<8x3xf32>
  %23 = train.softmax_grad %x, %dy {axis = 0 : si64} : tensor<8x3xf32>
  %24:3 = train.layer_norm_grad %x, %s, %dy {epsilon = 1.0e-3 : f32} : tensor<8x3xf32>, tensor<3xf32>
  %25 = train.gather_grad %ids, %dg : tensor<2x5xi64>, tensor<2x5x3xf32> -> tensor<10x3xf32>
  %26 = train.softmax_cross_entropy_loss_grad %x, %y, %dl {ignore_index = 0 : si64} : tensor<8x3xf32>, tensor<8xi64>, tensor<f32>
  %27 = train.exp %x : tensor<8x3xf32>
  %28 = train.log %x : tensor<8x3xf32>
  %29 = train.sqrt %x : tensor<8x3xf32>
  %30 = train.reciprocal %x : tensor<8x3xf32>
  %31 = train.erf %x : tensor<8x3xf32>
  %32 = train.sigmoid %x : tensor<8x3xf32>
  %33 = train.cos %x : tensor<8x3xf32>
  %34 = train.sin %x : tensor<8x3xf32>
  %35 = train.silu %x : tensor<8x3xf32>
  %36 = train.silu_grad %x, %dy : tensor<8x3xf32>
  %37 = train.pow %x, %s : tensor<8x3xf32>, tensor<3xf32> -> tensor<8x3xf32>
  %38 = train.equal %y, %y : tensor<8xi64>, tensor<8xi64> -> tensor<8xi1>
  %39 = train.less %x, %s : tensor<8x3xf32>, tensor<3xf32> -> tensor<8x3xi1>
  %40 = train.less_or_equal %x, %s : tensor<8x3xf32>, tensor<3xf32> -> tensor<8x3xi1>
  %41 = train.greater %x, %s : tensor<8x3xf32>, tensor<3xf32> -> tensor<8x3xi1>
  %42 = train.where %39, %x, %s : tensor<8x3xi1>, tensor<8x3xf32>, tensor<3xf32> -> tensor<8x3xf32>
  %43 = train.cast %x : tensor<8x3xf32> -> tensor<8x3xi64>
  %44 = train.reduce_max %x, [-1] : tensor<8x3xf32> -> tensor<8x1xf32>
  %45 = train.concat %x, %dy, %x {axis = 1} : tensor<8x3xf32>, tensor<8x3xf32>, tensor<8x3xf32> -> tensor<8x9xf32>
  %46 = train.slice %x {starts = array<i64: 1, 2>, steps = array<i64: 1, -1>} : tensor<8x3xf32> -> tensor<7x3xf32>
  %47 = train.slice_grad %46 {starts = array<i64: 1, 2>, steps = array<i64: 1, -1>} : tensor<7x3xf32> -> tensor<8x3xf32>
  %48 = train.linear %x3, %w45 : tensor<2x3x4xf32>, tensor<4x5xf32> -> tensor<2x3x5xf32>
  %49 = train.rms_norm %x3, %s4 {epsilon = 1.0e-5 : f32} : tensor<2x3x4xf32>, tensor<4xf32>
  %50:2 = train.rms_norm_grad %x3, %s4, %x3 {axis = 2 : si64} : tensor<2x3x4xf32>, tensor<4xf32>
  %51 = train.rope %x3, %t, %t : tensor<2x3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>
  %52 = train.rope_grad %x3, %t, %t : tensor<2x3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>
  %53 = train.attention %q, %k, %k {scale = 0.5} : tensor<1x4x3x2xf32>, tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>
  %54:3 = train.attention_grad %q, %k, %k, %53 {scale = 0.5} : tensor<1x4x3x2xf32>, tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>
  return %16 : tensor<f32>
}
)mlir";

// One kernel call as the LLVM dialect has it.
struct Call {
  std::string kernel;
  int ins = 0, outs = 0;             // slots stored into the scratch arrays
  std::vector<int64_t> iattrs;       // the constant array's values
  int fattrs = 0;                    // the constant array's length
};

// The constant array a call's argument points to (null: empty).
Attribute arrayOf(ModuleOp module, Value arg) {
  auto addr = arg.getDefiningOp<LLVM::AddressOfOp>();
  if (!addr)
    return {};
  auto global = module.lookupSymbol<LLVM::GlobalOp>(addr.getGlobalName());
  return global ? global.getValueOrNull() : Attribute();
}

// The step's spw_op_* calls. The lowering stores a call's inputs and outputs
// into the step's two scratch arrays (ins first) right before the call.
std::vector<Call> kernelCalls(ModuleOp module) {
  std::vector<Call> calls;
  auto step = module.lookupSymbol<LLVM::LLVMFuncOp>("spw_model_step");
  if (!step)
    return calls;
  SmallVector<Value> scratch; // ins, outs
  for (auto alloca : step.getBody().getOps<LLVM::AllocaOp>())
    scratch.push_back(alloca.getResult());
  if (scratch.size() != 2)
    return calls;
  for (Block &block : step.getBody())
    for (Operation &op : block) {
      auto call = dyn_cast<LLVM::CallOp>(op);
      if (!call || !call.getCallee() ||
          !call.getCallee()->starts_with("spw_op_"))
        continue;
      Call c;
      c.kernel = call.getCallee()->drop_front(strlen("spw_op_")).str();
      for (Operation *p = op.getPrevNode(); p; p = p->getPrevNode()) {
        if (isa<LLVM::AddressOfOp, LLVM::ZeroOp, LLVM::GEPOp>(p))
          continue;
        auto store = dyn_cast<LLVM::StoreOp>(p);
        if (!store)
          break;
        auto gep = store.getAddr().getDefiningOp<LLVM::GEPOp>();
        if (gep && gep.getBase() == scratch[0])
          ++c.ins;
        else if (gep && gep.getBase() == scratch[1])
          ++c.outs;
      }
      if (auto i = dyn_cast_or_null<DenseIntElementsAttr>(
              arrayOf(module, call.getArgOperands()[3])))
        for (const APInt &v : i)
          c.iattrs.push_back(v.getSExtValue());
      if (auto f = dyn_cast_or_null<DenseElementsAttr>(
              arrayOf(module, call.getArgOperands()[4])))
        c.fattrs = f.getNumElements();
      calls.push_back(std::move(c));
    }
  return calls;
}

struct KernelTableTest : ::testing::Test {
  MLIRContext context;
  KernelTableTest() {
    context.loadDialect<spillway::train::TrainDialect,
                        spillway::sched::SchedDialect, func::FuncDialect,
                        LLVM::LLVMDialect>();
  }
};

TEST_F(KernelTableTest, EveryKernelLowersWithItsRowsLayout) {
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(kEveryKernel, &context);
  ASSERT_TRUE(module);
  PassManager pm(&context);
  pm.addPass(spillway::createConvertTrainToRuntimePass());
  ASSERT_TRUE(succeeded(pm.run(*module)));

  std::vector<Call> calls = kernelCalls(*module);
  llvm::StringMap<const Row *> rows;
  for (const Row &r : kRows)
    rows[r.name] = &r;
  std::map<std::string, int> seen;
  for (const Call &c : calls) {
    SCOPED_TRACE("spw_op_" + c.kernel);
    ++seen[c.kernel];
    auto it = rows.find(c.kernel);
    ASSERT_NE(it, rows.end()) << "the lowering calls a kernel kernels.def "
                                 "does not list";
    const Row &r = *it->second;
    int ins = r.ins;
    if (ins < 0) {
      size_t at = SPW_KERNEL_INS_IATTR_INDEX(ins);
      ASSERT_LT(at, c.iattrs.size());
      ins = int(c.iattrs[at]);
    }
    EXPECT_EQ(c.ins, ins) << "inputs";
    EXPECT_EQ(c.outs, r.outs) << "outputs";
    if (r.iattrs != SPW_KERNEL_RANK_DEPENDENT) {
      EXPECT_EQ(int(c.iattrs.size()), r.iattrs) << "integer attributes";
    }
    EXPECT_EQ(c.fattrs, r.fattrs) << "float attributes";
  }
  for (const Row &r : kRows)
    EXPECT_TRUE(seen.count(r.name))
        << "kernels.def lists spw_op_" << r.name
        << ", which no op of this test lowers to: add one";
}

TEST_F(KernelTableTest, BlockClassesAreTheRuntimes) {
  using spillway::sched::BlockClass;
  int n = 0;
#define SPW_BLOCK_CLASS(ENUM, name, value)                                     \
  EXPECT_EQ(spillway::sched::stringifyBlockClass(BlockClass(value)), #name);   \
  EXPECT_EQ(spillway::sched::symbolizeBlockClass(#name),                       \
            std::optional<BlockClass>(BlockClass(value)));                     \
  ++n;
#include "spillway/runtime/block_classes.def"
  // Every class of the dialect is in the table.
  EXPECT_FALSE(spillway::sched::symbolizeBlockClass(n).has_value());
  EXPECT_TRUE(spillway::sched::symbolizeBlockClass(n - 1).has_value());
}

} // namespace
