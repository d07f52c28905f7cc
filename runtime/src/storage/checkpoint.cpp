//===- checkpoint.cpp - crash-safe training checkpoints -------------------===//
//
// See checkpoint.h for the layout and the write protocol. MANIFEST.json:
//
//   {
//     "format": "spillway-checkpoint",
//     "version": 1,
//     "step": 42,
//     "data_file": "data",
//     "data_bytes": 8192,            file size, padding included
//     "alignment": 4096,             of chunk offsets
//     "compression": "none",         or "zstd": every chunk is a zstd frame
//     "chunk_bytes": 4194304,        raw bytes per chunk (the last: fewer)
//     "raw_bytes": 152,              length of the raw stream
//     "metadata": {"key": "value", ...},
//     "tensors": [{"name": "param/fc1.weight", "dtype": "f32",
//                  "shape": [5, 3], "offset": 0, "bytes": 60}, ...],
//     "chunks": [{"offset": 0, "stored": 152, "raw": 152,
//                 "xxh3": "0123456789abcdef"}, ...],
//     "manifest_xxh3": "0123456789abcdef"
//   }
//
// "offset"/"bytes" of a tensor are in the raw stream (the tensors' bytes
// concatenated, each starting at a multiple of 64); chunk k holds raw bytes
// [k * chunk_bytes, ...) stored at file offset "offset" ("stored" bytes,
// then zero padding to the alignment). "xxh3" is XXH3-64 (seed 0) of the
// chunk's raw bytes, "manifest_xxh3" that of every byte of the manifest
// before the line that holds it. Both as 16 lower-case hex digits.
//
//===----------------------------------------------------------------------===//

#include "storage/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <fcntl.h>
#include <filesystem>
#include <new>
#include <optional>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

namespace fs = std::filesystem;

namespace spw::storage {

const char *const kCrashPhases[] = {"data-partial",     "data-written",
                                    "data-synced",      "manifest-written",
                                    "renamed",          "pruned"};
const size_t kNumCrashPhases = sizeof kCrashPhases / sizeof kCrashPhases[0];

namespace {

constexpr const char *kFormatName = "spillway-checkpoint";
constexpr const char *kChecksumLine = "  \"manifest_xxh3\": \"";
constexpr uint64_t kTensorAlign = 64;
// What a manifest may say (a crafted one is refused, not trusted): chunk
// offsets aligned to a power of two in [kMinAlignment, kMaxAlignment], chunks
// of at most kMaxChunkBytes raw bytes. The writer stays inside these.
constexpr uint64_t kMinAlignment = 512, kMaxAlignment = uint64_t(1) << 20;
constexpr uint64_t kMaxChunkBytes = uint64_t(1) << 30;

uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

std::string hex64(uint64_t v) { return format("%016llx", (unsigned long long)v); }

void default_notice(const std::string &msg) {
  std::fprintf(stderr, "spillway: %s\n", msg.c_str());
}

void say(const CheckpointOptions &o, const std::string &msg) {
  if (o.notice)
    o.notice(msg);
  else
    default_notice(msg);
}

// ---- test-only crash hook (see checkpoint.h) ----------------------------------

void maybe_crash(const char *phase, int64_t step) {
  const char *at = std::getenv("SPILLWAY_TEST_CRASH_AT");
  if (!at || std::strcmp(at, phase) != 0)
    return;
  if (const char *s = std::getenv("SPILLWAY_TEST_CRASH_STEP"))
    if (std::atoll(s) != step)
      return;
  if (const char *how = std::getenv("SPILLWAY_TEST_CRASH_HOW"))
    if (std::strcmp(how, "bad_alloc") == 0)
      throw std::bad_alloc();
  std::fflush(stdout);
  std::fflush(stderr);
  ::raise(SIGKILL);
}

// What an exception says, for an error message.
std::string exception_text(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error &x) {
    return x.what();
  } catch (const std::bad_alloc &) {
    return "out of memory";
  } catch (const std::exception &x) {
    return x.what();
  } catch (...) {
    return "an unknown exception";
  }
}

// ---- files ------------------------------------------------------------------

void fsync_dir(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    fail("cannot open directory '%s' to fsync it: %s", dir.c_str(),
         std::strerror(errno));
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    fail("cannot fsync directory '%s': %s", dir.c_str(), std::strerror(e));
  }
  ::close(fd);
}

