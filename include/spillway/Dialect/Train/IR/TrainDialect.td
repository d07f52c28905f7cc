//===- TrainDialect.td - the train dialect -----------------*- tablegen -*-===//
//
// `train` says what a training iteration computes: value-semantic tensor ops
// that mirror the ONNX ops exporters emit, the gradient ops autodiff produces,
// named parameters, and optimizer updates.
//
//===----------------------------------------------------------------------===//

#ifndef SPILLWAY_DIALECT_TRAIN_IR_TRAINDIALECT_TD
#define SPILLWAY_DIALECT_TRAIN_IR_TRAINDIALECT_TD

include "mlir/IR/OpBase.td"

def Train_Dialect : Dialect {
  let name = "train";
  let cppNamespace = "::spillway::train";
  let summary = "What one training iteration computes";
  let description = [{
    Tensor ops with value semantics over ranked, statically shaped tensors.
    Primitive ops mirror the ONNX operators real exporters emit; gradient ops
    (`*_grad`, `sum_to_shape`, `broadcast_to`) are produced by
    `train-autodiff`; `train.param` declares a named parameter whose initial
    value lives in the module's weights file (`train.weights` module
    attribute), never inline in the IR.
  }];
  let hasConstantMaterializer = 0;
  let useDefaultAttributePrinterParser = 1;
  // `train.layers` on the module: an array of #train.layer checked once.
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
  let useDefaultTypePrinterParser = 0;
}

class Train_Op<string mnemonic, list<Trait> traits = []>
    : Op<Train_Dialect, mnemonic, traits>;

#endif // SPILLWAY_DIALECT_TRAIN_IR_TRAINDIALECT_TD
