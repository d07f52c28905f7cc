//===- TrainAttrs.h - train dialect attributes ------------------*- C++ -*-===//
#ifndef SPILLWAY_DIALECT_TRAIN_IR_TRAINATTRS_H
#define SPILLWAY_DIALECT_TRAIN_IR_TRAINATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"
#include "spillway/Dialect/Train/IR/TrainDialect.h"

#define GET_ATTRDEF_CLASSES
#include "spillway/Dialect/Train/IR/TrainAttrs.h.inc"

#endif
