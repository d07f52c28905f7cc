//===- Executable.cpp - LLVM dialect to object code and executables -------===//

#include "spillway/Pipelines/Executable.h"
#include "spillway/Support/OutputFile.h"

#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

#ifndef SPILLWAY_RUNTIME_LINK_LIBS
#error "SPILLWAY_RUNTIME_LINK_LIBS (the runtime's libraries) comes from lib/Pipelines/CMakeLists.txt"
#endif

using namespace mlir;

/// The host target machine, position independent so the object links into a
/// PIE. The CPU is generic: the generated code only calls into the runtime,
/// so nothing is gained by tuning it to this machine, and the executable stays
/// portable.
static std::unique_ptr<llvm::TargetMachine> hostTargetMachine(std::string &error) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return nullptr;
  llvm::TargetOptions options;
  return std::unique_ptr<llvm::TargetMachine>(target->createTargetMachine(
      triple, "generic", "", options, llvm::Reloc::PIC_));
}

std::unique_ptr<llvm::Module>
spillway::translateToHostLLVMIR(ModuleOp module, llvm::LLVMContext &llvmCtx,
                                std::string &error) {
  DialectRegistry registry;
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  module.getContext()->appendDialectRegistry(registry);
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, llvmCtx, "spillway_model");
  if (!llvmModule) {
    error = "translation to LLVM IR failed (is the module fully lowered to "
            "the LLVM dialect?)";
    return nullptr;
  }
  auto tm = hostTargetMachine(error);
  if (!tm)
    return nullptr;
  llvmModule->setTargetTriple(tm->getTargetTriple());
  llvmModule->setDataLayout(tm->createDataLayout());
  return llvmModule;
}

LogicalResult spillway::emitObjectFile(llvm::Module &module, StringRef path,
                                       std::string &error) {
  auto tm = hostTargetMachine(error);
  if (!tm)
    return failure();
  std::error_code ec;
  llvm::raw_fd_ostream out(path, ec, llvm::sys::fs::OF_None);
  if (ec) {
    error = "cannot write '" + path.str() + "': " + ec.message();
    return failure();
  }
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, out, nullptr,
                              llvm::CodeGenFileType::ObjectFile)) {
    error = "the host target cannot emit object files";
    return failure();
  }
  pm.run(module);
  return success(spillway::finishOutput(out, path, error));
}

LogicalResult spillway::linkExecutable(StringRef objectPath,
                                       StringRef runtimeLibrary,
                                       StringRef exePath, std::string &error,
                                       StringRef cudaLibrary) {
  // The runtime is C++: link with a C++ driver so libstdc++ comes along.
  std::string driver;
  for (const char *name : {"c++", "g++", "clang++"})
    if (auto found = llvm::sys::findProgramByName(name)) {
      driver = *found;
      break;
    }
  if (driver.empty()) {
    error = "no C++ compiler driver (c++, g++, clang++) on PATH to link the "
            "executable; install build-essential or use --emit obj";
    return failure();
  }
  if (!llvm::sys::fs::exists(runtimeLibrary)) {
    error = "runtime library '" + runtimeLibrary.str() +
            "' not found; pass --runtime-lib PATH (libspillway_runtime.a)";
    return failure();
  }
  if (!cudaLibrary.empty() && !llvm::sys::fs::exists(cudaLibrary)) {
    error = "CUDA runtime library '" + cudaLibrary.str() + "' not found";
    return failure();
  }
  // The CUDA archive first: it refers to the runtime archive's symbols.
  SmallVector<StringRef> args = {driver, objectPath};
  if (!cudaLibrary.empty())
    args.push_back(cudaLibrary);
  args.append({runtimeLibrary, "-o", exePath});
  // What the runtime archive itself links against, as its CMake found it.
  StringRef(SPILLWAY_RUNTIME_LINK_LIBS)
      .split(args, ',', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  if (!cudaLibrary.empty())
    StringRef(SPILLWAY_CUDA_LINK_LIBS)
        .split(args, ',', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  std::string message;
  int rc = llvm::sys::ExecuteAndWait(driver, args, std::nullopt, {}, 0, 0,
                                     &message);
  if (rc != 0) {
    error = "linking '" + exePath.str() + "' with " + driver + " failed" +
            (message.empty() ? "" : (": " + message));
    return failure();
  }
  return success();
}
