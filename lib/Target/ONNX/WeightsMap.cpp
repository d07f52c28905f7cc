//===- WeightsMap.cpp - the weights file: raw blob or weights map ---------===//
//
// Writing weights maps, reading their headers back, and writing the logical
// blob they describe in bounded memory.
//
//===----------------------------------------------------------------------===//

#include "spillway/Target/ONNX/WeightsMap.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/xxhash.h"

#include <algorithm>
#include <sys/stat.h>

using namespace spillway::weights;
using llvm::StringRef;

namespace {
constexpr uint64_t kSampleBytes = 64 << 10;
/// What a copy holds in memory at once, whatever the weights' size.
constexpr uint64_t kChunkBytes = 4 << 20;
/// Inline tensors in a map's data region start at multiples of this, as in
/// the logical blob.
constexpr uint64_t kInlineAlignment = 64;

std::string hex16(uint64_t v) {
  std::string s;
  llvm::raw_string_ostream(s) << llvm::format_hex_no_prefix(v, 16);
  return s;
}

/// Reads exactly `buf.size()` bytes at `offset`; false at a short read.
bool readAt(llvm::sys::fs::file_t fd, llvm::MutableArrayRef<char> buf,
            uint64_t offset, std::string &error, StringRef path) {
  while (!buf.empty()) {
    llvm::Expected<size_t> n =
        llvm::sys::fs::readNativeFileSlice(fd, buf, offset);
    if (!n) {
      error = "cannot read '" + path.str() + "': " +
              llvm::toString(n.takeError());
      return false;
    }
    if (*n == 0) {
      error = llvm::formatv("'{0}' ends at byte {1}, before the weights' "
                            "bytes there; was it truncated since the "
                            "compile?",
                            path, offset)
                  .str();
      return false;
    }
    buf = buf.drop_front(*n);
    offset += *n;
  }
  return true;
}

/// An open input file, closed when it goes.
struct InFile {
  llvm::sys::fs::file_t fd = llvm::sys::fs::kInvalidFile;
  InFile() = default;
  InFile(const InFile &) = delete;
  InFile &operator=(const InFile &) = delete;
  /// Opens `path`, closing the file open before.
  bool open(StringRef path, std::string &error) {
    close();
    llvm::Expected<llvm::sys::fs::file_t> f =
        llvm::sys::fs::openNativeFileForRead(path);
    if (!f) {
      error = "cannot open '" + path.str() + "': " +
              llvm::toString(f.takeError());
      return false;
    }
    fd = *f;
    return true;
  }
  void close() {
    if (fd != llvm::sys::fs::kInvalidFile)
      llvm::sys::fs::closeFile(fd);
    fd = llvm::sys::fs::kInvalidFile;
  }
  ~InFile() { close(); }
};

void writeZeros(llvm::raw_ostream &os, uint64_t n) {
  static const char zeros[4096] = {};
  for (; n; n -= std::min<uint64_t>(n, sizeof(zeros)))
    os.write(zeros, std::min<uint64_t>(n, sizeof(zeros)));
}

/// The segments' layout: sorted, disjoint, inside [0, size).
bool checkLayout(uint64_t size, llvm::ArrayRef<Segment> segments,
                 std::string &error) {
  uint64_t end = 0;
  for (const Segment &s : segments) {
    if (s.offset < 0 || s.length <= 0 || s.sourceOffset < 0 ||
        (uint64_t)s.offset < end || (uint64_t)s.length > size ||
        (uint64_t)s.offset > size - s.length) {
      error = llvm::formatv("segment [{0}, {1}, {2}, {3}] is out of order, "
                            "overlaps another, or lies outside the {4} "
                            "bytes of the weights",
                            s.offset, s.length, s.source, s.sourceOffset,
                            size)
                  .str();
      return false;
    }
    end = s.offset + s.length;
  }
  return true;
}

bool closeOutput(llvm::raw_fd_ostream &os, StringRef path,
                 std::string &error) {
  os.close();
  if (os.has_error()) {
    error = "cannot write weights file '" + path.str() + "': " +
            os.error().message();
    os.clear_error();
    return false;
  }
  return true;
}
} // namespace

bool spillway::weights::describeSource(StringRef path, Source &out,
                                       std::string &error) {
  llvm::SmallString<256> real;
  if (std::error_code ec = llvm::sys::fs::real_path(path, real)) {
    error = "cannot read '" + path.str() + "': " + ec.message();
    return false;
  }
  // stat(2) itself: the runtime compares st_mtim to the nanosecond.
  struct stat st;
  if (::stat(real.c_str(), &st) != 0) {
    error = "cannot read '" + std::string(real) + "': " +
            std::error_code(errno, std::generic_category()).message();
    return false;
  }
  out.path = std::string(real);
  out.bytes = st.st_size;
  out.mtimeNs = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  uint64_t a = std::min<uint64_t>(out.bytes, kSampleBytes);
  std::string sample(2 * a, '\0');
  InFile in;
  if (!in.open(real, error) ||
      !readAt(in.fd, llvm::MutableArrayRef<char>(&sample[0], a), 0, error,
              real) ||
      !readAt(in.fd, llvm::MutableArrayRef<char>(&sample[a], a),
              out.bytes - a, error, real))
    return false;
  out.sample = llvm::xxh3_64bits(StringRef(sample));
  return true;
}

