//===- ToolMain.cpp - nesting limit and a large stack for the tools -------===//

#include "spillway/Support/ToolMain.h"

#include "llvm/ADT/Twine.h"

#include <pthread.h>

using namespace spillway;

bool spillway::checkNesting(llvm::StringRef text, llvm::StringRef name,
                            CommentStyle comments, std::string &error) {
  int depth = 0, line = 1;
  for (size_t i = 0, n = text.size(); i < n; ++i) {
    char c = text[i];
    char next = i + 1 < n ? text[i + 1] : '\0';
    if (c == '\n') {
      ++line;
    } else if (c == '"') {
      // A string: skip to its end (a backslash escapes the next character).
      for (++i; i < n && text[i] != '"'; ++i) {
        if (text[i] == '\\')
          ++i;
        else if (text[i] == '\n')
          ++line;
      }
    } else if ((comments == CommentStyle::MLIR && c == '/' && next == '/') ||
               (comments == CommentStyle::ONNX && c == '#')) {
      while (i < n && text[i] != '\n')
        ++i;
      --i; // the newline counts the line
    } else if ((c == '-' || c == '=' || c == '<') &&
               (next == '>' || next == '=')) {
      ++i; // ->, =>, <=, >=-like operators: not brackets
    } else if (c == '>' && next == '=') {
      ++i;
    } else if (c == '{' || c == '[' || c == '(' || c == '<') {
      if (++depth > kMaxNesting) {
        error = ((name.empty() ? llvm::Twine("line ") : name + ":") +
                 llvm::Twine(line) + ": brackets nest deeper than " +
                 llvm::Twine(kMaxNesting) +
                 " levels; Spillway reads models nested at most that deep")
                    .str();
        return false;
      }
    } else if (c == '}' || c == ']' || c == ')' || c == '>') {
      depth = depth > 0 ? depth - 1 : 0;
    }
  }
  return true;
}

namespace {
struct Job {
  llvm::function_ref<int()> body;
  int result = 0;
};
} // namespace

static void *runJob(void *arg) {
  auto *job = static_cast<Job *>(arg);
  job->result = job->body();
  return nullptr;
}

int spillway::runWithLargeStack(llvm::function_ref<int()> body) {
  Job job{body};
  pthread_attr_t attr;
  pthread_t thread;
  bool started = pthread_attr_init(&attr) == 0 &&
                 pthread_attr_setstacksize(&attr, kToolStackBytes) == 0 &&
                 pthread_create(&thread, &attr, runJob, &job) == 0;
  pthread_attr_destroy(&attr);
  if (!started)
    return body();
  pthread_join(thread, nullptr);
  return job.result;
}
