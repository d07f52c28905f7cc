//===- weights.cpp - checking and reading the weights file ----------------===//

#include "driver/driver.h"
#include "tiers.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <sys/stat.h>
#include <unordered_map>
#include <unordered_set>
#include <xxhash.h>

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
  // A tie's other name (spw_declare_param_alias) holds the same value: an
  // HF file may have only that one (GPT-2's transformer.wte.weight).
  std::unordered_map<std::string, size_t> alias_index;
  for (size_t i = 0; i < ctx->params.size(); ++i) {
    param_index.emplace(ctx->params[i].name, i);
    for (const std::string &a : ctx->params[i].aliases) {
      alias_index.emplace(a, i);
      alias_index.emplace(saved_name(ctx, a), i);
    }
  }
  std::vector<const SafetensorsEntry *> found(ctx->params.size(), nullptr);
  std::vector<const SafetensorsEntry *> found_alias(ctx->params.size(), nullptr);
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
    if (it == param_index.end() && !ctx->state_dict_prefix.empty())
      it = param_index.find(ctx->state_dict_prefix + t.name);
    if (it != param_index.end()) {
      found[it->second] = &t;
    } else if (auto a = alias_index.find(t.name); a != alias_index.end()) {
      found_alias[a->second] = &t;
    } else {
      add(extra, n_extra, t.name);
    }
  }
  for (size_t i = 0; i < ctx->params.size(); ++i)
    if (!found[i])
      found[i] = found_alias[i];
  const std::string *first_missing = nullptr;
  for (size_t i = 0; i < ctx->params.size(); ++i)
    if (!found[i]) {
      if (!first_missing)
        first_missing = &ctx->params[i].name;
      add(missing, n_missing, ctx->params[i].name);
    }
  // A fold of a parameter the file has whole: say why that is not enough.
  for (size_t i = 0; i < ctx->params.size(); ++i) {
    const ParamInfo &p = ctx->params[i];
    if (found[i] || p.folded_from.empty())
      continue;
    const std::string saved = saved_name(ctx, p.folded_from);
    for (const SafetensorsEntry &t : h.tensors)
      if (t.name == p.folded_from || t.name == saved)
        fail("%s has '%s' but not '%s', the parameter this model trains in "
             "its place: the exporter's optimizer folded the rows of '%s' "
             "the export reads into it, and which rows is not known here. "
             "Compile the model with spillwayc --exported-state-dict FILE "
             "(its state_dict as exported) to train '%s' whole; --weights "
             "then loads it by name",
             what.c_str(), t.name.c_str(), p.name.c_str(), t.name.c_str(),
             t.name.c_str());
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

// ---- weights maps ----------------------------------------------------------
// docs/runtime.md, "Weights": "SPWWMAP1", a u64 little-endian header length
// N, N bytes of JSON, then the inline data. The parser reads just this
// schema (unknown keys are skipped, for later versions' additions) and
// keeps only the segments, 32 bytes each: a header is not turned into a
// tree that would grow with the model's tensor count.

constexpr char kMapMagic[8] = {'S', 'P', 'W', 'W', 'M', 'A', 'P', '1'};
// Far beyond any model's header (about 60 bytes per tensor); a length past
// it is a corrupt file, not a header to read into memory.
constexpr uint64_t kMaxMapHeader = uint64_t(64) << 20;

struct MapSource {
  std::string path;
  int64_t bytes = -1, mtime_ns = 0;
  uint64_t sample = 0;
  bool have_mtime = false, have_sample = false;
};
struct WeightsMap {
  int64_t size = -1;
  std::vector<MapSource> sources;
  std::vector<WeightsSegment> segments;
};

class MapParser {
public:
  MapParser(const std::string &text, const std::string &what)
      : s_(text), what_(what) {}

  WeightsMap parse() {
    WeightsMap m;
    bool have_format = false, have_version = false, have_sources = false,
         have_segments = false;
    skip_ws();
    object("the header", [&](const std::string &key, size_t key_at) {
      if (key == "format") {
        const size_t at = pos_;
        if (string() != "spillway-weights-map")
          fail_at(at, "\"format\" is not \"spillway-weights-map\"");
        have_format = true;
      } else if (key == "version") {
        const size_t at = pos_;
        const int64_t v = integer("\"version\"");
        if (v != 1)
          fail_at(at, format("version %lld; this runtime reads version 1 "
                             "(recompile the model with this spillwayc)",
                             (long long)v));
        have_version = true;
      } else if (key == "size") {
        m.size = integer("\"size\"");
        if (m.size < 0)
          fail_at(key_at, "\"size\" is negative");
      } else if (key == "sources") {
        have_sources = true;
        array("\"sources\"", [&] { m.sources.push_back(source(m.sources.size())); });
      } else if (key == "segments") {
        have_segments = true;
        array("\"segments\"", [&] { m.segments.push_back(segment(m.segments.size())); });
      } else {
        skip_value(0);
      }
    });
    skip_ws();
    if (pos_ != s_.size())
      fail_at(pos_, "unexpected data after the header's JSON object");
    const char *missing = !have_format     ? "format"
                          : !have_version  ? "version"
                          : m.size < 0     ? "size"
                          : !have_sources  ? "sources"
                          : !have_segments ? "segments"
                                           : nullptr;
    if (missing)
      fail_at(s_.size(), format("no \"%s\"", missing));
    return m;
  }

private:
  const std::string &s_;
  const std::string &what_;
  size_t pos_ = 0;

  [[noreturn]] void fail_at(size_t at, const std::string &msg) const {
    fail("%s: malformed header (at byte %zu of its JSON): %s", what_.c_str(),
         at, msg.c_str());
  }
  int peek() const { return pos_ < s_.size() ? (unsigned char)s_[pos_] : -1; }
  std::string found() const {
    if (pos_ >= s_.size())
      return "the end of the header";
    const unsigned char c = (unsigned char)s_[pos_];
    return c >= 0x20 && c < 0x7f ? format("'%c'", c) : format("byte 0x%02x", c);
  }
  void expect(char c, const std::string &what) {
    if (peek() != (unsigned char)c)
      fail_at(pos_, "expected " + what + ", found " + found());
    ++pos_;
  }
  void skip_ws() {
    while (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')
      ++pos_;
  }

  // {"key": value, ...}: `member` parses each value.
  template <class F> void object(const std::string &what, F &&member) {
    expect('{', "an object for " + what);
    skip_ws();
    if (peek() == '}') {
      ++pos_;
      return;
    }
    std::unordered_set<std::string> seen; // a hostile header's many keys
    for (;;) {
      skip_ws();
      const size_t key_at = pos_;
      std::string key = string();
      if (!seen.insert(key).second)
        fail_at(key_at, "duplicate key \"" + key + "\" in " + what);
      skip_ws();
      expect(':', "':'");
      skip_ws();
      member(key, key_at);
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}', "',' or '}'");
      return;
    }
  }
  template <class F> void array(const std::string &what, F &&element) {
    expect('[', "an array for " + what);
    skip_ws();
    if (peek() == ']') {
      ++pos_;
      return;
    }
    for (;;) {
      skip_ws();
      element();
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']', "',' or ']'");
      return;
    }
  }

  // A JSON string; escapes other than \" and \\ and \/ are kept only as far
  // as paths need them (\uXXXX to UTF-8, surrogate pairs included).
  std::string string() {
    expect('"', "a string");
    std::string out;
    for (;;) {
      if (pos_ >= s_.size())
        fail_at(pos_, "unterminated string");
      const unsigned char c = (unsigned char)s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20)
        fail_at(pos_, format("control character 0x%02x in a string", c));
      ++pos_;
      if (c != '\\') {
        out += char(c);
        continue;
      }
      const size_t esc_at = pos_ - 1;
      const int e = peek();
      ++pos_;
      switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        uint32_t cp = hex4();
        if (cp >= 0xdc00 && cp <= 0xdfff)
          fail_at(esc_at, "unpaired low surrogate in \\u escape");
        if (cp >= 0xd800 && cp <= 0xdbff) {
          if (peek() != '\\' || pos_ + 1 >= s_.size() || s_[pos_ + 1] != 'u')
            fail_at(esc_at, "unpaired high surrogate in \\u escape");
          pos_ += 2;
          const uint32_t lo = hex4();
          if (lo < 0xdc00 || lo > 0xdfff)
            fail_at(esc_at, "unpaired high surrogate in \\u escape");
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        if (cp == 0)
          fail_at(esc_at, "NUL character in a string");
        if (cp < 0x80) {
          out += char(cp);
        } else if (cp < 0x800) {
          out += char(0xc0 | (cp >> 6));
          out += char(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
          out += char(0xe0 | (cp >> 12));
          out += char(0x80 | ((cp >> 6) & 0x3f));
          out += char(0x80 | (cp & 0x3f));
        } else {
          out += char(0xf0 | (cp >> 18));
          out += char(0x80 | ((cp >> 12) & 0x3f));
          out += char(0x80 | ((cp >> 6) & 0x3f));
          out += char(0x80 | (cp & 0x3f));
        }
        break;
      }
      default:
        fail_at(esc_at, "invalid escape in a string");
      }
    }
  }
  uint32_t hex4() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const int c = peek();
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0)
        fail_at(pos_, "invalid \\u escape");
      v = v * 16 + uint32_t(d);
      ++pos_;
    }
    return v;
  }

  // A JSON integer that fits in int64 (mtime_ns needs all 63 bits: a
  // double would round it).
  int64_t integer(const std::string &what) {
    const size_t at = pos_;
    const bool neg = peek() == '-';
    if (neg)
      ++pos_;
    if (peek() < '0' || peek() > '9')
      fail_at(at, what + ": expected an integer, found " + found());
    if (peek() == '0' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' &&
        s_[pos_ + 1] <= '9')
      fail_at(at, what + ": leading zero in an integer");
    uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      const unsigned d = unsigned(peek() - '0');
      if (v > (uint64_t(INT64_MAX) - d) / 10)
        fail_at(at, what + ": integer out of range");
      v = v * 10 + d;
      ++pos_;
    }
    if (peek() == '.' || peek() == 'e' || peek() == 'E')
      fail_at(at, what + ": expected an integer, found a fraction or exponent");
    return neg ? -int64_t(v) : int64_t(v);
  }

  // Any JSON value, for keys this version does not know.
  void skip_value(int depth) {
    if (depth > 64)
      fail_at(pos_, "values nested more than 64 deep");
    const int c = peek();
    if (c == '"') {
      string();
    } else if (c == '{') {
      object("a value", [&](const std::string &, size_t) { skip_value(depth + 1); });
    } else if (c == '[') {
      array("a value", [&] { skip_value(depth + 1); });
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      if (c == '-')
        ++pos_;
      const size_t start = pos_;
      while (peek() >= '0' && peek() <= '9')
        ++pos_;
      if (pos_ == start)
        fail_at(pos_, "expected a digit, found " + found());
      if (peek() == '.') {
        ++pos_;
        const size_t f = pos_;
        while (peek() >= '0' && peek() <= '9')
          ++pos_;
        if (pos_ == f)
          fail_at(pos_, "expected a digit, found " + found());
      }
      if (peek() == 'e' || peek() == 'E') {
        ++pos_;
        if (peek() == '+' || peek() == '-')
          ++pos_;
        const size_t e = pos_;
        while (peek() >= '0' && peek() <= '9')
          ++pos_;
        if (pos_ == e)
          fail_at(pos_, "expected a digit, found " + found());
      }
    } else {
      for (const char *word : {"true", "false", "null"})
        if (s_.compare(pos_, std::strlen(word), word) == 0) {
          pos_ += std::strlen(word);
          return;
        }
      fail_at(pos_, "expected a JSON value, found " + found());
    }
  }

  MapSource source(size_t k) {
    MapSource src;
    const std::string what = format("source %zu", k);
    const size_t at = pos_;
    object(what, [&](const std::string &key, size_t key_at) {
      if (key == "path") {
        src.path = string();
        if (src.path.empty())
          fail_at(key_at, what + ": empty \"path\"");
      } else if (key == "bytes") {
        src.bytes = integer(what + " \"bytes\"");
        if (src.bytes < 0)
          fail_at(key_at, what + ": negative \"bytes\"");
      } else if (key == "mtime_ns") {
        src.mtime_ns = integer(what + " \"mtime_ns\"");
        src.have_mtime = true;
      } else if (key == "sample") {
        const size_t v_at = pos_;
        const std::string h = string();
        bool hex = h.size() == 16;
        for (char c : h)
          hex &= (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
        if (!hex)
          fail_at(v_at, what + ": \"sample\" is not 16 lowercase hex digits");
        src.sample = std::stoull(h, nullptr, 16);
        src.have_sample = true;
      } else {
        skip_value(1);
      }
    });
    const char *missing = src.path.empty() ? "path"
                          : src.bytes < 0  ? "bytes"
                          : !src.have_mtime ? "mtime_ns"
                          : !src.have_sample ? "sample"
                                             : nullptr;
    if (missing)
      fail_at(at, format("%s has no \"%s\"", what.c_str(), missing));
    return src;
  }

  WeightsSegment segment(size_t k) {
    const std::string what = format("segment %zu", k);
    const size_t at = pos_;
    int64_t v[4];
    size_t n = 0;
    array(what, [&] {
      const int64_t x = integer(what);
      if (n < 4)
        v[n] = x;
      ++n;
    });
    if (n != 4)
      fail_at(at, format("%s has %zu numbers; a segment is [logical offset, "
                         "length, source, source offset]",
                         what.c_str(), n));
    if (v[2] < -1 || v[2] > INT32_MAX)
      fail_at(at, format("%s: source %lld is not an index into \"sources\" "
                         "or -1 (this file)",
                         what.c_str(), (long long)v[2]));
    return {v[0], v[1], int32_t(v[2]), v[3]};
  }
};

