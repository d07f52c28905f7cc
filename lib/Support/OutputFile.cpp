//===- OutputFile.cpp - write a file a tool makes, errors named -----------===//

#include "spillway/Support/OutputFile.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace spillway;

bool spillway::finishOutput(llvm::raw_fd_ostream &os, llvm::StringRef path,
                            std::string &error) {
  // A close can fail too (a quota, NFS); stdout ("-") is not ours to close.
  if (path == "-")
    os.flush();
  else
    os.close();
  if (!os.has_error())
    return true;
  error = "cannot write '" + path.str() + "': " + os.error().message();
  os.clear_error();
  return false;
}

bool spillway::writeOutputFile(
    llvm::StringRef path, llvm::function_ref<void(llvm::raw_ostream &)> write,
    std::string &error) {
  auto out = mlir::openOutputFile(path, &error);
  if (!out)
    return false;
  write(out->os());
  if (!finishOutput(out->os(), path, error))
    return false; // not kept: the partial file is removed
  out->keep();
  return true;
}
