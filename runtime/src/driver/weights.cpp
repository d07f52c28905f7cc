//===- weights.cpp - checking and reading the weights file ----------------===//

#include "driver/driver.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <sys/stat.h>
#include <unordered_map>

namespace spw::driver {

// Reads exactly `bytes` bytes at `offset`; false at end of file (errno 0) or
// on an error (errno set).
bool read_at(int fd, void *dst, size_t bytes, int64_t offset) {
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::pread(fd, static_cast<char *>(dst) + done, bytes - done,
                        off_t(offset + int64_t(done)));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      if (n == 0)
        errno = 0;
      return false;
    }
    done += size_t(n);
  }
  return true;
}

namespace {

[[noreturn]] void read_failed(const std::string &path, const std::string &what,
                              int64_t offset) {
  const int e = errno;
  fail("cannot read %s from weights file '%s' at offset %lld: %s",
       what.c_str(), path.c_str(), (long long)offset,
       e ? std::strerror(e) : "unexpected end of file");
}

} // namespace

// The first non-finite element of n floats, or -1.
int64_t first_non_finite(const float *x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i]))
      return i;
  return -1;
}

const char *non_finite_name(float v) {
  return std::isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf";
}

// The first f32 parameter holding a NaN or infinity (host copies), with
// the element; nullptr when all are finite.
const ParamInfo *non_finite_param(const spw_ctx *ctx, int64_t *element) {
  for (const ParamInfo &p : ctx->params) {
    if (p.value->dtype != SPW_F32 || !p.value->data)
      continue;
    const int64_t i = first_non_finite(p.value->as<float>(), p.value->numel);
    if (i >= 0) {
      *element = i;
      return &p;
    }
  }
  return nullptr;
}

namespace {

// safetensors' own limit on the header size.
constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

// Checks a .safetensors file whose first 8 bytes gave header length `n`
// (already checked: 2 <= n <= kMaxSafetensorsHeader) against the declared
// parameters, by name, and fills plan.offsets.
void check_safetensors(const spw_ctx *ctx, WeightsPlan &plan,
                       int64_t file_size, int64_t n, std::string header) {
  const std::string &path = plan.path;
  const std::string what = format("weights file '%s'", path.c_str());
  if (8 + n > file_size)
    fail("%s looks like a .safetensors file, but is truncated: its header "
         "is %lld bytes, and only %lld bytes follow the 8-byte length",
         what.c_str(), (long long)n, (long long)(file_size - 8));
  const int64_t data_start = 8 + n;
  SafetensorsHeader h =
      parse_safetensors_header(header, file_size - data_start, what);

  std::unordered_map<std::string, size_t> param_index;
  for (size_t i = 0; i < ctx->params.size(); ++i)
    param_index.emplace(ctx->params[i].name, i);
  std::vector<const SafetensorsEntry *> found(ctx->params.size(), nullptr);
  // Name lists for messages, cut after 10 names.
  std::string missing, extra;
  size_t n_missing = 0, n_extra = 0;
  auto add = [](std::string &list, size_t &count, const std::string &name) {
    if (count < 10)
      list += (count ? ", " : "") + name;
    else if (count == 10)
      list += ", ...";
    ++count;
  };
  for (const SafetensorsEntry &t : h.tensors) {
    auto it = param_index.find(t.name);
    if (it != param_index.end())
      found[it->second] = &t;
    else
      add(extra, n_extra, t.name);
  }
  const std::string *first_missing = nullptr;
  for (size_t i = 0; i < ctx->params.size(); ++i)
    if (!found[i]) {
      if (!first_missing)
        first_missing = &ctx->params[i].name;
      add(missing, n_missing, ctx->params[i].name);
    }
  if (first_missing)
    fail("%s has no tensor '%s' (missing %zu of the model's %zu parameters: "
         "%s); was it saved from another model?",
         what.c_str(), first_missing->c_str(), n_missing, ctx->params.size(),
         missing.c_str());
  for (size_t i = 0; i < ctx->params.size(); ++i) {
    const ParamInfo &p = ctx->params[i];
    const SafetensorsEntry &t = *found[i];
    const std::vector<int64_t> dims(p.value->dims,
                                    p.value->dims + p.value->rank);
    if (t.dtype != safetensors_dtype(p.value->dtype) || t.shape != dims)
      fail("%s: tensor '%s' is %s %s, but the model's parameter is %s %s; "
           "was it saved from another model?",
           what.c_str(), t.name.c_str(), t.dtype.c_str(),
           shape_str(t.shape.data(), int(t.shape.size())).c_str(),
           safetensors_dtype(p.value->dtype), p.value->shape().c_str());
  }
  if (n_extra)
    std::fprintf(stderr,
                 "warning: %s has %zu tensor%s that the model does not "
                 "declare (ignored): %s\n",
                 what.c_str(), n_extra, n_extra == 1 ? "" : "s",
                 extra.c_str());
  for (size_t i = 0; i < ctx->params.size(); ++i)
    plan.offsets.push_back(data_start + found[i]->begin);
}

} // namespace