// Opens a checkpoint file for reading. O_NONBLOCK, then fstat: a FIFO or a
// device where a checkpoint file should be must not hang the run on open or
// read. Returns -1 when the file does not exist (a missing file is what a
// torn or removed checkpoint looks like: invalid); throws CheckpointReadError
// on any other failure, and when it is not a regular file (not something a
// torn write leaves: someone put it there, and skipping it would resume from
// an older checkpoint or from the weights without anyone noticing).
int open_checkpoint_file(const std::string &path, uint64_t &size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return -1;
    throw CheckpointReadError(
        format("cannot open '%s': %s", path.c_str(), std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw CheckpointReadError(
        format("cannot stat '%s': %s", path.c_str(), std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw CheckpointReadError(format(
        "'%s' is %s, not a regular file; a checkpoint holds only regular "
        "files: remove it (or the whole checkpoint directory)",
        path.c_str(),
        S_ISFIFO(st.st_mode)   ? "a FIFO"
        : S_ISDIR(st.st_mode)  ? "a directory"
        : S_ISCHR(st.st_mode)  ? "a character device"
        : S_ISBLK(st.st_mode)  ? "a block device"
        : S_ISSOCK(st.st_mode) ? "a socket"
                               : "a special file"));
  }
  size = uint64_t(st.st_size);
  return fd;
}

// The most bytes a MANIFEST.json may have: ~100 bytes a chunk, so 256 MiB
// describes far more than any checkpoint holds; a larger one is not read.
constexpr uint64_t kMaxManifestBytes = uint64_t(256) << 20;

// MANIFEST.json's text; nullopt when it is missing; throws spw::Error when
// it is too large (invalid), CheckpointReadError when it cannot be read.
std::optional<std::string> read_manifest_file(const std::string &path) {
  uint64_t size = 0;
  const int fd = open_checkpoint_file(path, size);
  if (fd < 0)
    return std::nullopt;
  if (size > kMaxManifestBytes) {
    ::close(fd);
    fail("it is %llu bytes, more than a manifest can be (%llu)",
         (unsigned long long)size, (unsigned long long)kMaxManifestBytes);
  }
  std::string text(size_t(size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      throw CheckpointReadError(format("cannot read '%s' at offset %zu: %s",
                                       path.c_str(), done, std::strerror(e)));
    }
    if (n == 0) // it shrank while read: the checksum says whether it is whole
      break;
    done += size_t(n);
  }
  ::close(fd);
  text.resize(done);
  return text;
}

// An aligned staging buffer from the engine's pinned pool when it has room,
// else from the heap.
struct Staging {
  PinnedPool *pool = nullptr;
  void *p = nullptr;
  Staging() = default;
  Staging(const Staging &) = delete;
  Staging &operator=(const Staging &) = delete;
  Staging(Staging &&o) noexcept : pool(o.pool), p(o.p) { o.p = nullptr; }
  ~Staging() {
    if (!p)
      return;
    if (pool)
      pool->free(p);
    else
      std::free(p);
  }
  void allocate(IoEngine &engine, uint64_t bytes, uint64_t align) {
    align = std::max<uint64_t>(align, 4096);
    bytes = round_up(std::max<uint64_t>(bytes, 1), align);
    if (PinnedPool *pp = engine.config().pool)
      if ((p = pp->allocate(size_t(bytes), size_t(align)))) {
        pool = pp;
        return;
      }
    p = std::aligned_alloc(size_t(align), size_t(bytes));
    if (!p)
      fail("cannot allocate %llu bytes of checkpoint staging memory",
           (unsigned long long)bytes);
  }
  char *data() const { return static_cast<char *>(p); }
};

// ---- JSON -------------------------------------------------------------------

// (An object's members are a struct declared after Json, not a std::pair:
// libstdc++'s pair needs Json complete, which clang enforces.)
struct JsonMember;
struct Json {
  enum Kind { Null, Bool, Int, Str, Arr, Obj } kind = Null;
  bool b = false;
  int64_t i = 0;
  std::string s;
  std::vector<Json> arr;
  std::vector<JsonMember> obj;

  const Json *get(const std::string &key) const;
};
struct JsonMember {
  std::string first;
  Json second;
};
const Json *Json::get(const std::string &key) const {
  for (auto &[k, v] : obj)
    if (k == key)
      return &v;
  return nullptr;
}

// A strict JSON reader for what write_manifest writes: objects, arrays,
// strings, integers, booleans, null. No floats.
class JsonParser {
public:
  explicit JsonParser(const std::string &text) : t_(text) {}
  Json parse() {
    Json v = value(0);
    ws();
    if (p_ != t_.size())
      error("trailing text");
    return v;
  }

private:
  const std::string &t_;
  size_t p_ = 0;

  [[noreturn]] void error(const char *what) {
    fail("malformed JSON at byte %zu: %s", p_, what);
  }
  void ws() {
    while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\n' ||
                              t_[p_] == '\t' || t_[p_] == '\r'))
      ++p_;
  }
  bool eat(char c) {
    ws();
    if (p_ < t_.size() && t_[p_] == c) {
      ++p_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c))
      error(format("expected '%c'", c).c_str());
  }
  Json value(int depth) {
    if (depth > 32)
      error("nesting too deep");
    ws();
    if (p_ >= t_.size())
      error("unexpected end");
    Json v;
    char c = t_[p_];
    if (c == '{') {
      ++p_;
      v.kind = Json::Obj;
      if (eat('}'))
        return v;
      do {
        ws();
        std::string k = string();
        for (auto &kv : v.obj)
          if (kv.first == k)
            error("duplicate key");
        expect(':');
        v.obj.push_back({std::move(k), value(depth + 1)});
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      ++p_;
      v.kind = Json::Arr;
      if (eat(']'))
        return v;
      do
        v.arr.push_back(value(depth + 1));
      while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.kind = Json::Str;
      v.s = string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Json::Int;
      size_t start = p_;
      if (c == '-')
        ++p_;
      while (p_ < t_.size() && t_[p_] >= '0' && t_[p_] <= '9')
        ++p_;
      std::string num = t_.substr(start, p_ - start);
      errno = 0;
      char *end = nullptr;
      long long x = std::strtoll(num.c_str(), &end, 10);
      if (num == "-" || *end || errno == ERANGE)
        error("bad integer");
      if (p_ < t_.size() && (t_[p_] == '.' || t_[p_] == 'e' || t_[p_] == 'E'))
        error("not an integer");
      v.i = x;
    } else if (t_.compare(p_, 4, "true") == 0) {
      p_ += 4;
      v.kind = Json::Bool;
      v.b = true;
    } else if (t_.compare(p_, 5, "false") == 0) {
      p_ += 5;
      v.kind = Json::Bool;
    } else if (t_.compare(p_, 4, "null") == 0) {
      p_ += 4;
    } else {
      error("unexpected character");
    }
    return v;
  }
  std::string string() {
    if (p_ >= t_.size() || t_[p_] != '"')
      error("expected a string");
    ++p_;
    std::string out;
    while (true) {
      if (p_ >= t_.size())
        error("unterminated string");
      unsigned char c = (unsigned char)t_[p_++];
      if (c == '"')
        return out;
      if (c < 0x20)
        error("control character in a string");
      if (c != '\\') {
        out += char(c);
        continue;
      }
      if (p_ >= t_.size())
        error("unterminated string");
      char e = t_[p_++];
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
        if (p_ + 4 > t_.size())
          error("bad \\u escape");
        unsigned cp = 0;
        for (int k = 0; k < 4; ++k) {
          char h = t_[p_++];
          cp <<= 4;
          if (h >= '0' && h <= '9') cp |= unsigned(h - '0');
          else if (h >= 'a' && h <= 'f') cp |= unsigned(h - 'a' + 10);
          else if (h >= 'A' && h <= 'F') cp |= unsigned(h - 'A' + 10);
          else error("bad \\u escape");
        }
        // Only what json_str writes (control characters) and the BMP.
        if (cp < 0x80) {
          out += char(cp);
        } else if (cp < 0x800) {
          out += char(0xc0 | (cp >> 6));
          out += char(0x80 | (cp & 0x3f));
        } else {
          out += char(0xe0 | (cp >> 12));
          out += char(0x80 | ((cp >> 6) & 0x3f));
          out += char(0x80 | (cp & 0x3f));
        }
        break;
      }
      default: error("bad escape");
      }
    }
  }
};

int32_t parse_dtype(const std::string &s) {
  for (int32_t d : {SPW_F32, SPW_I64, SPW_I32, SPW_BOOL})
    if (s == dtype_name(d))
      return d;
  return 0;
}

// ---- the manifest -------------------------------------------------------------

struct ChunkInfo {
  uint64_t offset = 0, stored = 0, raw = 0, xxh3 = 0;
};

struct Manifest {
  int64_t step = 0;
  uint64_t data_bytes = 0, alignment = 0, chunk_bytes = 0, raw_bytes = 0;
  bool zstd = false;
  Metadata metadata;
  std::vector<CheckpointTensor> tensors;
  std::vector<ChunkInfo> chunks;
};

std::string manifest_text(const Manifest &m) {
  std::string t = "{\n";
  t += format("  \"format\": \"%s\",\n", kFormatName);
  t += format("  \"version\": %d,\n", kCheckpointFormatVersion);
  t += format("  \"step\": %lld,\n", (long long)m.step);
  t += format("  \"data_file\": %s,\n", json_string(kCheckpointDataFile).c_str());
  t += format("  \"data_bytes\": %llu,\n", (unsigned long long)m.data_bytes);
  t += format("  \"alignment\": %llu,\n", (unsigned long long)m.alignment);
  t += format("  \"compression\": \"%s\",\n", m.zstd ? "zstd" : "none");
  t += format("  \"chunk_bytes\": %llu,\n", (unsigned long long)m.chunk_bytes);
  t += format("  \"raw_bytes\": %llu,\n", (unsigned long long)m.raw_bytes);
  t += "  \"metadata\": {";
  for (size_t i = 0; i < m.metadata.size(); ++i)
    t += (i ? ",\n    " : "\n    ") + json_string(m.metadata[i].first) + ": " +
         json_string(m.metadata[i].second);
  t += m.metadata.empty() ? "},\n" : "\n  },\n";
  t += "  \"tensors\": [";
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const CheckpointTensor &x = m.tensors[i];
    std::string shape;
    for (size_t d = 0; d < x.shape.size(); ++d)
      shape += (d ? ", " : "") + std::to_string(x.shape[d]);
    t += format("%s\n    {\"name\": %s, \"dtype\": \"%s\", \"shape\": [%s], "
                "\"offset\": %llu, \"bytes\": %llu}",
                i ? "," : "", json_string(x.name).c_str(), dtype_name(x.dtype),
                shape.c_str(), (unsigned long long)x.offset,
                (unsigned long long)x.bytes);
  }
  t += m.tensors.empty() ? "],\n" : "\n  ],\n";
  t += "  \"chunks\": [";
  for (size_t i = 0; i < m.chunks.size(); ++i) {
    const ChunkInfo &c = m.chunks[i];
    t += format("%s\n    {\"offset\": %llu, \"stored\": %llu, \"raw\": %llu, "
                "\"xxh3\": \"%s\"}",
                i ? "," : "", (unsigned long long)c.offset,
                (unsigned long long)c.stored, (unsigned long long)c.raw,
                hex64(c.xxh3).c_str());
  }
  t += m.chunks.empty() ? "],\n" : "\n  ],\n";
  const uint64_t sum = XXH3_64bits(t.data(), t.size());
  t += kChecksumLine + hex64(sum) + "\"\n}\n";
  return t;
}

uint64_t u64_field(const Json &obj, const char *key, const char *where) {
  const Json *v = obj.get(key);
  if (!v || v->kind != Json::Int || v->i < 0)
    fail("%s: \"%s\" is missing or not a non-negative integer", where, key);
  return uint64_t(v->i);
}

const std::string &str_field(const Json &obj, const char *key,
                             const char *where) {
  const Json *v = obj.get(key);
  if (!v || v->kind != Json::Str)
    fail("%s: \"%s\" is missing or not a string", where, key);
  return v->s;
}

bool parse_hex64(const std::string &s, uint64_t &out) {
  if (s.size() != 16)
    return false;
  out = 0;
  for (char h : s) {
    out <<= 4;
    if (h >= '0' && h <= '9') out |= uint64_t(h - '0');
    else if (h >= 'a' && h <= 'f') out |= uint64_t(h - 'a' + 10);
    else return false;
  }
  return true;
}

