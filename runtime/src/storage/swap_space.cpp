//===- swap_space.cpp - swap files striped over directories ---------------===//

#include "storage/io_engine.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace spw::storage {

std::string human_bytes(uint64_t bytes) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  double v = double(bytes);
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  if (u == 0 || v == std::floor(v))
    return format("%.0f %s", v, units[u]);
  return format("%.1f %s", v, units[u]);
}

uint64_t parse_size(const std::string &s, const std::string &flag) {
  auto bad = [&]() -> uint64_t {
    fail("%s: '%s' is not a size (examples: 4096, 512M, 4G, 1.5GiB)",
         flag.c_str(), s.c_str());
  };
  size_t i = 0;
  while (i < s.size() && (isdigit((unsigned char)s[i]) || s[i] == '.'))
    ++i;
  std::string num = s.substr(0, i), unit = s.substr(i);
  if (num.empty() || num == "." || num.find('.') != num.rfind('.'))
    return bad();
  int shift = 0;
  if (!unit.empty() && unit != "B") {
    static const char letters[] = "KMGTP";
    char c = char(toupper((unsigned char)unit[0]));
    const char *l = c ? strchr(letters, c) : nullptr;
    std::string rest = unit.substr(1);
    if (!l || !(rest.empty() || rest == "B" || rest == "iB" || rest == "i"))
      return bad();
    shift = 10 * int(l - letters + 1);
  }
  double v = std::strtod(num.c_str(), nullptr) * std::ldexp(1.0, shift);
  if (!(v >= 0) || v >= 18446744073709551615.0 || v != std::floor(v))
    return bad();
  return uint64_t(v);
}

SwapSpace::SwapSpace(IoEngine &engine, const std::vector<std::string> &dirs,
                     uint64_t bytes, bool keep_files)
    : engine_(engine) {
  if (dirs.empty())
    fail("swap space: no directory given (pass --ssd DIR1,DIR2,...)");
  stripe_ = engine.config().request_bytes;
  size_t n = dirs.size();
  // Round-robin stripes: directory k holds stripes k, k+n, k+2n, ...
  uint64_t stripes = (bytes + stripe_ - 1) / stripe_;
  std::vector<uint64_t> need(n);
  for (size_t k = 0; k < n; ++k)
    need[k] = (stripes > k ? (stripes - k + n - 1) / n : 0) * stripe_;

  // Check every directory before creating anything.
  std::string short_of;
  for (size_t k = 0; k < n; ++k) {
    const std::string &d = dirs[k];
    struct stat st;
    if (stat(d.c_str(), &st) != 0)
      fail("swap directory '%s': %s", d.c_str(), strerror(errno));
    if (!S_ISDIR(st.st_mode))
      fail("swap directory '%s' is not a directory", d.c_str());
    struct statvfs vfs;
    if (statvfs(d.c_str(), &vfs) != 0)
      fail("swap directory '%s': statvfs failed: %s", d.c_str(),
           strerror(errno));
    uint64_t avail = uint64_t(vfs.f_bavail) * vfs.f_frsize;
    if (need[k] > avail)
      short_of += format("%sswap space needs %s in '%s' but only %s is free",
                         short_of.empty() ? "" : "; ",
                         human_bytes(need[k]).c_str(), d.c_str(),
                         human_bytes(avail).c_str());
  }
  if (!short_of.empty())
    fail("%s; free space or pass other --ssd directories", short_of.c_str());

  auto cleanup = [&] {
    for (size_t k = 0; k < files_.size(); ++k) {
      try {
        engine_.close(files_[k]);
      } catch (const Error &) {
      }
      unlink(paths_[k].c_str());
    }
    files_.clear();
  };
  try {
    for (size_t k = 0; k < n; ++k) {
      std::string path = format("%s/spillway-swap-%d-%zu.bin", dirs[k].c_str(),
                                int(getpid()), k);
      FileId f = engine_.open(path, true, unsigned(k));
      files_.push_back(f);
      paths_.push_back(path);
      const FileInfo &info = engine_.file(f);
      align_ = std::max(align_, info.align);
      // Before allocating anything there; the cleanup below closes and
      // removes this file and those opened before it.
      if (stripe_ % align_)
        fail("swap space: the stripe unit %s is not a multiple of the "
             "O_DIRECT alignment %zu of '%s'",
             human_bytes(stripe_).c_str(), align_, dirs[k].c_str());
      if (ftruncate(info.fd, 0) != 0)
        fail("swap file '%s': ftruncate failed: %s", path.c_str(),
             strerror(errno));
      if (need[k]) {
        int r = fallocate(info.fd, 0, 0, off_t(need[k]));
        if (r != 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) {
          engine_.config().notice(format(
              "'%s' cannot preallocate (fallocate: %s); the swap file is "
              "extended with ftruncate and may run out of space later",
              dirs[k].c_str(), strerror(errno)));
          r = ftruncate(info.fd, off_t(need[k]));
        }
        if (r != 0)
          fail("swap file in '%s': allocating %s failed: %s", dirs[k].c_str(),
               human_bytes(need[k]).c_str(), strerror(errno));
      }
      if (!keep_files && unlink(path.c_str()) != 0)
        fail("swap file '%s': unlink failed: %s", path.c_str(),
             strerror(errno));
    }
  } catch (...) {
    cleanup();
    throw;
  }
  size_ = bytes;
}

SwapSpace::~SwapSpace() {
  for (FileId f : files_) {
    try {
      engine_.close(f);
    } catch (const Error &) {
    }
  }
}

std::vector<Segment> SwapSpace::map(uint64_t offset, void *buf,
                                    uint64_t len) const {
  if (offset > size_ || len > size_ - offset)
    fail("swap space: range [%llu, %llu) is outside its %s",
         (unsigned long long)offset, (unsigned long long)(offset + len),
         human_bytes(size_).c_str());
  std::vector<Segment> segs;
  size_t n = files_.size();
  char *p = static_cast<char *>(buf);
  while (len) {
    uint64_t s = offset / stripe_, in = offset % stripe_;
    uint64_t chunk = std::min(len, stripe_ - in);
    segs.push_back({files_[s % n], (s / n) * stripe_ + in, p, chunk});
    offset += chunk;
    p += chunk;
    len -= chunk;
  }
  return segs;
}

Token SwapSpace::read(uint64_t offset, void *buf, uint64_t len, Priority prio,
                      const std::string &what) {
  return engine_.submit(IoOp::Read, map(offset, buf, len), prio, what);
}

Token SwapSpace::write(uint64_t offset, const void *buf, uint64_t len,
                       Priority prio, const std::string &what) {
  return engine_.submit(IoOp::Write,
                        map(offset, const_cast<void *>(buf), len), prio,
                        what);
}

} // namespace spw::storage
