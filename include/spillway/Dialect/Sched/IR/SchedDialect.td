//===- SchedDialect.td - the sched dialect -----------------*- tablegen -*-===//
//
// `sched` says when and where: one training iteration as an explicit,
// ordered program of tasks (layer x phase x micro-batch) with the residency
// of tensors, the transfers between tiers and the timepoints that order them.
//
//===----------------------------------------------------------------------===//

#ifndef SPILLWAY_DIALECT_SCHED_IR_SCHEDDIALECT_TD
#define SPILLWAY_DIALECT_SCHED_IR_SCHEDDIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Sched_Dialect : Dialect {
  let name = "sched";
  let cppNamespace = "::spillway::sched";
  let summary = "When and where one training iteration runs";
  let description = [{
    A `sched.iteration` is one training iteration written as a program: its
    block runs top to bottom, and its ops are `sched.task`s (the train ops of
    one layer, one phase — fwd, bwd, opt — and, after micro-batching, one
    micro-batch) and the value-level ops between them (`sched.slice` of a
    batch input, `sched.accumulate` of micro-batch gradients and losses).
    Tasks are isolated from above: every value a task reads or produces
    crosses its boundary as an operand or result, so the order of the tasks
    in the block is the schedule, and a FileCheck test reads it as text.

    Residency and transfers follow IREE's `stream` dialect: an offload
    plan's `sched.move` of a layer's block is asynchronous and returns a
    `!sched.timepoint`, which `sched.await` waits for before the block's
    copy is bound for compute. Placement is IR, not an annotation to
    legalize later.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
}

class Sched_Op<string mnemonic, list<Trait> traits = []>
    : Op<Sched_Dialect, mnemonic, traits>;

class Sched_Type<string name, string typeMnemonic>
    : TypeDef<Sched_Dialect, name> {
  let mnemonic = typeMnemonic;
}

def Sched_TimepointType : Sched_Type<"Timepoint", "timepoint"> {
  let summary = "the completion of an asynchronous transfer";
  let description = [{
    Produced by `sched.move`, consumed by `sched.await`.
  }];
}

def Sched_Phase : I32EnumAttr<"Phase", "the phase of a task", [
    I32EnumAttrCase<"fwd", 0>, I32EnumAttrCase<"bwd", 1>,
    I32EnumAttrCase<"opt", 2>]> {
  let cppNamespace = "::spillway::sched";
}

// The runtime ABI's tiers (runtime/include/spillway/runtime/tier.h,
// SPW_TIER_*): the same cases with the same values, which SchedDialect.cpp
// asserts, so a tier crosses from the plan to the executable as its number.
def Sched_Tier : I32EnumAttr<"Tier", "a memory tier", [
    I32EnumAttrCase<"gpu", 0>, I32EnumAttrCase<"host", 1>,
    I32EnumAttrCase<"ssd", 2>]> {
  let cppNamespace = "::spillway::sched";
}

def Sched_BlockClass : I32EnumAttr<"BlockClass",
    "the tensors of one layer that move together", [
    I32EnumAttrCase<"params", 0>, I32EnumAttrCase<"optimizer", 1>,
    I32EnumAttrCase<"gradients", 2>, I32EnumAttrCase<"gradstage", 3>,
    I32EnumAttrCase<"activations", 4>, I32EnumAttrCase<"pending", 5>,
    I32EnumAttrCase<"master", 6>]> {
  let cppNamespace = "::spillway::sched";
}

def Sched_Priority : I32EnumAttr<"Priority",
    "the storage engine's priority class of a transfer", [
    I32EnumAttrCase<"demand", 0>, I32EnumAttrCase<"prefetch", 1>,
    I32EnumAttrCase<"writeback", 2>]> {
  let cppNamespace = "::spillway::sched";
}

def Sched_GradMode : I32EnumAttr<"GradMode",
    "whether a gradient flush starts or adds to an accumulator", [
    I32EnumAttrCase<"first", 0>, I32EnumAttrCase<"add", 1>]> {
  let cppNamespace = "::spillway::sched";
}

def Sched_AccumulateKind : I32EnumAttr<"AccumulateKind",
    "how micro-batch values combine", [
    I32EnumAttrCase<"sum", 0>, I32EnumAttrCase<"mean", 1>]> {
  let cppNamespace = "::spillway::sched";
}

def Sched_PlacementAttr : AttrDef<Sched_Dialect, "Placement"> {
  let mnemonic = "placement";
  let summary = "the home tier of each tensor class, or of each layer's block";
  let description = [{
    Written by `sched-place` on the iteration; `sched-insert-transfers`
    moves blocks from and to these homes, `sched-assign-buffers` sizes the
    tiers by them.

    A class off the GPU may be split by layer: `layers` maps a class
    (`params`, `optimizer`, `gradients`, `master` under bf16-mixed, or
    `activations`) to the home tier of each layer's block, one entry per
    layer of `train.layers`, each `host` (1) or `ssd` (2), and for `params`
    and `activations` also `gpu` (0: parameters resident for the whole
    iteration, no load brings them; activations the backward reads where
    the forward left them). A layer's activations are those its forward
    tasks produce. The class's own tier is then the slowest of them. Where
    the optimizer runs (the GPU with its state there, the host otherwise)
    and where the backward leaves the gradients stay one place for the
    whole model.

    A block homed on SSD may be cut between host and SSD: `cuts` maps a
    class (`params`, `optimizer` or `master`) to pairs of a layer and a
    number of elements E > 0, `array<i64: layer, E, ...>` (layers
    ascending): the first E elements of that layer's block (of its members
    in block order; of each moment for the optimizer) live on host, the rest
    at the block's home, SSD. A layer's params, master and optimizer blocks
    are then split at element E into two parts (as the optimizer overlap
    splits them, at the same element for every class, so a layer cut in two
    classes is cut at one E); `sched-assign-buffers` checks E against the
    layer.

    ```mlir
    #sched.placement<params = ssd, optimizer = host, gradients = host, activations = gpu>
    #sched.placement<params = ssd, optimizer = ssd, gradients = host,
                     activations = gpu, layers = {optimizer = array<i32: 1, 1, 2>}>
    #sched.placement<params = gpu, optimizer = ssd, gradients = host,
                     activations = gpu, layers = {optimizer = array<i32: 1, 2, 2>},
                     cuts = {optimizer = array<i64: 1, 8192>}>
    ```
  }];
  let parameters = (ins EnumParameter<Sched_Tier>:$params,
                        EnumParameter<Sched_Tier>:$optimizer,
                        EnumParameter<Sched_Tier>:$gradients,
                        EnumParameter<Sched_Tier>:$activations,
                        OptionalParameter<"::mlir::DictionaryAttr">:$layers,
                        OptionalParameter<"::mlir::DictionaryAttr">:$cuts);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The home of layer `layer`'s block of class `cls` ("params",
    /// "optimizer", "gradients", "master" or "activations"), whose class
    /// tier is `base`.
    Tier homeOf(::llvm::StringRef cls, Tier base, int64_t layer) const;
    /// The per-layer tiers of `cls`, or an empty list when it is whole.
    ::llvm::ArrayRef<int32_t> layerTiers(::llvm::StringRef cls) const;
    /// The elements of layer `layer`'s block of class `cls` that live on
    /// host apart from the rest of the block (`cuts`); 0: it is not cut.
    int64_t cutOf(::llvm::StringRef cls, int64_t layer) const;
    /// The element layer `layer`'s params, master and optimizer blocks are
    /// split at by its cuts (one for all its classes); 0: none is cut.
    int64_t layerCut(int64_t layer) const;
  }];
}

#endif // SPILLWAY_DIALECT_SCHED_IR_SCHEDDIALECT_TD
