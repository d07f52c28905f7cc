//===- main.cpp - spw_main: the training executable's driver --------------===//
//
// Parses the command line, loads the weights and the --input arrays, and runs
// the training loop or the gradient check. This is the only object of the
// library that refers to spw_model_declare / spw_model_step, which generated
// code defines: a program that does not call spw_main does not pull it in,
// so it links without a model.
//
//===----------------------------------------------------------------------===//

#include "runtime_internal.h"
#include "spillway/runtime/hyperparams.h"
#include "storage/checkpoint.h"
#include "tiers.h"
#include "trace.h"

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <chrono>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_map>
#include <unordered_set>
#include <xxhash.h>

extern "C" void spw_model_declare(spw_ctx *ctx);
extern "C" void spw_model_step(spw_ctx *ctx);

namespace spw {
namespace {

struct UsageError : Error {
  using Error::Error;
};

// Progress goes to stdout, which may go away (`| head -3`: SIGPIPE is
// ignored, see spw_main) or fill up (`> /dev/full`): that must not stop the
// training or lose its result. The first failed write is said once on
// stderr, and stdout then goes to /dev/null; the exit status does not
// change.
bool g_stdout_gone = false;
void flush_stdout() {
  if (g_stdout_gone)
    return;
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout))
    return;
  const int e = errno;
  g_stdout_gone = true;
  std::fprintf(stderr,
               "warning: cannot write to standard output (%s); progress is "
               "no longer printed, the run goes on\n",
               e ? std::strerror(e) : "write error");
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null >= 0) {
    (void)::dup2(null, STDOUT_FILENO);
    ::close(null);
  }
  std::clearerr(stdout);
}

struct Options {
  std::vector<std::pair<std::string, std::string>> inputs; // name, file
  int64_t steps = 1;
  uint64_t seed = 0;
  AdamWOverrides adamw;
  std::string log_json, save, weights;
  int64_t print_every = 0; // 0: default max(1, steps / 20)
  bool check_gradients = false;
  double fd_eps = 1e-2;
  int64_t fd_samples = 16;
  double fd_tol = 1e-2;
  bool help = false;
  // Forward-only models (spw_declare_output): --outputs DIR, and whether
  // --steps was given (it defaults to the inputs' batch count for them).
  std::string outputs;
  bool steps_given = false;
  std::vector<std::string> training_flags; // given flags a forward model rejects
  // Checkpoints (storage/checkpoint.h).
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0; // 0: only after the last step
  bool resume = false;
  bool checkpoint_zstd = false;
  int64_t keep_checkpoints = 2;
  storage::Backend io_backend = storage::Backend::Auto;
  std::vector<std::string> checkpoint_flags; // given flags that need --checkpoint-dir
  // Offload plans (tiers.h).
  std::vector<std::string> ssd;
  std::string stats_json;
  std::string trace; // --trace FILE (trace.h)
  // Backend (device.h): "" is the compile target's (spillwayc --target).
  std::string device;
  int64_t device_arena = 0; // step arena bytes; 0: the backend's default
};

const char kUsage[] =
    "usage: %s [options]\n"
    "Trains the model compiled into this executable.\n"
    "\n"
    "  --input NAME=FILE.npy   data for model input NAME: an array of shape\n"
    "                          [B, *input_shape] (step s uses batch s %% B) or\n"
    "                          exactly input_shape (one batch); float32 for\n"
    "                          float inputs, int64 or int32 for integer ones\n"
    "  --steps N               training steps (default 1)\n"
    "  --lr F, --beta1 F, --beta2 F, --eps F, --weight-decay F\n"
    "                          AdamW hyper-parameters (default: the values\n"
    "                          compiled into the model); FOAM uses them too\n"
    "  --foam-alpha F          FOAM's update scale (models compiled with\n"
    "                          --optimizer foam; default: the compiled one)\n"
    "  --weights FILE          initial parameters: the raw weights spillwayc\n"
    "                          writes, or a .safetensors file (e.g. from\n"
    "                          --save) (default: <executable>.weights)\n"
    "  --save FILE             write the final parameters as .safetensors\n"
    "  --log-json FILE         one JSON object per step: step, loss, lr\n"
    "  --print-every N         progress line every N steps (default steps/20)\n"
    "  --seed S                seed of the element choice of --check-gradients\n"
    "  --check-gradients       compare the gradients with central finite\n"
    "                          differences on batch 0 instead of training\n"
    "    --fd-eps H            step: H * max(1, |p|) (default 1e-2)\n"
    "    --fd-samples K        elements checked per parameter (default 16)\n"
    "    --fd-tol T            relative tolerance (default 1e-2)\n"
    "  --checkpoint-dir DIR    write crash-safe checkpoints of all training\n"
    "                          state (parameters, AdamW moments, step) to\n"
    "                          DIR/step-NNNNNNNN/, after the last step and\n"
    "                          every --checkpoint-every steps\n"
    "    --checkpoint-every N  also checkpoint every N steps (default: only\n"
    "                          after the last step)\n"
    "    --resume              continue from the newest valid checkpoint in\n"
    "                          DIR (torn ones are skipped); --steps stays the\n"
    "                          total; starts from --weights if there is none.\n"
    "                          The result is bit for bit that of an\n"
    "                          uninterrupted run\n"
    "    --keep-checkpoints K  keep the newest K checkpoints (default 2)\n"
    "    --checkpoint-zstd     compress checkpoints with zstd\n"
    "  --io-backend B          checkpoint and offload I/O: auto (io_uring,\n"
    "                          else threads), io_uring or threads (default\n"
    "                          auto)\n"
    "  --ssd DIR[,DIR...]      models compiled with an offload plan: the\n"
    "                          directories of the SSD swap files (default:\n"
    "                          spillwayc's --ssd, else the current directory)\n"
    "  --stats-json FILE       models compiled with an offload plan: write\n"
    "                          the bytes moved per link per iteration next\n"
    "                          to the plan's prediction, peak bytes per tier,\n"
    "                          time waiting on I/O and the overlap\n"
    "  --trace FILE            write the run's timeline (tasks, kernels,\n"
    "                          copies, waits) as a Chrome trace (Perfetto)\n"
    "  --outputs DIR           forward-only models (spillwayc --forward):\n"
    "                          write each output NAME to DIR/NAME.npy, shape\n"
    "                          [steps, *output_shape]; step s at index s-1;\n"
    "                          characters outside [A-Za-z0-9._-] in NAME\n"
    "                          become '_' (DIR is created if missing)\n"
    "  --device D              where the step runs: cpu, cuda (executables\n"
    "                          compiled with spillwayc --target cuda) or\n"
    "                          loopback (the CUDA backend's host side on\n"
    "                          host memory with the CPU kernels, to test it\n"
    "                          without a GPU) (default: the compile target)\n"
    "    --device-arena SIZE   bytes reserved once for the step's tensors on\n"
    "                          the device, e.g. 40G (suffixes K, M, G; default:\n"
    "                          most of the free GPU memory; loopback: 4G)\n"
    "  --help                  this text\n"
    "\n"
    "A forward-only model runs --steps steps (default: the largest batch\n"
    "count B among its inputs) without a loss; the training flags (--lr,\n"
    "--beta1, --beta2, --eps, --weight-decay, --foam-alpha, --save,\n"
    "--log-json, --check-gradients and the checkpoint flags) are usage\n"
    "errors for it.\n"
    "\n"
    "Exit status: 0 success, 1 runtime or data error, 2 usage error.\n";

// Decimal digits only: strtoll alone would take " 5", "+5" and, for an
// unsigned flag, " -1" as 2^64 - 1.
bool all_digits(const std::string &v) {
  return !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
}

int64_t parse_int(const std::string &flag, const std::string &v, int64_t min) {
  errno = 0;
  char *end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (!all_digits(v) || *end != '\0' || errno == ERANGE || x < min)
    throw UsageError(format("invalid value '%s' for %s: expected an integer "
                            ">= %lld",
                            v.c_str(), flag.c_str(), (long long)min));
  return x;
}

double parse_double(const std::string &flag, const std::string &v, double min,
                    double max, bool max_inclusive) {
  errno = 0;
  char *end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || std::isspace(static_cast<unsigned char>(v[0])) ||
      *end != '\0' || errno == ERANGE || !std::isfinite(x) ||
      x < min || x > max || (!max_inclusive && x == max))
    throw UsageError(format("invalid value '%s' for %s: expected a number in "
                            "[%g, %g%s",
                            v.c_str(), flag.c_str(), min, max,
                            max_inclusive ? "]" : ")"));
  return x;
}

// An optimizer hyper-parameter: the range of hyperparams.h, which spillwayc
// and the train dialect's verifier check too.
double parse_hparam(const spillway::hyperparams::Range &r,
                    const std::string &v) {
  double x = 0;
  const std::string e = spillway::hyperparams::parse_flag(r, v, x);
  if (!e.empty())
    throw UsageError(e);
  return x;
}

// A byte count: digits with an optional K, M or G (powers of 1024).
int64_t parse_size(const std::string &flag, const std::string &v) {
  std::string digits = v;
  int shift = 0;
  if (!v.empty() && std::strchr("KkMmGg", v.back())) {
    const char c = char(std::toupper(static_cast<unsigned char>(v.back())));
    shift = c == 'K' ? 10 : c == 'M' ? 20 : 30;
    digits.pop_back();
  }
  errno = 0;
  char *end = nullptr;
  const long long x = std::strtoll(digits.c_str(), &end, 10);
  if (!all_digits(digits) || *end != '\0' || errno == ERANGE || x < 1 ||
      x > (INT64_MAX >> 1 >> shift))
    throw UsageError(format("invalid value '%s' for %s: expected a byte "
                            "count such as 1048576, 512M or 40G",
                            v.c_str(), flag.c_str()));
  return int64_t(x) << shift;
}

