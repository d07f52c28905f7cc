//===- scripted_faults.cpp - fault injection from a script ----------------===//

#include "storage/io_engine.h"

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <sstream>

namespace spw::storage {

namespace {

enum class Kind { Short, Short512, Zero, Error };

struct Rule {
  Kind kind;
  int err = 0;       // for Kind::Error: the errno reported
  int64_t n = 1;     // the completion it applies to, counted from 1
  bool onward = false;
  int only = -1;     // -1: any op; else the IoOp counted
};

int errno_named(const std::string &s) {
  if (s == "eio") return EIO;
  if (s == "enospc") return ENOSPC;
  if (s == "eagain") return EAGAIN;
  if (s == "eintr") return EINTR;
  if (s == "ecanceled") return ECANCELED;
  if (s == "eperm") return EPERM;
  if (s == "enosys") return ENOSYS;
  if (s == "eacces") return EACCES;
  if (s == "enomem") return ENOMEM;
  if (s == "einval") return EINVAL;
  if (s == "ebusy") return EBUSY;
  if (s == "ebadf") return EBADF;
  return 0;
}

} // namespace

struct ScriptedFaults::Impl {
  std::mutex mu;
  std::vector<Rule> rules;
  int ring = 0, reg = 0, direct = 0; // -errno to inject, or 0
  int submit = 0;                     // -errno for io_uring_submit_and_wait
  int64_t submit_from = 1;            // the first call that fails
  int64_t submit_left = -1;           // calls still to fail; -1: all
  int64_t submit_calls = 0;
  int64_t seen[3] = {0, 0, 0};   // completions: reads, writes, all
  int64_t injected = 0;
};

ScriptedFaults::ScriptedFaults(const std::string &script)
    : impl_(std::make_unique<Impl>()) {
  std::stringstream ss(script);
  std::string item;
  auto bad = [&](const char *why) {
    fail("fault script '%s': rule '%s' %s (rules: short@N, short512@N, "
         "zero@N, eio@N, "
         "enospc@N, eagain@N, eintr@N, ecanceled@N, optionally N+ and "
         "/read or /write; ring=eperm|enosys; register=enomem|eperm; "
         "direct=einval; submit=eagain|eintr|ebusy|ebadf|eio|enomem, "
         "optionally @N and *K)",
         script.c_str(), item.c_str(), why);
  };
  while (std::getline(ss, item, ',')) {
    while (!item.empty() && item.front() == ' ')
      item.erase(item.begin());
    while (!item.empty() && item.back() == ' ')
      item.pop_back();
    if (item.empty())
      continue;
    if (auto eq = item.find('='); eq != std::string::npos) {
      std::string key = item.substr(0, eq), val = item.substr(eq + 1);
      int64_t times = -1, from = 1;
      auto number_after = [&](char c, const char *why) -> int64_t {
        auto pos = val.find(c);
        if (key != "submit" || pos == std::string::npos)
          return 0;
        std::string k = val.substr(pos + 1);
        val = val.substr(0, pos);
        char *end = nullptr;
        long long v = k.empty() ? 0 : strtoll(k.c_str(), &end, 10);
        if (k.empty() || *end || v < 1)
          bad(why);
        return v;
      };
      if (int64_t k = number_after('*', "needs a count K >= 1 after *"))
        times = k;
      if (int64_t n = number_after('@', "needs a call number N >= 1 after @"))
        from = n;
      int e = errno_named(val);
      if (key == "ring" && (e == EPERM || e == ENOSYS || e == EACCES))
        impl_->ring = -e;
      else if (key == "register" && (e == ENOMEM || e == EPERM))
        impl_->reg = -e;
      else if (key == "direct" && e == EINVAL)
        impl_->direct = -e;
      else if (key == "submit" &&
               (e == EAGAIN || e == EINTR || e == EBUSY || e == EBADF ||
                e == EIO || e == ENOMEM)) {
        impl_->submit = -e;
        impl_->submit_left = times;
        impl_->submit_from = from;
      }
      else
        bad("is not understood");
      continue;
    }
    auto at = item.find('@');
    if (at == std::string::npos)
      bad("has no @N");
    Rule r;
    std::string kind = item.substr(0, at), rest = item.substr(at + 1);
    if (kind == "short")
      r.kind = Kind::Short;
    else if (kind == "short512")
      r.kind = Kind::Short512;
    else if (kind == "zero")
      r.kind = Kind::Zero;
    else if (int e = errno_named(kind);
             e == EIO || e == ENOSPC || e == EAGAIN || e == EINTR ||
             e == ECANCELED) {
      r.kind = Kind::Error;
      r.err = e;
    } else
      bad("names no known fault");
    if (auto slash = rest.find('/'); slash != std::string::npos) {
      std::string op = rest.substr(slash + 1);
      rest = rest.substr(0, slash);
      if (op == "read")
        r.only = int(IoOp::Read);
      else if (op == "write")
        r.only = int(IoOp::Write);
      else
        bad("has an op other than /read or /write");
    }
    if (!rest.empty() && rest.back() == '+') {
      r.onward = true;
      rest.pop_back();
    }
    char *end = nullptr;
    long long n = rest.empty() ? 0 : strtoll(rest.c_str(), &end, 10);
    if (rest.empty() || *end || n < 1)
      bad("needs a completion number N >= 1 after @");
    r.n = n;
    impl_->rules.push_back(r);
  }
}

ScriptedFaults::~ScriptedFaults() = default;

int ScriptedFaults::rewrite_completion(const PieceInfo &piece, int res) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  int64_t nop = ++impl_->seen[int(piece.op)];
  int64_t nall = ++impl_->seen[2];
  for (const Rule &r : impl_->rules) {
    int64_t n = r.only < 0 ? nall : r.only == int(piece.op) ? nop : -1;
    if (n < 0 || !(n == r.n || (r.onward && n > r.n)))
      continue;
    int out = res;
    switch (r.kind) {
    case Kind::Short:
      if (res > 0) {
        out = (res / 2) & ~511;
        if (out == 0)
          out = res / 2;
      }
      break;
    case Kind::Short512: // not a multiple of any O_DIRECT alignment
      if (res > 0)
        out = res > 512 ? res - 512 : res / 2;
      break;
    case Kind::Zero:
      out = 0;
      break;
    case Kind::Error:
      out = -r.err;
      break;
    }
    if (out != res)
      ++impl_->injected;
    return out;
  }
  return res;
}

int ScriptedFaults::ring_init_result() { return impl_->ring; }
int ScriptedFaults::register_buffers_result() { return impl_->reg; }
int ScriptedFaults::open_direct_result() { return impl_->direct; }

int ScriptedFaults::submit_result() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  if (!impl_->submit || ++impl_->submit_calls < impl_->submit_from ||
      impl_->submit_left == 0)
    return 0;
  if (impl_->submit_left > 0)
    --impl_->submit_left;
  return impl_->submit;
}

int64_t ScriptedFaults::injected() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->injected;
}

} // namespace spw::storage
