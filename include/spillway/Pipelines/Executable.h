//===- Executable.h - LLVM dialect to object code and executables -*- C++ -*-===//
#ifndef SPILLWAY_PIPELINES_EXECUTABLE_H
#define SPILLWAY_PIPELINES_EXECUTABLE_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include <memory>
#include <string>

namespace spillway {

/// Translates an LLVM-dialect module to LLVM IR for the host target.
/// Returns null and sets `error` on failure.
std::unique_ptr<llvm::Module> translateToHostLLVMIR(mlir::ModuleOp module,
                                                    llvm::LLVMContext &llvmCtx,
                                                    std::string &error);

/// Emits `module` as a relocatable object file for the host, in process.
llvm::LogicalResult emitObjectFile(llvm::Module &module, llvm::StringRef path,
                                   std::string &error);

/// Links an object produced above with the runtime archive into a standalone
/// executable, using the system C++ compiler driver as the linker. A
/// non-empty `cudaLibrary` (libspillway_cuda.a) links the CUDA backend too,
/// with the CUDA libraries it needs.
llvm::LogicalResult linkExecutable(llvm::StringRef objectPath,
                                   llvm::StringRef runtimeLibrary,
                                   llvm::StringRef exePath, std::string &error,
                                   llvm::StringRef cudaLibrary = "");

} // namespace spillway

#endif