// A path flag's value; an empty one is a usage error (`--save "$OUT"` with
// OUT unset must not quietly mean "do not save").
std::string path_value(const std::string &flag, const std::string &v,
                       const char *what = "file") {
  if (v.empty())
    throw UsageError(format("%s needs a %s path, and the one given is empty "
                            "(an unset shell variable?)",
                            flag.c_str(), what));
  return v;
}

Options parse_args(int argc, char **argv) {
  Options o;
  bool fd_flag = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      o.help = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0)
      throw UsageError(format("unexpected argument '%s'", arg.c_str()));
    std::string flag = arg, value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    if (flag == "--check-gradients" || flag == "--resume" ||
        flag == "--checkpoint-zstd") {
      if (has_value)
        throw UsageError(format("%s takes no value", flag.c_str()));
      if (flag == "--check-gradients")
        o.check_gradients = true;
      else if (flag == "--resume")
        o.resume = true;
      else
        o.checkpoint_zstd = true;
      if (flag != "--check-gradients")
        o.checkpoint_flags.push_back(flag);
      o.training_flags.push_back(flag);
      continue;
    }
    static const char *const kValued[] = {
        "--input", "--steps", "--seed", "--lr", "--beta1", "--beta2", "--eps",
        "--weight-decay", "--foam-alpha", "--log-json", "--save", "--weights",
        "--print-every", "--fd-eps", "--fd-samples", "--fd-tol", "--outputs",
        "--checkpoint-dir", "--checkpoint-every", "--keep-checkpoints",
        "--io-backend", "--ssd", "--stats-json", "--device",
        "--device-arena", "--trace"};
    if (std::find_if(std::begin(kValued), std::end(kValued),
                     [&](const char *f) { return flag == f; }) ==
        std::end(kValued))
      throw UsageError(format("unknown flag '%s'", flag.c_str()));
    if (!has_value) {
      if (i + 1 >= argc)
        throw UsageError(format("%s needs a value", flag.c_str()));
      value = argv[++i];
    }
    static const char *const kTraining[] = {
        "--lr", "--beta1", "--beta2", "--eps", "--weight-decay",
        "--foam-alpha", "--save", "--log-json", "--checkpoint-dir",
        "--checkpoint-every", "--keep-checkpoints"};
    if (std::find_if(std::begin(kTraining), std::end(kTraining),
                     [&](const char *f) { return flag == f; }) !=
        std::end(kTraining))
      o.training_flags.push_back(flag);
    if (flag == "--input") {
      size_t eq = value.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == value.size())
        throw UsageError(format("invalid value '%s' for --input: expected "
                                "NAME=FILE.npy",
                                value.c_str()));
      std::string name = value.substr(0, eq);
      for (auto &in : o.inputs)
        if (in.first == name)
          throw UsageError(format("--input %s given twice", name.c_str()));
      o.inputs.emplace_back(name, value.substr(eq + 1));
    } else if (flag == "--steps") {
      o.steps = parse_int(flag, value, 0);
      o.steps_given = true;
    } else if (flag == "--seed") {
      errno = 0;
      char *end = nullptr;
      unsigned long long s = std::strtoull(value.c_str(), &end, 10);
      if (!all_digits(value) || *end != '\0' || errno == ERANGE)
        throw UsageError(format("invalid value '%s' for --seed: expected a "
                                "non-negative integer",
                                value.c_str()));
      o.seed = s;
    } else if (flag == "--lr") {
      o.adamw.lr = parse_hparam(spillway::hyperparams::kLr, value);
    } else if (flag == "--beta1") {
      o.adamw.beta1 = parse_hparam(spillway::hyperparams::kBeta1, value);
    } else if (flag == "--beta2") {
      o.adamw.beta2 = parse_hparam(spillway::hyperparams::kBeta2, value);
    } else if (flag == "--eps") {
      o.adamw.eps = parse_hparam(spillway::hyperparams::kEps, value);
    } else if (flag == "--weight-decay") {
      o.adamw.weight_decay =
          parse_hparam(spillway::hyperparams::kWeightDecay, value);
    } else if (flag == "--foam-alpha") {
      o.adamw.foam_alpha =
          parse_hparam(spillway::hyperparams::kFoamAlpha, value);
    } else if (flag == "--log-json") {
      o.log_json = path_value(flag, value);
    } else if (flag == "--save") {
      o.save = path_value(flag, value);
    } else if (flag == "--ssd") {
      o.ssd.clear();
      size_t start = 0;
      while (start <= value.size()) {
        size_t comma = value.find(',', start);
        if (comma == std::string::npos)
          comma = value.size();
        if (comma == start)
          throw UsageError(format("invalid value '%s' for --ssd: expected "
                                  "DIR[,DIR...] without empty names",
                                  value.c_str()));
        o.ssd.push_back(value.substr(start, comma - start));
        start = comma + 1;
      }
    } else if (flag == "--stats-json") {
      o.stats_json = path_value(flag, value);
    } else if (flag == "--trace") {
      o.trace = path_value(flag, value);
    } else if (flag == "--weights") {
      o.weights = path_value(flag, value);
    } else if (flag == "--outputs") {
      o.outputs = path_value(flag, value, "directory");
    } else if (flag == "--checkpoint-dir") {
      o.checkpoint_dir = path_value(flag, value, "directory");
    } else if (flag == "--checkpoint-every") {
      o.checkpoint_every = parse_int(flag, value, 1);
      o.checkpoint_flags.push_back(flag);
    } else if (flag == "--keep-checkpoints") {
      o.keep_checkpoints = parse_int(flag, value, 1);
      if (o.keep_checkpoints > 1000000)
        throw UsageError(format("invalid value '%s' for --keep-checkpoints: "
                                "expected at most 1000000",
                                value.c_str()));
      o.checkpoint_flags.push_back(flag);
    } else if (flag == "--io-backend") {
      try {
        o.io_backend = storage::parse_backend(value);
      } catch (const Error &) {
        throw UsageError(format("invalid value '%s' for --io-backend: "
                                "expected auto, io_uring or threads",
                                value.c_str()));
      }
    } else if (flag == "--device") {
      if (value != "cpu" && value != "cuda" && value != "loopback")
        throw UsageError(format("invalid value '%s' for --device: expected "
                                "cpu, cuda or loopback",
                                value.c_str()));
      o.device = value;
    } else if (flag == "--device-arena") {
      o.device_arena = parse_size(flag, value);
    } else if (flag == "--print-every") {
      o.print_every = parse_int(flag, value, 1);
    } else if (flag == "--fd-eps") {
      o.fd_eps = parse_double(flag, value, 0.0, 1.0, true);
      if (o.fd_eps == 0.0)
        throw UsageError("invalid value '0' for --fd-eps: must be > 0");
      fd_flag = true;
    } else if (flag == "--fd-samples") {
      o.fd_samples = parse_int(flag, value, 1);
      fd_flag = true;
    } else if (flag == "--fd-tol") {
      o.fd_tol = parse_double(flag, value, 0.0, 1e6, true);
      if (o.fd_tol == 0.0)
        throw UsageError("invalid value '0' for --fd-tol: must be > 0");
      fd_flag = true;
    }
  }
  if (fd_flag && !o.check_gradients)
    throw UsageError("--fd-eps, --fd-samples and --fd-tol need "
                     "--check-gradients");
  if (!o.checkpoint_flags.empty() && o.checkpoint_dir.empty())
    throw UsageError(format("%s needs --checkpoint-dir DIR",
                            o.checkpoint_flags.front().c_str()));
  if (o.check_gradients && !o.checkpoint_dir.empty())
    throw UsageError("--check-gradients does not train: it takes no "
                     "--checkpoint-dir or --resume");
  return o;
}

std::string exe_path(const char *argv0) {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) {
    buf[n] = '\0';
    return buf;
  }
  return argv0 ? argv0 : "spillway-model";
}

std::string human_bytes(int64_t b) {
  if (b < 1024)
    return format("%lld B", (long long)b);
  if (b < (int64_t(1) << 20))
    return format("%.1f KiB", double(b) / 1024.0);
  if (b < (int64_t(1) << 30))
    return format("%.1f MiB", double(b) / double(1 << 20));
  return format("%.2f GiB", double(b) / double(1 << 30));
}

// ---- weights ----------------------------------------------------------------

struct FdCloser {
  int fd = -1;
  FdCloser() = default;
  explicit FdCloser(int f) : fd(f) {}
  FdCloser(FdCloser &&o) noexcept : fd(o.fd) { o.fd = -1; }
  FdCloser &operator=(FdCloser &&o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~FdCloser() {
    if (fd >= 0)
      ::close(fd);
  }
};

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

[[noreturn]] void read_failed(const std::string &path, const std::string &what,
                              int64_t offset) {
  const int e = errno;
  fail("cannot read %s from weights file '%s' at offset %lld: %s",
       what.c_str(), path.c_str(), (long long)offset,
       e ? std::strerror(e) : "unexpected end of file");
}

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

// safetensors' own limit on the header size.
constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

// Where each parameter's bytes are in a checked weights file; read once the
// parameters have their buffers (read_weights).
struct WeightsPlan {
  std::string path;
  FdCloser fd;
  std::vector<int64_t> offsets; // per parameter; empty: nothing to read
};

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

// ---- inputs --------------------------------------------------------------------

std::string numpy_dtype(const NpyHeader &a) {
  const char *kind = a.kind == 'f'   ? "float"
                     : a.kind == 'i' ? "int"
                     : a.kind == 'u' ? "uint"
                     : a.kind == 'b' ? "bool"
                     : a.kind == 'c' ? "complex"
                                     : nullptr;
  if (a.kind == 'b' && a.itemsize == 1)
    return "bool ('" + a.descr + "')";
  if (!kind)
    return "'" + a.descr + "'";
  return format("%s%d ('%s')", kind, a.itemsize * 8, a.descr.c_str());
}

std::string tuple_str(const std::vector<int64_t> &v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i)
    s += std::to_string(v[i]) + (v.size() == 1 ? "," : i + 1 < v.size() ? ", " : "");
  return s + ")";
}