std::string spillway::weights::sourceChange(const Source &recorded) {
  Source now;
  std::string error;
  if (!describeSource(recorded.path, now, error))
    return error;
  if (now.bytes != recorded.bytes)
    return llvm::formatv("'{0}' is {1} bytes, but was {2} at compile time",
                         recorded.path, now.bytes, recorded.bytes)
        .str();
  if (now.mtimeNs != recorded.mtimeNs)
    return llvm::formatv("'{0}' was modified after the compile (mtime {1} "
                         "ns, was {2})",
                         recorded.path, now.mtimeNs, recorded.mtimeNs)
        .str();
  if (now.sample != recorded.sample)
    return llvm::formatv("the bytes of '{0}' changed after the compile "
                         "(sample {1}, was {2})",
                         recorded.path, hex16(now.sample),
                         hex16(recorded.sample))
        .str();
  return {};
}

bool spillway::weights::writeMap(StringRef path, uint64_t size,
                                 llvm::ArrayRef<Source> sources,
                                 llvm::ArrayRef<Segment> segments,
                                 std::string &error) {
  if (!checkLayout(size, segments, error))
    return false;
  // The header holds each inline segment's place in the file, which follows
  // the header: its length grows with those offsets, which grow with it, so
  // it is laid out again until the length holds (a step or two).
  auto header = [&](uint64_t dataStart) {
    std::string text;
    llvm::raw_string_ostream os(text);
    llvm::json::OStream j(os);
    uint64_t at = dataStart;
    j.object([&] {
      j.attribute("format", "spillway-weights-map");
      j.attribute("version", 1);
      j.attribute("size", int64_t(size));
      j.attributeArray("sources", [&] {
        for (const Source &s : sources)
          j.object([&] {
            j.attribute("path", s.path);
            j.attribute("bytes", int64_t(s.bytes));
            j.attribute("mtime_ns", s.mtimeNs);
            j.attribute("sample", hex16(s.sample));
          });
      });
      j.attributeArray("segments", [&] {
        for (const Segment &s : segments)
          j.array([&] {
            j.value(s.offset);
            j.value(s.length);
            j.value(s.source);
            if (s.source >= 0) {
              j.value(s.sourceOffset);
              return;
            }
            at = llvm::alignTo(at, kInlineAlignment);
            j.value(int64_t(at));
            at += s.length;
          });
      });
    });
    return text;
  };
  std::string text = header(16);
  for (uint64_t n = 0; n != text.size();) {
    n = text.size();
    text = header(16 + n);
  }
  uint64_t n = text.size(), dataStart = 16 + n;
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec) {
    error = "cannot write weights file '" + path.str() + "': " + ec.message();
    return false;
  }
  char len[8];
  llvm::support::endian::write64le(len, n);
  os << kMapMagic;
  os.write(len, 8);
  os << text;
  uint64_t at = dataStart;
  for (const Segment &s : segments) {
    if (s.source >= 0)
      continue;
    uint64_t start = llvm::alignTo(at, kInlineAlignment);
    writeZeros(os, start - at);
    os << s.data;
    at = start + s.length;
  }
  return closeOutput(os, path, error);
}

bool spillway::weights::writeRaw(StringRef path, uint64_t size,
                                 llvm::ArrayRef<Source> sources,
                                 llvm::ArrayRef<Segment> segments,
                                 std::string &error, StringRef mapPath) {
  if (!checkLayout(size, segments, error))
    return false;
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec) {
    error = "cannot write weights file '" + path.str() + "': " + ec.message();
    return false;
  }
  // One source open at a time (segments of one source come in runs).
  std::vector<char> chunk;
  InFile in;
  int64_t openSource = -2;
  uint64_t at = 0;
  for (const Segment &s : segments) {
    writeZeros(os, s.offset - at);
    at = s.offset + s.length;
    if (s.source < 0 && mapPath.empty()) {
      os << s.data;
      continue;
    }
    StringRef from = s.source < 0 ? mapPath : StringRef(sources[s.source].path);
    if (s.source != openSource) {
      if (!in.open(from, error))
        return false;
      openSource = s.source;
    }
    chunk.resize(std::min<uint64_t>(kChunkBytes, s.length));
    for (uint64_t done = 0; done < (uint64_t)s.length;) {
      uint64_t n = std::min<uint64_t>(chunk.size(), s.length - done);
      if (!readAt(in.fd, llvm::MutableArrayRef<char>(chunk.data(), n),
                  s.sourceOffset + done, error, from))
        return false;
      os.write(chunk.data(), n);
      done += n;
    }
  }
  writeZeros(os, size - at);
  return closeOutput(os, path, error);
}