// "2026-12-02 05:01:12 UTC" (with the nanoseconds when `ns` is set).
std::string mtime_str(int64_t mtime_ns, bool ns) {
  const int64_t sec = mtime_ns >= 0 ? mtime_ns / 1000000000
                                    : -((-mtime_ns + 999999999) / 1000000000);
  const time_t t = time_t(sec);
  struct tm tm;
  char buf[64] = "?";
  if (::gmtime_r(&t, &tm))
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  std::string s = buf;
  if (ns)
    s += format(".%09lld", (long long)(mtime_ns - sec * 1000000000));
  return s + " UTC";
}

int64_t mtime_ns_of(const struct stat &st) {
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + int64_t(st.st_mtim.tv_nsec);
}

// XXH3-64 of a file's first a bytes followed by its last a bytes,
// a = min(size, 64 KiB): what spillwayc records as "sample".
uint64_t file_sample(int fd, int64_t size, const std::string &path) {
  const int64_t a = std::min<int64_t>(size, 65536);
  std::vector<char> buf(size_t(2 * a));
  if (!read_at(fd, buf.data(), size_t(a), 0))
    read_failed(path, "the first bytes", 0);
  if (!read_at(fd, buf.data() + a, size_t(a), size - a))
    read_failed(path, "the last bytes", size - a);
  return XXH3_64bits(buf.data(), buf.size());
}