// Parses and checks MANIFEST.json's text: its own checksum first, then the
// structure. Throws spw::Error saying what is wrong (without the file name).
Manifest parse_manifest(const std::string &text) {
  const size_t at = text.rfind(std::string("\n") + kChecksumLine);
  if (at == std::string::npos)
    fail("it has no manifest_xxh3 line (truncated?)");
  const size_t hex_at = at + 1 + std::strlen(kChecksumLine);
  uint64_t want = 0;
  if (hex_at + 16 > text.size() ||
      !parse_hex64(text.substr(hex_at, 16), want))
    fail("its manifest_xxh3 is not 16 hex digits (truncated?)");
  const uint64_t got = XXH3_64bits(text.data(), at + 1);
  if (got != want)
    fail("its checksum does not match (manifest_xxh3 %s, content %s)",
         hex64(want).c_str(), hex64(got).c_str());
  Json j;
  try {
    j = JsonParser(text).parse();
  } catch (const Error &e) {
    fail("%s", e.what());
  }
  const char *w = "manifest";
  if (j.kind != Json::Obj)
    fail("it is not a JSON object");
  if (str_field(j, "format", w) != kFormatName)
    fail("\"format\" is not \"%s\"", kFormatName);
  const uint64_t version = u64_field(j, "version", w);
  if (version != uint64_t(kCheckpointFormatVersion))
    fail("format version %llu; this runtime reads version %d",
         (unsigned long long)version, kCheckpointFormatVersion);
  Manifest m;
  m.step = int64_t(u64_field(j, "step", w));
  if (str_field(j, "data_file", w) != kCheckpointDataFile)
    fail("\"data_file\" is not \"%s\"", kCheckpointDataFile);
  m.data_bytes = u64_field(j, "data_bytes", w);
  m.alignment = u64_field(j, "alignment", w);
  m.chunk_bytes = u64_field(j, "chunk_bytes", w);
  m.raw_bytes = u64_field(j, "raw_bytes", w);
  if (m.alignment < kMinAlignment || m.alignment > kMaxAlignment ||
      (m.alignment & (m.alignment - 1)))
    fail("\"alignment\" %llu is not a power of two from %llu to %llu",
         (unsigned long long)m.alignment, (unsigned long long)kMinAlignment,
         (unsigned long long)kMaxAlignment);
  if (m.data_bytes % m.alignment)
    fail("\"data_bytes\" %llu is not a multiple of the alignment %llu",
         (unsigned long long)m.data_bytes, (unsigned long long)m.alignment);
  if (m.chunk_bytes == 0 || m.chunk_bytes > kMaxChunkBytes)
    fail("\"chunk_bytes\" %llu is not from 1 to %llu",
         (unsigned long long)m.chunk_bytes, (unsigned long long)kMaxChunkBytes);
  const std::string &comp = str_field(j, "compression", w);
  if (comp != "none" && comp != "zstd")
    fail("unknown compression '%s'", comp.c_str());
  m.zstd = comp == "zstd";
  const Json *meta = j.get("metadata");
  if (!meta || meta->kind != Json::Obj)
    fail("\"metadata\" is missing or not an object");
  for (auto &[k, v] : meta->obj) {
    if (v.kind != Json::Str)
      fail("metadata '%s' is not a string", k.c_str());
    m.metadata.emplace_back(k, v.s);
  }
  const Json *ts = j.get("tensors");
  if (!ts || ts->kind != Json::Arr)
    fail("\"tensors\" is missing or not an array");
  for (const Json &t : ts->arr) {
    if (t.kind != Json::Obj)
      fail("a tensor entry is not an object");
    CheckpointTensor x;
    x.name = str_field(t, "name", "tensor");
    const std::string where = "tensor '" + x.name + "'";
    x.dtype = parse_dtype(str_field(t, "dtype", where.c_str()));
    if (!x.dtype)
      fail("%s: unknown dtype", where.c_str());
    const Json *shape = t.get("shape");
    if (!shape || shape->kind != Json::Arr || shape->arr.size() > kMaxRank)
      fail("%s: \"shape\" is missing or not an array of at most %d sizes",
           where.c_str(), kMaxRank);
    uint64_t numel = 1;
    for (const Json &d : shape->arr) {
      if (d.kind != Json::Int || d.i < 0 ||
          __builtin_mul_overflow(numel, uint64_t(d.i), &numel))
        fail("%s: bad shape", where.c_str());
      x.shape.push_back(d.i);
    }
    x.offset = u64_field(t, "offset", where.c_str());
    x.bytes = u64_field(t, "bytes", where.c_str());
    uint64_t want_bytes;
    if (__builtin_mul_overflow(numel, uint64_t(dtype_size(x.dtype)),
                               &want_bytes) ||
        want_bytes != x.bytes)
      fail("%s: %llu bytes do not match dtype and shape", where.c_str(),
           (unsigned long long)x.bytes);
    if (x.offset % kTensorAlign)
      fail("%s: offset %llu is not a multiple of %llu", where.c_str(),
           (unsigned long long)x.offset, (unsigned long long)kTensorAlign);
    if (x.offset > m.raw_bytes || x.bytes > m.raw_bytes - x.offset)
      fail("%s: bytes [%llu, +%llu) run past the raw data (%llu bytes)",
           where.c_str(), (unsigned long long)x.offset,
           (unsigned long long)x.bytes, (unsigned long long)m.raw_bytes);
    for (const CheckpointTensor &y : m.tensors)
      if (y.name == x.name)
        fail("tensor '%s' appears twice", x.name.c_str());
    m.tensors.push_back(std::move(x));
  }
  const Json *cs = j.get("chunks");
  if (!cs || cs->kind != Json::Arr)
    fail("\"chunks\" is missing or not an array");
  uint64_t raw = 0, file_end = 0;
  for (size_t k = 0; k < cs->arr.size(); ++k) {
    const Json &c = cs->arr[k];
    if (c.kind != Json::Obj)
      fail("chunk %zu is not an object", k);
    const std::string where = format("chunk %zu", k);
    ChunkInfo ci;
    ci.offset = u64_field(c, "offset", where.c_str());
    ci.stored = u64_field(c, "stored", where.c_str());
    ci.raw = u64_field(c, "raw", where.c_str());
    if (!parse_hex64(str_field(c, "xxh3", where.c_str()), ci.xxh3))
      fail("%s: \"xxh3\" is not 16 hex digits", where.c_str());
    // Checked arithmetic throughout: every number here is the file's word,
    // and the checksum above proves nothing against a crafted manifest.
    uint64_t padded = 0, end = 0;
    if (ci.offset % m.alignment || ci.offset < file_end || ci.stored == 0 ||
        ci.stored > m.data_bytes ||
        (padded = round_up(ci.stored, m.alignment)) > m.data_bytes ||
        __builtin_add_overflow(ci.offset, padded, &end) || end > m.data_bytes)
      fail("%s: stored range [%llu, +%llu) is misplaced in the %llu-byte "
           "data file",
           where.c_str(), (unsigned long long)ci.offset,
           (unsigned long long)ci.stored, (unsigned long long)m.data_bytes);
    if (!m.zstd && ci.stored != ci.raw)
      fail("%s: stored and raw lengths differ without compression",
           where.c_str());
    if (m.zstd && ci.stored > ZSTD_compressBound(size_t(m.chunk_bytes)))
      fail("%s: %llu stored bytes are more than zstd makes of %llu",
           where.c_str(), (unsigned long long)ci.stored,
           (unsigned long long)m.chunk_bytes);
    if (ci.raw == 0 || ci.raw > m.chunk_bytes ||
        (k + 1 < cs->arr.size() && ci.raw != m.chunk_bytes))
      fail("%s: raw length %llu does not fit chunk_bytes %llu", where.c_str(),
           (unsigned long long)ci.raw, (unsigned long long)m.chunk_bytes);
    file_end = end;
    if (__builtin_add_overflow(raw, ci.raw, &raw) || raw > m.raw_bytes)
      fail("%s: the chunks hold more than \"raw_bytes\" %llu", where.c_str(),
           (unsigned long long)m.raw_bytes);
    m.chunks.push_back(ci);
  }
  if (raw != m.raw_bytes)
    fail("the chunks hold %llu raw bytes, \"raw_bytes\" says %llu",
         (unsigned long long)raw, (unsigned long long)m.raw_bytes);
  return m;
}

