//===- TrainAttrs.td - train dialect attributes ------------*- tablegen -*-===//
//
// The layer table: what `train-partition-layers` says of each layer, read
// by the sched passes, the cost model's summary and the driver. Typed so
// that a reader takes a checked entry instead of re-parsing a dictionary.
//
//===----------------------------------------------------------------------===//

#ifndef SPILLWAY_DIALECT_TRAIN_IR_TRAINATTRS_TD
#define SPILLWAY_DIALECT_TRAIN_IR_TRAINATTRS_TD

include "spillway/Dialect/Train/IR/TrainDialect.td"
include "mlir/IR/AttrTypeBase.td"

class Train_Attr<string name, string attrMnemonic>
    : AttrDef<Train_Dialect, name> {
  let mnemonic = attrMnemonic;
}

def Train_SharedParamAttr : Train_Attr<"SharedParam", "shared"> {
  let summary = "a parameter one layer owns and other layers read too";
  let description = [{
    `param` is owned by the layer whose entry lists this; `used_by` are the
    layers whose forward reads it (the owner among them when it does),
    `grad_from` the layers whose backward produces a part of its gradient:
    its update waits for all of them.

    ```mlir
    #train.shared<@wte, used_by = [0, 5], grad_from = [0, 5]>
    ```
  }];
  let parameters = (ins "::mlir::FlatSymbolRefAttr":$param,
                        ArrayRefParameter<"int64_t">:$usedBy,
                        ArrayRefParameter<"int64_t">:$gradFrom);
  let assemblyFormat = [{
    `<` $param `,` `used_by` `=` custom<LayerIndices>($usedBy) `,`
        `grad_from` `=` custom<LayerIndices>($gradFrom) `>`
  }];
  let genVerifyDecl = 1;
}

def Train_LayerAttr : Train_Attr<"Layer", "layer"> {
  let summary = "one layer of the module's `train.layers`";
  let description = [{
    A layer's `name` (`h.3`, or `a+b` for parallel branches), the
    parameters it owns (`params`, in the order its blocks pack them),
    where present those of them other layers read too (`shared`) and the
    parameters owned by other layers that it reads (`uses`, a tied
    weight).

    ```mlir
    #train.layer<"h.0", params = [@h.0.w, @h.0.b]>
    #train.layer<"wte", params = [@wte],
                 shared = [#train.shared<@wte, used_by = [0, 5], grad_from = [0, 5]>]>
    #train.layer<"lm_head", params = [@lm_head.b], uses = [@wte]>
    ```
  }];
  let parameters = (ins StringRefParameter<"the layer's name">:$name,
      ArrayRefParameter<"::mlir::FlatSymbolRefAttr">:$params,
      OptionalArrayRefParameter<"::spillway::train::SharedParamAttr">:$shared,
      OptionalArrayRefParameter<"::mlir::FlatSymbolRefAttr">:$uses);
  // Written by hand: `shared` and `uses` are optional and comma-led, which
  // a declarative format cannot tell apart.
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Whether another layer reads one of its parameters or it reads one of
    /// another layer's (a tied weight).
    bool sharesParams() const { return !getShared().empty() || !getUses().empty(); }
  }];
}

#endif // SPILLWAY_DIALECT_TRAIN_IR_TRAINATTRS_TD
