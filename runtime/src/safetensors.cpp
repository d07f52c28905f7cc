//===- safetensors.cpp - .safetensors reader and writer -------------------===//
//
// Layout: u64 little-endian header size, the JSON header (padded with spaces
// to a multiple of 8 bytes), then the tensors' bytes back to back;
// data_offsets are relative to the end of the header.
//
// The reader is a small, strict parser of exactly what a safetensors header
// may hold: one JSON object whose values are tensor entries
// {"dtype": STRING, "shape": [INT, ...], "data_offsets": [INT, INT]} or, under
// the key "__metadata__", an object of strings. No third-party code.
//
//===----------------------------------------------------------------------===//

#include "formats.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace spw {

const char *safetensors_dtype(int32_t dtype) {
  switch (dtype) {
  case SPW_F32: return "F32";
  case SPW_I64: return "I64";
  case SPW_I32: return "I32";
  default: return "?";
  }
}

std::string safetensors_bytes(const std::vector<NamedTensor> &tensors) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  int64_t offset = 0;
  for (const NamedTensor &nt : tensors) {
    const spw_tensor &t = *nt.tensor;
    header += "," + json_string(nt.name) + ":{\"dtype\":\"" +
              safetensors_dtype(t.dtype) + "\",\"shape\":[";
    for (int i = 0; i < t.rank; ++i)
      header += (i ? "," : "") + std::to_string(t.dims[i]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + t.bytes()) + "]}";
    offset += t.bytes();
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + header.size() + size_t(offset));
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out += char((n >> (8 * i)) & 0xff);
  out += header;
  for (const NamedTensor &nt : tensors)
    out.append(static_cast<const char *>(nt.tensor->data),
               size_t(nt.tensor->bytes()));
  return out;
}

// ---- reader -------------------------------------------------------------------

int64_t safetensors_dtype_size(const std::string &dtype) {
  static const std::pair<const char *, int64_t> kSizes[] = {
      {"BOOL", 1}, {"U8", 1},   {"I8", 1},   {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2},  {"F16", 2},  {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4},  {"F64", 8},  {"I64", 8},     {"U64", 8}};
  for (auto &[name, size] : kSizes)
    if (dtype == name)
      return size;
  return 0;
}

namespace {

class HeaderParser {
public:
  HeaderParser(const std::string &text, const std::string &what)
      : s_(text), what_(what) {}

  SafetensorsHeader parse() {
    SafetensorsHeader h;
    std::set<std::string> seen;
    skip_ws();
    expect('{', "'{' (the header is not a JSON object)");
    skip_ws();
    if (peek() != '}') {
      for (;;) {
        skip_ws();
        const size_t key_at = pos_;
        std::string key = string();
        if (!seen.insert(key).second)
          fail_at(key_at, "duplicate key " + quoted(key));
        skip_ws();
        expect(':', "':'");
        skip_ws();
        if (key == "__metadata__")
          metadata(h.metadata);
        else
          h.tensors.push_back(tensor(std::move(key)));
        skip_ws();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}', "',' or '}'");
        break;
      }
    } else {
      ++pos_;
    }
    // Padding: the writer pads with spaces; JSON whitespace is tolerated.
    skip_ws();
    if (pos_ != s_.size())
      fail_at(pos_, "unexpected data after the header's JSON object");
    return h;
  }