// Swaps two paths atomically (renameat2 RENAME_EXCHANGE); -1 with errno
// EINVAL/ENOSYS where the kernel or file system cannot.
// SPILLWAY_TEST_RENAME=fallback (test-only) makes it report EINVAL.
int exchange_dirs(const std::string &a, const std::string &b) {
  const char *t = std::getenv("SPILLWAY_TEST_RENAME");
  if (t && std::strncmp(t, "fallback", 8) == 0) {
    errno = EINVAL;
    return -1;
  }
#ifdef SYS_renameat2
  return int(::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD,
                       b.c_str(), RENAME_EXCHANGE));
#else
  errno = ENOSYS;
  return -1;
#endif
}

// rename() of the tmp dir into place; SPILLWAY_TEST_RENAME=fallback-fail
// (test-only) makes it fail with EIO (and exchange_dirs with EINVAL).
int rename_dir(const std::string &from, const std::string &to) {
  const char *t = std::getenv("SPILLWAY_TEST_RENAME");
  if (t && std::strcmp(t, "fallback-fail") == 0) {
    errno = EIO;
    return -1;
  }
  return ::rename(from.c_str(), to.c_str());
}

bool pid_alive(long pid) {
  return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM);
}

// ".step-00000042.tmp-123" -> 123; ".step-00000042.stale-123" -> 123; -1.
long leftover_pid(const std::string &name) {
  if (name.rfind(".step-", 0) != 0)
    return -1;
  for (const char *tag : {".tmp-", ".stale-"}) {
    size_t at = name.rfind(tag);
    if (at == std::string::npos)
      continue;
    std::string num = name.substr(at + std::strlen(tag));
    if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos)
      return -1;
    return std::atol(num.c_str());
  }
  return -1;
}

// What pruning knows of a dir.
enum class DirState { Valid, Invalid, Unreadable };

std::string dir_key(const std::string &path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  return (ec ? fs::path(path) : p).lexically_normal().string();
}

// Why the loader rejected `dir` in this run, or null.
const std::string *known_invalid(const CheckpointOptions &o,
                                 const std::string &dir) {
  if (!o.verdicts)
    return nullptr;
  const std::string key = dir_key(dir);
  for (const auto &[d, why] : o.verdicts->invalid)
    if (d == key)
      return &why;
  return nullptr;
}

void forget_verdict(const CheckpointOptions &o, const std::string &dir) {
  if (!o.verdicts)
    return;
  const std::string key = dir_key(dir);
  auto &v = o.verdicts->invalid;
  v.erase(std::remove_if(v.begin(), v.end(),
                         [&](const auto &e) { return e.first == key; }),
          v.end());
}

// Valid: not rejected by the loader in this run (`o.verdicts`), and what
// the loader checks before reading the chunks holds: MANIFEST.json parses,
// matches its own checksum and names `step`, and the data file is a regular
// file at least as long as the manifest says. Invalid: one of those was read
// and is missing, torn or wrong. Unreadable: something could not be read
// (`why` says why), so nothing is known about the dir.
DirState dir_state(const std::string &dir, int64_t step,
                   const CheckpointOptions &o, std::string &why) {
  if (known_invalid(o, dir))
    return DirState::Invalid;
  try {
    std::optional<std::string> text =
        read_manifest_file((fs::path(dir) / kCheckpointManifest).string());
    if (!text)
      return DirState::Invalid;
    const Manifest m = parse_manifest(*text);
    if (m.step != step)
      return DirState::Invalid;
    uint64_t size = 0;
    const int fd = open_checkpoint_file(
        (fs::path(dir) / kCheckpointDataFile).string(), size);
    if (fd < 0)
      return DirState::Invalid;
    ::close(fd);
    return size < m.data_bytes ? DirState::Invalid : DirState::Valid;
  } catch (const CheckpointReadError &e) {
    why = e.what();
    return DirState::Unreadable;
  } catch (const Error &) {
    return DirState::Invalid;
  }
}

// After writing `step`: keeps it and the newest keep-1 older dirs that are
// valid (dir_state); removes the other older ones, valid or not (a torn
// one never counts toward `keep`), and every invalid newer one (a newer dir
// can only be a torn one the resume skipped, else the run would have
// resumed from it). A valid newer one (another run's, in the same ROOT) is
// left alone with a notice: --resume would load it rather than this one.
// Only a dir that was read and found invalid, or valid and old, is removed:
// one whose manifest cannot be read is kept, with a notice, whatever its age.
void prune(const std::string &root, int64_t step, const CheckpointOptions &o,
           CheckpointWriteResult &result) {
  int kept = 0;
  for (auto &[s, path] : list_checkpoints(root)) {
    if (s == step)
      continue;
    std::string why;
    const DirState state = dir_state(path, s, o, why);
    if (state == DirState::Unreadable) {
      say(o, format("keeping '%s': %s, so whether it is intact is unknown; "
                    "not pruned",
                    path.c_str(), why.c_str()));
      continue;
    }
    const bool valid = state == DirState::Valid;
    if (s > step && valid) {
      say(o, format("keeping '%s': a valid checkpoint of a later step than "
                    "the one just written (%lld), which --resume would load "
                    "instead",
                    path.c_str(), (long long)step));
      continue;
    }
    if (s < step && valid && kept < o.keep - 1) {
      ++kept;
      continue;
    }
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec)
      say(o, format("cannot remove %s checkpoint '%s': %s",
                    valid ? "old" : "invalid", path.c_str(),
                    ec.message().c_str()));
    else {
      result.pruned.push_back(path);
      forget_verdict(o, path);
    }
  }
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const long pid = leftover_pid(name);
    if (pid < 0 || (pid != long(::getpid()) && pid_alive(pid)))
      continue;
    std::error_code rec;
    fs::remove_all(it->path(), rec);
  }
}

// What is at `p`, where a checkpoint directory should be, when it is not a
// directory nor a symlink to one ("a regular file", ...); "" otherwise, and
// when it cannot be told (the reader then says why it cannot read it).
std::string non_directory(const fs::path &p) {
  auto kind = [](const fs::file_status &st) -> std::string {
    switch (st.type()) {
    case fs::file_type::regular:
      return "a regular file";
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::socket:
      return "a socket";
    default:
      return "a special file";
    }
  };
  std::error_code ec;
  const fs::file_status l = fs::symlink_status(p, ec);
  if (ec || fs::is_directory(l) || l.type() == fs::file_type::not_found)
    return {};
  if (!fs::is_symlink(l))
    return kind(l);
  const fs::file_status t = fs::status(p, ec);
  if (t.type() == fs::file_type::not_found)
    return "a dangling symbolic link";
  if (ec || fs::is_directory(t))
    return {};
  return "a symbolic link to " + kind(t);
}

std::string not_a_checkpoint_dir(const std::string &path,
                                 const std::string &root,
                                 const std::string &what) {
  return format("'%s' is %s, not a checkpoint directory; move it out of '%s'",
                path.c_str(), what.c_str(), root.c_str());
}

} // namespace

// ---- public -----------------------------------------------------------------

std::string checkpoint_dir_name(int64_t step) {
  return format("step-%08lld", (long long)step);
}

int64_t parse_checkpoint_dir_name(const std::string &name) {
  if (name.size() < 13 || name.rfind("step-", 0) != 0)
    return -1;
  const std::string digits = name.substr(5);
  if (digits.find_first_not_of("0123456789") != std::string::npos ||
      digits.size() > 18)
    return -1;
  const int64_t step = std::atoll(digits.c_str());
  return checkpoint_dir_name(step) == name ? step : -1;
}

std::vector<std::pair<int64_t, std::string>>
list_checkpoints(const std::string &root) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  fs::directory_iterator it(root, ec), end;
  if (ec == std::errc::no_such_file_or_directory)
    return out;
  // A listing that fails part-way would hide checkpoints: never "none".
  for (; !ec && it != end; it.increment(ec)) {
    int64_t s = parse_checkpoint_dir_name(it->path().filename().string());
    if (s < 0)
      continue;
    // Not something a writer leaves: someone put it there. Skipping it
    // would hide it; reading it would blame the storage (ENOTDIR).
    if (std::string what = non_directory(it->path()); !what.empty())
      throw CheckpointReadError(
          not_a_checkpoint_dir(it->path().string(), root, what));
    out.emplace_back(s, it->path().string());
  }
  if (ec)
    throw CheckpointReadError(format("cannot list checkpoint directory '%s': %s",
                                     root.c_str(), ec.message().c_str()));
  std::sort(out.begin(), out.end(),
            [](auto &a, auto &b) { return a.first > b.first; });
  return out;
}

