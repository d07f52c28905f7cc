//===- output_files.cpp - checking and writing the run's output files -----===//

#include "driver/checkpoints.h"
#include "driver/driver.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

namespace spw::driver {

namespace {

std::string parent_dir(const std::string &path) {
  const std::string d = std::filesystem::path(path).parent_path().string();
  return d.empty() ? "." : d;
}

// Creates and removes a file in `dir`: the one test that files can be made
// there (access(2) says yes to root on a read-only mount or an immutable
// directory). `flag` and `value` name the destination in the error.
void probe_dir(const std::string &dir, const char *flag,
               const std::string &value) {
  // A run killed between creating and removing its probe left one.
  remove_files_of_dead_writers(dir, ".spillway-probe-", '-');
  std::string tmpl =
      format("%s/.spillway-probe-%ld-XXXXXX", dir.c_str(), long(::getpid()));
  const int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    // ENOENT from a directory that exists (procfs, a file system that
    // makes no files): not a missing directory.
    struct stat st;
    if (e == ENOENT && ::stat(dir.c_str(), &st) != 0)
      fail("%s '%s': directory '%s' does not exist; create it first (this "
           "is checked before training, so no result is lost)",
           flag, value.c_str(), dir.c_str());
    fail("%s '%s': cannot create files in directory '%s': %s; choose a "
         "writable directory (this is checked before training, so no result "
         "is lost)",
         flag, value.c_str(), dir.c_str(), std::strerror(e));
  }
  ::close(fd);
  ::unlink(tmpl.c_str());
}

} // namespace

// An output file the run writes or replaces: absent or a regular file that
// may be replaced (not chattr +i or +a), in a directory where files can be
// created. A symlink is followed (--save replaces its target, --log-json
// writes through it): the target and its directory are checked.
void check_output_file(const char *flag, const std::string &given) {
  if (given.empty())
    return;
  const std::string path = resolve_symlinks(given);
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      fail("%s '%s' is %s; the run writes a regular file there and will not "
           "replace it: pass the path of a regular file",
           flag, given.c_str(), file_kind(st.st_mode));
    const int fd =
        ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    int attrs = 0;
    if (fd >= 0 && ::ioctl(fd, FS_IOC_GETFLAGS, &attrs) == 0 &&
        (attrs & (FS_IMMUTABLE_FL | FS_APPEND_FL))) {
      ::close(fd);
      fail("%s '%s' is %s (chattr %s), so the run could not replace it: "
           "remove the attribute (chattr %s) or choose another path (this is "
           "checked before training, so no result is lost)",
           flag, given.c_str(),
           attrs & FS_IMMUTABLE_FL ? "immutable" : "append-only",
           attrs & FS_IMMUTABLE_FL ? "+i" : "+a",
           attrs & FS_IMMUTABLE_FL ? "-i" : "-a");
    }
    if (fd >= 0)
      ::close(fd);
  } else if (errno != ENOENT) {
    fail("%s '%s': %s", flag, given.c_str(),
         errno == ENOTDIR ? "a part of the path is not a directory"
                          : std::strerror(errno));
  }
  probe_dir(parent_dir(path), flag, given);
}

namespace {

// An output directory (created by the run if missing): a directory where
// files can be created, or a missing one under the nearest existing
// directory, which must take files.
void check_output_dir(const char *flag, const std::string &dir) {
  if (dir.empty())
    return;
  std::string at = dir;
  while (true) {
    struct stat st;
    if (::stat(at.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode))
        fail("cannot create %s directory '%s': '%s' is %s, not a directory",
             flag, dir.c_str(), at.c_str(), file_kind(st.st_mode));
      probe_dir(at, flag, dir);
      return;
    }
    if (errno != ENOENT)
      fail("%s '%s': %s", flag, dir.c_str(),
           errno == ENOTDIR ? "a part of the path is not a directory"
                            : std::strerror(errno));
    const std::string up = parent_dir(at);
    if (up == at)
      fail("%s '%s': no part of the path exists", flag, dir.c_str());
    at = up;
  }
}

} // namespace

FileRole file_role(std::string role, const std::string &path) {
  FileRole f;
  f.role = std::move(role);
  f.path = path;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    f.exists = true;
    f.dev = st.st_dev;
    f.ino = st.st_ino;
  }
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  if (!ec)
    f.norm = std::filesystem::weakly_canonical(abs, ec).string();
  if (ec)
    f.norm = abs.lexically_normal().string();
  return f;
}

namespace {

bool same_file(const FileRole &a, const FileRole &b) {
  if (a.exists && b.exists)
    return a.dev == b.dev && a.ino == b.ino;
  return !a.exists && !b.exists && !a.norm.empty() && a.norm == b.norm;
}

} // namespace

