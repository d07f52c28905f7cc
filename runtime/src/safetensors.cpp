//===- safetensors.cpp - .safetensors writer and atomic file writes --------===//
//
// Layout: u64 little-endian header size, the JSON header (padded with spaces
// to a multiple of 8 bytes), then the tensors' bytes back to back;
// data_offsets are relative to the end of the header.
//
//===----------------------------------------------------------------------===//

#include "runtime_internal.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace spw {

static std::string json_string(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      out += format("\\u%04x", c);
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

static const char *safetensors_dtype(int32_t dtype) {
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

void write_file_atomic(const std::string &path, const std::string &bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    fail("cannot create '%s': %s", tmp.c_str(), std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int e = n < 0 ? errno : EIO;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("cannot write '%s' at offset %zu: %s", tmp.c_str(), done,
           std::strerror(e));
    }
    done += size_t(n);
  }
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    fail("cannot fsync '%s': %s", tmp.c_str(), std::strerror(e));
  }
  if (::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("cannot close '%s': %s", tmp.c_str(), std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("cannot rename '%s' to '%s': %s", tmp.c_str(), path.c_str(),
         std::strerror(e));
  }
  // Make the rename durable; failure here is not worth failing the run for
  // (some file systems refuse fsync on directories).
  std::string dir = path.substr(0, path.find_last_of('/') + 1);
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY |
                                                       O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

} // namespace spw
