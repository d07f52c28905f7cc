//===- support.cpp - errors, formatting, dtypes, buffers, files, memory ---===//

#include "support.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <map>
#include <optional>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

namespace spw {

static std::string vformat(const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap2);
  va_end(ap2);
  std::string s(n > 0 ? size_t(n) : 0, '\0');
  if (n > 0)
    std::vsnprintf(s.data(), s.size() + 1, fmt, ap);
  return s;
}

std::string format(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  throw Error(s);
}

int64_t dtype_size(int32_t dtype) {
  switch (dtype) {
  case SPW_F32: return 4;
  case SPW_I64: return 8;
  case SPW_I32: return 4;
  case SPW_BOOL: return 1;
  case SPW_BF16: return 2;
  default: return 0;
  }
}

const char *dtype_name(int32_t dtype) {
  switch (dtype) {
  case SPW_F32: return "f32";
  case SPW_I64: return "i64";
  case SPW_I32: return "i32";
  case SPW_BOOL: return "bool";
  case SPW_BF16: return "bf16";
  default: return "?";
  }
}

std::string shape_str(const int64_t *dims, int rank) {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i)
      s += ",";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

void AlignedFree::operator()(void *p) const { std::free(p); }

Buffer alloc_buffer(int64_t bytes) {
  // aligned_alloc needs a size that is a multiple of the alignment.
  size_t n = size_t((bytes + 63) / 64 * 64);
  if (n == 0)
    n = 64;
  void *p = std::aligned_alloc(64, n);
  if (!p)
    fail("cannot allocate %lld bytes", (long long)bytes);
  return Buffer(p);
}

std::string json_string(const std::string &s) {
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

const char *file_kind(unsigned mode) {
  switch (mode & S_IFMT) {
  case S_IFREG: return "a regular file";
  case S_IFDIR: return "a directory";
  case S_IFIFO: return "a FIFO (named pipe)";
  case S_IFCHR: return "a character device";
  case S_IFBLK: return "a block device";
  case S_IFSOCK: return "a socket";
  case S_IFLNK: return "a symbolic link";
  default: return "a special file";
  }
}

int open_regular(const std::string &path, const char *what, int64_t *size) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
  // writer forever; it has no effect on the reads of a regular file.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0)
    fail("cannot open %s '%s': %s", what, path.c_str(), std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("cannot stat %s '%s': %s", what, path.c_str(), std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("%s '%s' is %s, not a regular file", what, path.c_str(),
         file_kind(st.st_mode));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0)
    (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  if (size)
    *size = int64_t(st.st_size);
  return fd;
}

std::string read_whole_file(const std::string &path, const char *what) {
  int64_t size = 0;
  int fd = open_regular(path, what, &size);
  std::string bytes(size_t(size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      fail("cannot read %s '%s' at offset %zu: %s", what, path.c_str(), done,
           std::strerror(e));
    }
    if (n == 0) // the file shrank while we read it
      break;
    done += size_t(n);
  }
  ::close(fd);
  bytes.resize(done);
  return bytes;
}

namespace {

// The first number of a one-line file such as memory.max ("max": none).
std::optional<int64_t> read_number_file(const char *path) {
  FILE *f = std::fopen(path, "re");
  if (!f)
    return std::nullopt;
  char buf[64] = {};
  const bool got = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  if (!got)
    return std::nullopt;
  char *end = nullptr;
  errno = 0;
  const long long v = std::strtoll(buf, &end, 10);
  if (end == buf || errno == ERANGE || v < 0)
    return std::nullopt;
  return int64_t(v);
}

// MemAvailable of /proc/meminfo, in bytes.
std::optional<int64_t> meminfo_available() {
  FILE *f = std::fopen("/proc/meminfo", "re");
  if (!f)
    return std::nullopt;
  char line[256];
  std::optional<int64_t> r;
  while (std::fgets(line, sizeof line, f)) {
    long long kib = 0;
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) {
      r = int64_t(kib) * 1024;
      break;
    }
  }
  std::fclose(f);
  return r;
}

} // namespace

MemoryBudget available_memory() {
  MemoryBudget b;
  auto take = [&](std::optional<int64_t> v, const char *source) {
    if (v && (b.bytes < 0 || *v < b.bytes)) {
      b.bytes = std::max<int64_t>(*v, 0);
      b.source = source;
    }
  };
  take(meminfo_available(), "MemAvailable in /proc/meminfo");
  // cgroup v2, then v1: the limit less what the group already uses.
  if (auto max = read_number_file("/sys/fs/cgroup/memory.max")) {
    auto cur = read_number_file("/sys/fs/cgroup/memory.current");
    take(*max - cur.value_or(0), "the cgroup's memory.max");
  } else if (auto lim = read_number_file(
                 "/sys/fs/cgroup/memory/memory.limit_in_bytes");
             lim && *lim < (int64_t(1) << 60)) {
    auto cur = read_number_file("/sys/fs/cgroup/memory/memory.usage_in_bytes");
    take(*lim - cur.value_or(0), "the cgroup's memory.limit_in_bytes");
  }
  // The address-space limit (ulimit -v) less what the process maps.
  struct rlimit rl;
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    long long pages = 0;
    if (FILE *f = std::fopen("/proc/self/statm", "re")) {
      if (std::fscanf(f, "%lld", &pages) != 1)
        pages = 0;
      std::fclose(f);
    }
    take(int64_t(rl.rlim_cur) - int64_t(pages) * ::sysconf(_SC_PAGESIZE),
         "the address-space limit (ulimit -v)");
  }
  return b;
}

