//===- OffloadOps.cpp - an offload plan's sched ops to runtime calls ------===//
//
// Part of convert-train-to-runtime: an offload plan's tiers (the arenas and
// blocks sched-assign-buffers laid out, declared in spw_model_declare) and
// its sched ops, which convert-sched-to-train leaves in the flat step among
// the train ops, as the runtime's spw_move family (docs/runtime.md,
// "Offload").
//
//===----------------------------------------------------------------------===//

#include "RuntimeEmitter.h"

using namespace mlir;
using namespace spillway;
using namespace spillway::runtime_lowering;

LogicalResult RuntimeEmitter::emitTiers() {
  auto plan = module->getAttrOfType<DictionaryAttr>("sched.buffers");
  if (!plan)
    return success();
  auto i64Of = [&](DictionaryAttr d, StringRef key) -> int64_t {
    auto a = d.getAs<IntegerAttr>(key);
    return a ? a.getInt() : 0;
  };
  auto links = plan.getAs<DictionaryAttr>("bytes_per_iteration");
  if (!links)
    return module.emitError("sched.buffers has no bytes_per_iteration");
  SmallVector<int64_t> predicted = {
      i64Of(links, "ssd_read"), i64Of(links, "ssd_write"), i64Of(links, "h2d"),
      i64Of(links, "d2h")};
  auto dirs = module->getAttrOfType<StringAttr>("sched.ssd_dirs");
  callRuntime("spw_declare_tiers", voidTy,
              {ptrTy, i64Ty, i64Ty, i64Ty, ptrTy, ptrTy},
              {ctxArg, i64(i64Of(plan, "gpu_bytes")),
               i64(i64Of(plan, "host_bytes")), i64(i64Of(plan, "ssd_bytes")),
               stringConstant(dirs ? dirs.getValue() : ""),
               i64Array(predicted)});
  if (auto pred = module->getAttrOfType<DictionaryAttr>("sched.prediction")) {
    auto secs = pred.getAs<FloatAttr>("iteration_s");
    auto bound = pred.getAs<StringAttr>("bound");
    if (!secs || !bound)
      return module.emitError("sched.prediction needs iteration_s and bound");
    callRuntime("spw_declare_prediction", voidTy, {ptrTy, f64Ty, ptrTy},
                {ctxArg, f64(secs.getValueAsDouble()),
                 stringConstant(bound.getValue())});
  }
  if (auto step = plan.getAs<IntegerAttr>("step_arena_bytes")) {
    // What the step's tensors may take on the device beside the arena.
    if (step.getInt() < 0)
      return module.emitError("sched.buffers: negative step_arena_bytes ")
             << step.getInt();
    callRuntime("spw_declare_step_arena", voidTy, {ptrTy, i64Ty},
                {ctxArg, i64(step.getInt())});
  }
  auto blocks = plan.getAs<ArrayAttr>("blocks");
  if (!blocks)
    return module.emitError("sched.buffers has no blocks");
  for (Attribute a : blocks) {
    // The plan comes from sched-assign-buffers; a hand-edited one must still
    // be an error, never a crash or a runtime reading past an array.
    auto b = dyn_cast<DictionaryAttr>(a);
    auto clsName = b ? b.getAs<StringAttr>("class") : StringAttr();
    auto cls = clsName ? sched::symbolizeBlockClass(clsName.getValue())
                       : std::nullopt;
    auto memberList = b ? b.getAs<ArrayAttr>("members") : ArrayAttr();
    auto offsets = b ? b.getAs<DenseI64ArrayAttr>("offsets")
                     : DenseI64ArrayAttr();
    if (!cls || !memberList || !offsets || !b.getAs<IntegerAttr>("layer") ||
        !b.getAs<IntegerAttr>("bytes") ||
        int64_t(memberList.size()) != offsets.size())
      return module.emitError("sched.buffers: malformed block ")
             << a << " (class, layer, bytes, members and as many offsets)";
    int32_t home = -1;
    if (auto h = b.getAs<StringAttr>("home")) {
      auto tier = sched::symbolizeTier(h.getValue());
      if (!tier || !b.getAs<IntegerAttr>("offset"))
        return module.emitError("sched.buffers: block ")
               << a << " has a bad home";
      home = static_cast<int32_t>(*tier);
    }
    if (*cls == sched::BlockClass::activations) {
      // Homeless and memberless: a slot on each tier it visits (`at`).
      if (home != -1 || !memberList.empty() || i64Of(b, "bytes") <= 0)
        return module.emitError("sched.buffers: activation block ")
               << a << " has a home, members or no bytes";
      callRuntime("spw_declare_activation", voidTy, {ptrTy, i32Ty, i64Ty},
                  {ctxArg, i32(i64Of(b, "layer")), i64(i64Of(b, "bytes"))});
      continue;
    }
    SmallVector<int64_t> members;
    for (Attribute m : memberList) {
      auto sym = dyn_cast<FlatSymbolRefAttr>(m);
      auto it = sym ? paramIndexByName.find(sym.getValue())
                    : paramIndexByName.end();
      if (it == paramIndexByName.end())
        return module.emitError("sched.buffers: unknown parameter ") << m;
      members.push_back(it->second);
    }
    callRuntime("spw_declare_block", voidTy,
                {ptrTy, i32Ty, i32Ty, i64Ty, i32Ty, i64Ty, i32Ty, ptrTy, ptrTy},
                {ctxArg, i32(static_cast<int32_t>(*cls)),
                 i32(i64Of(b, "layer")), i64(i64Of(b, "bytes")), i32(home),
                 i64(i64Of(b, "offset")), i32(members.size()),
                 i64Array(members), i64Array(offsets.asArrayRef())});
    if (auto split = b.getAs<IntegerAttr>("split")) {
      if (split.getInt() <= 0)
        return module.emitError("sched.buffers: block ")
               << a << " has a bad split";
      callRuntime("spw_declare_split", voidTy, {ptrTy, i32Ty, i32Ty, i64Ty},
                  {ctxArg, i32(static_cast<int32_t>(*cls)),
                   i32(i64Of(b, "layer")), i64(split.getInt())});
    }
    // A block cut between two tiers: part 0's own home.
    if (auto h0 = b.getAs<StringAttr>("home0")) {
      auto tier = sched::symbolizeTier(h0.getValue());
      auto offset0 = b.getAs<IntegerAttr>("offset0");
      if (!tier || !offset0 || offset0.getInt() < 0 ||
          !b.getAs<IntegerAttr>("split"))
        return module.emitError("sched.buffers: block ")
               << a << " has a bad home0 (a split block's part 0 home: a "
               << "tier and offset0)";
      callRuntime(
          "spw_declare_part_home", voidTy, {ptrTy, i32Ty, i32Ty, i32Ty, i64Ty},
          {ctxArg, i32(static_cast<int32_t>(*cls)), i32(i64Of(b, "layer")),
           i32(static_cast<int32_t>(*tier)), i64(offset0.getInt())});
    }
  }
  return success();
}

