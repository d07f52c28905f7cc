//===- npy.cpp - NumPy .npy reader (format versions 1, 2, 3) --------------===//
//
// The header is a Python dict literal, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// parsed here with a small tokenizer rather than by string search, so key
// order, spacing and quoting variants written by other tools are accepted.
//
//===----------------------------------------------------------------------===//

#include "formats.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>

namespace spw {

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

namespace {

// A value of the header dict: a string, a bool, an int, or a tuple of ints.
struct PyValue {
  enum Kind { Str, Bool, Int, Tuple, Other } kind = Other;
  std::string s;
  bool b = false;
  int64_t i = 0;
  std::vector<int64_t> tuple;
};

class HeaderParser {
public:
  HeaderParser(const std::string &text, const std::string &what)
      : t(text), what(what) {}

  std::map<std::string, PyValue> parse_dict() {
    std::map<std::string, PyValue> dict;
    skip_ws();
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') {
        ++pos;
        break;
      }
      std::string key = parse_string();
      skip_ws();
      expect(':');
      skip_ws();
      dict[key] = parse_value();
      skip_ws();
      if (peek() == ',') {
        ++pos;
        continue;
      }
      skip_ws();
      expect('}');
      break;
    }
    return dict;
  }

private:
  const std::string &t;
  const std::string &what;
  size_t pos = 0;

  [[noreturn]] void bad(const char *msg) {
    fail("%s: malformed .npy header (%s at offset %zu): %s", what.c_str(), msg,
         pos, t.c_str());
  }
  char peek() const { return pos < t.size() ? t[pos] : '\0'; }
  void skip_ws() {
    while (pos < t.size() && std::isspace(static_cast<unsigned char>(t[pos])))
      ++pos;
  }
  void expect(char c) {
    if (peek() != c)
      bad(format("expected '%c'", c).c_str());
    ++pos;
  }
  std::string parse_string() {
    char q = peek();
    if (q != '\'' && q != '"')
      bad("expected a string");
    ++pos;
    std::string s;
    while (pos < t.size() && t[pos] != q) {
      if (t[pos] == '\\' && pos + 1 < t.size())
        ++pos;
      s += t[pos++];
    }
    expect(q);
    return s;
  }
  int64_t parse_int() {
    size_t start = pos;
    if (peek() == '-')
      ++pos;
    int64_t v = 0;
    bool any = false;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      if (v > (INT64_MAX - 9) / 10)
        bad("integer too large");
      v = v * 10 + (t[pos++] - '0');
      any = true;
    }
    if (!any)
      bad("expected an integer");
    if (peek() == 'L') // Python 2 long suffix
      ++pos;
    return t[start] == '-' ? -v : v;
  }
  PyValue parse_value() {
    PyValue v;
    char c = peek();
    if (c == '\'' || c == '"') {
      v.kind = PyValue::Str;
      v.s = parse_string();
    } else if (t.compare(pos, 4, "True") == 0) {
      v.kind = PyValue::Bool;
      v.b = true;
      pos += 4;
    } else if (t.compare(pos, 5, "False") == 0) {
      v.kind = PyValue::Bool;
      pos += 5;
    } else if (c == '(') {
      v.kind = PyValue::Tuple;
      ++pos;
      while (true) {
        skip_ws();
        if (peek() == ')') {
          ++pos;
          break;
        }
        v.tuple.push_back(parse_int());
        skip_ws();
        if (peek() == ',')
          ++pos;
        else if (peek() != ')')
          bad("expected ',' or ')' in shape");
      }
    } else if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
      v.kind = PyValue::Int;
      v.i = parse_int();
    } else if (c == '[') {
      // Structured dtypes (a list of fields): skip to the matching bracket.
      int depth = 0;
      do {
        if (peek() == '[')
          ++depth;
        else if (peek() == ']')
          --depth;
        else if (peek() == '\0')
          bad("unterminated list");
        ++pos;
      } while (depth > 0);
      v.kind = PyValue::Other;
    } else {
      bad("unexpected value");
    }
    return v;
  }
};

uint32_t le_u16(const std::string &b, size_t at) {
  return uint32_t(uint8_t(b[at])) | uint32_t(uint8_t(b[at + 1])) << 8;
}
uint32_t le_u32(const std::string &b, size_t at) {
  return le_u16(b, at) | le_u16(b, at + 2) << 16;
}

} // namespace

namespace {
// numpy writes headers of a few hundred bytes; a longer one is not an array
// header, and reading it whole would take memory sized from the file.
constexpr int64_t kMaxNpyHeader = int64_t(1) << 20;
} // namespace

int64_t npy_header_bytes(const std::string &bytes, const std::string &what) {
  static const char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0)
    fail("%s is not a .npy file (no \\x93NUMPY magic; %zu bytes); save arrays "
         "with numpy.save",
         what.c_str(), bytes.size());
  const int major = uint8_t(bytes[6]);
  if (major == 1)
    return 10 + int64_t(le_u16(bytes, 8));
  if (major != 2 && major != 3)
    fail("%s: unsupported .npy format version %d.%d (expected 1, 2 or 3)",
         what.c_str(), major, int(uint8_t(bytes[7])));
  if (bytes.size() < 12)
    fail("%s: truncated .npy header", what.c_str());
  const int64_t len = int64_t(le_u32(bytes, 8));
  if (len > kMaxNpyHeader)
    fail("%s: the .npy header declares %lld bytes (numpy writes a few "
         "hundred); the file is corrupt",
         what.c_str(), (long long)len);
  return 12 + len;
}