// What the run reads: its --input files, the weights and the executable.
std::vector<FileRole> run_inputs(const Options &o, const std::string &weights,
                                 const std::string &exe) {
  std::vector<FileRole> in;
  for (const auto &[name, file] : o.inputs)
    in.push_back(file_role(format("--input %s=%s", name.c_str(), file.c_str()),
                           file));
  if (!o.data.empty())
    in.push_back(file_role(format("--data '%s'", o.data.c_str()), o.data));
  if (!o.val_data.empty())
    in.push_back(file_role(format("--val-data '%s'", o.val_data.c_str()),
                           o.val_data));
  in.push_back(file_role(o.weights.empty()
                             ? format("the weights '%s' (the default of "
                                      "--weights)",
                                      weights.c_str())
                             : format("--weights '%s'", weights.c_str()),
                         weights));
  in.push_back(file_role(format("the executable '%s'", exe.c_str()), exe));
  return in;
}

// No output may replace an input or another output (`--log-json x.npy` would
// wipe the data at the start). The one exception: --save onto the --weights
// it started from, which is safe (read at the start, replaced atomically at
// the end) and the way to continue a run.
void refuse_overwrites(const std::vector<FileRole> &outs,
                       const std::vector<FileRole> &ins, const Options &o) {
  for (size_t i = 0; i < outs.size(); ++i) {
    for (const FileRole &in : ins) {
      if (!same_file(outs[i], in))
        continue;
      if (outs[i].role.rfind("--save ", 0) == 0 && !o.weights.empty() &&
          in.role.rfind("--weights ", 0) == 0)
        continue;
      throw UsageError(format(
          "%s is the same file as %s: the run would overwrite what it reads; "
          "choose another path%s",
          outs[i].role.c_str(), in.role.c_str(),
          outs[i].role.rfind("--save ", 0) == 0 && o.weights.empty() &&
                  in.role.rfind("the weights ", 0) == 0
              ? " (or pass --weights with that file to start from it and "
                "replace it)"
              : ""));
    }
    for (size_t j = 0; j < i; ++j)
      if (same_file(outs[i], outs[j]))
        throw UsageError(format("%s and %s are the same file: one would "
                                "overwrite the other; choose different paths",
                                outs[j].role.c_str(), outs[i].role.c_str()));
  }
}

// Every destination the run writes, before anything else: a --save into a
// missing directory is an error before step 1, not after the last, and one
// that is an input of the run is refused.
std::vector<FileRole> output_roles(const Options &o) {
  std::vector<FileRole> outs;
  for (const auto &[flag, path] :
       {std::pair<const char *, const std::string *>{"--save", &o.save},
        {"--log-json", &o.log_json},
        {"--stats-json", &o.stats_json}, {"--trace", &o.trace}})
    if (!path->empty())
      outs.push_back(file_role(format("%s '%s'", flag, path->c_str()), *path));
  return outs;
}

void check_outputs(const Options &o, const std::vector<FileRole> &ins) {
  refuse_overwrites(output_roles(o), ins, o);
  check_output_file("--save", o.save);
  check_output_file("--log-json", o.log_json);
  check_output_file("--stats-json", o.stats_json);
  check_output_file("--trace", o.trace);
  check_output_dir("--checkpoint-dir", o.checkpoint_dir);
  check_output_dir("--outputs", o.outputs);
}

// Opens --log-json for writing (appending after a resume) without blocking
// on a FIFO, refusing anything but a regular file.
FILE *open_log(const std::string &path, bool append) {
  const int fd = ::open(path.c_str(),
                        O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK |
                            O_NOCTTY | (append ? O_APPEND : 0),
                        0644);
  if (fd < 0) {
    const int e = errno;
    fail("cannot create --log-json file '%s': %s", path.c_str(),
         e == ENXIO ? "it is a FIFO without a reader" : std::strerror(e));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const unsigned mode = st.st_mode;
    ::close(fd);
    fail("--log-json '%s' is %s, not a regular file", path.c_str(),
         file_kind(mode));
  }
  if (!append && ::ftruncate(fd, 0) != 0) {
    const int e = errno;
    ::close(fd);
    fail("cannot truncate --log-json file '%s': %s", path.c_str(),
         std::strerror(e));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0)
    (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  FILE *f = ::fdopen(fd, append ? "a" : "w");
  if (!f) {
    const int e = errno;
    ::close(fd);
    fail("cannot open --log-json file '%s': %s", path.c_str(),
         std::strerror(e));
  }
  return f;
}

// Stops, before a file is written, when a float parameter is not finite.
void check_finite_weights(const spw_ctx *ctx, const char *before) {
  int64_t at = 0;
  if (const ParamInfo *p = non_finite_param(ctx, &at))
    check_finite_range(ctx, *p, p->value->as<float>(), 0, p->value->numel,
                       before);
}

void check_finite_range(const spw_ctx *ctx, const ParamInfo &p,
                        const float *w, int64_t begin, int64_t n,
                        const char *before) {
  const int64_t i = first_non_finite(w, n);
  if (i >= 0)
    fail("step %lld: parameter '%s' %s holds %s at flat index %lld; %s is "
         "not written (a non-finite gradient or a diverging update made it: "
         "check the inputs and the model, or lower --lr if the loss grew)",
         (long long)ctx->step, p.name.c_str(), p.value->shape().c_str(),
         non_finite_name(w[i]), (long long)(begin + i), before);
}

} // namespace spw::driver