// Opens a map's source and checks it is the file spillwayc read.
FdCloser open_source(const std::string &map_path, const MapSource &src,
                     const std::string &path) {
  const std::string recorded =
      format("%lld bytes, modified %s", (long long)src.bytes,
             mtime_str(src.mtime_ns, false).c_str());
  const char *fix = "recompile the model with spillwayc, or pass --weights FILE";
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR))
    fail("weights file '%s' not found: the weights map '%s' reads the "
         "model's weights from it (spillwayc recorded %s): %s",
         path.c_str(), map_path.c_str(), recorded.c_str(), fix);
  int64_t size = 0;
  FdCloser fd(open_regular(path, "weights file", &size));
  if (::fstat(fd.fd, &st) != 0)
    fail("cannot stat weights file '%s': %s", path.c_str(),
         std::strerror(errno));
  const int64_t mtime = mtime_ns_of(st);
  if (size != src.bytes || mtime != src.mtime_ns) {
    // Two times in the same second differ in their nanoseconds.
    const bool ns = mtime_str(mtime, false) == mtime_str(src.mtime_ns, false);
    fail("weights file '%s' changed after the model was compiled (it is "
         "%lld bytes, modified %s; spillwayc recorded %lld bytes, modified "
         "%s): %s",
         path.c_str(), (long long)size, mtime_str(mtime, ns).c_str(),
         (long long)src.bytes, mtime_str(src.mtime_ns, ns).c_str(), fix);
  }
  const uint64_t sample = file_sample(fd.fd, size, path);
  if (sample != src.sample)
    fail("weights file '%s' changed after the model was compiled (its size "
         "and modification time are the recorded ones, %s, but its first "
         "and last 64 KiB are not: sample %016llx, spillwayc recorded "
         "%016llx): %s",
         path.c_str(), recorded.c_str(),
         (unsigned long long)sample, (unsigned long long)src.sample, fix);
  return fd;
}