// An --input file whose header was checked against its input; its data is
// read once the memory for all of them is known to be there (read_input).
struct InputPlan {
  InputInfo *in = nullptr;
  std::string file;
  FdCloser fd;
  NpyHeader h;
  int64_t batches = 0;
  int64_t bytes = 0; // of the input's buffer: batches * the input's bytes
};

InputPlan check_input(InputInfo &in, const std::string &file) {
  spw_tensor &view = *in.view;
  const std::string what = format("input '%s' (%s)", in.name.c_str(),
                                  file.c_str());
  InputPlan plan;
  plan.in = &in;
  plan.file = file;
  NpyHeader &a = plan.h;
  try {
    int64_t size = 0;
    plan.fd = FdCloser(open_regular(file, ".npy file", &size));
    // The preamble, then the whole header: a bounded read (npy.cpp caps
    // the header's length), whatever the file's size.
    std::string head(size_t(std::min<int64_t>(size, 12)), '\0');
    if (!read_at(plan.fd.fd, head.data(), head.size(), 0))
      fail("cannot read .npy file '%s': %s", file.c_str(),
           errno ? std::strerror(errno) : "unexpected end of file");
    const int64_t want =
        std::min<int64_t>(npy_header_bytes(head, file), size);
    if (want > int64_t(head.size())) {
      head.resize(size_t(want));
      if (!read_at(plan.fd.fd, head.data(), head.size(), 0))
        fail("cannot read .npy file '%s': %s", file.c_str(),
             errno ? std::strerror(errno) : "unexpected end of file");
    }
    a = parse_npy_header(head, size, file);
  } catch (const Error &e) {
    fail("input '%s': %s", in.name.c_str(), e.what());
  }
  if (a.fortran_order)
    fail("%s: the array is in Fortran order; expected C order: save "
         "np.ascontiguousarray(arr)",
         what.c_str());
  const char *want = view.dtype == SPW_F32    ? "float32"
                     : view.dtype == SPW_I64  ? "int64 (or int32)"
                     : view.dtype == SPW_BOOL ? "bool"
                                              : "int32 (or int64)";
  const char *hint = view.dtype == SPW_F32    ? "arr.astype(np.float32)"
                     : view.dtype == SPW_I64  ? "arr.astype(np.int64)"
                     : view.dtype == SPW_BOOL ? "arr.astype(np.bool_)"
                                              : "arr.astype(np.int32)";
  if (a.big_endian && a.itemsize > 1)
    fail("%s: the array is big-endian ('%s'), expected little-endian %s: "
         "save arr.astype('<%c%d')",
         what.c_str(), a.descr.c_str(), want, a.kind, a.itemsize);
  const bool ok_dtype =
      view.dtype == SPW_F32    ? a.kind == 'f' && a.itemsize == 4
      : view.dtype == SPW_BOOL ? a.kind == 'b' && a.itemsize == 1
                               : a.kind == 'i' && (a.itemsize == 8 ||
                                                   a.itemsize == 4);
  if (!ok_dtype)
    fail("%s: dtype is %s, expected %s: convert with %s", what.c_str(),
         numpy_dtype(a).c_str(), want, hint);
  std::vector<int64_t> ishape(view.dims, view.dims + view.rank);
  int64_t batches = 0;
  if (a.shape == ishape)
    batches = 1;
  else if (a.shape.size() == ishape.size() + 1 &&
           std::equal(ishape.begin(), ishape.end(), a.shape.begin() + 1))
    batches = a.shape[0];
  else
    fail("%s: shape is %s, expected %s (one batch) or (B, %s) for B batches",
         what.c_str(), tuple_str(a.shape).c_str(), tuple_str(ishape).c_str(),
         tuple_str(ishape).substr(1, tuple_str(ishape).size() - 2).c_str());
  if (batches == 0)
    fail("%s: shape is %s: no batches", what.c_str(),
         tuple_str(a.shape).c_str());
  plan.batches = batches;
  // The file holds batches * numel elements (checked against its size), so
  // the buffer is at most twice the file: no overflow, but say so anyway.
  if (__builtin_mul_overflow(view.bytes(), batches, &plan.bytes))
    fail("%s: %lld batches of %s do not fit in memory", what.c_str(),
         (long long)batches, view.shape().c_str());
  return plan;
}

// Reads a checked input's data into its new buffer, converting int32 and
// int64 in chunks; float inputs holding NaN or an infinity are refused.
void read_input(InputPlan &plan, bool require_finite) {
  InputInfo &in = *plan.in;
  spw_tensor &view = *in.view;
  const NpyHeader &a = plan.h;
  const std::string what = format("input '%s' (%s)", in.name.c_str(),
                                  plan.file.c_str());
  const int64_t n = view.numel * plan.batches;
  Buffer buf = alloc_buffer(plan.bytes);
  auto read_failed_at = [&](int64_t offset) {
    fail("%s: cannot read the data at offset %lld: %s", what.c_str(),
         (long long)offset,
         errno ? std::strerror(errno) : "unexpected end of file");
  };
  const int64_t src_size = a.itemsize, dst_size = dtype_size(view.dtype);
  if (src_size == dst_size) {
    if (!read_at(plan.fd.fd, buf.get(), size_t(plan.bytes), a.data_offset))
      read_failed_at(a.data_offset);
  } else {
    constexpr int64_t kChunk = 1 << 16; // elements per read
    std::vector<char> chunk(size_t(kChunk * src_size));
    for (int64_t at = 0; at < n; at += kChunk) {
      const int64_t m = std::min(kChunk, n - at);
      const int64_t off = a.data_offset + at * src_size;
      if (!read_at(plan.fd.fd, chunk.data(), size_t(m * src_size), off))
        read_failed_at(off);
      if (view.dtype == SPW_I64) { // int32 file
        auto *d = static_cast<int64_t *>(buf.get()) + at;
        for (int64_t i = 0; i < m; ++i) {
          int32_t v;
          std::memcpy(&v, chunk.data() + i * 4, 4);
          d[i] = v;
        }
      } else { // int64 file into an int32 input
        auto *d = static_cast<int32_t *>(buf.get()) + at;
        for (int64_t i = 0; i < m; ++i) {
          int64_t v;
          std::memcpy(&v, chunk.data() + i * 8, 8);
          if (v < INT32_MIN || v > INT32_MAX)
            fail("%s: value %lld at flat index %lld does not fit the "
                 "input's int32",
                 what.c_str(), (long long)v, (long long)(at + i));
          d[i] = int32_t(v);
        }
      }
    }
  }
  plan.fd = FdCloser();
  if (view.dtype == SPW_F32 && require_finite) {
    const float *x = static_cast<const float *>(buf.get());
    const int64_t bad = first_non_finite(x, n);
    if (bad >= 0) {
      const int64_t per = std::max<int64_t>(view.numel, 1);
      fail("%s: batch %lld holds %s at flat index %lld of the batch (flat "
           "index %lld of the file); the model trains on finite numbers: "
           "clean the data (e.g. np.nan_to_num, or drop the batch)",
           what.c_str(), (long long)(bad / per), non_finite_name(x[bad]),
           (long long)(bad % per), (long long)bad);
    }
  }
  in.batches = std::move(buf);
  in.num_batches = plan.batches;
  view.owned.reset();
  view.data = in.batches.get();
}

void select_batch(spw_ctx *ctx, int64_t step0) {
  for (InputInfo &in : ctx->inputs) {
    const int64_t at = (step0 % in.num_batches) * in.view->bytes();
    in.view->data = static_cast<char *>(in.batches.get()) + at;
    if (in.dev_view)
      in.dev_view->data = static_cast<char *>(in.dev_batches) + at;
  }
}

// Runs one step on batch step0 % B; returns the loss.
float run_step(spw_ctx *ctx, int64_t step0, const std::string &label) {
  select_batch(ctx, step0);
  clear_step(ctx);
  ctx->error.clear();
  ctx->grad_error.clear();
  if (has_tiers(ctx))
    tiers_step_begin(ctx);
  spw_model_step(ctx);
  if (has_tiers(ctx) && !ctx->failed())
    tiers_step_end(ctx);
  if (ctx->failed())
    fail("%s: %s", label.c_str(), ctx->error.c_str());
  if (!ctx->loss)
    fail("%s: the model did not set a loss (spw_set_loss)", label.c_str());
  float loss = 0.0f;
  read_tensor(ctx, *ctx->loss, &loss);
  clear_step(ctx);
  // A non-finite gradient (the optimizer skipped the updates from there on)
  // under a non-finite loss is the loss's doing: the caller reports that.
  if (!ctx->grad_error.empty() && std::isfinite(loss))
    fail("%s: %s (the loss, %g, is finite); the update is not applied: "
         "check this step's batch and the model for operations undefined on "
         "it",
         label.c_str(), ctx->grad_error.c_str(), double(loss));
  return loss;
}

// ---- gradient check ----------------------------------------------------------