FailureOr<bool> RuntimeEmitter::emitSchedOp(Operation *op) {
  auto atOf = [&](std::optional<uint64_t> at) {
    return i64(at ? int64_t(*at) : -1);
  };
  auto tier = [&](sched::Tier t) { return i32(static_cast<int32_t>(t)); };
  auto cls = [&](sched::BlockClass c) { return i32(static_cast<int32_t>(c)); };
  if (!module->hasAttr("sched.buffers"))
    return op->emitOpError("needs the offload plan's buffers; run "
                           "sched-assign-buffers before lowering");
  if (auto mv = dyn_cast<sched::MoveOp>(op)) {
    // One part of a split block, or the whole block.
    if (auto part = mv.getPart()) {
      setHandle(mv.getTimepoint(), callRuntime(
          "spw_move_part", i32Ty,
          {ptrTy, i32Ty, i32Ty, i32Ty, i32Ty, i32Ty, i32Ty, i64Ty},
          {ctxArg, cls(mv.getBlockClass()), i32(mv.getLayer()),
           i32(static_cast<int32_t>(*part)), tier(mv.getFrom()),
           tier(mv.getTo()), i32(static_cast<int32_t>(mv.getPrio())),
           atOf(mv.getAt())}));
      return true;
    }
    setHandle(mv.getTimepoint(), callRuntime(
        "spw_move", i32Ty, {ptrTy, i32Ty, i32Ty, i32Ty, i32Ty, i32Ty, i64Ty},
        {ctxArg, cls(mv.getBlockClass()), i32(mv.getLayer()),
         tier(mv.getFrom()), tier(mv.getTo()),
         i32(static_cast<int32_t>(mv.getPrio())), atOf(mv.getAt())}));
    return true;
  }
  if (auto al = dyn_cast<sched::AllocOp>(op)) {
    callRuntime("spw_alloc_copy", voidTy,
                {ptrTy, i32Ty, i32Ty, i32Ty, i32Ty, i64Ty},
                {ctxArg, cls(al.getBlockClass()), i32(al.getLayer()),
                 i32(al.getPart() ? int32_t(*al.getPart()) : -1),
                 tier(al.getTier()), atOf(al.getAt())});
    return true;
  }
  if (auto aw = dyn_cast<sched::AwaitOp>(op)) {
    for (Value t : aw.getTimepoints())
      callRuntime("spw_await", voidTy, {ptrTy, i32Ty},
                  {ctxArg, handle(t)});
    return true;
  }
  if (auto d = dyn_cast<sched::DropOp>(op)) {
    if (auto part = d.getPart())
      callRuntime("spw_drop_part", voidTy,
                  {ptrTy, i32Ty, i32Ty, i32Ty, i32Ty},
                  {ctxArg, cls(d.getBlockClass()), i32(d.getLayer()),
                   i32(static_cast<int32_t>(*part)), tier(d.getTier())});
    else
      callRuntime("spw_drop", voidTy, {ptrTy, i32Ty, i32Ty, i32Ty},
                  {ctxArg, cls(d.getBlockClass()), i32(d.getLayer()),
                   tier(d.getTier())});
    return true;
  }
  if (auto bd = dyn_cast<sched::BindOp>(op)) {
    callRuntime("spw_bind", voidTy, {ptrTy, i32Ty, i32Ty, i32Ty},
                {ctxArg, cls(bd.getBlockClass()), i32(bd.getLayer()),
                 tier(bd.getTier())});
    return true;
  }
  if (auto st = dyn_cast<sched::StageGradsOp>(op)) {
    SmallVector<Value> grads;
    for (Value g : st.getGrads())
      grads.push_back(handle(g));
    for (auto [i, v] : llvm::enumerate(grads)) {
      Value slot = LLVM::GEPOp::create(
          builder, loc, ptrTy, LLVM::LLVMArrayType::get(ptrTy, numIns),
          insArray, ArrayRef<LLVM::GEPArg>{0, (int32_t)i});
      LLVM::StoreOp::create(builder, loc, v, slot);
    }
    callRuntime("spw_stage_grads", voidTy,
                {ptrTy, i32Ty, i32Ty, i32Ty, i32Ty, ptrTy, i64Ty},
                {ctxArg, cls(st.getInto()), i32(st.getLayer()),
                 i32(static_cast<int32_t>(st.getMode())), i32(grads.size()),
                 insArray, atOf(st.getAt())});
    return true;
  }
  if (auto acc = dyn_cast<sched::AccumulateGradsOp>(op)) {
    callRuntime("spw_accumulate_grads", voidTy,
                {ptrTy, i32Ty, i32Ty, i32Ty, i64Ty},
                {ctxArg, i32(acc.getLayer()),
                 i32(static_cast<int32_t>(acc.getMode())), tier(acc.getTier()),
                 atOf(acc.getAt())});
    return true;
  }
  if (auto g = dyn_cast<sched::GradientOp>(op)) {
    auto it = paramIndexByName.find(g.getParam());
    if (it == paramIndexByName.end())
      return g.emitOpError("refers to unknown parameter @") << g.getParam();
    setHandle(g.getResult(), callRuntime(
        "spw_gradient", ptrTy, {ptrTy, i32Ty, i32Ty, i32Ty, i64Ty},
        {ctxArg, i32(it->second), i32(g.getLayer()), tier(g.getTier()),
         i64(g.getDivisor())}));
    return true;
  }
  if (auto n = dyn_cast<sched::GradNormsOp>(op)) {
    callRuntime("spw_grad_norms", voidTy, {ptrTy, i32Ty, i32Ty, i64Ty},
                {ctxArg, i32(n.getLayer()), tier(n.getTier()),
                 i64(n.getDivisor())});
    return true;
  }
  if (auto clip = dyn_cast<sched::ClipGradNormOp>(op)) {
    SmallVector<int64_t> indices;
    for (Attribute a : clip.getParams()) {
      auto sym = cast<FlatSymbolRefAttr>(a);
      auto it = paramIndexByName.find(sym.getValue());
      if (it == paramIndexByName.end())
        return clip.emitOpError("refers to unknown parameter ") << sym;
      indices.push_back(it->second);
    }
    // The updates that take the coefficient run after it; the runtime
    // applies the step's coefficient to them.
    setHandle(clip.getCoef(),
              callRuntime("spw_clip_grad_norm_of", ptrTy,
                          {ptrTy, i32Ty, ptrTy, f64Ty},
                          {ctxArg, i32(int32_t(indices.size())),
                           i64Array(indices),
                           f64(clip.getMaxNorm().convertToDouble())}));
    return true;
  }
  if (auto put = dyn_cast<sched::PutActivationOp>(op)) {
    callRuntime("spw_put_activation", voidTy, {ptrTy, i32Ty, ptrTy, i64Ty},
                {ctxArg, i32(put.getIndex()), handle(put.getValue()),
                 atOf(put.getAt())});
    return true;
  }
  if (auto take = dyn_cast<sched::TakeActivationOp>(op)) {
    auto type = cast<RankedTensorType>(take.getType());
    auto dtype = dtypeOf(op, type.getElementType());
    if (failed(dtype))
      return failure();
    setHandle(take.getResult(), callRuntime(
        "spw_take_activation", ptrTy, {ptrTy, i32Ty, i32Ty, i32Ty, ptrTy},
        {ctxArg, i32(take.getIndex()), i32(*dtype), i32(type.getRank()),
         i64Array(type.getShape())}));
    return true;
  }
  return false;
}