// The map at plan.path (`size` bytes, header length n): parsed, its
// segments checked against the logical size, the sources and the map's own
// inline region, and every source checked and opened.
void check_map(WeightsPlan &plan, int64_t size, uint64_t n,
               int64_t expected) {
  const std::string what = format("weights map '%s'", plan.path.c_str());
  if (n > kMaxMapHeader || int64_t(n) > size - 16)
    fail("%s is truncated or corrupt: its header is %llu bytes, and only "
         "%lld bytes follow the 16-byte preamble",
         what.c_str(), (unsigned long long)n, (long long)(size - 16));
  std::string header(size_t(n), '\0');
  if (!read_at(plan.fd.fd, header.data(), header.size(), 16))
    read_failed(plan.path, "the map's header", 16);
  WeightsMap m = MapParser(header, what).parse();
  // From here on the file is a map (check_weights: no raw fallback).
  plan.map = true;
  const int64_t data_start = 16 + int64_t(n);

  if (m.size != expected)
    fail("%s describes %lld bytes of weights, the model's weights are %lld "
         "bytes; was it written for another model?",
         what.c_str(), (long long)m.size, (long long)expected);
  int64_t at = 0;
  for (size_t k = 0; k < m.segments.size(); ++k) {
    const WeightsSegment &s = m.segments[k];
    int64_t end, src_end;
    if (s.logical < 0 || s.length < 0 || s.offset < 0 ||
        __builtin_add_overflow(s.logical, s.length, &end) ||
        __builtin_add_overflow(s.offset, s.length, &src_end))
      fail("%s: segment %zu [%lld, %lld, %d, %lld] has a negative or "
           "overflowing offset or length",
           what.c_str(), k, (long long)s.logical, (long long)s.length,
           s.source, (long long)s.offset);
    if (end > m.size)
      fail("%s: segment %zu covers bytes [%lld, %lld) of the weights, "
           "beyond their %lld bytes",
           what.c_str(), k, (long long)s.logical, (long long)end,
           (long long)m.size);
    if (s.logical < at)
      fail("%s: segment %zu starts at byte %lld of the weights, before the "
           "end of segment %zu (%lld): segments must be sorted and must not "
           "overlap",
           what.c_str(), k, (long long)s.logical, k - 1, (long long)at);
    at = std::max(at, end);
    if (s.source >= int32_t(m.sources.size()))
      fail("%s: segment %zu names source %d, but the map has %zu source%s",
           what.c_str(), k, s.source, m.sources.size(),
           m.sources.size() == 1 ? "" : "s");
    if (s.source < 0 ? s.offset < data_start || src_end > size
                     : src_end > m.sources[size_t(s.source)].bytes)
      fail("%s: segment %zu reads bytes [%lld, %lld) of %s, which %s",
           what.c_str(), k, (long long)s.offset, (long long)src_end,
           s.source < 0 ? "the map itself"
                        : format("source %d ('%s')", s.source,
                                 m.sources[size_t(s.source)].path.c_str())
                              .c_str(),
           s.source < 0 ? format("has its inline data in [%lld, %lld)",
                                 (long long)data_start, (long long)size)
                              .c_str()
                        : format("has %lld bytes",
                                 (long long)m.sources[size_t(s.source)].bytes)
                              .c_str());
  }
  // Relative source paths are the map's directory's.
  const size_t slash = plan.path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "" : plan.path.substr(0, slash + 1);
  for (const MapSource &src : m.sources) {
    const std::string path = src.path[0] == '/' ? src.path : dir + src.path;
    try {
      plan.source_fds.push_back(open_source(plan.path, src, path));
    } catch (const Error &e) {
      // Said by check_weights, or after a --resume that needs no weights.
      if (plan.source_problem.empty())
        plan.source_problem = e.what();
      plan.source_fds.emplace_back();
    }
    plan.source_paths.push_back(path);
  }
  std::erase_if(m.segments,
                [](const WeightsSegment &s) { return s.length == 0; });
  plan.segments = std::move(m.segments);
}

} // namespace

