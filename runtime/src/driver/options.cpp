//===- options.cpp - command-line parsing and --help ----------------------===//

#include "driver/options.h"
#include "host_tasks.h"
#include "spillway/runtime/hyperparams.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>

namespace spw::driver {

const char kUsage[] =
    "usage: %s [options]\n"
    "Trains the model compiled into this executable.\n"
    "\n"
    "  --input NAME=FILE.npy   data for model input NAME: an array of shape\n"
    "                          [B, *input_shape] (step s uses batch s %% B) or\n"
    "                          exactly input_shape (one batch); float32 for\n"
    "                          float inputs, int64 or int32 for integer ones\n"
    "  --data FILE             token file for the token inputs no --input\n"
    "                          names: nanoGPT's raw uint16 train.bin or\n"
    "                          llm.c's format (scripts/prepare-text.py makes\n"
    "                          one); each step takes a random window per\n"
    "                          batch row (from --seed). An input named labels\n"
    "                          gets the same tokens (the model shifts), one\n"
    "                          named targets, target or y the next ones\n"
    "    --data-labels same|shifted\n"
    "                          override what the labels input gets\n"
    "    --val-data FILE       token file of the validation loss, printed\n"
    "                          after the last step (the mean loss of the\n"
    "                          same --eval-batches batches each time)\n"
    "      --eval-every N      also evaluate after every N-th step\n"
    "      --eval-batches K    validation batches per evaluation (default 8)\n"
    "  --steps N               training steps (default 1)\n"
    "  --lr F, --beta1 F, --beta2 F, --eps F, --weight-decay F\n"
    "                          AdamW hyper-parameters (default: the values\n"
    "                          compiled into the model); FOAM uses them too\n"
    "  --lr-schedule S         constant (default) or cosine: from --lr to\n"
    "                          --min-lr (default 0) over --steps, as nanoGPT\n"
    "    --warmup N            first N steps: lr * s / (N + 1) at step s\n"
    "    --min-lr F            where the cosine schedule ends\n"
    "  --grad-clip F           global gradient-norm clipping's max_norm\n"
    "                          (torch's clip_grad_norm_) for models compiled\n"
    "                          with spillwayc --grad-clip (default: the\n"
    "                          compiled value; 0: off)\n"
    "  --foam-alpha F          FOAM's update scale (models compiled with\n"
    "                          --optimizer foam; default: the compiled one)\n"
    "  --weights FILE          initial parameters: the raw weights spillwayc\n"
    "                          writes, a weights map (which reads the ONNX\n"
    "                          external data in place: it must not change),\n"
    "                          or a .safetensors file (e.g. from --save)\n"
    "                          (default: <executable>.weights)\n"
    "  --save FILE             write the final parameters as .safetensors\n"
    "  --log-json FILE         one JSON object per step: step, loss, lr,\n"
    "                          grad_norm (with clipping), val_loss,\n"
    "                          tokens/s, FLOP/s, elapsed, ETA\n"
    "  --print-every N         progress line every N steps (default steps/20)\n"
    "  --seed S                seed of --data's windows and of the element\n"
    "                          choice of --check-gradients (default 0)\n"
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
    "                          time waiting on I/O, the overlap and the\n"
    "                          SSD bytes written (the run's last line says\n"
    "                          them too)\n"
    "  --trace FILE            write the run's timeline (tasks, kernels,\n"
    "                          copies, waits) as a Chrome trace (Perfetto)\n"
    "  --optimizer-threads N   offload plans with the optimizer state on host\n"
    "                          or SSD: host threads running the updates\n"
    "                          (default: min(4, hardware threads - 1))\n"
    "  --kernels K             the CPU kernels: fast (BLAS GEMMs, blocked\n"
    "                          attention, threaded and vectorized; default)\n"
    "                          or reference (single-threaded, double\n"
    "                          accumulation: what the tests compare with\n"
    "                          NumPy at tight tolerances)\n"
    "  --threads N             threads of the fast CPU kernels (default: the\n"
    "                          CPUs this process may run on); the same\n"
    "                          executable, N and inputs give the same bits\n"
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
    "    --loopback-delays SEED\n"
    "                          loopback: seeds the random delays of its GPU\n"
    "                          tier's copies (default 1; 0: no delays)\n"
    "  --help                  this text\n"
    "\n"
    "A forward-only model runs --steps steps (default: the largest batch\n"
    "count B among its inputs) without a loss; the training flags (--lr,\n"
    "--beta1, --beta2, --eps, --weight-decay, --foam-alpha, --grad-clip,\n"
    "--save, --log-json, --check-gradients, the checkpoint, data and\n"
    "schedule flags) are usage errors for it.\n"
    "\n"
    "Data parallel: `mpirun -np N %s ARGS` (Open MPI) trains on N ranks, each\n"
    "on its own rows of every step: with --input, each batch of FILE.npy\n"
    "holds N x the model's batch rows and rank r reads the r-th part; with\n"
    "--data, rank r takes the r-th part of the job's windows. The update\n"
    "uses the mean gradient of all ranks (what one process of batch N x b\n"
    "in N micro-batches computes) and the logged loss is their mean. Rank\n"
    "0 prints and writes --save, --log-json, --trace and the checkpoints\n"
    "(--resume needs the same N); each rank swaps to DIR/rank-R under each\n"
    "--ssd DIR, and rank R > 0 writes --stats-json FILE.rank-R. Every rank\n"
    "must run the same executable with the same arguments. Launched the\n"
    "way torchrun launches (`torchrun --nproc-per-node N --no-python EXE\n"
    "ARGS`: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK set),\n"
    "the ranks meet at MASTER_ADDR:MASTER_PORT (torchrun's store, else rank\n"
    "0 serves it) and run their collectives on Gloo (needs libgloo0);\n"
    "SPILLWAY_DIST_TIMEOUT=S bounds their waits for each other (default:\n"
    "300 s to meet, 1800 s per collective), GLOO_SOCKET_IFNAME names the\n"
    "network interface they share.\n"
    "  --zero 1                ZeRO stage 1: each rank keeps the AdamW state\n"
    "                          of 1/N of every parameter's elements and\n"
    "                          updates those; the gradients are\n"
    "                          reduce-scattered and the updated values\n"
    "                          all-gathered (--zero 0, the default: every\n"
    "                          rank keeps the whole state, unless the plan\n"
    "                          was cut for the ranks; 2 ranks give the\n"
    "                          same bits either way, more the same within\n"
    "                          rounding). AdamW only. An offload plan's\n"
    "                          blocks must be cut for the ranks (spillwayc\n"
    "                          --zero 1 --ranks N): such an executable runs\n"
    "                          --zero 1 in a job of N ranks only; a\n"
    "                          bf16-mixed one shards the f32 master weights\n"
    "                          too and all-gathers the bf16 working copies.\n"
    "  --zero 2                ZeRO stage 2 of an offload plan compiled with\n"
    "                          spillwayc --zero 2 --ranks N (such a plan runs\n"
    "                          it without the flag): its gradient blocks hold\n"
    "                          this rank's shard too, each layer's gradients\n"
    "                          reduce-scattered on the GPU as its backward\n"
    "                          completes, so only the shard moves off it.\n"
    "  --overlap-exchanges W   --zero 2 through host memory (MPI, Gloo; not\n"
    "                          NCCL): on runs each layer's reduce-scatters on\n"
    "                          an exchange thread during the next layer's\n"
    "                          backward, off where they start, auto (default)\n"
    "                          on when this rank has a core for the thread\n"
    "                          besides its kernel threads' (on a shared core\n"
    "                          the thread slows them); the banner says which.\n"
    "  --collectives C         how gradients in GPU memory are averaged: nccl\n"
    "                          (NCCL's all-reduce on the GPU, bootstrapped\n"
    "                          through MPI or Gloo; alone, a communicator of\n"
    "                          one), mpi (through host memory: MPI's, or\n"
    "                          Gloo's under torchrun) or auto (default:\n"
    "                          nccl for --device cuda in a job when NCCL\n"
    "                          loads, else mpi; the banner says which). With\n"
    "                          --zero 1, NCCL reduce-scatters the gradients\n"
    "                          and all-gathers the values on the GPU.\n"
    "\n"
    "Exit status: 0 success, 1 runtime or data error, 2 usage error.\n";

namespace {

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

} // namespace

Options parse_args(int argc, char **argv) {
  Options o;
  bool fd_flag = false;
  std::string eval_flag; // --eval-every or --eval-batches, if given
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
        "--device-arena", "--loopback-delays", "--optimizer-threads", "--trace",
        "--kernels", "--threads", "--data", "--val-data", "--data-labels",
        "--eval-every", "--eval-batches", "--lr-schedule", "--warmup",
        "--min-lr", "--grad-clip", "--zero", "--collectives",
        "--overlap-exchanges"};
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
        "--checkpoint-every", "--keep-checkpoints", "--data", "--val-data",
        "--data-labels", "--eval-every", "--eval-batches", "--lr-schedule",
        "--warmup", "--min-lr", "--grad-clip", "--zero", "--collectives",
        "--overlap-exchanges"};
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
    } else if (flag == "--grad-clip") {
      o.adamw.grad_clip = parse_hparam(spillway::hyperparams::kGradClip, value);
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
    } else if (flag == "--collectives") {
      if (value != "auto" && value != "mpi" && value != "nccl")
        throw UsageError(format("invalid value '%s' for --collectives: "
                                "expected auto, mpi or nccl",
                                value.c_str()));
      o.collectives = value;
    } else if (flag == "--overlap-exchanges") {
      if (value != "auto" && value != "on" && value != "off")
        throw UsageError(format("invalid value '%s' for --overlap-exchanges: "
                                "expected auto, on or off",
                                value.c_str()));
      o.overlap_exchanges = value;
    } else if (flag == "--zero") {
      if (value != "0" && value != "1" && value != "2")
        throw UsageError(format("invalid value '%s' for --zero: expected 0 "
                                "(every rank keeps the whole optimizer "
                                "state), 1 (the ranks shard it) or 2 (an "
                                "offload plan compiled with spillwayc --zero "
                                "2: its gradients sharded too)",
                                value.c_str()));
      o.zero = value[0] - '0';
      o.zero_given = true;
    } else if (flag == "--optimizer-threads") {
      o.optimizer_threads = parse_int(flag, value, 1);
      if (o.optimizer_threads > HostTasks::kMaxThreads)
        throw UsageError(format("invalid value '%s' for --optimizer-threads: "
                                "expected at most %d",
                                value.c_str(), HostTasks::kMaxThreads));
    } else if (flag == "--kernels") {
      if (value != "fast" && value != "reference")
        throw UsageError(format("invalid value '%s' for --kernels: expected "
                                "fast or reference",
                                value.c_str()));
      o.reference_kernels = value == "reference";
    } else if (flag == "--threads") {
      o.threads = parse_int(flag, value, 1);
      if (o.threads > HostTasks::kMaxThreads)
        throw UsageError(format("invalid value '%s' for --threads: expected "
                                "at most %d",
                                value.c_str(), HostTasks::kMaxThreads));
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
    } else if (flag == "--loopback-delays") {
      o.loopback_delays = uint64_t(parse_int(flag, value, 0));
    } else if (flag == "--data") {
      o.data = path_value(flag, value);
    } else if (flag == "--val-data") {
      o.val_data = path_value(flag, value);
    } else if (flag == "--data-labels") {
      if (value != "same" && value != "shifted")
        throw UsageError(format("invalid value '%s' for --data-labels: "
                                "expected same or shifted",
                                value.c_str()));
      o.data_labels = value;
    } else if (flag == "--eval-every") {
      o.eval_every = parse_int(flag, value, 1);
      eval_flag = flag;
    } else if (flag == "--eval-batches") {
      o.eval_batches = parse_int(flag, value, 1);
      eval_flag = flag;
    } else if (flag == "--lr-schedule") {
      if (value != "constant" && value != "cosine")
        throw UsageError(format("invalid value '%s' for --lr-schedule: "
                                "expected constant or cosine",
                                value.c_str()));
      o.cosine = value == "cosine";
    } else if (flag == "--warmup") {
      o.warmup = parse_int(flag, value, 0);
    } else if (flag == "--min-lr") {
      o.min_lr = parse_double(flag, value, 0.0, 1e6, true);
      o.min_lr_given = true;
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
  if (!o.data_labels.empty() && o.data.empty())
    throw UsageError("--data-labels needs --data FILE");
  if (!o.val_data.empty() && o.data.empty())
    throw UsageError("--val-data needs --data FILE (the validation batches "
                     "feed the inputs --data feeds)");
  if (!eval_flag.empty() && o.val_data.empty())
    throw UsageError(format("%s needs --val-data FILE", eval_flag.c_str()));
  if (o.min_lr_given && !o.cosine)
    throw UsageError("--min-lr is where --lr-schedule cosine ends; the "
                     "constant schedule has none");
  if (o.check_gradients && (o.cosine || o.warmup || !o.val_data.empty()))
    throw UsageError("--check-gradients does not train: it takes no "
                     "--lr-schedule, --warmup or --val-data");
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

} // namespace spw::driver
