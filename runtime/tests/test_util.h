//===- test_util.h - helpers for the runtime's unit tests ------------------===//
#ifndef SPILLWAY_RUNTIME_TESTS_TEST_UTIL_H
#define SPILLWAY_RUNTIME_TESTS_TEST_UTIL_H

#include "context.h"
#include "formats.h"
#include "storage/checkpoint.h"

#include <csignal>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <initializer_list>
#include <memory>
#include <regex>
#include <string>
#include <vector>

namespace spwtest {

// A --log-json log without the fields that time the run (tokens_per_s,
// flops_per_s, elapsed_s, eta_s, offload): what two runs that train the
// same must agree on byte for byte.
inline std::string without_timings(const std::string &log) {
  static const std::regex timed(
      R"re(, "(tokens_per_s|flops_per_s|elapsed_s|eta_s)": [^,}]*|, "offload": \{[^}]*\})re");
  return std::regex_replace(log, timed, "");
}

using Tensor = std::unique_ptr<spw_tensor>;
using Kernel = void (*)(spw_ctx *, spw_tensor *const *, spw_tensor *const *,
                        const int64_t *, const double *);

inline Tensor make(int32_t dtype, const std::vector<int64_t> &dims) {
  return spw::make_tensor(dtype, int32_t(dims.size()), dims.data(), "test");
}

inline Tensor f32(const std::vector<int64_t> &dims,
                  const std::vector<float> &v) {
  Tensor t = make(SPW_F32, dims);
  if (int64_t(v.size()) != t->numel)
    throw std::runtime_error("test tensor: wrong number of values");
  if (!v.empty()) // memcpy from an empty vector's null data() is UB
    std::memcpy(t->data, v.data(), v.size() * 4);
  return t;
}

inline Tensor i64(const std::vector<int64_t> &dims,
                  const std::vector<int64_t> &v) {
  Tensor t = make(SPW_I64, dims);
  if (!v.empty()) // memcpy from an empty vector's null data() is UB
    std::memcpy(t->data, v.data(), v.size() * 8);
  return t;
}

inline Tensor i32(const std::vector<int64_t> &dims,
                  const std::vector<int32_t> &v) {
  Tensor t = make(SPW_I32, dims);
  if (!v.empty()) // memcpy from an empty vector's null data() is UB
    std::memcpy(t->data, v.data(), v.size() * 4);
  return t;
}

inline std::vector<float> values(const spw_tensor &t) {
  return std::vector<float>(t.as<float>(), t.as<float>() + t.numel);
}

// Runs a kernel on a fresh context; returns its error ("" on success).
inline std::string call(Kernel k, std::initializer_list<spw_tensor *> ins,
                        std::initializer_list<spw_tensor *> outs,
                        std::initializer_list<int64_t> iattrs = {},
                        std::initializer_list<double> fattrs = {}) {
  auto ctx = spw::make_context();
  std::vector<spw_tensor *> in(ins), out(outs);
  std::vector<int64_t> ia(iattrs);
  std::vector<double> fa(fattrs);
  k(ctx.get(), in.data(), out.data(), ia.empty() ? nullptr : ia.data(),
    fa.empty() ? nullptr : fa.data());
  return ctx->error;
}

// Deterministic pseudo-random floats in [lo, hi).
inline std::vector<float> randoms(size_t n, uint64_t seed, float lo = -1.0f,
                                  float hi = 1.0f) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto &x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = lo + (hi - lo) * float((s >> 11) * (1.0 / 9007199254740992.0));
  }
  return v;
}

// A pid that runs no process: a child that has exited and been reaped.
inline pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child < 0)
    throw std::runtime_error("dead_pid: fork failed");
  if (child == 0)
    ::_exit(0);
  if (::waitpid(child, nullptr, 0) != child)
    throw std::runtime_error("dead_pid: waitpid failed");
  return child;
}

// A child process holding the checkpoint directory lock of `dir`, as a
// running training run does, until release() (or destruction) kills it;
// its flock dies with it.
class LockHolder {
public:
  explicit LockHolder(const std::string &dir) {
    if (::pipe(ready_) != 0 || ::pipe(hold_) != 0)
      throw std::runtime_error("LockHolder: pipe failed");
    pid_ = ::fork();
    if (pid_ < 0)
      throw std::runtime_error("LockHolder: fork failed");
    if (pid_ == 0) {
      try {
        spw::storage::CheckpointDirLock lock(dir);
        char c = 'y';
        if (::write(ready_[1], &c, 1) != 1)
          std::_Exit(2);
        (void)!::read(hold_[0], &c, 1); // until the parent kills it
      } catch (...) {
        std::_Exit(3);
      }
      std::_Exit(0);
    }
    char c = 0;
    if (::read(ready_[0], &c, 1) != 1)
      throw std::runtime_error("LockHolder: the child did not take the lock");
  }
  ~LockHolder() { release(); }
  LockHolder(const LockHolder &) = delete;
  LockHolder &operator=(const LockHolder &) = delete;

  pid_t pid() const { return pid_; }
  void release() {
    if (pid_ <= 0)
      return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    for (int fd : {ready_[0], ready_[1], hold_[0], hold_[1]})
      ::close(fd);
    pid_ = -1;
  }

private:
  int ready_[2] = {-1, -1}, hold_[2] = {-1, -1};
  pid_t pid_ = -1;
};

} // namespace spwtest

#endif // SPILLWAY_RUNTIME_TESTS_TEST_UTIL_H
