//===- main.cpp - spw_main: the training executable's driver --------------===//
//
// Parses the command line, loads the weights and the --input arrays, and runs
// the training loop or the gradient check: spw_main and the order of the
// checks (run); driver/driver.h says which file of driver/ does the rest.
// Only spw_main reaches spw_model_declare / spw_model_step, which generated
// code defines: a program that does not call spw_main pulls in none of the
// driver's objects, so it links without a model.
//
//===----------------------------------------------------------------------===//

#include "cpu/parallel.h"
#include "dist/dist.h"
#include "dist/nccl.h"
#include "dist/zero.h"
#include "driver/checkpoints.h"
#include "driver/driver.h"
#include "driver/options.h"
#include "host_optimizer.h"
#include "spillway/runtime/hyperparams.h"
#include "tiers.h"
#include "trace.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <malloc.h>
#include <optional>
#include <sys/resource.h>
#include <unistd.h>
#include <xxhash.h>

namespace spw::driver {

namespace {
bool g_stdout_gone = false;
} // namespace

// Progress goes to stdout, which may go away (`| head -3`: SIGPIPE is
// ignored, see spw_main) or fill up (`> /dev/full`): that must not stop the
// training or lose its result. The first failed write is said once on
// stderr, and stdout then goes to /dev/null; the exit status does not
// change.
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

std::string human_bytes(int64_t b) {
  if (b < 1024)
    return format("%lld B", (long long)b);
  if (b < (int64_t(1) << 20))
    return format("%.1f KiB", double(b) / 1024.0);
  if (b < (int64_t(1) << 30))
    return format("%.1f MiB", double(b) / double(1 << 20));
  return format("%.2f GiB", double(b) / double(1 << 30));
}

namespace {

std::string exe_path(const char *argv0) {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) {
    buf[n] = '\0';
    return buf;
  }
  return argv0 ? argv0 : "spillway-model";
}

// What every rank of a data-parallel job must share: the executable's bytes
// and the arguments. A rank that differs would train another model or
// another schedule, and hang or corrupt the others' collectives.
uint64_t job_fingerprint(int argc, char **argv) {
  XXH3_state_t *st = XXH3_createState();
  if (!st)
    throw std::bad_alloc();
  XXH3_64bits_reset(st);
  for (int i = 1; i < argc; ++i)
    XXH3_64bits_update(st, argv[i], std::strlen(argv[i]) + 1);
  FdCloser fd(::open("/proc/self/exe", O_RDONLY | O_CLOEXEC));
  std::vector<char> buf(size_t(1) << 20);
  ssize_t n;
  while (fd.fd >= 0 && (n = ::read(fd.fd, buf.data(), buf.size())) > 0)
    XXH3_64bits_update(st, buf.data(), size_t(n));
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

// Data parallel: what this rank starts from, to compare with the others'
// (a rank whose --weights file or checkpoint differs would train another
// model without a word: the averaged gradients move every copy alike). The
// parameters as read: the host copies, and those an offload plan streams
// into its homes read once more from the weights (a map's sources
// included). A resume replaces it with the checkpoint manifest's hash.
uint64_t starting_params_hash(const spw_ctx *ctx, const WeightsPlan &w,
                              bool stream_start) {
  XXH3_state_t *st = XXH3_createState();
  if (!st)
    throw std::bad_alloc();
  XXH3_64bits_reset(st);
  std::vector<char> buf;
  for (size_t i = 0; i < ctx->params.size(); ++i) {
    const spw_tensor &v = *ctx->params[i].value;
    const int64_t bytes = v.bytes();
    if (stream_start && tiers_hold(ctx, i, SPW_BLOCK_PARAMS)) {
      if (w.offsets.empty())
        continue;
      buf.resize(size_t(std::min<int64_t>(bytes, int64_t(4) << 20)));
      for (int64_t at = 0; at < bytes; at += int64_t(buf.size())) {
        const size_t n =
            size_t(std::min<int64_t>(int64_t(buf.size()), bytes - at));
        w.read(ctx, i, at, n, buf.data());
        XXH3_64bits_update(st, buf.data(), n);
      }
    } else if (v.data) {
      XXH3_64bits_update(st, v.data, size_t(bytes));
    }
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

// Data parallel: each rank's own files. Rank 0 writes what the job
// produces (the weights, the log, the trace, checkpoints); every rank
// writes its own offload statistics (rank r > 0: --stats-json FILE.rank-r)
// and swaps to its own directories (tiers_start).
void rank_options(Options &o) {
  if (!dist::active())
    return;
  // mpirun binds each rank to its own cores; a torchrun-style job's ranks
  // share the machine's, so each takes its share of them.
  if (o.threads == 0 && !dist::binds_ranks())
    o.threads = std::max(1, cpu::available_cpus() / dist::local_size());
  const int r = dist::rank();
  if (r == 0)
    return;
  if (!o.stats_json.empty())
    o.stats_json += ".rank-" + std::to_string(r);
  o.rank0_saves = !o.save.empty();
  o.save.clear();
  o.log_json.clear();
  o.trace.clear();
}

// --overlap-exchanges: whether ZeRO stage 2's reduce-scatters through host
// memory (MPI, Gloo) run on the exchange thread, during the next layer's
// backward (dist.h). auto: when the rank has a core for the thread besides
// its kernel threads' (the CPU device's --threads, which default to all
// the rank's cores; one on a GPU): on a core of its own the exchange
// overlaps, on a shared one it slows the kernels (Open MPI polls while it
// waits). The rank's cores: those it may run on, at most its share of the
// machine's (ranks not bound to their own). on or off where there is no
// such exchange is refused, saying why. Returns the banner's line ("" when
// there is no such exchange).
std::string start_exchanges(const Options &o, spw_ctx *ctx) {
  const std::string &w = o.overlap_exchanges;
  std::string none;
  if (!ctx->gradient_shards)
    none = "this executable's plan is not cut for ZeRO stage 2 (spillwayc "
           "--zero 2 --ranks N with an offload plan)";
  else if (!dist::active())
    none = "it runs alone, not in a job of ranks";
  else if (zero::exchanges_on_device(ctx))
    none = "its exchanges run on the GPU (NCCL, in the compute stream's "
           "order); --collectives mpi takes them through host memory";
  if (!none.empty()) {
    if (w != "auto")
      throw UsageError("--overlap-exchanges " + w +
                       ": nothing to overlap: ZeRO stage 2's reduce-scatters "
                       "through host memory are what it moves to an "
                       "exchange thread, and " +
                       none);
    return "";
  }
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  const int cores =
      std::min(cpu::available_cpus(),
               std::max(1, int(online > 0 ? online : 1) / dist::local_size()));
  const int kernels = ctx->device->host_visible() ? cpu::threads() : 1;
  const bool want = w == "on" || (w == "auto" && cores > kernels);
  std::string why = "--overlap-exchanges " + w;
  if (w == "auto") {
    why = format("auto: this rank has %d core%s for %d kernel thread%s", cores,
                 cores == 1 ? "" : "s", kernels, kernels == 1 ? "" : "s");
    if (!want)
      why += cores > 1
                 ? format("; --threads %d leaves the thread a core, or "
                          "--overlap-exchanges on",
                          cores - 1)
                 : std::string("; a second core for the rank with --threads "
                               "1 (mpirun --map-by slot:PE=2 ... --threads "
                               "1) leaves the thread one, or "
                               "--overlap-exchanges on");
  }
  if (dist::use_exchange_thread(want))
    return "each layer's reduce-scatters on an exchange thread during the "
           "next layer's backward (" +
           why + ")";
  return format("each layer's reduce-scatters where they start (%s)",
                want ? "Open MPI gives no MPI_THREAD_SERIALIZED, which the "
                       "exchange thread needs"
                     : why.c_str());
}

// --collectives: NCCL for the device gradients (on the device's GPU, after
// device_start) or MPI through host memory; the banner's line, "" for a
// run without ranks or NCCL.
std::string start_collectives(const Options &o, const std::string &device) {
  const bool forced = o.collectives == "nccl";
  const bool wanted =
      forced || (o.collectives == "auto" && device == "cuda" && dist::active());
  std::string why;
  if (wanted) {
    if (device == "cpu")
      throw UsageError("--collectives nccl averages gradients in GPU "
                       "memory; this run computes on the CPU (--device "
                       "cuda, or --collectives mpi)");
    const char *standin = std::getenv("SPILLWAY_NCCL_LIBRARY");
    if (device == "loopback" && (!standin || !*standin))
      throw UsageError("--collectives nccl: the loopback device's memory is "
                       "host memory, which NCCL cannot reduce; it takes a "
                       "stand-in library (SPILLWAY_NCCL_LIBRARY, the tests') "
                       "there");
    why = nccl::load();
    // Every rank the same way (join is collective).
    if (!dist::all_equal(why.empty() ? 1 : 0) && why.empty())
      why = "another rank cannot load NCCL (its error says why)";
    if (!why.empty() && forced)
      fail("--collectives nccl: %s; or average through host memory with "
           "--collectives mpi",
           why.c_str());
    if (why.empty())
      nccl::join();
  }
  if (nccl::active())
    return format("%s: the device gradients %s on the GPU, the rest over %s",
                  nccl::describe().c_str(),
                  o.zero ? "reduce-scattered and the updated values "
                           "all-gathered"
                         : "summed",
                  dist::host_collectives());
  if (!dist::active())
    return "";
  if (device == "cpu")
    return dist::host_collectives();
  // Why not NCCL, in the banner.
  if (why.empty())
    why = o.collectives == "mpi"
              ? "--collectives mpi"
              : "--collectives auto takes it for --device cuda only";
  return format("%s, the device gradients through host memory (NCCL not "
                "used: %s)",
                dist::host_collectives(), why.c_str());
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
                  const AdamWHparams &hp, const DataFeed *data = nullptr,
                  const std::string &collectives = "",
                  const std::string &exchanges = "") {
  int64_t elems = 0, bytes = 0;
  for (const ParamInfo &p : ctx->params) {
    elems += p.value->numel;
    bytes += p.value->bytes();
  }
  std::printf("spillway: %zu parameters (%lld elements, %s), %zu inputs\n",
              ctx->params.size(), (long long)elems, human_bytes(bytes).c_str(),
              ctx->inputs.size());
  if (ctx->bf16_mixed)
    std::printf("  precision: bf16-mixed (bf16 activations and working "
                "weights%s)\n",
                !ctx->outputs.empty() ? ""
                : ctx->state_bf16
                    ? ", fp32 master weights, bf16 optimizer state"
                    : ", fp32 master weights and optimizer state");
  else if (ctx->state_bf16)
    std::printf("  precision: fp32 weights, bf16 optimizer state\n");
  if (ctx->device->step_arena_bytes() > 0)
    std::printf("  device: %s, %s, step arena %s\n",
                ctx->device->name().c_str(), precision_name(ctx->precision),
                human_bytes(ctx->device->step_arena_bytes()).c_str());
  // The CUDA device runs its own kernels (the CPU ones only as fallbacks).
  if (ctx->device->name() == "cpu" || ctx->device->name() == "loopback")
    std::printf("  kernels: %s, %d thread%s\n",
                cpu::kernel_set_name(cpu::kernel_set()), cpu::threads(),
                cpu::threads() == 1 ? "" : "s");
  if (dist::active())
    std::printf("  data parallel: %d ranks (%s), each on its own rows of "
                "every step; the gradients and the logged loss are their "
                "means; rank 0 prints and writes\n",
                dist::size(), dist::launcher());
  if (!collectives.empty())
    std::printf("  collectives: %s\n", collectives.c_str());
  if (zero::active(ctx)) {
    int64_t whole = 0, here = 0;
    for (const ParamInfo &p : ctx->params)
      if (p.shard_hi >= 0) {
        whole += p.state_numel();
        here += p.state_local_numel();
      }
    const int64_t elem = ctx->state_bf16 ? 2 : 4;
    std::printf("  zero: stage %d, AdamW state sharded over %d rank%s: %s on "
                "this rank of %s (%s)\n",
                ctx->zero_stage, dist::size(), dist::size() == 1 ? "" : "s",
                human_bytes(2 * here * elem).c_str(),
                human_bytes(2 * whole * elem).c_str(),
                !dist::active() ? "one rank: nothing to exchange"
                : ctx->grad_clip.declared
                    ? "gradients reduce-scattered, clipping's norm from the "
                      "shards of its 64 Ki-element blocks; values all-gathered"
                    : "gradients reduce-scattered; values all-gathered");
    // The offload plan's masters are cut as the state is (4 bytes each).
    if (tiers_shards_masters(ctx) && dist::active())
      std::printf("  zero: fp32 master weights sharded too: %s on this rank "
                  "of %s (the bf16 working copies all-gathered)\n",
                  human_bytes(here * 4).c_str(),
                  human_bytes(whole * 4).c_str());
    // Stage 2: the gradient blocks' too (f32, one per state element).
    // Device memory without NCCL goes through host memory whole
    // (zero::reduce_scatter_mean): said, as the plan counts the shard.
    if (ctx->gradient_shards && dist::active())
      std::printf("  zero: gradients sharded too: %s on this rank of %s "
                  "(each layer's reduce-scattered in the GPU tier as its "
                  "backward completes; only the shard moves off it%s)\n",
                  human_bytes(here * 4).c_str(), human_bytes(whole * 4).c_str(),
                  ctx->device->host_visible() || nccl::active()
                      ? ""
                      : "; without NCCL each exchange also downloads the "
                        "whole gradient to host memory: --collectives nccl "
                        "avoids it");
    if (!exchanges.empty())
      std::printf("  zero: %s\n", exchanges.c_str());
  }
  if (!ctx->params.empty())
    std::printf("  weights: %s\n", weights.c_str());
  for (size_t i = 0; i < ctx->inputs.size(); ++i) {
    const InputInfo &in = ctx->inputs[i];
    std::string file;
    for (auto &[name, f] : o.inputs)
      if (name == in.name)
        file = f;
    if (data && *data && (&in == data->tokens || &in == data->labels))
      continue; // data->describe() says where they come from
    std::printf("  input %s: %s %s from %s (%lld batch%s)\n", in.name.c_str(),
                dtype_name(in.view->dtype), in.view->shape().c_str(),
                file.c_str(), (long long)in.num_batches,
                in.num_batches == 1 ? "" : "es");
  }
  if (data && *data)
    std::printf("%s\n", data->describe().c_str());
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
  if (ctx->grad_clip.declared) {
    const double clip = effective_grad_clip(ctx);
    line += clip > 0 ? format("\n  gradient clipping: global norm, max_norm "
                              "%g",
                              clip)
                     : std::string("\n  gradient clipping: off");
    if (f.grad_clip)
      line += format(" (flag; compiled %g)", ctx->grad_clip.max_norm);
  }
  std::printf("%s\n", line.c_str());
  if (!o.check_gradients && (o.cosine || o.warmup))
    std::printf("  lr schedule: %s\n", lr_schedule_string(o, hp.lr).c_str());
  if (!o.check_gradients)
    std::printf("  training %lld steps\n", (long long)o.steps);
  flush_stdout();
}

int run(const Options &given, const char *argv0) {
  Options o = given;
  auto owned = make_context();
  spw_ctx *ctx = owned.get();
  ctx->overrides = o.adamw;
  ctx->defer_alloc = true; // allocate_declared, once the files are checked
  spw_model_declare(ctx);
  if (ctx->failed())
    fail("model declaration: %s", ctx->error.c_str());
  // An offload plan cut for ZeRO's ranks (spillwayc --zero 1 --ranks N)
  // holds one rank's shard of the optimizer state: it runs --zero 1.
  // Cut for stage 2 (spillwayc --zero 2), its gradient blocks too: it runs
  // --zero 2.
  if (ctx->declared_shards > 0) {
    const int stage = zero::cut_stage(ctx);
    if (o.zero_given && o.zero != stage)
      throw UsageError(format(
          "--zero %d: this executable's offload plan holds one rank's shard "
          "of the optimizer state%s (compiled with spillwayc --zero %d "
          "--ranks %d), so it runs --zero %d: drop --zero %d, or recompile "
          "%s",
          o.zero, stage == 2 ? " and of the gradients" : "", stage,
          ctx->declared_shards, stage, o.zero,
          o.zero == 0 ? "without --zero"
                      : format("with --zero %d", o.zero).c_str()));
    o.zero = stage;
  } else if (o.zero == 2) {
    // An offload plan's blocks must be cut for any ZeRO stage; a resident
    // plan's state is sharded by --zero 1 as it runs.
    throw UsageError(
        has_tiers(ctx)
            ? "--zero 2 shards an offload plan's gradient blocks, which must "
              "be cut for the ranks, and this executable's are whole: run it "
              "without --zero, or recompile with spillwayc --zero 2 --ranks "
              "N (the job's ranks)"
            : "--zero 2 shards an offload plan's gradient blocks, and this "
              "executable has no offload plan (its gradients live for one "
              "step): run --zero 1, or recompile with spillwayc --zero 2 "
              "--ranks N and an offload plan (--place, --gpu-mem, "
              "--host-mem)");
  }
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
  // Before how it was launched: what the executable itself cannot check
  // says what to recompile (not how to launch it, which would not help).
  if (!forward && has_tiers(ctx) && o.check_gradients)
    throw UsageError("--check-gradients needs the parameters resident; "
                     "compile the model without an offload plan to check "
                     "its gradients");
  if (dist::active() && (forward || o.check_gradients))
    throw UsageError(format("%s runs on one process; this one is rank %d of "
                            "a job of %d (%s): run it alone",
                            forward ? "a forward-only model (spillwayc "
                                      "--forward)"
                                    : "--check-gradients",
                            dist::rank(), dist::size(), dist::launcher()));
  // 0 is off: what such an executable does anyway.
  if (o.adamw.grad_clip && *o.adamw.grad_clip > 0 && !ctx->grad_clip.declared)
    throw UsageError("--grad-clip: this executable was compiled without "
                     "gradient clipping, whose norm is a barrier the plan "
                     "must hold (every update after the last gradient): "
                     "recompile with spillwayc --grad-clip F");
  if (o.zero) {
    if (const std::string why = zero::unsupported(ctx); !why.empty())
      throw UsageError(why);
    ctx->zero_stage = int(o.zero);
    zero::start(ctx);
  }
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

  // --data feeds the token inputs no --input names (checked here: a model
  // it cannot feed is a usage error); the files are opened and mapped.
  DataFeed data = plan_data(ctx, o);

  const std::string device =
      !o.device.empty() ? o.device : ctx->cuda_factory ? "cuda" : "cpu";
  if (device == "cuda" && !ctx->cuda_factory)
    throw UsageError("--device cuda: this executable was compiled for the "
                     "CPU; recompile the model with spillwayc --target cuda");
  if (o.device_arena && device == "cpu")
    throw UsageError("--device-arena sizes a device's step arena; this run "
                     "is on the CPU (--device cpu)");
  if (o.loopback_delays && device != "loopback")
    throw UsageError(format("--loopback-delays seeds the loopback device's "
                            "copies; this run is on --device %s",
                            device.c_str()));
  if (!forward) {
    const bool tiered = has_tiers(ctx);
    if (!tiered && (!o.ssd.empty() || !o.stats_json.empty() ||
                    o.optimizer_threads > 0))
      throw UsageError(format("%s is for models compiled with an offload plan "
                              "(spillwayc --place / --gpu-mem / --host-mem); "
                              "this one keeps everything resident",
                              !o.ssd.empty()            ? "--ssd"
                              : o.optimizer_threads > 0 ? "--optimizer-threads"
                                                        : "--stats-json"));
  }
  if (ctx->bf16_mixed && o.check_gradients)
    throw UsageError("--check-gradients compares the gradients with finite "
                     "differences, which this model's bf16 storage rounds "
                     "away (it is bf16-mixed: spillwayc --precision "
                     "bf16-mixed, or a module train-mixed-precision ran "
                     "on); compile the model in fp32 to check its "
                     "gradients");

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
  // A --resume restores every parameter from a checkpoint: the weights map's
  // sources may have changed since (re-exported, touched, deleted), which is
  // an error only when no checkpoint restores.
  const bool resuming = o.resume && !o.checkpoint_dir.empty();
  WeightsPlan wplan =
      check_weights(ctx, weights, !o.weights.empty(), resuming);
  {
    // A weights map's sources are read too (in place, until the start is
    // done): no output may replace one (--save onto gpt.onnx.data).
    std::vector<FileRole> sources;
    for (const std::string &s : wplan.source_paths)
      sources.push_back(file_role(
          format("the weights map's source '%s'", s.c_str()), s));
    refuse_overwrites(output_roles(o), sources, o);
  }
  std::vector<InputPlan> iplans;
  for (InputInfo &in : ctx->inputs) {
    const std::string *file = nullptr;
    for (auto &[name, f] : o.inputs)
      if (name == in.name)
        file = &f;
    if (data && (&in == data.tokens || &in == data.labels))
      continue;
    if (!file)
      fail("input '%s' has no data: pass --input %s=FILE.npy%s",
           in.name.c_str(), in.name.c_str(),
           o.data.empty() && (in.view->dtype == SPW_I64 ||
                              in.view->dtype == SPW_I32)
               ? " (or --data FILE for a token file)"
               : "");
    iplans.push_back(check_input(in, *file));
  }
  // An offload plan's params blocks get their parameters straight from the
  // weights into their homes, after tiers_start (stream_weights): those
  // parameters get no host copy, so a model larger than host memory starts
  // (and a --resume restores into the homes too, Checkpointer::start).
  const bool stream_start = !forward && has_tiers(ctx);
  {
    // Host memory: the parameters (but those streamed into an offload
    // plan's homes, which its --host-mem budget holds), outputs and input
    // batches, and for training on the CPU without an offload plan, the
    // gradients and the two AdamW moments (made at the first step).
    const bool host_state = !forward && device == "cpu" && !has_tiers(ctx);
    int64_t total = 0;
    auto add = [&](int64_t b) {
      if (__builtin_add_overflow(total, b, &total))
        total = INT64_MAX;
    };
    for (size_t i = 0; i < ctx->params.size(); ++i) {
      const ParamInfo &p = ctx->params[i];
      if (stream_start && tiers_hold(ctx, i, SPW_BLOCK_PARAMS))
        continue;
      add(p.value->bytes());
      if (host_state) {
        add(p.value->bytes());
        if (p.value->dtype == SPW_F32)
          add(2 * p.state_local_numel() * int64_t(sizeof(float)));
      }
    }
    for (const OutputInfo &out : ctx->outputs)
      add(out.value->bytes());
    for (const InputPlan &ip : iplans)
      add(ip.bytes);
    if (data) // one batch each (the token file is mapped, not read)
      add(data.tokens->view->bytes() +
          (data.labels ? data.labels->view->bytes() : 0));
    check_memory(total, host_state ? "the parameters, their gradients and "
                                     "AdamW state, and the inputs need"
                                   : "the parameters and the inputs need");
  }
  allocate_declared(ctx, stream_start);
  if (data)
    data.allocate();
  if (wplan.source_problem.empty())
    read_weights(ctx, wplan, !forward);
  uint64_t start_hash = 0;
  if (dist::active() && wplan.source_problem.empty())
    start_hash = starting_params_hash(ctx, wplan, stream_start);
  for (InputPlan &ip : iplans)
    read_input(ip, !forward);

  if (device == "cuda")
    device_start(ctx, ctx->cuda_factory(o.device_arena, ctx->precision));
  else if (device == "loopback")
    device_start(ctx, make_loopback_device(
                          o.device_arena ? o.device_arena : int64_t(4) << 30,
                          ctx->precision,
                          {.seed = o.loopback_delays.value_or(1)}));
  else
    device_start(ctx, make_cpu_device());
  const std::string collectives = start_collectives(o, device);
  const std::string exchanges = start_exchanges(o, ctx);

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
  if (o.min_lr_given && o.min_lr > hp.lr)
    throw UsageError(format("--min-lr %g is above the learning rate (%g): "
                            "the cosine schedule decays from --lr to --min-lr",
                            o.min_lr, hp.lr));
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
  if (tiered) {
    tiers_start(ctx, o.ssd, o.io_backend);
    host_optimizer_configure(ctx, int(o.optimizer_threads));
  }
  print_banner(ctx, o, weights, hp, &data, collectives, exchanges);
  if (tiered)
    std::printf("%s\n", tiers_describe(ctx).c_str());

  std::unique_ptr<Checkpointer> ck;
  int64_t start = 0;
  if (!o.checkpoint_dir.empty()) {
    ck = std::make_unique<Checkpointer>(ctx, o, hp, &data);
    std::printf("%s\n", ck->describe().c_str());
    start = ck->start();
    if (!dist::all_equal(uint64_t(start)))
      fail("the ranks resumed from different checkpoints (this one from "
           "step %lld): every rank must read the same --checkpoint-dir",
           (long long)start);
    if (dist::active() && ck->restored()) {
      // Its tensors' checksums: the checkpoint's content.
      const std::string m = read_whole_file(
          ck->restored_dir() + "/MANIFEST.json", "checkpoint manifest");
      start_hash = XXH3_64bits(m.data(), m.size());
    }
    device_push(ctx); // the restored state
    flush_stdout();
  }
  if (const std::string r = dist::ranks_differing(start_hash); !r.empty())
    fail("rank%s %s start%s from other parameters than rank 0 (%s): every "
         "rank must start from the same weights: copy rank 0's files to "
         "the other machines",
         r.find(',') != std::string::npos ? "s" : "", r.c_str(),
         r.find(',') != std::string::npos ? "" : "s",
         ck && ck->restored() ? "the checkpoint each resumed from differs"
                              : "the --weights each read differ");
  // A restored checkpoint is in the homes already (Checkpointer::start);
  // else the weights and fresh optimizer state go there now: streamed, or
  // (without streaming) the plain copies scattered.
  const bool restored = ck && ck->restored();
  if (!wplan.source_problem.empty()) {
    if (!restored)
      fail("%s", wplan.source_problem.c_str());
    std::fprintf(stderr,
                 "warning: %s; the run resumed from its checkpoint, which "
                 "holds every parameter, so it goes on\n",
                 wplan.source_problem.c_str());
  }
  if (stream_start) {
    if (!restored)
      stream_weights(ctx, wplan);
  } else if (tiered) {
    if (restored)
      tiers_release_copies(ctx);
    else
      tiers_scatter(ctx);
  }
  wplan = WeightsPlan(); // closes the weights files
  const auto t0 = std::chrono::steady_clock::now();
  if (data && o.check_gradients)
    data.feed_train(ctx); // the check's one batch: the first window
  int rc = o.check_gradients ? check_gradients(ctx, o)
                             : train(ctx, o, hp, ck.get(), start, data);
  // The training's time: validation is not an iteration of the plan.
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count() -
      data.eval_seconds;
  if (tiered) {
    if (o.steps > start)
      std::printf("%s\n", tiers_summary(ctx, secs, o.steps - start).c_str());
  }
  // (Printing cannot fail the run: flush_stdout.)
  if (ctx->device->step_arena_bytes() > 0 && rc == 0)
    std::printf("%s\n", device_summary(ctx).c_str());
  // The weights before any other file: one that fails (--stats-json on a
  // full disk) must not lose them.
  if (!o.save.empty())
    save_params(ctx, o.save);
  else if (o.rank0_saves)
    join_save(ctx);
  if (tiered && !o.stats_json.empty()) {
    try {
      write_file_atomic(o.stats_json,
                        tiers_stats_json(ctx, secs, o.steps - start,
                                         tokens_per_step(ctx, data)));
    } catch (const Error &e) {
      fail("--stats-json: %s%s", e.what(),
           o.save.empty() ? ""
                          : format("; the weights were saved to '%s'",
                                   o.save.c_str())
                                .c_str());
    }
    std::printf("wrote offload statistics to %s\n", o.stats_json.c_str());
  }
  // Last, where a glance at the end of a run finds it: the swap drives'
  // wear, measured.
  if (tiered && o.steps > start)
    if (std::string w = tiers_ssd_writes(ctx, tokens_per_step(ctx, data));
        !w.empty())
      std::printf("%s\n", w.c_str());
  tracing.write();
  return rc;
}

} // namespace

} // namespace spw::driver

extern "C" int spw_main(int argc, char **argv) {
  using namespace spw;
  using namespace spw::driver;
  // A closed stdout is an EPIPE for flush_stdout, not a silent death that
  // loses the run (`EXE ... | head -3`).
  std::signal(SIGPIPE, SIG_IGN);
  // Buffers of 1 MiB and more (step tensors, gradients, staging) are mapped
  // and unmapped on their own. glibc's default threshold rises to 32 MiB
  // after the first such free, and the freed step tensors below it then
  // stay in the heap, fragmented: 2.5 x an offload plan's budgets in RSS
  // after one step (docs/runtime.md, "Memory bound"), for no speed gained.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  // A weights map may name one file per tensor (ONNX's
  // all_tensors_to_one_file=False), all open during the start: the soft
  // limit on open files (often 1024) goes up to the hard one.
  if (rlimit r; ::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &r);
  }
  const char *prog = argc > 0 && argv[0] ? argv[0] : "model";
  // Under mpirun: join the job first, so that every error below ends the
  // whole job (the other ranks would wait in a collective for this one).
  try {
    dist::init();
  } catch (const Error &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    dist::abort_job(1);
    return 1;
  }
  // Rank 0 alone prints; the others' errors name their rank.
  const std::string who =
      dist::active() ? format("rank %d: ", dist::rank()) : std::string();
  if (dist::rank() != 0 && !std::freopen("/dev/null", "w", stdout))
    std::fprintf(stderr, "%swarning: cannot silence stdout\n", who.c_str());
  auto failed = [&](int rc) {
    dist::abort_job(rc);
    return rc;
  };
  Options o;
  try {
    o = parse_args(argc, argv);
  } catch (const UsageError &e) {
    std::fprintf(stderr, "%serror: %s\nrun '%s --help' for usage\n",
                 who.c_str(), e.what(), prog);
    return failed(2);
  }
  if (o.help) {
    std::printf(kUsage, prog, prog);
    flush_stdout();
    dist::finalize();
    return 0;
  }
  try {
    // (Only in a job: it reads the whole executable.)
    if (const uint64_t fp = dist::active() ? job_fingerprint(argc, argv) : 0;
        !dist::all_equal(fp)) {
      const std::string ranks = dist::ranks_differing(fp);
      fail("the ranks of this job do not run the same executable with the "
           "same arguments (rank%s %s differ%s from rank 0): launch one "
           "executable and one argument list, `%s`",
           ranks.find(',') != std::string::npos ? "s" : "", ranks.c_str(),
           ranks.find(',') != std::string::npos ? "" : "s",
           dist::binds_ranks()
               ? "mpirun -np N EXE ARGS"
               : "torchrun --nproc-per-node N --no-python EXE ARGS");
    }
    rank_options(o);
    cpu::configure_kernels(o.reference_kernels ? cpu::KernelSet::Reference
                                               : cpu::KernelSet::Fast,
                           int(o.threads));
    const int rc = run(o, prog);
    flush_stdout();
    if (rc != 0)
      return failed(rc);
    nccl::finish();
    dist::finalize();
    return rc;
  } catch (const UsageError &e) {
    flush_stdout();
    std::fprintf(stderr, "%serror: %s\nrun '%s --help' for usage\n",
                 who.c_str(), e.what(), prog);
    return failed(2);
  } catch (const Error &e) {
    flush_stdout();
    std::fprintf(stderr, "%serror: %s\n", who.c_str(), e.what());
    return failed(1);
  } catch (const std::bad_alloc &) {
    flush_stdout();
    std::fprintf(stderr, "%serror: out of memory\n", who.c_str());
    return failed(1);
  } catch (const std::exception &e) {
    flush_stdout();
    std::fprintf(stderr, "%serror: %s\n", who.c_str(), e.what());
    return failed(1);
  }
}