int64_t check_checkpoint_manifest(const std::string &text) {
  return parse_manifest(text).step;
}

namespace {
// "pid N on host H since T" of whoever holds ROOT/LOCK, read from the file.
std::string lock_holder(int fd) {
  char buf[512];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s(buf, n > 0 ? size_t(n) : 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0'))
    s.pop_back();
  for (char &c : s) // the file is anyone's: print it tamely
    if ((unsigned char)c < 0x20 || (unsigned char)c == 0x7f)
      c = '?';
  return s.empty() ? "a process that has not written its pid yet" : s;
}
} // namespace

namespace {
// DIR, made if missing (the lock and the first checkpoint both need it).
void create_checkpoint_root(const std::string &root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec || !fs::is_directory(root, ec))
    fail("cannot create checkpoint directory '%s': %s; pass another "
         "--checkpoint-dir",
         root.c_str(), ec ? ec.message().c_str() : "not a directory");
}
} // namespace

CheckpointDirLock::CheckpointDirLock(
    const std::string &root,
    const std::function<void(const std::string &)> &notice) {
  create_checkpoint_root(root);
  const std::string path = (fs::path(root) / kCheckpointLockFile).string();
  // O_NOFOLLOW | O_NONBLOCK: a symlink or FIFO planted as LOCK is refused,
  // not followed or waited on.
  int fd = ::open(path.c_str(),
                  O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd < 0)
    fail("cannot open the lock file '%s' of --checkpoint-dir '%s': %s",
         path.c_str(), root.c_str(), std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("the lock file '%s' of --checkpoint-dir '%s' is not a regular file; "
         "remove it",
         path.c_str(), root.c_str());
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    if (e == EWOULDBLOCK) {
      const std::string holder = lock_holder(fd);
      ::close(fd);
      fail("--checkpoint-dir '%s' is in use by another run (%s, says '%s'); "
           "two runs cannot share a checkpoint directory: wait for that one "
           "to finish, or pass another --checkpoint-dir",
           root.c_str(), holder.c_str(), path.c_str());
    }
    ::close(fd);
    if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS) {
      const std::string msg =
          format("the file system of --checkpoint-dir '%s' cannot lock '%s' "
                 "(%s): nothing stops a second run from using it at the "
                 "same time",
                 root.c_str(), path.c_str(), std::strerror(e));
      if (notice)
        notice(msg);
      else
        default_notice(msg);
      return;
    }
    fail("cannot lock '%s' of --checkpoint-dir '%s': %s", path.c_str(),
         root.c_str(), std::strerror(e));
  }
  char host[256] = "?";
  if (::gethostname(host, sizeof host - 1) != 0)
    std::strcpy(host, "?");
  host[sizeof host - 1] = '\0';
  char when[64] = "?";
  const time_t now = ::time(nullptr);
  struct tm tm;
  if (::gmtime_r(&now, &tm))
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  const std::string text =
      format("pid %ld on host %s since %s\n", long(::getpid()), host, when);
  // Only for the message of a refused run: a failure here changes nothing.
  if (::ftruncate(fd, 0) == 0) {
    const ssize_t w = ::pwrite(fd, text.data(), text.size(), 0);
    (void)w;
  }
  fd_ = fd;
}

CheckpointDirLock::~CheckpointDirLock() {
  // Closing drops the flock. The file stays: unlinking it would let a run
  // that opened it before the unlink and one that creates it anew both hold
  // "the" lock.
  if (fd_ >= 0)
    ::close(fd_);
}

const CheckpointTensor *LoadedCheckpoint::find(const std::string &name) const {
  for (const CheckpointTensor &t : tensors)
    if (t.name == name)
      return &t;
  return nullptr;
}

const std::string *LoadedCheckpoint::meta(const std::string &key) const {
  for (auto &[k, v] : metadata)
    if (k == key)
      return &v;
  return nullptr;
}

uint64_t checkpoint_staging_bytes(uint64_t raw_bytes,
                                  const CheckpointOptions &o) {
  const uint64_t chunk = round_up(std::max<uint64_t>(o.chunk_bytes, 1), 4096);
  const uint64_t nchunks = (raw_bytes + chunk - 1) / chunk;
  const uint64_t slots =
      std::clamp<uint64_t>(nchunks, 1, std::max(1u, o.in_flight));
  uint64_t per_slot = chunk;
  if (o.zstd)
    per_slot += round_up(ZSTD_compressBound(size_t(chunk)), 4096);
  return slots * per_slot;
}

// ---- the streaming writer -------------------------------------------------------

struct CheckpointWriter::Impl {
  IoEngine &engine;
  std::string root, name, final_dir, tmp_dir, data_path;
  int64_t step;
  CheckpointOptions o;
  Manifest m;
  std::vector<uint64_t> offsets;
  CheckpointWriteResult result;
  struct Slot {
    Staging raw, packed;
    Token token;
  };
  std::vector<Slot> slots;
  uint64_t align = 0, zcap = 0, nchunks = 0;
  bool file_open = false, dead = false, finished = false;
  FileId file = 0;
  // Where the stream is: the tensor appended to, the bytes of it done, the
  // raw-stream position, the chunk being filled and the bytes in it, the
  // data file's end.
  size_t ti = 0;
  uint64_t td = 0, pos = 0, chunk = 0, fill = 0, file_off = 0;

  Impl(IoEngine &e, int64_t s) : engine(e), step(s) {}

  Slot &slot() { return slots[size_t(chunk % slots.size())]; }

  // Waits for every write in flight, even after one failed (the staging
  // buffers must outlive them); rethrows the first error.
  void wait_all() {
    std::string first;
    for (Slot &s : slots) {
      try {
        s.token.wait();
      } catch (const Error &e) {
        if (first.empty())
          first = e.what();
      }
      s.token = Token();
    }
    if (!first.empty())
      throw Error(first);
  }

  // Skips the tensors with no bytes at the stream's position.
  void skip_empty() {
    while (ti < m.tensors.size() && m.tensors[ti].bytes == td) {
      ++ti;
      td = 0;
    }
  }

  void flush_chunk() {
    Slot &s = slot();
    const uint64_t n = fill;
    ChunkInfo c;
    c.offset = file_off;
    c.raw = n;
    c.xxh3 = XXH3_64bits(s.raw.data(), size_t(n));
    char *src = s.raw.data();
    c.stored = n;
    if (o.zstd) {
      size_t z = ZSTD_compress(s.packed.data(), size_t(zcap), s.raw.data(),
                               size_t(n), o.zstd_level);
      if (ZSTD_isError(z))
        fail("zstd cannot compress chunk %llu: %s", (unsigned long long)chunk,
             ZSTD_getErrorName(z));
      src = s.packed.data();
      c.stored = z;
    }
    const uint64_t padded = round_up(c.stored, align);
    std::memset(src + c.stored, 0, size_t(padded - c.stored));
    s.token = engine.write(file, file_off, src, padded, Priority::WriteBack,
                           format("chunk %llu of the checkpoint of step %lld",
                                  (unsigned long long)chunk, (long long)step));
    m.chunks.push_back(c);
    file_off += padded;
    if (chunk == 0) {
      const char *at = std::getenv("SPILLWAY_TEST_CRASH_AT");
      if (at && std::strcmp(at, "data-partial") == 0) {
        s.token.wait();
        maybe_crash("data-partial", step);
      }
    }
    ++chunk;
    fill = 0;
    // The next chunk's slot: its previous write must be done.
    Slot &next = slot();
    next.token.wait();
    next.token = Token();
  }

  // n bytes at src (zeros when null) into the stream.
  void emit(const char *src, uint64_t n) {
    while (n > 0) {
      const uint64_t c = std::min(n, m.chunk_bytes - fill);
      char *dst = slot().raw.data() + fill;
      if (src) {
        std::memcpy(dst, src, size_t(c));
        src += c;
      } else {
        std::memset(dst, 0, size_t(c));
      }
      fill += c;
      pos += c;
      n -= c;
      if (fill == m.chunk_bytes)
        flush_chunk();
    }
  }

  void append(const char *data, uint64_t bytes) {
    while (bytes > 0) {
      skip_empty();
      if (ti == m.tensors.size())
        fail("%llu bytes appended beyond the %zu tensors' %llu",
             (unsigned long long)bytes, m.tensors.size(),
             (unsigned long long)m.raw_bytes);
      const CheckpointTensor &t = m.tensors[ti];
      if (pos < t.offset + td) // the gap before the tensor: zeros
        emit(nullptr, t.offset + td - pos);
      const uint64_t n = std::min(bytes, t.bytes - td);
      emit(data, n);
      data += n;
      bytes -= n;
      td += n;
    }
    skip_empty();
  }

