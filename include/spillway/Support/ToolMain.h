//===- ToolMain.h - what every Spillway tool's main does ---------*- C++ -*-===//
//
// Deeply nested input must get an error, not a stack overflow: the parsers
// (MLIR's, libonnx's textual-syntax one), the verifier and the printer all
// recurse once per nesting level. Two guards:
//  - `checkNesting` refuses text whose brackets nest deeper than
//    `kMaxNesting` before a parser sees it, naming the line;
//  - `runWithLargeStack` runs a tool's work on a thread with a large stack,
//    so that what the check lets through (and what it cannot see, such as
//    MLIR on stdin) has room to recurse.
//
//===----------------------------------------------------------------------===//

#ifndef SPILLWAY_SUPPORT_TOOLMAIN_H
#define SPILLWAY_SUPPORT_TOOLMAIN_H

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"

#include <cstddef>
#include <string>

namespace spillway {

/// The deepest bracket nesting the tools read. Real models nest a few
/// levels (module, function, region; a tensor literal's rank; a subgraph or
/// two); 1000 levels recurse well within `kToolStackBytes`.
constexpr int kMaxNesting = 1000;

/// The stack of the thread a tool's work runs on.
constexpr size_t kToolStackBytes = size_t(512) << 20;

/// How the text to check spells comments.
enum class CommentStyle {
  MLIR, // `// ...`
  ONNX, // `# ...` (ONNX textual syntax)
};

/// Checks that the brackets ({, [, (, <) of `text` outside strings and
/// comments nest at most `kMaxNesting` deep. On failure returns false and
/// sets `error` to a message naming the line where the limit is passed,
/// as `NAME:LINE: ...` (`line LINE: ...` when `name` is empty).
bool checkNesting(llvm::StringRef text, llvm::StringRef name,
                  CommentStyle comments, std::string &error);

/// Runs `body` on a thread with a `kToolStackBytes` stack and returns its
/// result; where no such thread can be made, runs it on this one.
int runWithLargeStack(llvm::function_ref<int()> body);

} // namespace spillway

#endif // SPILLWAY_SUPPORT_TOOLMAIN_H