struct SplitMix64 {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

// K distinct indices of [0, n), sorted (Floyd's algorithm), or all of them.
std::vector<int64_t> sample_indices(int64_t n, int64_t k, SplitMix64 &rng) {
  std::vector<int64_t> out;
  if (n <= k) {
    for (int64_t i = 0; i < n; ++i)
      out.push_back(i);
    return out;
  }
  std::unordered_set<int64_t> chosen;
  for (int64_t j = n - k; j < n; ++j) {
    int64_t t = int64_t(rng.next() % uint64_t(j + 1));
    chosen.insert(chosen.count(t) ? j : t);
  }
  out.assign(chosen.begin(), chosen.end());
  std::sort(out.begin(), out.end());
  return out;
}

int check_gradients(spw_ctx *ctx, const Options &o) {
  ctx->evaluate_only = true;
  const float base = run_step(ctx, 0, "gradient check, base step");
  if (!std::isfinite(base))
    fail("gradient check: the loss on batch 0 is %g", double(base));
  std::printf("gradient check on batch 0: loss %.7g, h = %g * max(1, |p|), "
              "tol %g, up to %lld elements per parameter, seed %llu\n",
              double(base), o.fd_eps, o.fd_tol, (long long)o.fd_samples,
              (unsigned long long)o.seed);
  std::vector<std::vector<char>> analytic;
  for (const ParamInfo &p : ctx->params)
    analytic.push_back(p.grad);
  SplitMix64 rng{o.seed};
  bool all_ok = true;
  for (size_t pi = 0; pi < ctx->params.size(); ++pi) {
    ParamInfo &p = ctx->params[pi];
    if (p.value->dtype != SPW_F32) {
      std::printf("gradcheck %s: skipped (%s parameter)\n", p.name.c_str(),
                  dtype_name(p.value->dtype));
      continue;
    }
    const bool have_grad = !analytic[pi].empty();
    const float *an_all =
        reinterpret_cast<const float *>(analytic[pi].data());
    float *w = p.value->as<float>();
    auto idx = sample_indices(p.value->numel, o.fd_samples, rng);
    int64_t ok = 0;
    double max_abs = 0.0;
    std::string details;
    int shown = 0;
    for (int64_t i : idx) {
      const float orig = w[i];
      const double h = o.fd_eps * std::max(1.0, std::fabs(double(orig)));
      const std::string label =
          format("gradient check of %s[%lld]", p.name.c_str(), (long long)i);
      w[i] = float(double(orig) + h);
      const double hp = w[i];
      device_push_param(ctx, pi);
      const double lp = run_step(ctx, 0, label);
      w[i] = float(double(orig) - h);
      const double hm = w[i];
      device_push_param(ctx, pi);
      const double lm = run_step(ctx, 0, label);
      w[i] = orig;
      device_push_param(ctx, pi);
      const double fd = (lp - lm) / (hp - hm);
      const double an = have_grad ? double(an_all[i]) : 0.0;
      const double err = std::fabs(fd - an);
      // Relative tolerance, plus the finite difference's own rounding noise:
      // a float32 loss is only known to a few ulps.
      const double noise =
          32.0 * double(FLT_EPSILON) * std::max(std::fabs(lp), std::fabs(lm)) /
          (hp - hm);
      const bool good = std::isfinite(fd) && std::isfinite(an) &&
                        err <= o.fd_tol * std::max(std::fabs(fd),
                                                   std::fabs(an)) +
                                   noise;
      if (!std::isfinite(err))
        max_abs = INFINITY;
      else
        max_abs = std::max(max_abs, err);
      if (good) {
        ++ok;
      } else if (shown++ < 5) {
        details += format("  %s[%lld]: analytic %.7g, finite difference "
                          "%.7g\n",
                          p.name.c_str(), (long long)i, an, fd);
      }
    }
    std::printf("gradcheck %s: %lld/%zu elements ok, max abs err %.2g%s\n",
                p.name.c_str(), (long long)ok, idx.size(), max_abs,
                have_grad ? "" : " (no gradient recorded; compared with 0)");
    std::fputs(details.c_str(), stdout);
    if (ok != int64_t(idx.size()))
      all_ok = false;
  }
  // The last step run perturbed nothing, but its gradients are those of
  // p - h for one element: restore the base step's.
  for (size_t pi = 0; pi < ctx->params.size(); ++pi)
    ctx->params[pi].grad = analytic[pi];
  std::printf("%s\n", all_ok ? "gradient check passed"
                             : "gradient check FAILED");
  flush_stdout();
  return all_ok ? 0 : 1;
}

// ---- output destinations ---------------------------------------------------

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
    if (e == ENOENT)
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

// A file the run reads or writes, for telling whether two are the same:
// by device and inode where it exists, else by its normalized path.
struct FileRole {
  std::string role; // "--input x=x.npy", "--save 's.st'", ...
  std::string path;
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string norm;
};

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

bool same_file(const FileRole &a, const FileRole &b) {
  if (a.exists && b.exists)
    return a.dev == b.dev && a.ino == b.ino;
  return !a.exists && !b.exists && !a.norm.empty() && a.norm == b.norm;
}

// What the run reads: its --input files, the weights and the executable.
std::vector<FileRole> run_inputs(const Options &o, const std::string &weights,
                                 const std::string &exe) {
  std::vector<FileRole> in;
  for (const auto &[name, file] : o.inputs)
    in.push_back(file_role(format("--input %s=%s", name.c_str(), file.c_str()),
                           file));
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
void check_outputs(const Options &o, const std::vector<FileRole> &ins) {
  std::vector<FileRole> outs;
  for (const auto &[flag, path] :
       {std::pair<const char *, const std::string *>{"--save", &o.save},
        {"--log-json", &o.log_json},
        {"--stats-json", &o.stats_json}, {"--trace", &o.trace}})
    if (!path->empty())
      outs.push_back(file_role(format("%s '%s'", flag, path->c_str()), *path));
  refuse_overwrites(outs, ins, o);
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

// Writes trained weights that could not go where they were asked to, so the
// run's result is not lost: to $TMPDIR (else /tmp), else the current
// directory, under a new name. Returns the path, or "" when nothing took them.
std::string rescue_weights(const std::string &bytes, const std::string &asked) {
  std::string base = std::filesystem::path(asked).filename().string();
  if (base.empty())
    base = "weights.safetensors";
  const std::string name = format("%s.rescued-%ld.safetensors", base.c_str(),
                                  long(::getpid()));
  const char *tmp = std::getenv("TMPDIR");
  for (std::string dir : {std::string(tmp && *tmp ? tmp : "/tmp"),
                          std::string(".")}) {
    const std::string path = dir + "/" + name;
    try {
      write_file_synced(path, bytes, /*exclusive=*/true);
      return path;
    } catch (const Error &) {
    }
  }
  return {};
}

// Stops, before a file is written, when a float parameter is not finite.
void check_finite_weights(const spw_ctx *ctx, const char *before) {
  int64_t at = 0;
  if (const ParamInfo *p = non_finite_param(ctx, &at))
    fail("step %lld: parameter '%s' %s holds %s at flat index %lld; %s is "
         "not written (a non-finite gradient or a diverging update made it: "
         "check the inputs and the model, or lower --lr if the loss grew)",
         (long long)ctx->step, p->name.c_str(), p->value->shape().c_str(),
         non_finite_name(p->value->as<float>()[at]), (long long)at, before);
}

// ---- checkpoints ---------------------------------------------------------------

// Parameter names, dtypes and shapes, hashed: a checkpoint written for
// another model is refused instead of loaded as garbage.
std::string model_fingerprint(const spw_ctx *ctx) {
  std::string text;
  for (const ParamInfo &p : ctx->params)
    text += p.name + "\t" + dtype_name(p.value->dtype) + "\t" +
            p.value->shape() + "\n";
  return format("%016llx", (unsigned long long)XXH3_64bits(text.data(),
                                                           text.size()));
}

// The inputs' names, shapes and data: a resume with other data is warned
// about (it cannot reproduce the uninterrupted run).
std::string inputs_digest(const spw_ctx *ctx) {
  XXH3_state_t *st = XXH3_createState();
  if (!st)
    fail("out of memory");
  XXH3_64bits_reset(st);
  for (const InputInfo &in : ctx->inputs) {
    std::string head = in.name + "\t" + dtype_name(in.view->dtype) + "\t" +
                       in.view->shape() + "\t" +
                       std::to_string(in.num_batches) + "\n";
    XXH3_64bits_update(st, head.data(), head.size());
    XXH3_64bits_update(st, in.batches.get(),
                       size_t(in.view->bytes() * in.num_batches));
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return format("%016llx", (unsigned long long)h);
}

std::string adamw_string(const AdamWHparams &h) {
  return format("lr=%.17g beta1=%.17g beta2=%.17g eps=%.17g "
                "weight_decay=%.17g",
                h.lr, h.beta1, h.beta2, h.eps, h.weight_decay);
}

// FOAM's settings in effect, for checkpoints' metadata and the banner;
// empty when no parameter is folded.
std::string foam_string(const spw_ctx *ctx) {
  for (const ParamInfo &p : ctx->params)
    if (p.foam_level >= 0)
      return format(" foam_level=%d foam_alpha=%.17g", p.foam_level,
                    ctx->overrides.foam_alpha.value_or(p.foam_alpha));
  return {};
}

// Which optimizer state a checkpoint holds: "adamw", or "foam level L" when
// parameters are folded (the folded moments are means over 2^L elements:
// another level's state has another meaning even where its shape agrees).
std::string optimizer_kind(const spw_ctx *ctx) {
  for (const ParamInfo &p : ctx->params)
    if (p.foam_level >= 0)
      return format("foam level %d", p.foam_level);
  return "adamw";
}

// Writes and restores everything a training step depends on: the parameters,
// the AdamW moments (where allocated) and the step counter. (The batch of a
// step follows from its number; the model itself keeps no state.)
class Checkpointer {
public:
  Checkpointer(spw_ctx *ctx, const Options &o, const AdamWHparams &hp)
      : ctx_(ctx), o_(o), hp_(hp), inputs_(inputs_digest(ctx)) {
    // First: a second run on the same directory is refused before anything.
    lock_ = std::make_unique<storage::CheckpointDirLock>(o.checkpoint_dir);
    copts_.zstd = o.checkpoint_zstd;
    copts_.keep = int(o.keep_checkpoints);
    // Staging buffers for the chunks in flight, registered with the rings.
    uint64_t raw = 0;
    for (const ParamInfo &p : ctx->params)
      raw += 3 * ((uint64_t(p.value->bytes()) + 63) / 64 * 64);
    storage::EngineConfig cfg; // SPILLWAY_IO_FAULTS reaches it (tests)
    cfg.backend = o.io_backend;
    try {
      pool_ = std::make_unique<storage::PinnedPool>(
          size_t(storage::checkpoint_staging_bytes(raw, copts_)));
      cfg.pool = pool_.get();
      engine_ = std::make_unique<storage::IoEngine>(cfg);
    } catch (const Error &e) {
      fail("cannot start the I/O engine for --checkpoint-dir (--io-backend "
           "%s): %s; try --io-backend threads",
           storage::backend_name(o.io_backend), e.what());
    }
  }

  // Loads the newest valid checkpoint (with --resume) and returns its step,
  // or 0 to start from the weights. Without --resume, a directory that
  // already holds checkpoints is refused: they belong to another run.
  int64_t start() {
    const std::string &dir = o_.checkpoint_dir;
    if (!o_.resume) {
      auto existing = storage::list_checkpoints(dir);
      if (!existing.empty())
        fail("--checkpoint-dir '%s' already holds checkpoints (the newest: "
             "'%s'): pass --resume to continue that run, or choose another "
             "directory",
             dir.c_str(), existing.front().second.c_str());
      return 0;
    }
    std::optional<storage::LoadedCheckpoint> c =
        storage::load_newest_checkpoint(*engine_, dir, copts_);
    if (!c) {
      std::printf("  resume: no valid checkpoint in '%s'; starting from the "
                  "weights\n",
                  dir.c_str());
      return 0;
    }
    // Older checkpoints have no "optimizer": their shapes are checked.
    if (const std::string *k = c->meta("optimizer");
        k && *k != optimizer_kind(ctx_))
      fail("checkpoint '%s' holds %s optimizer state; this executable "
           "trains with %s, so the state does not carry over: resume with "
           "an executable compiled with the same --optimizer and "
           "--foam-level, or start a new --checkpoint-dir",
           c->dir.c_str(), k->c_str(), optimizer_kind(ctx_).c_str());
    restore(*c);
    check_restored(c->dir);
    if (c->step > o_.steps)
      fail("checkpoint '%s' is at step %lld, beyond --steps %lld (--steps "
           "is the total step count, not the number of steps to add)",
           c->dir.c_str(), (long long)c->step, (long long)o_.steps);
    std::printf("  resume: from '%s' (step %lld of %lld)\n", c->dir.c_str(),
                (long long)c->step, (long long)o_.steps);
    if (const std::string *h = c->meta("adamw"); h && *h != hparams())
      std::fprintf(stderr,
                   "warning: checkpoint '%s' was written with AdamW %s; this "
                   "run uses %s, so it will not reproduce the interrupted "
                   "run\n",
                   c->dir.c_str(), h->c_str(), hparams().c_str());
    if (const std::string *h = c->meta("inputs");
        h && *h != inputs_)
      std::fprintf(stderr,
                   "warning: checkpoint '%s' was written with other --input "
                   "data; this run will not reproduce the interrupted run\n",
                   c->dir.c_str());
    return c->step;
  }

  void write(int64_t step, bool report) {
    using storage::CheckpointTensorRef;
    if (has_tiers(ctx_))
      tiers_gather(ctx_);
    device_pull(ctx_);
    check_finite_weights(ctx_, "the checkpoint");
    std::vector<CheckpointTensorRef> ts;
    for (const ParamInfo &p : ctx_->params) {
      const std::vector<int64_t> dims(p.value->dims,
                                      p.value->dims + p.value->rank);
      ts.push_back({"param/" + p.name, p.value->dtype, dims, p.value->data,
                    uint64_t(p.value->bytes())});
      if (!p.adam_m.empty()) {
        // FOAM's folded moments keep their own [rows, folded] shape.
        const std::vector<int64_t> sdims = p.state_dims();
        ts.push_back({"adam_m/" + p.name, SPW_F32, sdims, p.adam_m.data(),
                      p.adam_m.size() * sizeof(float)});
        ts.push_back({"adam_v/" + p.name, SPW_F32, sdims, p.adam_v.data(),
                      p.adam_v.size() * sizeof(float)});
      }
    }
    const storage::Metadata meta = {
        {"model_fingerprint", model_fingerprint(ctx_)},
        {"parameters", std::to_string(ctx_->params.size())},
        {"adamw", hparams()},
        {"optimizer", optimizer_kind(ctx_)},
        {"inputs", inputs_},
        {"steps", std::to_string(o_.steps)}};
    const auto t0 = std::chrono::steady_clock::now();
    storage::CheckpointWriteResult r = storage::write_checkpoint(
        *engine_, o_.checkpoint_dir, step, ts, meta, copts_);
    if (has_tiers(ctx_))
      tiers_release_copies(ctx_);
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
    if (report) {
      std::printf("  checkpoint %s (%s%s, %.1f ms)\n", r.dir.c_str(),
                  human_bytes(int64_t(r.raw_bytes)).c_str(),
                  o_.checkpoint_zstd
                      ? format(", %s stored",
                               human_bytes(int64_t(r.stored_bytes)).c_str())
                            .c_str()
                      : "",
                  ms);
      flush_stdout();
    }
  }

  std::string describe() const {
    std::string s = format("  checkpoints: %s, ", o_.checkpoint_dir.c_str());
    s += o_.checkpoint_every
             ? format("every %lld steps and ", (long long)o_.checkpoint_every)
             : std::string();
    s += format("after the last step, keep %lld, %s, I/O %s",
                (long long)o_.keep_checkpoints,
                o_.checkpoint_zstd ? "zstd" : "uncompressed",
                storage::backend_name(engine_->backend()));
    return s;
  }

private:
  spw_ctx *ctx_;
  const Options &o_;
  AdamWHparams hp_;
  std::string hparams() const {
    return adamw_string(hp_) + foam_string(ctx_);
  }
  std::string inputs_; // inputs_digest: the inputs do not change
  storage::CheckpointOptions copts_;
  std::unique_ptr<storage::CheckpointDirLock> lock_; // held for the run
  std::unique_ptr<storage::PinnedPool> pool_; // outlives the engine
  std::unique_ptr<storage::IoEngine> engine_;

  // A checkpoint's checksums say its bytes are the ones written, not that
  // they make sense: anyone can recompute them. The writer never writes
  // non-finite weights, so a NaN here was put there; refused at the resume,
  // naming the tensor, instead of failing steps later. v may be +Inf (a
  // finite gradient above 1.8e19 squares to it, and the update is then 0),
  // never NaN or negative.
  void check_restored(const std::string &dir) {
    auto refuse = [&](const std::string &tensor, const char *shape,
                      const char *what, int64_t i) {
      fail("checkpoint '%s': %s %s holds %s at flat index %lld, which "
           "training never writes (its checksums match, so it was written "
           "so, or crafted): move it out of --checkpoint-dir to resume from "
           "the one before, or start a new --checkpoint-dir",
           dir.c_str(), tensor.c_str(), shape, what, (long long)i);
    };
    for (const ParamInfo &p : ctx_->params) {
      if (p.value->dtype != SPW_F32)
        continue;
      const float *w = p.value->as<float>();
      const int64_t bad = first_non_finite(w, p.value->numel);
      if (bad >= 0)
        refuse(format("parameter '%s'", p.name.c_str()),
               p.value->shape().c_str(), non_finite_name(w[bad]), bad);
      const std::string sshape =
          shape_str(p.state_dims().data(), int(p.state_dims().size()));
      const int64_t m_bad =
          first_non_finite(p.adam_m.data(), int64_t(p.adam_m.size()));
      if (m_bad >= 0)
        refuse(format("the first moment (adam_m) of '%s'", p.name.c_str()),
               sshape.c_str(), non_finite_name(p.adam_m[size_t(m_bad)]),
               m_bad);
      for (size_t i = 0; i < p.adam_v.size(); ++i)
        if (std::isnan(p.adam_v[i]) || p.adam_v[i] < 0)
          refuse(format("the second moment (adam_v) of '%s'", p.name.c_str()),
                 sshape.c_str(),
                 std::isnan(p.adam_v[i])
                     ? "NaN"
                     : format("a negative value (%g)", double(p.adam_v[i]))
                           .c_str(),
                 int64_t(i));
    }
  }

  void restore(const storage::LoadedCheckpoint &c) {
    const char *other = "; it was written for another model: pass another "
                        "--checkpoint-dir to train this one";
    size_t in_ckpt = 0;
    for (const storage::CheckpointTensor &t : c.tensors)
      in_ckpt += t.name.rfind("param/", 0) == 0;
    for (const ParamInfo &p : ctx_->params) {
      const storage::CheckpointTensor *t = c.find("param/" + p.name);
      if (!t)
        fail("checkpoint '%s' has no parameter '%s'%s", c.dir.c_str(),
             p.name.c_str(), other);
      const std::vector<int64_t> dims(p.value->dims,
                                      p.value->dims + p.value->rank);
      if (t->dtype != p.value->dtype || t->shape != dims)
        fail("checkpoint '%s': parameter '%s' is %s %s, the model's is %s "
             "%s%s",
             c.dir.c_str(), p.name.c_str(), dtype_name(t->dtype),
             shape_str(t->shape.data(), int(t->shape.size())).c_str(),
             dtype_name(p.value->dtype), p.value->shape().c_str(), other);
    }
    const std::string *fp = c.meta("model_fingerprint");
    if (in_ckpt != ctx_->params.size() || !fp ||
        *fp != model_fingerprint(ctx_))
      fail("checkpoint '%s' holds %zu parameters, the model has %zu (or "
           "they are declared in another order)%s",
           c.dir.c_str(), in_ckpt, ctx_->params.size(), other);
    for (ParamInfo &p : ctx_->params) {
      const storage::CheckpointTensor *t = c.find("param/" + p.name);
      if (t->bytes)
        std::memcpy(p.value->data, c.data(*t), size_t(t->bytes));
      const storage::CheckpointTensor *m = c.find("adam_m/" + p.name);
      const storage::CheckpointTensor *v = c.find("adam_v/" + p.name);
      if (!m && !v) { // never updated yet
        p.adam_m.clear();
        p.adam_v.clear();
        continue;
      }
      const uint64_t want = uint64_t(p.state_numel()) * sizeof(float);
      if (!m || !v || m->dtype != SPW_F32 || v->dtype != SPW_F32 ||
          m->shape != p.state_dims() || v->shape != p.state_dims())
        fail("checkpoint '%s': the %s state of '%s' is incomplete or of "
             "another shape than %s (was it written with another --optimizer "
             "or --foam-level?)%s",
             c.dir.c_str(), p.foam_level >= 0 ? "FOAM" : "AdamW",
             p.name.c_str(),
             shape_str(p.state_dims().data(), int(p.state_dims().size()))
                 .c_str(),
             other);
      p.adam_m.resize(size_t(p.state_numel()));
      p.adam_v.resize(size_t(p.state_numel()));
      if (want) {
        std::memcpy(p.adam_m.data(), c.data(*m), size_t(want));
        std::memcpy(p.adam_v.data(), c.data(*v), size_t(want));
      }
    }
  }
};

// ---- training ---------------------------------------------------------------------

// The host copies of the parameters as .safetensors (after device_pull).
std::string params_safetensors(spw_ctx *ctx) {
  std::vector<NamedTensor> ts;
  for (const ParamInfo &p : ctx->params)
    ts.push_back({p.name, p.value.get()});
  return safetensors_bytes(ts);
}

// Writes the final parameters to --save; when that fails at the end of a
// run, to a rescue path (rescue_weights), named in the error.
void save_params(spw_ctx *ctx, const std::string &path) {
  device_pull(ctx);
  check_finite_weights(ctx, "--save");
  const std::string bytes = params_safetensors(ctx);
  try {
    write_file_atomic(path, bytes);
  } catch (const Error &e) {
    const std::string rescued = rescue_weights(bytes, path);
    if (rescued.empty())
      fail("--save: %s; writing the weights to $TMPDIR, /tmp or the current "
           "directory failed too: they are lost",
           e.what());
    fail("--save: %s; the trained weights were written to '%s' instead",
         e.what(), rescued.c_str());
  }
  std::printf("saved %zu parameters to %s\n", ctx->params.size(),
              path.c_str());
}

// Applies the optimizer updates the schedule deferred to the next step
// (sched-overlap-optimizer): after the last step, and before a checkpoint,
// whatever is pending belongs to the weights of ordinary training. A later
// step's own apply then finds nothing pending, so a flushed run computes the
// same bits as one that never flushed.
void flush_deferred_updates(spw_ctx *ctx) {
  const bool pending = std::any_of(
      ctx->params.begin(), ctx->params.end(),
      [](const ParamInfo &p) { return !p.pending.empty(); });
  if (!pending)
    return;
  // An offload plan's parameters and state live in its blocks: update
  // plain copies and put them back (outside the steps, so the per-step
  // bytes stay the plan's).
  if (has_tiers(ctx))
    tiers_gather(ctx);
  ctx->error.clear();
  spw_adamw_flush(ctx);
  if (ctx->failed())
    fail("%s", ctx->error.c_str());
  if (has_tiers(ctx))
    tiers_scatter(ctx);
}

// An output failed during the run (a checkpoint, a --log-json line): the
// weights of the steps run so far go to --save, or to a rescue path, before
// the error ends the run. Deferred updates are applied first (they belong to
// the weights of the steps run).
[[noreturn]] void output_failed(spw_ctx *ctx, const Options &o,
                                const Error &e) {
  flush_deferred_updates(ctx);
  if (has_tiers(ctx))
    tiers_gather(ctx);
  device_pull(ctx);
  int64_t at = 0;
  if (non_finite_param(ctx, &at)) // nothing worth keeping
    throw e;
  const std::string bytes = params_safetensors(ctx);
  std::string to;
  if (!o.save.empty()) {
    try {
      write_file_atomic(o.save, bytes);
      to = o.save;
    } catch (const Error &) {
    }
  }
  if (to.empty())
    to = rescue_weights(bytes, o.save.empty() ? "weights.safetensors" : o.save);
  if (to.empty())
    throw e;
  fail("%s; the weights after step %lld were written to '%s' (pass them as "
       "--weights to go on)",
       e.what(), (long long)ctx->step, to.c_str());
}

// Runs steps start+1 .. o.steps (`start` > 0 after a resume), checkpointing
// when `ck` is given; the weights it leaves have no update pending.
int train(spw_ctx *ctx, const Options &o, const AdamWHparams &hp,
          Checkpointer *ck, int64_t start) {
  FILE *log = nullptr;
  if (!o.log_json.empty()) {
    // A resumed run appends: the interrupted run's lines stay (those of steps
    // after its last checkpoint appear twice; "step" tells them apart).
    log = open_log(o.log_json, start > 0);
  }
  struct Closer {
    FILE *&f;
    ~Closer() {
      if (f)
        std::fclose(f);
    }
  } closer{log};
  const int64_t every =
      o.print_every > 0 ? o.print_every : std::max<int64_t>(1, o.steps / 20);
  const auto t0 = std::chrono::steady_clock::now();
  // On a device the first steps also reserve the arena and pick GEMM
  // algorithms: the steady state is timed from the end of the second.
  std::chrono::steady_clock::time_point warm;
  float loss = NAN, prev_loss = NAN, first_loss = NAN;
  // The host copies are the weights only on the CPU without an offload
  // plan; elsewhere they are checked before each checkpoint and --save.
  const bool scan_weights = !ctx->device && !has_tiers(ctx);
  for (int64_t s = start + 1; s <= o.steps; ++s) {
    ctx->step = s;
    prev_loss = loss;
    // A loss that grew before it (or a gradient) broke is a divergence,
    // which the learning rate causes; one that breaks from a steady value
    // more likely meets data or an operation undefined on it.
    const bool grew = s > start + 2 && std::isfinite(first_loss) &&
                      std::fabs(prev_loss) > 4 * std::fabs(first_loss) + 1e-6;
    const std::string growth =
        grew ? format("the loss grew from %g (step %lld) to %g (step %lld): "
                      "the training diverged; lower --lr (now %g)",
                      double(first_loss), (long long)(start + 1),
                      double(prev_loss), (long long)(s - 1), hp.lr)
             : std::string();
    try {
      loss = run_step(ctx, s - 1, format("step %lld", (long long)s));
    } catch (const Error &e) {
      if (!grew)
        throw;
      fail("%s; %s", e.what(), growth.c_str());
    }
    if (s == start + 2)
      warm = std::chrono::steady_clock::now();
    if (s == start + 1)
      first_loss = loss;
    // A failed log line is reported after the loss and weight checks (a
    // broken loss says more), with the weights of this step kept.
    std::string log_error;
    if (log) {
      errno = 0;
      if (std::isfinite(loss))
        std::fprintf(log, "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g}\n",
                     (long long)s, double(loss), hp.lr);
      else
        std::fprintf(log, "{\"step\": %lld, \"loss\": null, \"lr\": %.9g}\n",
                     (long long)s, hp.lr);
      const bool bad = std::fflush(log) != 0 || std::ferror(log);
      const int e = bad ? errno : test_write_fault(o.log_json) ? ENOSPC : 0;
      if (bad || e)
        log_error = format("--log-json: cannot write '%s' at step %lld: %s%s",
                           o.log_json.c_str(), (long long)s,
                           e ? std::strerror(e) : "write error",
                           bad ? "" : " (SPILLWAY_TEST_ENOSPC)");
    }
    if (!std::isfinite(loss)) {
      flush_stdout();
      std::string batches;
      for (const InputInfo &in : ctx->inputs)
        if (in.num_batches > 1)
          batches += format("%s batch %lld of input '%s'",
                            batches.empty() ? "" : ",",
                            (long long)((s - 1) % in.num_batches),
                            in.name.c_str());
      if (batches.empty())
        batches = " the inputs";
      // Step 1 computes its loss from the loaded weights and inputs, both
      // checked finite: no learning rate is involved yet.
      if (s == 1)
        fail("the loss is %s at step 1, before any update, from finite "
             "weights and inputs: the model's arithmetic overflows or is "
             "undefined on this data (e.g. the log of 0); check%s and the "
             "model",
             non_finite_name(loss), batches.c_str());
      if (grew)
        fail("loss became %s at step %lld; %s", non_finite_name(loss),
             (long long)s, growth.c_str());
      fail("loss became %s at step %lld (step %lld's was %g, not growing)%s: "
           "check%s and the model for operations undefined on that data "
           "(e.g. the log of 0); if it recurs on other data, lower --lr (now "
           "%g)",
           non_finite_name(loss), (long long)s, (long long)(s - 1),
           double(prev_loss),
           scan_weights ? ", from finite weights" : "", batches.c_str(),
           hp.lr);
    }
    if (scan_weights) {
      int64_t at = 0;
      if (const ParamInfo *p = non_finite_param(ctx, &at)) {
        flush_stdout();
        fail("step %lld: parameter '%s' %s holds %s at flat index %lld after "
             "the update (the loss, %g, and the gradients were finite): the "
             "update overflowed; lower --lr (now %g) or --weight-decay (now "
             "%g)",
             (long long)s, p->name.c_str(), p->value->shape().c_str(),
             non_finite_name(p->value->as<float>()[at]), (long long)at,
             double(loss), hp.lr, hp.weight_decay);
      }
    }
    if (!log_error.empty())
      output_failed(ctx, o, Error(log_error));
    const bool progress = s % every == 0 || s == o.steps;
    if (progress) {
      std::printf("step %lld/%lld  loss %.6f%s\n", (long long)s,
                  (long long)o.steps, double(loss),
                  has_tiers(ctx) ? ("  " + tiers_progress(ctx)).c_str() : "");
      flush_stdout();
    }
    if (ck && (s == o.steps ||
               (o.checkpoint_every && s % o.checkpoint_every == 0))) {
      flush_deferred_updates(ctx);
      try {
        ck->write(s, progress);
      } catch (const storage::CheckpointPublishedError &e) {
        // The published checkpoint holds these weights (the message says
        // so): only an asked-for --save is still written, no rescue copy.
        if (o.save.empty())
          throw;
        output_failed(ctx, o, e);
      } catch (const Error &e) {
        output_failed(ctx, o, e);
      }
    }
  }
  flush_deferred_updates(ctx);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  if (log) {
    FILE *f = log;
    log = nullptr;
    if (std::fclose(f) != 0)
      output_failed(ctx, o,
                    Error(format("--log-json: cannot write '%s': %s",
                                 o.log_json.c_str(), std::strerror(errno))));
  }
  const int64_t ran = o.steps - start;
  if (ran > 0)
    std::printf("done: %lld steps in %.3f s (%.1f steps/s), final loss %.6f\n",
                (long long)ran, secs, secs > 0 ? double(ran) / secs : 0.0,
                double(loss));
  else if (start > 0)
    std::printf("done: the checkpoint is at the last step (%lld); nothing "
                "to train\n",
                (long long)start);
  if (ctx->device && ran > 2) {
    const double steady = std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - warm)
                              .count() /
                          double(ran - 2);
    std::printf("steady state: %.6f s/step (steps %lld..%lld)\n", steady,
                (long long)start + 3, (long long)o.steps);
  }
  return 0;
}

// ---- forward-only models ------------------------------------------------------

// The file name of output `name` under --outputs: characters outside
// [A-Za-z0-9._-] (say, the '/' of "model/logits") become '_'.
std::string output_file_name(const std::string &name) {
  std::string f = name;
  for (char &c : f)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' &&
        c != '-')
      c = '_';
  return f + ".npy";
}

const char *npy_descr(int32_t dtype) {
  switch (dtype) {
  case SPW_F32: return "<f4";
  case SPW_I64: return "<i8";
  case SPW_I32: return "<i4";
  case SPW_BOOL: return "|b1";
  default: fail("output of unknown dtype %d", dtype);
  }
}

// Runs `steps` steps of a forward-only model (step s on batch (s-1) % B) and
// writes each output to DIR/<name>.npy, shape [steps, *output_shape], with
// step s's values at index s-1.
int run_forward(spw_ctx *ctx, const Options &o, int64_t steps,
                const std::vector<FileRole> &ins) {
  namespace fs = std::filesystem;
  std::vector<std::string> paths;
  if (!o.outputs.empty()) {
    std::error_code ec;
    fs::create_directories(o.outputs, ec);
    if (ec || !fs::is_directory(o.outputs))
      fail("cannot create --outputs directory '%s': %s", o.outputs.c_str(),
           ec ? ec.message().c_str() : "not a directory");
    for (size_t i = 0; i < ctx->outputs.size(); ++i) {
      paths.push_back(
          (fs::path(o.outputs) / output_file_name(ctx->outputs[i].name))
              .string());
      for (size_t j = 0; j < i; ++j)
        if (paths[j] == paths[i])
          fail("outputs '%s' and '%s' would both be written to '%s'",
               ctx->outputs[j].name.c_str(), ctx->outputs[i].name.c_str(),
               paths[i].c_str());
      // Each file is replaced at the end: a FIFO or device there, or an
      // input of the run, is found now, not after the last step.
      refuse_overwrites({file_role(format("--outputs file '%s'",
                                          paths[i].c_str()),
                                   paths[i])},
                        ins, o);
      check_output_file("--outputs", paths[i]);
    }
  }
  std::vector<std::vector<char>> values(ctx->outputs.size());
  if (!paths.empty())
    for (size_t i = 0; i < ctx->outputs.size(); ++i) {
      int64_t total;
      if (__builtin_mul_overflow(steps, ctx->outputs[i].value->bytes(), &total))
        fail("--outputs: %lld steps of output '%s' (%lld bytes each) do not "
             "fit in memory; lower --steps",
             (long long)steps, ctx->outputs[i].name.c_str(),
             (long long)ctx->outputs[i].value->bytes());
      check_memory(total, format("--outputs: %lld steps of output '%s' need",
                                 (long long)steps,
                                 ctx->outputs[i].name.c_str()));
      values[i].resize(size_t(total));
    }
  const int64_t every =
      o.print_every > 0 ? o.print_every : std::max<int64_t>(1, steps / 20);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t s = 1; s <= steps; ++s) {
    ctx->step = s;
    select_batch(ctx, s - 1);
    clear_step(ctx);
    ctx->error.clear();
    spw_model_step(ctx);
    if (ctx->failed())
      fail("step %lld: %s", (long long)s, ctx->error.c_str());
    for (size_t i = 0; i < ctx->outputs.size(); ++i) {
      const OutputInfo &out = ctx->outputs[i];
      if (!out.set)
        fail("step %lld: the model did not set output '%s' (spw_set_output)",
             (long long)s, out.name.c_str());
      const int64_t b = out.value->bytes();
      if (!values[i].empty() && b > 0)
        std::memcpy(values[i].data() + (s - 1) * b, out.value->data, size_t(b));
    }
    clear_step(ctx);
    if (s % every == 0 || s == steps) {
      std::printf("step %lld/%lld\n", (long long)s, (long long)steps);
      flush_stdout();
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  if (steps > 0)
    std::printf("done: %lld steps in %.3f s (%.1f steps/s)\n",
                (long long)steps, secs,
                secs > 0 ? double(steps) / secs : 0.0);
  for (size_t i = 0; i < paths.size(); ++i) {
    const spw_tensor &v = *ctx->outputs[i].value;
    std::vector<int64_t> shape = {steps};
    shape.insert(shape.end(), v.dims, v.dims + v.rank);
    write_file_atomic(paths[i], write_npy(npy_descr(v.dtype), shape,
                                          values[i].data(), values[i].size()));
    std::printf("wrote output %s %s to %s\n", ctx->outputs[i].name.c_str(),
                shape_str(shape.data(), int(shape.size())).c_str(),
                paths[i].c_str());
  }
  flush_stdout();
  return 0;
}

// The device's arena use and the ops it ran on host copies.
std::string device_summary(spw_ctx *ctx) {
  const Device &d = *ctx->device;
  std::string s = format("device: step arena peak %s of %s",
                         human_bytes(d.step_bytes_peak()).c_str(),
                         human_bytes(d.step_arena_bytes()).c_str());
  const std::string fb = d.host_fallbacks();
  if (!fb.empty())
    s += "; ops run on host copies (no device kernel): " + fb;
  return s;
}

void print_banner(spw_ctx *ctx, const Options &o, const std::string &weights,
                  const AdamWHparams &hp) {
  int64_t elems = 0, bytes = 0;
  for (const ParamInfo &p : ctx->params) {
    elems += p.value->numel;
    bytes += p.value->bytes();
  }
  std::printf("spillway: %zu parameters (%lld elements, %s), %zu inputs\n",
              ctx->params.size(), (long long)elems, human_bytes(bytes).c_str(),
              ctx->inputs.size());
  if (ctx->device)
    std::printf("  device: %s, %s, step arena %s\n",
                ctx->device->name().c_str(), precision_name(ctx->precision),
                human_bytes(ctx->device->step_arena_bytes()).c_str());
  if (!ctx->params.empty())
    std::printf("  weights: %s\n", weights.c_str());
  for (size_t i = 0; i < ctx->inputs.size(); ++i) {
    const InputInfo &in = ctx->inputs[i];
    std::string file;
    for (auto &[name, f] : o.inputs)
      if (name == in.name)
        file = f;
    std::printf("  input %s: %s %s from %s (%lld batch%s)\n", in.name.c_str(),
                dtype_name(in.view->dtype), in.view->shape().c_str(),
                file.c_str(), (long long)in.num_batches,
                in.num_batches == 1 ? "" : "es");
  }
  auto field = [](const char *name, double v, const std::optional<double> &flag,
                  std::optional<double> compiled) {
    std::string s = format(" %s=%g", name, v);
    if (flag)
      s += compiled ? format(" (flag; compiled %g)", *compiled) : " (flag)";
    return s;
  };
  if (!ctx->outputs.empty()) { // forward-only: no optimizer
    for (const OutputInfo &out : ctx->outputs)
      std::printf("  output %s: %s %s\n", out.name.c_str(),
                  dtype_name(out.value->dtype), out.value->shape().c_str());
    std::printf("  forward-only: %lld steps\n", (long long)o.steps);
    flush_stdout();
    return;
  }
  const auto &d = ctx->declared_adamw;
  const auto &f = ctx->overrides;
  std::string line = "  optimizer: AdamW";
  line += field("lr", hp.lr, f.lr, d ? std::optional(d->lr) : std::nullopt);
  line += field("beta1", hp.beta1, f.beta1,
                d ? std::optional(d->beta1) : std::nullopt);
  line += field("beta2", hp.beta2, f.beta2,
                d ? std::optional(d->beta2) : std::nullopt);
  line += field("eps", hp.eps, f.eps, d ? std::optional(d->eps) : std::nullopt);
  line += field("weight_decay", hp.weight_decay, f.weight_decay,
                d ? std::optional(d->weight_decay) : std::nullopt);
  if (!d)
    line += " (the model declared no defaults)";
  // FOAM: which parameters fold, and alpha; the hyper-parameters above are
  // shared.
  int64_t folded = 0, folded_numel = 0, level = -1;
  double alpha = 0;
  for (const ParamInfo &p : ctx->params)
    if (p.foam_level >= 0) {
      ++folded;
      folded_numel += p.value->numel;
      level = p.foam_level;
      alpha = p.foam_alpha;
    }
  if (folded) {
    line += format("\n  FOAM on %lld weight matrices (%lld parameters), "
                   "level %lld,",
                   (long long)folded, (long long)folded_numel,
                   (long long)level);
    line += field("alpha", f.foam_alpha.value_or(alpha), f.foam_alpha,
                  std::optional(alpha));
    line += "; AdamW on the rest";
  }
  std::printf("%s\n", line.c_str());
  if (!o.check_gradients)
    std::printf("  training %lld steps\n", (long long)o.steps);
  flush_stdout();
}

int run(const Options &o, const char *argv0) {
  auto owned = make_context();
  spw_ctx *ctx = owned.get();
  ctx->overrides = o.adamw;
  ctx->defer_alloc = true; // allocate_declared, once the files are checked
  spw_model_declare(ctx);
  if (ctx->failed())
    fail("model declaration: %s", ctx->error.c_str());
  const bool forward = !ctx->outputs.empty();
  if (forward && !o.training_flags.empty())
    throw UsageError(format("this executable was compiled with --forward: "
                            "%s is a training flag, and a forward-only model "
                            "has no loss, optimizer or gradients",
                            o.training_flags.front().c_str()));
  if (!forward && !o.outputs.empty())
    throw UsageError("--outputs is for forward-only models (spillwayc "
                     "--forward); this executable trains a model with a loss");
  ctx->evaluate_only = forward; // never update parameters
  if (o.adamw.foam_alpha && foam_string(ctx).empty())
    throw UsageError("--foam-alpha: this executable folds no parameter "
                     "(compiled with --optimizer adamw, or a model with no "
                     "weight matrix besides its embeddings and LM head)");

  // Unknown --input names are usage errors; everything else is data.
  for (auto &[name, file] : o.inputs) {
    bool known = false;
    for (const InputInfo &in : ctx->inputs)
      known |= in.name == name;
    if (!known) {
      std::string names;
      for (const InputInfo &in : ctx->inputs)
        names += (names.empty() ? "" : ", ") + in.name;
      throw UsageError(format("--input %s=%s: the model has no input '%s' "
                              "(its inputs: %s)",
                              name.c_str(), file.c_str(), name.c_str(),
                              names.empty() ? "none" : names.c_str()));
    }
  }

  const std::string device =
      !o.device.empty() ? o.device : ctx->cuda_factory ? "cuda" : "cpu";
  if (device == "cuda" && !ctx->cuda_factory)
    throw UsageError("--device cuda: this executable was compiled for the "
                     "CPU; recompile the model with spillwayc --target cuda");
  if (o.device_arena && device == "cpu")
    throw UsageError("--device-arena sizes a device's step arena; this run "
                     "is on the CPU (--device cpu)");
  if (!forward) {
    const bool tiered = has_tiers(ctx);
    if (!tiered && (!o.ssd.empty() || !o.stats_json.empty()))
      throw UsageError(format("%s is for models compiled with an offload plan "
                              "(spillwayc --place / --gpu-mem / --host-mem); "
                              "this one keeps everything resident",
                              !o.ssd.empty() ? "--ssd" : "--stats-json"));
    if (tiered && o.check_gradients)
      throw UsageError("--check-gradients needs the parameters resident; "
                       "compile the model without an offload plan to check "
                       "its gradients");
  }

  // Every destination first: a result that cannot be written is found
  // before the run, not after it.
  const std::string exe = exe_path(argv0);
  const std::string weights =
      o.weights.empty() ? exe + ".weights" : o.weights;
  const std::vector<FileRole> ins = run_inputs(o, weights, exe);
  check_outputs(o, ins);
  // From here on the trace records; it is written at the end, or when the
  // run fails, with what happened until then.
  trace::Session tracing(o.trace);

  // Every file against the declarations, then the memory for all of them,
  // and only then any buffer sized from the model or the files.
  WeightsPlan wplan = check_weights(ctx, weights, !o.weights.empty());
  std::vector<InputPlan> iplans;
  for (InputInfo &in : ctx->inputs) {
    const std::string *file = nullptr;
    for (auto &[name, f] : o.inputs)
      if (name == in.name)
        file = &f;
    if (!file)
      fail("input '%s' has no data: pass --input %s=FILE.npy",
           in.name.c_str(), in.name.c_str());
    iplans.push_back(check_input(in, *file));
  }
  {
    // Host memory: the parameters, outputs and input batches, and for
    // training on the CPU without an offload plan, the gradients and the
    // two AdamW moments (made at the first step).
    const bool host_state = !forward && device == "cpu" && !has_tiers(ctx);
    int64_t total = 0;
    auto add = [&](int64_t b) {
      if (__builtin_add_overflow(total, b, &total))
        total = INT64_MAX;
    };
    for (const ParamInfo &p : ctx->params) {
      add(p.value->bytes());
      if (host_state) {
        add(p.value->bytes());
        if (p.value->dtype == SPW_F32)
          add(2 * p.state_numel() * int64_t(sizeof(float)));
      }
    }
    for (const OutputInfo &out : ctx->outputs)
      add(out.value->bytes());
    for (const InputPlan &ip : iplans)
      add(ip.bytes);
    check_memory(total, host_state ? "the parameters, their gradients and "
                                     "AdamW state, and the inputs need"
                                   : "the parameters and the inputs need");
  }
  allocate_declared(ctx);
  read_weights(ctx, wplan, !forward);
  for (InputPlan &ip : iplans)
    read_input(ip, !forward);

  if (device == "cuda")
    device_start(ctx, ctx->cuda_factory(o.device_arena, ctx->precision));
  else if (device == "loopback")
    device_start(ctx, make_loopback_device(
                          o.device_arena ? o.device_arena : int64_t(4) << 30,
                          ctx->precision));

  const AdamWHparams hp =
      effective_adamw(ctx, ctx->declared_adamw.value_or(AdamWHparams{}));
  if (!forward) {
    // The flags are checked already: a bad value here was compiled in.
    namespace hpr = spillway::hyperparams;
    const std::pair<const hpr::Range *, double> values[] = {
        {&hpr::kLr, hp.lr}, {&hpr::kBeta1, hp.beta1}, {&hpr::kBeta2, hp.beta2},
        {&hpr::kEps, hp.eps}, {&hpr::kWeightDecay, hp.weight_decay}};
    for (const auto &[r, v] : values) {
      if (!hpr::in_range(*r, v))
        fail("the model was compiled with AdamW %s = %g, outside %s: pass "
             "%s to override it, or recompile the model",
             r->attr, v, hpr::expected(*r).c_str(), r->flag);
      if (std::string why = hpr::float32_problem(*r, v); !why.empty())
        fail("the model was compiled with AdamW %s = %g: %s; pass %s to "
             "override it, or recompile the model",
             r->attr, v, why.c_str(), r->flag);
    }
  }
  if (forward) {
    // --steps defaults to the inputs' batch count (the largest B), or 1.
    Options fo = o;
    if (!fo.steps_given) {
      fo.steps = 1;
      for (const InputInfo &in : ctx->inputs)
        fo.steps = std::max(fo.steps, in.num_batches);
    }
    print_banner(ctx, fo, weights, hp);
    const int frc = run_forward(ctx, fo, fo.steps, ins);
    tracing.write();
    return frc;
  }
  const bool tiered = has_tiers(ctx);
  if (tiered)
    tiers_start(ctx, o.ssd, o.io_backend);
  print_banner(ctx, o, weights, hp);
  if (tiered)
    std::printf("%s\n", tiers_describe(ctx).c_str());

  std::unique_ptr<Checkpointer> ck;
  int64_t start = 0;
  if (!o.checkpoint_dir.empty()) {
    ck = std::make_unique<Checkpointer>(ctx, o, hp);
    std::printf("%s\n", ck->describe().c_str());
    start = ck->start();
    device_push(ctx); // the restored state
    flush_stdout();
  }
  if (tiered)
    tiers_scatter(ctx);
  const auto t0 = std::chrono::steady_clock::now();
  int rc = o.check_gradients ? check_gradients(ctx, o)
                             : train(ctx, o, hp, ck.get(), start);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  if (tiered) {
    tiers_gather(ctx);
    if (o.steps > start)
      std::printf("%s\n", tiers_summary(ctx, secs, o.steps - start).c_str());
  }
  // (Printing cannot fail the run: flush_stdout.)
  if (ctx->device && rc == 0)
    std::printf("%s\n", device_summary(ctx).c_str());
  // The weights before any other file: one that fails (--stats-json on a
  // full disk) must not lose them.
  if (!o.save.empty())
    save_params(ctx, o.save);
  if (tiered && !o.stats_json.empty()) {
    try {
      write_file_atomic(o.stats_json,
                        tiers_stats_json(ctx, secs, o.steps - start));
    } catch (const Error &e) {
      fail("--stats-json: %s%s", e.what(),
           o.save.empty() ? ""
                          : format("; the weights were saved to '%s'",
                                   o.save.c_str())
                                .c_str());
    }
    std::printf("wrote offload statistics to %s\n", o.stats_json.c_str());
  }
  tracing.write();
  return rc;
}

} // namespace
} // namespace spw

extern "C" int spw_main(int argc, char **argv) {
  using namespace spw;
  // A closed stdout is an EPIPE for flush_stdout, not a silent death that
  // loses the run (`EXE ... | head -3`).
  std::signal(SIGPIPE, SIG_IGN);
  const char *prog = argc > 0 && argv[0] ? argv[0] : "model";
  Options o;
  try {
    o = parse_args(argc, argv);
  } catch (const UsageError &e) {
    std::fprintf(stderr, "error: %s\nrun '%s --help' for usage\n", e.what(),
                 prog);
    return 2;
  }
  if (o.help) {
    std::printf(kUsage, prog);
    flush_stdout();
    return 0;
  }
  try {
    const int rc = run(o, prog);
    flush_stdout();
    return rc;
  } catch (const UsageError &e) {
    flush_stdout();
    std::fprintf(stderr, "error: %s\nrun '%s --help' for usage\n", e.what(),
                 prog);
    return 2;
  } catch (const Error &e) {
    flush_stdout();
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc &) {
    flush_stdout();
    std::fprintf(stderr, "error: out of memory\n");
    return 1;
  } catch (const std::exception &e) {
    flush_stdout();
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
