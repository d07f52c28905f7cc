//===- InitAll.h - everything Spillway's tools register ---------*- C++ -*-===//
#ifndef SPILLWAY_INITALL_H
#define SPILLWAY_INITALL_H

#include "mlir/IR/DialectRegistry.h"

namespace spillway {
/// The dialects Spillway's tools parse and print.
void registerAllDialects(mlir::DialectRegistry &registry);
/// Spillway's passes plus the upstream passes its pipelines use.
void registerAllPasses();
} // namespace spillway

#endif