// Checks the weights file `path` against the declared parameters, before
// they have buffers: a .safetensors file (by name; detected by content) or
// the raw layout spillwayc writes (each parameter at its declared offset;
// the file exactly as large as the declared weights).
WeightsPlan check_weights(const spw_ctx *ctx, const std::string &path,
                          bool explicit_path, bool defer_sources) {
  WeightsPlan plan = check_weights_file(ctx, path, explicit_path);
  if (!plan.source_problem.empty() && !defer_sources)
    fail("%s", plan.source_problem.c_str());
  return plan;
}

WeightsPlan check_weights_file(const spw_ctx *ctx, const std::string &path,
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

  // Format detection by content. A weights map starts with its magic. A
  // .safetensors file with a u64 little-endian header length N in [2, 1e8],
  // then '{'. A raw file of exactly the model's size whose first bytes
  // happen to look like either (say, an int64 parameter holding small
  // numbers) is told apart by its "header": a map's must parse, and a
  // .safetensors header is JSON text, which has no bytes below 0x20 other
  // than tab, newline and carriage return.
  unsigned char head[16];
  const size_t head_n = size_t(std::min<int64_t>(size, sizeof head));
  if (size >= 10 && !read_at(fd, head, head_n, 0))
    read_failed(path, "the header", 0);
  auto le64 = [&](int at) {
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i)
      n |= uint64_t(head[at + i]) << (8 * i);
    return n;
  };
  if (size >= 16 && std::memcmp(head, kMapMagic, 8) == 0) {
    try {
      check_map(plan, size, le64(8), expected);
      for (const ParamInfo &p : ctx->params)
        plan.offsets.push_back(p.offset);
      return plan;
    } catch (const Error &) {
      // A raw file that merely starts with the magic.
      if (size != expected || plan.map)
        throw;
    }
  }
  if (size >= 10) {
    const uint64_t n = le64(0);
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

void WeightsPlan::read(const spw_ctx *ctx, size_t param, int64_t begin,
                       size_t bytes, void *dst) const {
  const ParamInfo &p = ctx->params[param];
  auto what = [&] { return format("parameter '%s'", p.name.c_str()); };
  if (!map) {
    if (!read_at(fd.fd, dst, bytes, offsets[param] + begin))
      read_failed(path, what(), offsets[param] + begin);
    return;
  }
  // The segments that meet [lo, hi) of the logical blob; bytes between
  // them are zeros (the blob's alignment padding).
  char *out = static_cast<char *>(dst);
  const int64_t lo = offsets[param] + begin, hi = lo + int64_t(bytes);
  auto it = std::upper_bound(
      segments.begin(), segments.end(), lo,
      [](int64_t x, const WeightsSegment &s) { return x < s.logical + s.length; });
  int64_t at = lo;
  for (; it != segments.end() && it->logical < hi; ++it) {
    const int64_t from = std::max(at, it->logical);
    const int64_t to = std::min(hi, it->logical + it->length);
    std::memset(out + (at - lo), 0, size_t(from - at));
    const int sfd = it->source < 0 ? fd.fd : source_fds[size_t(it->source)].fd;
    const std::string &spath =
        it->source < 0 ? path : source_paths[size_t(it->source)];
    const int64_t off = it->offset + (from - it->logical);
    if (!read_at(sfd, out + (from - lo), size_t(to - from), off))
      read_failed(spath, what(), off);
    at = to;
  }
  std::memset(out + (at - lo), 0, size_t(hi - at));
}

namespace {

[[noreturn]] void non_finite_weights(const WeightsPlan &plan,
                                     const ParamInfo &p, float v,
                                     int64_t at) {
  fail("weights file '%s': parameter '%s' %s holds %s at flat index %lld; "
       "training cannot start from non-finite weights: pass other "
       "--weights",
       plan.path.c_str(), p.name.c_str(), p.value->shape().c_str(),
       non_finite_name(v), (long long)at);
}

} // namespace

// Reads the checked weights into the parameters' buffers (those that have
// one: an offload plan's blocks take theirs from stream_weights); a NaN or
// an infinity in a float parameter is refused (training would spread it).
// Training refuses non-finite weights and inputs (a NaN would silently reach
// every weight); a forward-only model evaluates what it is given, NaN included.
void read_weights(spw_ctx *ctx, WeightsPlan &plan, bool require_finite) {
  if (plan.offsets.empty())
    return;
  for (size_t i = 0; i < ctx->params.size(); ++i) {
    ParamInfo &p = ctx->params[i];
    if (!p.value->data)
      continue;
    plan.read(ctx, i, 0, size_t(p.value->bytes()), p.value->data);
    if (p.value->dtype != SPW_F32 || !require_finite)
      continue;
    const int64_t bad = first_non_finite(p.value->as<float>(), p.value->numel);
    if (bad >= 0)
      non_finite_weights(plan, p, p.value->as<float>()[bad], bad);
  }
}

// The initial load of an offload plan: each params block from the weights
// straight into its home, one block at a time (tiers_stream_in's bounded
// host copy), and zeros for the optimizer blocks' state, as tiers_scatter
// gives fresh state. The plain copies stay as tiers_scatter leaves them
// (none for these parameters), so the first step binds as it would there.
void stream_weights(spw_ctx *ctx, const WeightsPlan &plan) {
  tiers_stream_in(ctx, SPW_BLOCK_PARAMS, [&](const BlockRange &r) {
    const ParamInfo &p = ctx->params[size_t(r.param)];
    if (p.value->dtype != SPW_F32)
      fail("parameter '%s' is %s; an offload plan's blocks hold f32 "
           "parameters",
           p.name.c_str(), dtype_name(p.value->dtype));
    const size_t bytes = size_t(r.count) * sizeof(float);
    if (plan.offsets.empty()) {
      std::memset(r.data, 0, bytes);
      return;
    }
    plan.read(ctx, size_t(r.param), r.begin * int64_t(sizeof(float)), bytes,
              r.data);
    const float *x = static_cast<const float *>(r.data);
    const int64_t bad = first_non_finite(x, r.count);
    if (bad >= 0)
      non_finite_weights(plan, p, x[bad], r.begin + bad);
  });
  tiers_stream_in(ctx, SPW_BLOCK_OPTIMIZER, [](const BlockRange &r) {
    std::memset(r.data, 0, size_t(r.count) * sizeof(float));
  });
}

} // namespace spw::driver