private:
  const std::string &s_;
  const std::string &what_;
  size_t pos_ = 0;

  [[noreturn]] void fail_at(size_t at, const std::string &msg) const {
    fail("%s: malformed .safetensors header (at byte %zu of the JSON): %s", what_.c_str(),
         at, msg.c_str());
  }
  static std::string quoted(const std::string &v) { return "'" + v + "'"; }

  int peek() const { return pos_ < s_.size() ? (unsigned char)s_[pos_] : -1; }
  std::string found() const {
    if (pos_ >= s_.size())
      return "the end of the header";
    unsigned char c = (unsigned char)s_[pos_];
    if (c >= 0x20 && c < 0x7f)
      return format("'%c'", c);
    return format("byte 0x%02x", c);
  }
  void expect(char c, const char *what) {
    if (peek() != (unsigned char)c)
      fail_at(pos_, std::string("expected ") + what + ", found " + found());
    ++pos_;
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' ||
                                s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }

  static void append_utf8(std::string &out, uint32_t cp) {
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
  }
  uint32_t hex4() {
    if (pos_ + 4 > s_.size())
      fail_at(pos_, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_ + size_t(i)];
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0)
        fail_at(pos_ + size_t(i), "invalid hex digit in \\u escape");
      v = v * 16 + uint32_t(d);
    }
    pos_ += 4;
    return v;
  }

  std::string string() {
    expect('"', "a string");
    std::string out;
    for (;;) {
      if (pos_ >= s_.size())
        fail_at(pos_, "unterminated string");
      unsigned char c = (unsigned char)s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20)
        fail_at(pos_, format("control character 0x%02x in a string (it "
                             "must be escaped)",
                             c));
      if (c != '\\') {
        out += char(c);
        ++pos_;
        continue;
      }
      const size_t esc_at = pos_++;
      if (pos_ >= s_.size())
        fail_at(pos_, "unterminated string");
      char e = s_[pos_++];
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
          if (pos_ + 2 > s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u')
            fail_at(esc_at, "unpaired high surrogate in \\u escape");
          pos_ += 2;
          uint32_t lo = hex4();
          if (lo < 0xdc00 || lo > 0xdfff)
            fail_at(esc_at, "unpaired high surrogate in \\u escape");
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        append_utf8(out, cp);
        break;
      }
      default:
        fail_at(esc_at, format("invalid escape '\\%c'", e));
      }
    }
  }

  // A non-negative JSON integer (no sign, fraction or exponent).
  int64_t integer(const std::string &ctx) {
    const size_t at = pos_;
    if (peek() == '-')
      fail_at(at, ctx + ": expected a non-negative integer, found a negative "
                        "number");
    if (peek() < '0' || peek() > '9')
      fail_at(at, ctx + ": expected a non-negative integer, found " + found());
    if (peek() == '0' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' &&
        s_[pos_ + 1] <= '9')
      fail_at(at, ctx + ": leading zero in an integer");
    int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      int d = peek() - '0';
      if (v > (INT64_MAX - d) / 10)
        fail_at(at, ctx + ": integer too large");
      v = v * 10 + d;
      ++pos_;
    }
    if (peek() == '.' || peek() == 'e' || peek() == 'E')
      fail_at(at, ctx + ": expected an integer, found a fraction or exponent");
    return v;
  }

  std::vector<int64_t> int_array(const std::string &ctx) {
    std::vector<int64_t> v;
    expect('[', ("an array for " + ctx).c_str());
    skip_ws();
    if (peek() == ']') {
      ++pos_;
      return v;
    }
    for (;;) {
      skip_ws();
      v.push_back(integer(ctx));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']', "',' or ']'");
      return v;
    }
  }

  void metadata(std::vector<std::pair<std::string, std::string>> &out) {
    expect('{', "an object for \"__metadata__\"");
    std::set<std::string> seen;
    skip_ws();
    if (peek() == '}') {
      ++pos_;
      return;
    }
    for (;;) {
      skip_ws();
      const size_t key_at = pos_;
      std::string key = string();
      if (!seen.insert(key).second)
        fail_at(key_at, "duplicate __metadata__ key " + quoted(key));
      skip_ws();
      expect(':', "':'");
      skip_ws();
      if (peek() != '"')
        fail_at(pos_, "__metadata__ value of " + quoted(key) +
                          " must be a string, found " + found());
      out.emplace_back(std::move(key), string());
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}', "',' or '}'");
      return;
    }
  }

  SafetensorsEntry tensor(std::string name) {
    SafetensorsEntry t;
    t.name = std::move(name);
    const std::string ctx = "tensor " + quoted(t.name);
    expect('{', ("an object for " + ctx).c_str());
    bool have_dtype = false, have_shape = false, have_offsets = false;
    skip_ws();
    if (peek() != '}') {
      for (;;) {
        skip_ws();
        const size_t key_at = pos_;
        std::string key = string();
        skip_ws();
        expect(':', "':'");
        skip_ws();
        bool *have = key == "dtype"          ? &have_dtype
                     : key == "shape"        ? &have_shape
                     : key == "data_offsets" ? &have_offsets
                                             : nullptr;
        if (!have)
          fail_at(key_at, ctx + ": unknown key " + quoted(key) +
                              " (expected dtype, shape, data_offsets)");
        if (*have)
          fail_at(key_at, ctx + ": duplicate key " + quoted(key));
        *have = true;
        if (key == "dtype") {
          const size_t at = pos_;
          t.dtype = string();
          if (safetensors_dtype_size(t.dtype) == 0)
            fail_at(at, ctx + ": unknown dtype " + quoted(t.dtype));
        } else if (key == "shape") {
          t.shape = int_array(ctx + " shape");
        } else {
          const size_t at = pos_;
          std::vector<int64_t> off = int_array(ctx + " data_offsets");
          if (off.size() != 2)
            fail_at(at, ctx + ": data_offsets must be [begin, end], found " +
                            std::to_string(off.size()) + " numbers");
          t.begin = off[0];
          t.end = off[1];
        }
        skip_ws();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}', "',' or '}'");
        break;
      }
    } else {
      ++pos_;
    }
    const char *missing = !have_dtype    ? "dtype"
                          : !have_shape  ? "shape"
                          : !have_offsets ? "data_offsets"
                                          : nullptr;
    if (missing)
      fail_at(pos_ - 1, ctx + ": no \"" + missing + "\"");
    return t;
  }
};

} // namespace