  // Removes what this write made (after any failure before publishing).
  void cleanup() {
    dead = true;
    try {
      wait_all();
    } catch (...) {
    }
    if (file_open) {
      file_open = false;
      try {
        engine.close(file, false);
      } catch (...) {
      }
    }
    std::error_code ec;
    fs::remove_all(tmp_dir, ec);
  }

  [[noreturn]] void failed(const std::string &why) {
    cleanup();
    fail("cannot write the checkpoint of step %lld to '%s': %s (the "
         "checkpoints already in '%s' are untouched; check free space and "
         "permissions there, or pass another --checkpoint-dir)",
         (long long)step, final_dir.c_str(), why.c_str(), root.c_str());
  }

  // Runs f before publishing: any exception (spw::Error, std::bad_alloc,
  // std::filesystem_error, ...) cleans up, then one spw::Error with context.
  template <class F> void guarded(F &&f) {
    if (dead)
      fail("the checkpoint of step %lld to '%s' already failed",
           (long long)step, final_dir.c_str());
    try {
      f();
    } catch (...) {
      failed(exception_text(std::current_exception()));
    }
  }

  void open(const std::vector<CheckpointTensorSpec> &tensors,
            const Metadata &metadata) {
    result.dir = final_dir;
    m.step = step;
    m.zstd = o.zstd;
    m.metadata = metadata;
    for (const CheckpointTensorSpec &t : tensors) {
      m.raw_bytes = round_up(m.raw_bytes, kTensorAlign);
      offsets.push_back(m.raw_bytes);
      CheckpointTensor x;
      x.name = t.name;
      x.dtype = t.dtype;
      x.shape = t.shape;
      x.offset = m.raw_bytes;
      x.bytes = t.bytes;
      m.tensors.push_back(std::move(x));
      m.raw_bytes += t.bytes;
    }
    result.raw_bytes = m.raw_bytes;
    guarded([&] {
      std::error_code ec;
      fs::remove_all(tmp_dir, ec);
      if (::mkdir(tmp_dir.c_str(), 0755) != 0)
        fail("cannot create '%s': %s", tmp_dir.c_str(), std::strerror(errno));
      file = engine.open(data_path, /*create=*/true);
      file_open = true;
      // At least 4 KiB even for a buffered file (alignment 1), so that the
      // checkpoint also loads through O_DIRECT elsewhere.
      align = std::max<uint64_t>(engine.file(file).align, 4096);
      if (align > kMaxAlignment)
        fail("'%s' needs %llu-byte aligned I/O; checkpoints support up to "
             "%llu",
             data_path.c_str(), (unsigned long long)align,
             (unsigned long long)kMaxAlignment);
      m.alignment = align;
      m.chunk_bytes = round_up(std::max<uint64_t>(o.chunk_bytes, 1), align);
      nchunks = (m.raw_bytes + m.chunk_bytes - 1) / m.chunk_bytes;
      const size_t nslots =
          size_t(std::clamp<uint64_t>(nchunks, 1, std::max(1u, o.in_flight)));
      zcap = ZSTD_compressBound(size_t(m.chunk_bytes));
      slots.resize(nslots);
      for (Slot &s : slots) {
        s.raw.allocate(engine, m.chunk_bytes, align);
        if (o.zstd)
          s.packed.allocate(engine, zcap, align);
      }
      skip_empty();
    });
  }

  CheckpointWriteResult finish() {
    std::string old_dir; // a replaced step-N, to remove once ROOT is synced
    guarded([&] {
      skip_empty();
      if (ti != m.tensors.size())
        fail("tensor '%s' got %llu of its %llu bytes before the checkpoint "
             "was finished",
             m.tensors[ti].name.c_str(), (unsigned long long)td,
             (unsigned long long)m.tensors[ti].bytes);
      if (pos < m.raw_bytes) // the gap before trailing empty tensors
        emit(nullptr, m.raw_bytes - pos);
      if (fill > 0)
        flush_chunk();
      m.data_bytes = file_off;
      wait_all();
      result.stored_bytes = m.data_bytes;
      maybe_crash("data-written", step);
      file_open = false;
      engine.close(file, /*sync=*/true);
      maybe_crash("data-synced", step);

      const std::string manifest = manifest_text(m);
      const std::string manifest_path =
          (fs::path(tmp_dir) / kCheckpointManifest).string();
      write_file_synced(manifest_path, manifest, /*exclusive=*/true);
      maybe_crash("manifest-written", step);
      fsync_dir(tmp_dir);

      // A step-N dir already there (a torn one the resume skipped, or the
      // same step written again) is swapped with the tmp dir atomically, so
      // that step-N is the old or the new checkpoint at every instant; the
      // old one, now under the tmp name, is removed once ROOT is fsynced.
      std::error_code ec;
      if (std::string what = non_directory(final_dir); !what.empty())
        fail("%s", not_a_checkpoint_dir(final_dir, root, what).c_str());
      if (fs::exists(final_dir, ec)) {
        if (exchange_dirs(tmp_dir, final_dir) == 0) {
          old_dir = tmp_dir;
        } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP ||
                   errno == EOPNOTSUPP) {
          // No RENAME_EXCHANGE here (file system or kernel): move the old
          // one aside, then rename, putting it back if that fails. A crash
          // between the two leaves it under .step-N.stale-<pid>.
          old_dir = (fs::path(root) /
                     format(".%s.stale-%ld", name.c_str(), long(::getpid())))
                        .string();
          fs::remove_all(old_dir, ec);
          if (::rename(final_dir.c_str(), old_dir.c_str()) != 0)
            fail("cannot move the old '%s' aside to '%s': %s",
                 final_dir.c_str(), old_dir.c_str(), std::strerror(errno));
          if (rename_dir(tmp_dir, final_dir) != 0) {
            const int e = errno;
            const bool restored =
                ::rename(old_dir.c_str(), final_dir.c_str()) == 0;
            fail("cannot rename '%s' to '%s': %s%s", tmp_dir.c_str(),
                 final_dir.c_str(), std::strerror(e),
                 restored ? "" : format(" (the old one is left in '%s')",
                                        old_dir.c_str())
                                     .c_str());
          }
        } else {
          fail("cannot exchange '%s' with '%s': %s", tmp_dir.c_str(),
               final_dir.c_str(), std::strerror(errno));
        }
      } else if (rename_dir(tmp_dir, final_dir) != 0) {
        fail("cannot rename '%s' to '%s': %s", tmp_dir.c_str(),
             final_dir.c_str(), std::strerror(errno));
      }
    });
    finished = true;
    slots.clear();
    // Published: step-N is the new checkpoint. A failure from here on must
    // not remove it nor say that nothing changed: it says what is in place.
    bool synced = false, pruned = false;
    try {
      forget_verdict(o, final_dir); // it is the new one now
      maybe_crash("renamed", step);
      fsync_dir(root);
      synced = true;
      if (!old_dir.empty()) {
        std::error_code ec;
        fs::remove_all(old_dir, ec);
      }
      try {
        prune(root, step, o, result);
      } catch (const Error &e) {
        say(o, format("cannot prune the checkpoints in '%s': %s; they are "
                      "left as they are",
                      root.c_str(), e.what()));
      }
      pruned = true;
      maybe_crash("pruned", step);
    } catch (...) {
      const std::string why = exception_text(std::current_exception());
      std::string done;
      if (!synced)
        done = format("but '%s' was not fsynced, so it may not survive a "
                      "power loss, and no older checkpoint was pruned",
                      root.c_str());
      else if (!pruned)
        done = "and fsynced; older checkpoints may not all have been pruned";
      else
        done = result.pruned.empty()
                   ? std::string("and fsynced; nothing needed pruning")
                   : format("and fsynced, and %zu older one%s pruned",
                            result.pruned.size(),
                            result.pruned.size() == 1 ? " was" : "s were");
      throw CheckpointPublishedError(
          format("the checkpoint of step %lld is published as '%s' %s; then: "
                 "%s (--resume continues from '%s')",
                 (long long)step, final_dir.c_str(), done.c_str(), why.c_str(),
                 final_dir.c_str()));
    }
    return result;
  }
};