void check_memory(int64_t bytes, const std::string &what) {
  const MemoryBudget b = available_memory();
  if (b.bytes >= 0 && bytes > b.bytes)
    fail("%s %lld bytes (%.2f GiB), more than the %lld bytes (%.2f "
         "GiB) available (%s); use a smaller model or fewer batches, or "
         "free memory",
         what.c_str(), (long long)bytes, double(bytes) / double(1 << 30),
         (long long)b.bytes, double(b.bytes) / double(1 << 30),
         b.source.c_str());
}

// ---- atomic writes ----------------------------------------------------------------

void write_file_synced(const std::string &path, const std::string &bytes,
                       bool exclusive) {
  // O_NONBLOCK: a FIFO there fails to open (ENXIO) instead of waiting for
  // a reader; it changes nothing for a regular file.
  int fd = ::open(path.c_str(),
                  O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOCTTY |
                      (exclusive ? O_EXCL : O_TRUNC),
                  0644);
  if (fd < 0)
    fail("cannot create '%s': %s", path.c_str(), std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
    ::close(fd); // not ours to remove
    fail("'%s' is %s, not a regular file", path.c_str(),
         file_kind(st.st_mode));
  }
  auto give_up = [&](const char *what, size_t at, int e) {
    ::close(fd);
    ::unlink(path.c_str());
    if (at == size_t(-1))
      fail("cannot %s '%s': %s", what, path.c_str(), std::strerror(e));
    fail("cannot %s '%s' at offset %zu: %s", what, path.c_str(), at,
         std::strerror(e));
  };
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      give_up("write", done, n < 0 ? errno : ENOSPC);
    done += size_t(n);
  }
  if (::fsync(fd) != 0)
    give_up("fsync", size_t(-1), errno);
  if (::close(fd) != 0) {
    int e = errno;
    ::unlink(path.c_str());
    fail("cannot close '%s': %s", path.c_str(), std::strerror(e));
  }
}

void remove_files_of_dead_writers(const std::string &dir,
                                  const std::string &prefix, char sep) {
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return;
  while (const struct dirent *e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix))
      continue;
    const size_t stop = sep ? name.find(sep, prefix.size()) : name.size();
    if (stop == std::string::npos)
      continue;
    const std::string digits = name.substr(prefix.size(), stop - prefix.size());
    if (digits.empty() || digits.size() > 9 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    const pid_t pid = pid_t(std::stol(digits));
    if (pid <= 0 || pid == ::getpid() ||
        !(::kill(pid, 0) != 0 && errno == ESRCH))
      continue;
    const std::string full = dir + "/" + name;
    struct stat st;
    if (::lstat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode))
      ::unlink(full.c_str());
  }
  ::closedir(d);
}

std::string resolve_symlinks(const std::string &given) {
  std::string path = given;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode))
      return path;
    std::string target(size_t(PATH_MAX), '\0');
    const ssize_t n = ::readlink(path.c_str(), target.data(), target.size());
    if (n <= 0 || size_t(n) >= target.size())
      return path;
    target.resize(size_t(n));
    // A relative target is relative to the link's directory.
    const size_t slash = path.find_last_of('/');
    path = target[0] == '/' || slash == std::string::npos
               ? target
               : path.substr(0, slash + 1) + target;
  }
  return path; // a loop: the writes fail on it with ELOOP, naming it
}

bool test_write_fault(const std::string &path) {
  const char *spec = std::getenv("SPILLWAY_TEST_ENOSPC");
  if (!spec || !*spec)
    return false;
  static std::map<std::string, long> writes; // per FILE of the spec
  const std::string all = spec;
  size_t start = 0;
  while (start <= all.size()) {
    size_t comma = all.find(',', start);
    if (comma == std::string::npos)
      comma = all.size();
    std::string item = all.substr(start, comma - start), name = item;
    long from = 1;
    if (size_t at = item.rfind('@'); at != std::string::npos) {
      name = item.substr(0, at);
      from = std::atol(item.c_str() + at + 1);
    }
    if (name == path)
      return ++writes[name] >= from;
    start = comma + 1;
  }
  return false;
}

void write_file_atomic(const std::string &given, const std::string &bytes) {
  // A symlink is followed: its target is what the user means to replace (a
  // rename over the link would replace the link and leave the target as it
  // was); the temporary is made beside the target.
  const std::string path = resolve_symlinks(given);
  // Only a regular file is replaced: a rename over /dev/null (or a FIFO, a
  // directory) would swap the node for a file.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail("'%s' is %s; refusing to replace it with a regular file",
         path.c_str(), file_kind(st.st_mode));
  // What a killed earlier write of this file left (`<name>.tmp.<pid>`).
  {
    const size_t slash = path.find_last_of('/');
    remove_files_of_dead_writers(
        slash == std::string::npos ? "."
        : slash == 0               ? "/"
                                   : path.substr(0, slash),
        (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp.",
        '\0');
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  // A new file: whatever has this name (a file of an earlier process with
  // our pid, or a FIFO someone made there) is not opened.
  ::unlink(tmp.c_str());
  if (test_write_fault(given))
    fail("cannot write '%s' at offset 0: %s (SPILLWAY_TEST_ENOSPC)",
         tmp.c_str(), std::strerror(ENOSPC));
  write_file_synced(tmp, bytes, /*exclusive=*/true);
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