// Checks the weights file `path` against the declared parameters, before
// they have buffers: a .safetensors file (by name; detected by content) or
// the raw layout spillwayc writes (each parameter at its declared offset;
// the file exactly as large as the declared weights).
WeightsPlan check_weights(const spw_ctx *ctx, const std::string &path,
                          bool explicit_path) {
  WeightsPlan plan;
  plan.path = path;
  int64_t needed = 0;
  for (const ParamInfo &p : ctx->params) {
    int64_t end;
    if (__builtin_add_overflow(p.offset, p.value->bytes(), &end))
      fail("the model is inconsistent: parameter '%s' ends beyond 2^63 "
           "bytes of weights",
           p.name.c_str());
    needed = std::max(needed, end);
  }
  if (ctx->weights_bytes >= 0 && needed > ctx->weights_bytes)
    fail("the model is inconsistent: its parameters need %lld bytes of "
         "weights, but it declares %lld",
         (long long)needed, (long long)ctx->weights_bytes);
  const int64_t expected = std::max(needed, ctx->weights_bytes);
  if (ctx->params.empty() && expected == 0 && !explicit_path)
    return plan;
  int64_t size = 0;
  {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 && errno == ENOENT)
      fail("weights file '%s' not found: pass --weights FILE, or recompile "
           "the model with spillwayc to write it",
           path.c_str());
  }
  plan.fd = FdCloser(open_regular(path, "weights file", &size));
  const int fd = plan.fd.fd;

  // Format detection by content: a u64 little-endian header length N in
  // [2, 1e8], then '{'. A raw file of exactly the model's size whose first
  // bytes happen to look like that (say, an int64 parameter holding small
  // numbers) is told apart by its "header" not being JSON text: JSON has no
  // bytes below 0x20 other than tab, newline and carriage return.
  if (size >= 10) {
    unsigned char head[9];
    if (!read_at(fd, head, sizeof head, 0))
      read_failed(path, "the header", 0);
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i)
      n |= uint64_t(head[i]) << (8 * i);
    if (head[8] == '{' && n >= 2 && n <= kMaxSafetensorsHeader) {
      std::string header(size_t(std::min<int64_t>(int64_t(n), size - 8)),
                         '\0');
      if (!read_at(fd, header.data(), header.size(), 8))
        read_failed(path, "the .safetensors header", 8);
      const bool text = std::none_of(header.begin(), header.end(), [](char c) {
        unsigned char u = (unsigned char)c;
        return u < 0x20 && u != '\t' && u != '\n' && u != '\r';
      });
      if (text || size != expected) {
        check_safetensors(ctx, plan, size, int64_t(n), std::move(header));
        return plan;
      }
    }
  }

  if (size != expected)
    fail("weights file '%s' is %lld bytes, the model's weights are %lld "
         "bytes; was it written for another model?",
         path.c_str(), (long long)size, (long long)expected);
  for (const ParamInfo &p : ctx->params)
    plan.offsets.push_back(p.offset);
  return plan;
}

// Reads the checked weights into the parameters' buffers; a NaN or an
// infinity in a float parameter is refused (training would spread it).
// Training refuses non-finite weights and inputs (a NaN would silently reach
// every weight); a forward-only model evaluates what it is given, NaN included.
void read_weights(spw_ctx *ctx, WeightsPlan &plan, bool require_finite) {
  if (plan.offsets.empty())
    return;
  for (size_t i = 0; i < ctx->params.size(); ++i) {
    ParamInfo &p = ctx->params[i];
    if (!read_at(plan.fd.fd, p.value->data, size_t(p.value->bytes()),
                 plan.offsets[i]))
      read_failed(plan.path, format("parameter '%s'", p.name.c_str()),
                  plan.offsets[i]);
    if (p.value->dtype != SPW_F32 || !require_finite)
      continue;
    const int64_t bad = first_non_finite(p.value->as<float>(), p.value->numel);
    if (bad >= 0)
      fail("weights file '%s': parameter '%s' %s holds %s at flat index %lld; "
           "training cannot start from non-finite weights: pass other "
           "--weights",
           plan.path.c_str(), p.name.c_str(), p.value->shape().c_str(),
           non_finite_name(p.value->as<float>()[bad]), (long long)bad);
  }
  plan.fd = FdCloser();
}

} // namespace spw::driver