CheckpointWriter::CheckpointWriter(
    IoEngine &engine, const std::string &root, int64_t step,
    const std::vector<CheckpointTensorSpec> &tensors, const Metadata &metadata,
    const CheckpointOptions &o) {
  if (step < 0)
    fail("checkpoint of negative step %lld", (long long)step);
  if (o.keep < 1)
    fail("keeping %d checkpoints: must be at least 1", o.keep);
  if (o.chunk_bytes > kMaxChunkBytes - kMaxAlignment)
    fail("checkpoint chunks of %llu bytes: at most %llu",
         (unsigned long long)o.chunk_bytes,
         (unsigned long long)(kMaxChunkBytes - kMaxAlignment));
  create_checkpoint_root(root);
  impl_ = std::make_unique<Impl>(engine, step);
  Impl &w = *impl_;
  w.o = o;
  w.root = root;
  w.name = checkpoint_dir_name(step);
  w.final_dir = (fs::path(root) / w.name).string();
  w.tmp_dir = (fs::path(root) /
               format(".%s.tmp-%ld", w.name.c_str(), long(::getpid())))
                  .string();
  w.data_path = (fs::path(w.tmp_dir) / kCheckpointDataFile).string();
  w.open(tensors, metadata);
}

CheckpointWriter::~CheckpointWriter() {
  if (impl_ && !impl_->finished && !impl_->dead)
    impl_->cleanup();
}

void CheckpointWriter::append(const void *data, uint64_t bytes) {
  Impl &w = *impl_;
  w.guarded([&] { w.append(static_cast<const char *>(data), bytes); });
}

CheckpointWriteResult CheckpointWriter::finish() { return impl_->finish(); }

size_t CheckpointWriter::next_tensor() const { return impl_->ti; }

CheckpointWriteResult write_checkpoint(IoEngine &engine,
                                       const std::string &root, int64_t step,
                                       const std::vector<CheckpointTensorRef> &
                                           tensors,
                                       const Metadata &metadata,
                                       const CheckpointOptions &o) {
  std::vector<CheckpointTensorSpec> specs;
  for (const CheckpointTensorRef &t : tensors)
    specs.push_back({t.name, t.dtype, t.shape, t.bytes});
  CheckpointWriter w(engine, root, step, specs, metadata, o);
  for (const CheckpointTensorRef &t : tensors)
    if (t.bytes)
      w.append(t.data, t.bytes);
  return w.finish();
}

// ---- the streaming reader -------------------------------------------------------

struct CheckpointReader::Impl {
  IoEngine &engine;
  std::string dir, data_path;
  int64_t step = 0;
  Manifest m;
  FileId f = 0;
  bool file_open = false;
  uint64_t read_align = 1, slot_bytes = 0;
  struct Slot {
    Staging buf;
    Token token;
    uint64_t lo = 0;   // file offset of buf[0]
    int64_t chunk = -1; // the chunk read into it (-1: none)
  };
  std::vector<Slot> slots;
  int64_t next_submit = 0; // the next chunk to read ahead
  Staging decoded;         // the cached chunk's raw bytes (zstd)
  int64_t cached = -1;
  // Uncompressed, the cached chunk is read from its slot (no copy), which
  // reads ahead again once the cache moves on; -1: none.
  int cslot = -1;
  const char *cache = nullptr; // the cached chunk's raw bytes
  std::vector<uint64_t> chunk_raw; // raw offset of each chunk

  explicit Impl(IoEngine &e) : engine(e) {}
  ~Impl() {
    drain();
    if (file_open) {
      try {
        engine.close(f);
      } catch (...) {
      }
    }
  }

  static CheckpointReadError unreadable(const Error &e) {
    return CheckpointReadError(e.what());
  }

  // Waits for every read in flight (their buffers must outlive them).
  void drain() {
    cached = -1;
    cslot = -1;
    for (Slot &s : slots) {
      try {
        s.token.wait();
      } catch (const Error &) {
      }
      s.token = Token();
      s.chunk = -1;
    }
  }

  void span(const ChunkInfo &c, uint64_t &lo, uint64_t &hi) const {
    lo = c.offset / read_align * read_align;
    hi = std::min(round_up(c.offset + c.stored, read_align), m.data_bytes);
  }

  void submit(Slot &s, int64_t k) {
    uint64_t hi;
    span(m.chunks[size_t(k)], s.lo, hi);
    s.chunk = k;
    try {
      s.token = engine.read(
          f, s.lo, s.buf.data(), hi - s.lo, Priority::Demand,
          format("chunk %lld of checkpoint %s", (long long)k, dir.c_str()));
    } catch (const Error &e) {
      s.chunk = -1;
      throw unreadable(e);
    }
  }

  void open(const std::string &d) {
    dir = d;
    step = parse_checkpoint_dir_name(fs::path(dir).filename().string());
    if (step < 0)
      fail("the name is not step-NNNNNNNN");
    const std::string manifest_path =
        (fs::path(dir) / kCheckpointManifest).string();
    {
      // CheckpointReadError (cannot be read) passes through; anything else
      // means the manifest was read and is invalid.
      std::optional<std::string> text = read_manifest_file(manifest_path);
      if (!text)
        fail("%s is missing", kCheckpointManifest);
      try {
        m = parse_manifest(*text);
      } catch (const CheckpointReadError &) {
        throw;
      } catch (const Error &e) {
        fail("%s: %s", kCheckpointManifest, e.what());
      }
    }
    if (m.step != step)
      fail("%s says step %lld", kCheckpointManifest, (long long)m.step);
    data_path = (fs::path(dir) / kCheckpointDataFile).string();
    uint64_t size = 0;
    {
      const int fd = open_checkpoint_file(data_path, size);
      if (fd < 0)
        fail("data file '%s' is missing", data_path.c_str());
      ::close(fd);
    }
    if (size < m.data_bytes)
      fail("data file '%s' is %llu bytes, the manifest says %llu (truncated)",
           data_path.c_str(), (unsigned long long)size,
           (unsigned long long)m.data_bytes);
    uint64_t raw = 0;
    for (const ChunkInfo &c : m.chunks) {
      chunk_raw.push_back(raw);
      raw += c.raw;
    }
    if (m.chunks.empty())
      return;
    // From here on a failure of the engine (open, a read) is an I/O error,
    // not evidence of a torn checkpoint. (Its message names the file.)
    try {
      f = engine.open(data_path, /*create=*/false, /*queue=*/0,
                      /*read_only=*/true);
    } catch (const Error &e) {
      throw unreadable(e);
    }
    file_open = true;
    const uint64_t falign = std::max<uint64_t>(engine.file(f).align, 1);
    read_align = std::max(falign, m.alignment);
    if (m.data_bytes % falign)
      fail("data file '%s': %llu bytes is not a multiple of the file's "
           "alignment %llu",
           data_path.c_str(), (unsigned long long)m.data_bytes,
           (unsigned long long)falign);
    for (const ChunkInfo &c : m.chunks) {
      uint64_t lo, hi;
      span(c, lo, hi);
      slot_bytes = std::max(slot_bytes, hi - lo);
    }
    slots.resize(std::min<size_t>(m.chunks.size(), 4));
    for (Slot &s : slots)
      s.buf.allocate(engine, slot_bytes, read_align);
    if (m.zstd)
      decoded.allocate(engine, m.chunk_bytes, 4096);
  }