SafetensorsHeader parse_safetensors_header(const std::string &json,
                                           int64_t data_size,
                                           const std::string &what) {
  SafetensorsHeader h = HeaderParser(json, what).parse();
  // Every tensor's byte range must match its dtype and shape, lie inside the
  // data section, and the ranges must tile the data section (the format
  // allows no holes, overlaps or trailing bytes).
  std::vector<const SafetensorsEntry *> by_offset;
  for (const SafetensorsEntry &t : h.tensors) {
    int64_t bytes = safetensors_dtype_size(t.dtype);
    for (int64_t d : t.shape) {
      if (d != 0 && bytes > INT64_MAX / d)
        fail("%s: tensor '%s': shape %s is too large", what.c_str(),
             t.name.c_str(),
             shape_str(t.shape.data(), int(t.shape.size())).c_str());
      bytes *= d;
    }
    if (t.begin > t.end)
      fail("%s: tensor '%s': data_offsets [%lld, %lld] end before they begin",
           what.c_str(), t.name.c_str(), (long long)t.begin,
           (long long)t.end);
    if (t.end - t.begin != bytes)
      fail("%s: tensor '%s': data_offsets [%lld, %lld] span %lld bytes, but "
           "%s %s needs %lld",
           what.c_str(), t.name.c_str(), (long long)t.begin, (long long)t.end,
           (long long)(t.end - t.begin), t.dtype.c_str(),
           shape_str(t.shape.data(), int(t.shape.size())).c_str(),
           (long long)bytes);
    if (t.end > data_size)
      fail("%s: tensor '%s': data_offsets [%lld, %lld] run past the end of "
           "the data section (%lld bytes); is the file truncated?",
           what.c_str(), t.name.c_str(), (long long)t.begin, (long long)t.end,
           (long long)data_size);
    by_offset.push_back(&t);
  }
  std::stable_sort(by_offset.begin(), by_offset.end(),
                   [](const SafetensorsEntry *a, const SafetensorsEntry *b) {
                     return a->begin != b->begin ? a->begin < b->begin
                                                 : a->end < b->end;
                   });
  int64_t at = 0;
  const SafetensorsEntry *prev = nullptr;
  for (const SafetensorsEntry *t : by_offset) {
    if (t->begin < at)
      fail("%s: tensor '%s': data_offsets [%lld, %lld] overlap those of "
           "tensor '%s'",
           what.c_str(), t->name.c_str(), (long long)t->begin,
           (long long)t->end, prev->name.c_str());
    if (t->begin > at)
      fail("%s: tensor '%s': data_offsets [%lld, %lld] leave bytes [%lld, "
           "%lld) of the data section unused",
           what.c_str(), t->name.c_str(), (long long)t->begin,
           (long long)t->end, (long long)at, (long long)t->begin);
    at = t->end;
    prev = t;
  }
  if (at != data_size)
    fail("%s: the data section is %lld bytes, but the tensors' data_offsets "
         "end at %lld",
         what.c_str(), (long long)data_size, (long long)at);
  return h;
}

} // namespace spw