bool spillway::weights::hasMapMagic(StringRef path) {
  auto buf = llvm::MemoryBuffer::getFileSlice(path, kMapMagic.size(), 0);
  return buf && (*buf)->getBuffer() == kMapMagic;
}

std::optional<Map> spillway::weights::readMap(StringRef path,
                                              std::string &error) {
  auto fail = [&](const llvm::Twine &why) -> std::optional<Map> {
    error = ("weights map '" + path + "': " + why).str();
    return std::nullopt;
  };
  uint64_t fileSize;
  if (std::error_code ec = llvm::sys::fs::file_size(path, fileSize))
    return fail("cannot read it: " + ec.message());
  auto head = llvm::MemoryBuffer::getFileSlice(path, 16, 0);
  if (!head || (*head)->getBufferSize() != 16 ||
      !(*head)->getBuffer().starts_with(kMapMagic))
    return fail("no SPWWMAP1 header");
  uint64_t n = llvm::support::endian::read64le(
      (*head)->getBufferStart() + kMapMagic.size());
  if (n > fileSize - 16)
    return fail(llvm::formatv("its header length {0} runs past the file's "
                              "{1} bytes",
                              n, fileSize));
  auto text = llvm::MemoryBuffer::getFileSlice(path, n, 16);
  if (!text)
    return fail("cannot read its header: " + text.getError().message());
  llvm::Expected<llvm::json::Value> json =
      llvm::json::parse((*text)->getBuffer());
  if (!json)
    return fail("its header is not JSON: " + llvm::toString(json.takeError()));
  const llvm::json::Object *root = json->getAsObject();
  if (!root || root->getString("format") != "spillway-weights-map" ||
      root->getInteger("version") != 1)
    return fail("its header is not a version 1 spillway-weights-map");
  Map map;
  std::optional<int64_t> size = root->getInteger("size");
  const llvm::json::Array *sources = root->getArray("sources");
  const llvm::json::Array *segments = root->getArray("segments");
  if (!size || *size < 0 || !sources || !segments)
    return fail("its header lacks a size, sources or segments");
  map.size = *size;
  for (const llvm::json::Value &v : *sources) {
    const llvm::json::Object *o = v.getAsObject();
    std::optional<StringRef> p = o ? o->getString("path") : std::nullopt;
    std::optional<int64_t> bytes = o ? o->getInteger("bytes") : std::nullopt;
    std::optional<int64_t> mtime = o ? o->getInteger("mtime_ns") : std::nullopt;
    std::optional<StringRef> sample = o ? o->getString("sample") : std::nullopt;
    Source s;
    if (!p || !bytes || *bytes < 0 || !mtime || !sample ||
        sample->size() != 16 || sample->getAsInteger(16, s.sample))
      return fail("a source lacks its path, bytes, mtime_ns or sample (16 "
                  "hex digits)");
    s.path = p->str();
    s.bytes = *bytes;
    s.mtimeNs = *mtime;
    map.sources.push_back(std::move(s));
  }
  for (const llvm::json::Value &v : *segments) {
    const llvm::json::Array *a = v.getAsArray();
    std::optional<int64_t> f[4];
    if (a && a->size() == 4)
      for (int i = 0; i < 4; ++i)
        f[i] = (*a)[i].getAsInteger();
    if (!f[0] || !f[1] || !f[2] || !f[3])
      return fail("a segment is not [offset, length, source, source_offset]");
    Segment s{*f[0], *f[1], *f[2], *f[3], {}};
    uint64_t limit = s.source == -1 ? fileSize
                     : s.source >= 0 && s.source < (int64_t)map.sources.size()
                         ? map.sources[s.source].bytes
                         : 0;
    if (s.source < -1 || s.source >= (int64_t)map.sources.size())
      return fail(llvm::formatv("segment at {0} names source {1}; there are "
                                "{2}",
                                s.offset, s.source, map.sources.size()));
    if (s.sourceOffset < 0 || s.length < 0 ||
        (uint64_t)s.length > limit ||
        (uint64_t)s.sourceOffset > limit - s.length)
      return fail(llvm::formatv("segment at {0} ({1} bytes at {2}) lies "
                                "outside its source's {3} bytes",
                                s.offset, s.length, s.sourceOffset, limit));
    map.segments.push_back(s);
  }
  std::string layout;
  if (!checkLayout(map.size, map.segments, layout))
    return fail(layout);
  return map;
}