  // Decodes and verifies chunk k into `decoded`, reading ahead.
  void load(int64_t k) {
    if (cached == k)
      return;
    cached = -1;
    if (cslot >= 0) { // the slot the cache was in reads ahead again
      Slot &old = slots[size_t(cslot)];
      cslot = -1;
      if (next_submit < int64_t(m.chunks.size()))
        submit(old, next_submit++);
    }
    Slot *s = nullptr;
    for (Slot &x : slots)
      if (x.chunk == k)
        s = &x;
    if (!s) {
      // Not read ahead (a jump): start reading from k.
      drain();
      next_submit = k;
      for (Slot &x : slots) {
        if (next_submit >= int64_t(m.chunks.size()))
          break;
        submit(x, next_submit++);
      }
      for (Slot &x : slots)
        if (x.chunk == k)
          s = &x;
    }
    try {
      s->token.wait();
    } catch (const Error &e) {
      s->token = Token();
      s->chunk = -1;
      throw unreadable(e);
    }
    s->token = Token();
    s->chunk = -1;
    const ChunkInfo &c = m.chunks[size_t(k)];
    const uint64_t raw_off = chunk_raw[size_t(k)];
    // parse_manifest checked these; re-checked where they guard memory.
    if (c.offset < s->lo || c.offset > m.data_bytes ||
        c.stored > m.data_bytes - c.offset ||
        c.offset - s->lo + c.stored > slot_bytes || c.raw > m.chunk_bytes ||
        raw_off > m.raw_bytes || c.raw > m.raw_bytes - raw_off)
      fail("chunk %lld is out of bounds", (long long)k);
    const char *src = s->buf.data() + (c.offset - s->lo);
    const char *raw = src;
    if (m.zstd) {
      raw = decoded.data();
      size_t n = ZSTD_decompress(decoded.data(), size_t(c.raw), src,
                                 size_t(c.stored));
      if (ZSTD_isError(n) || n != c.raw)
        fail("chunk %lld (bytes %llu..%llu of '%s') does not decompress: %s",
             (long long)k, (unsigned long long)c.offset,
             (unsigned long long)(c.offset + c.stored), data_path.c_str(),
             ZSTD_isError(n) ? ZSTD_getErrorName(n) : "wrong length");
    }
    if (m.zstd && next_submit < int64_t(m.chunks.size()))
      submit(*s, next_submit++);
    const uint64_t h = XXH3_64bits(raw, size_t(c.raw));
    if (h != c.xxh3)
      fail("chunk %lld (bytes %llu..%llu of '%s') fails its checksum "
           "(xxh3 %s, expected %s)",
           (long long)k, (unsigned long long)c.offset,
           (unsigned long long)(c.offset + c.stored), data_path.c_str(),
           hex64(h).c_str(), hex64(c.xxh3).c_str());
    cached = k;
    cache = raw;
    if (!m.zstd)
      cslot = int(s - slots.data());
  }

  void read_raw(uint64_t off, uint64_t n, char *dst) {
    if (off > m.raw_bytes || n > m.raw_bytes - off)
      fail("checkpoint '%s': bytes [%llu, +%llu) are beyond its %llu raw "
           "bytes",
           dir.c_str(), (unsigned long long)off, (unsigned long long)n,
           (unsigned long long)m.raw_bytes);
    while (n > 0) {
      const int64_t k = int64_t(off / m.chunk_bytes);
      load(k);
      const uint64_t in = off - chunk_raw[size_t(k)];
      const uint64_t c = std::min(n, m.chunks[size_t(k)].raw - in);
      std::memcpy(dst, cache + in, size_t(c));
      dst += c;
      off += c;
      n -= c;
    }
  }
};

CheckpointReader::CheckpointReader(IoEngine &engine, const std::string &dir)
    : impl_(std::make_unique<Impl>(engine)) {
  impl_->open(dir);
}
CheckpointReader::~CheckpointReader() = default;
CheckpointReader::CheckpointReader(CheckpointReader &&) noexcept = default;
CheckpointReader &
CheckpointReader::operator=(CheckpointReader &&) noexcept = default;
const std::string &CheckpointReader::dir() const { return impl_->dir; }
int64_t CheckpointReader::step() const { return impl_->step; }
const std::vector<CheckpointTensor> &CheckpointReader::tensors() const {
  return impl_->m.tensors;
}
const Metadata &CheckpointReader::metadata() const { return impl_->m.metadata; }
uint64_t CheckpointReader::raw_bytes() const { return impl_->m.raw_bytes; }
const CheckpointTensor *
CheckpointReader::find(const std::string &name) const {
  for (const CheckpointTensor &t : impl_->m.tensors)
    if (t.name == name)
      return &t;
  return nullptr;
}
const std::string *CheckpointReader::meta(const std::string &key) const {
  for (auto &[k, v] : impl_->m.metadata)
    if (k == key)
      return &v;
  return nullptr;
}
void CheckpointReader::read(const CheckpointTensor &t, uint64_t offset,
                            uint64_t n, void *dst) {
  if (offset > t.bytes || n > t.bytes - offset)
    fail("checkpoint '%s': bytes [%llu, +%llu) of tensor '%s' are beyond its "
         "%llu bytes",
         impl_->dir.c_str(), (unsigned long long)offset,
         (unsigned long long)n, t.name.c_str(), (unsigned long long)t.bytes);
  impl_->read_raw(t.offset + offset, n, static_cast<char *>(dst));
}
void CheckpointReader::read_raw(uint64_t offset, uint64_t n, void *dst) {
  impl_->read_raw(offset, n, static_cast<char *>(dst));
}

LoadedCheckpoint load_checkpoint(IoEngine &engine, const std::string &dir) {
  CheckpointReader r(engine, dir);
  LoadedCheckpoint out;
  out.dir = dir;
  out.step = r.step();
  out.raw = alloc_buffer(int64_t(r.raw_bytes()));
  r.read_raw(0, r.raw_bytes(), out.raw.get());
  out.tensors = r.tensors();
  out.metadata = r.metadata();
  return out;
}

void reject_checkpoint(const CheckpointOptions &o, const std::string &dir,
                       const std::string &why) {
  say(o, format("skipping checkpoint '%s': %s; trying the next older one",
                dir.c_str(), why.c_str()));
  if (o.verdicts && !known_invalid(o, dir))
    o.verdicts->invalid.emplace_back(dir_key(dir), why);
}

std::string unreadable_checkpoint_message(const std::string &root,
                                          const std::string &path,
                                          const std::string &why) {
  // Skipping it would resume from an older one, or from the weights, and
  // the next checkpoint would prune the ones that could not be read.
  return format(
      "cannot read checkpoint '%s': %s; a read error says nothing about "
      "whether it is intact, so it is not skipped and nothing in '%s' is "
      "changed: check the storage (dmesg, the device, permissions) and "
      "rerun, or move '%s' out of '%s' to resume from the next older "
      "checkpoint",
      path.c_str(), why.c_str(), root.c_str(), path.c_str(), root.c_str());
}

std::optional<CheckpointReader>
open_newest_checkpoint(IoEngine &engine, const std::string &root,
                       const CheckpointOptions &o, int64_t below) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    if (ec && ec != std::errc::no_such_file_or_directory)
      throw CheckpointReadError(format("cannot read checkpoint directory "
                                       "'%s': %s",
                                       root.c_str(), ec.message().c_str()));
    if (fs::exists(fs::symlink_status(root, ec)))
      fail("checkpoint directory '%s' is not a directory; pass another "
           "--checkpoint-dir",
           root.c_str());
    return std::nullopt;
  }
  if (below == INT64_MAX) {
    std::vector<std::string> leftovers;
    for (fs::directory_iterator it(root, ec), end; !ec && it != end;
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (leftover_pid(name) >= 0)
        leftovers.push_back(it->path().string());
      else if (name.rfind("step-", 0) == 0 &&
               parse_checkpoint_dir_name(name) < 0)
        say(o, format("skipping '%s': not a checkpoint (the name is not "
                      "step-NNNNNNNN)",
                      it->path().c_str()));
    }
    std::sort(leftovers.begin(), leftovers.end());
    for (const std::string &l : leftovers)
      say(o, format("skipping '%s': an unfinished checkpoint write (removed "
                    "after the next checkpoint)",
                    l.c_str()));
  }
  for (auto &[step, path] : list_checkpoints(root)) {
    if (step >= below)
      continue;
    try {
      return CheckpointReader(engine, path);
    } catch (const CheckpointReadError &e) {
      throw CheckpointReadError(
          unreadable_checkpoint_message(root, path, e.what()));
    } catch (const Error &e) {
      reject_checkpoint(o, path, e.what());
    }
  }
  return std::nullopt;
}

std::optional<LoadedCheckpoint>
load_newest_checkpoint(IoEngine &engine, const std::string &root,
                       const CheckpointOptions &o) {
  int64_t below = INT64_MAX;
  while (true) {
    std::optional<CheckpointReader> r =
        open_newest_checkpoint(engine, root, o, below);
    if (!r)
      return std::nullopt;
    try {
      LoadedCheckpoint out;
      out.dir = r->dir();
      out.step = r->step();
      out.raw = alloc_buffer(int64_t(r->raw_bytes()));
      r->read_raw(0, r->raw_bytes(), out.raw.get());
      out.tensors = r->tensors();
      out.metadata = r->metadata();
      return out;
    } catch (const CheckpointReadError &e) {
      throw CheckpointReadError(
          unreadable_checkpoint_message(root, r->dir(), e.what()));
    } catch (const Error &e) {
      reject_checkpoint(o, r->dir(), e.what());
    }
    below = r->step();
  }
}

} // namespace spw::storage