NpyHeader parse_npy_header(const std::string &bytes, int64_t file_size,
                           const std::string &what) {
  const int64_t header_end = npy_header_bytes(bytes, what);
  const size_t header_start = uint8_t(bytes[6]) == 1 ? 10 : 12;
  const size_t header_len = size_t(header_end) - header_start;
  if (file_size < header_end || int64_t(bytes.size()) < header_end)
    fail("%s: truncated .npy header (%zu bytes declared, file has %lld)",
         what.c_str(), header_len,
         (long long)(std::min<int64_t>(file_size, int64_t(bytes.size())) -
                     int64_t(header_start)));
  std::string header = bytes.substr(header_start, header_len);
  while (!header.empty() && (header.back() == '\n' || header.back() == ' ' ||
                             header.back() == '\0'))
    header.pop_back();
  auto dict = HeaderParser(header, what).parse_dict();

  NpyHeader a;
  auto descr = dict.find("descr");
  if (descr == dict.end())
    fail("%s: .npy header has no 'descr'", what.c_str());
  if (descr->second.kind != PyValue::Str)
    fail("%s: structured dtype in .npy header is not supported; save a plain "
         "numeric array",
         what.c_str());
  auto fortran = dict.find("fortran_order");
  if (fortran == dict.end() || fortran->second.kind != PyValue::Bool)
    fail("%s: .npy header has no boolean 'fortran_order'", what.c_str());
  auto shape = dict.find("shape");
  if (shape == dict.end() || shape->second.kind != PyValue::Tuple)
    fail("%s: .npy header has no 'shape' tuple", what.c_str());

  a.descr = descr->second.s;
  a.fortran_order = fortran->second.b;
  a.shape = shape->second.tuple;
  const std::string &d = a.descr;
  if (d.size() < 3 || std::string("<>|=").find(d[0]) == std::string::npos ||
      !std::isalpha(static_cast<unsigned char>(d[1])))
    fail("%s: unsupported dtype descr '%s'", what.c_str(), d.c_str());
  a.big_endian = d[0] == '>';
  a.kind = d[1];
  char *end = nullptr;
  long sz = std::strtol(d.c_str() + 2, &end, 10);
  if (*end != '\0' || sz <= 0 || sz > 64)
    fail("%s: unsupported dtype descr '%s'", what.c_str(), d.c_str());
  a.itemsize = int(sz);

  // At most 2^46 elements of at most 64 bytes: the byte count fits.
  int64_t numel = 1;
  for (int64_t dim : a.shape) {
    if (dim < 0)
      fail("%s: negative dimension in shape", what.c_str());
    if (dim != 0 && numel > (int64_t(1) << 46) / dim)
      fail("%s: shape is too large", what.c_str());
    numel *= dim;
  }
  a.numel = numel;
  a.data_offset = header_end;
  a.data_bytes = numel * a.itemsize;
  const int64_t have = file_size - header_end;
  if (have < a.data_bytes)
    fail("%s: truncated .npy file: data is %lld bytes, shape and dtype '%s' "
         "need %lld",
         what.c_str(), (long long)have, d.c_str(), (long long)a.data_bytes);
  if (have > a.data_bytes)
    fail("%s: .npy file has %lld bytes after the data its header describes "
         "(%lld); the file is corrupt",
         what.c_str(), (long long)(have - a.data_bytes),
         (long long)a.data_bytes);
  return a;
}

NpyArray parse_npy(const std::string &bytes, const std::string &what) {
  const NpyHeader h = parse_npy_header(bytes, int64_t(bytes.size()), what);
  NpyArray a;
  a.kind = h.kind;
  a.itemsize = h.itemsize;
  a.big_endian = h.big_endian;
  a.fortran_order = h.fortran_order;
  a.descr = h.descr;
  a.shape = h.shape;
  a.data.assign(bytes.begin() + long(h.data_offset), bytes.end());
  return a;
}

NpyArray read_npy(const std::string &path) {
  return parse_npy(read_whole_file(path, ".npy file"), path);
}

std::string write_npy(const std::string &descr,
                      const std::vector<int64_t> &shape, const void *data,
                      size_t bytes) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, "
                     "'shape': (";
  for (size_t i = 0; i < shape.size(); ++i)
    dict += std::to_string(shape[i]) + (shape.size() == 1 ? "," : i + 1 < shape.size() ? ", " : "");
  dict += "), }";
  // Pad so that the data starts at a multiple of 64 bytes, ending in '\n'.
  size_t total = 10 + dict.size() + 1;
  size_t pad = (64 - total % 64) % 64;
  dict += std::string(pad, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  out += char(dict.size() & 0xff);
  out += char((dict.size() >> 8) & 0xff);
  out += dict;
  out.append(static_cast<const char *>(data), bytes);
  return out;
}

} // namespace spw
