//===- spillwayc.cpp - compile a model and its loss to a training executable -===//
//
// Parses flags and calls the pipelines in lib/Pipelines: import (ONNX) or
// parse (MLIR), the training pipeline, lowering to runtime calls, LLVM IR,
// object code, link. Nothing here transforms IR itself.
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "spillway/InitAll.h"
#include "spillway/Pipelines/Executable.h"
#include "spillway/Pipelines/Pipelines.h"
#include "spillway/Schedule/CostModel.h"
#include "spillway/Schedule/HardwareProfile.h"
#include "spillway/Schedule/IterationSummary.h"
#include "spillway/Support/CompileTiming.h"
#include "spillway/Support/ToolMain.h"
#include "spillway/Target/ONNX/ImportONNX.h"
#include "Report.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

// The runtime's probe (plain C++, no MLIR): --probe-hw measures through the
// runtime's own kernels and storage engine.
#include "spillway/runtime/hw_probe.h"
#include "spillway/runtime/hyperparams.h"

#include <cerrno>
#include <csignal>
#include <ctime>
#include <tuple>
#include <unistd.h>

using namespace mlir;
namespace cl = llvm::cl;

namespace {
enum class EmitKind { MLIR, LLVM, Obj, Exe };

cl::OptionCategory category("spillwayc options");

cl::opt<std::string> inputPath(cl::Positional,
                               cl::desc("<MODEL.onnx|MODEL.onnxtext|MODEL.mlir>"),
                               cl::cat(category));
cl::opt<std::string> outputPath("o",
                                cl::desc("Output file (the executable, or "
                                         "what --emit names)"),
                                cl::value_desc("EXE"), cl::cat(category));
cl::list<std::string>
    binds("bind", cl::CommaSeparated,
          cl::desc("Bind symbolic ONNX input dimensions, e.g. "
                   "--bind batch=64,seq=128"),
          cl::value_desc("NAME=INT,..."), cl::cat(category));
cl::list<std::string> constantInitializers(
    "constant-initializers", cl::CommaSeparated,
    cl::desc("ONNX float initializers that are constants, not trainable "
             "parameters (exported buffers, e.g. a rotary inv_freq)"),
    cl::value_desc("NAME,..."), cl::cat(category));
cl::opt<int64_t> maxInlineConstantElements(
    "max-inline-constant-elements", cl::init(int64_t(1) << 20),
    cl::desc("The largest ONNX constant (in elements) the importer evaluates "
             "or puts into the executable, e.g. a causal mask (S*S); past it "
             "a constant is an error naming the node. Splat constants are "
             "filled at run time whatever their size"),
    cl::value_desc("N"), cl::cat(category));
cl::opt<std::string> fusePatterns(
    "fuse-patterns", cl::init("all"),
    cl::desc("Decomposed patterns to replace by fused ops: all, none, or a "
             "comma-separated subset of attention,rms_norm,gelu,rope,silu,"
             "linear"),
    cl::cat(category));
cl::opt<std::string> optimizer(
    "optimizer", cl::init("adamw"),
    cl::desc("Optimizer: adamw, or foam (AdamW with folded state for the "
             "2-D weights other than embeddings and the LM head; "
             "docs/compiler.md, \"FOAM\")"),
    cl::cat(category));
cl::opt<int64_t> foamLevel(
    "foam-level", cl::init(2),
    cl::desc("FOAM: fold each row's optimizer state in blocks of 2^L "
             "elements (0..16; default 2: a quarter of AdamW's state)"),
    cl::value_desc("L"), cl::cat(category));
// The numeric flags are read as text and parsed by hyperparams::parse_flag:
// LLVM's double parser turns "" into 0 and its messages show the parsed
// value, not what was typed.
cl::opt<std::string> foamAlphaText("foam-alpha", cl::init("0.25"),
                          cl::desc("FOAM: scale of the folded matrices' "
                                   "update, whose step is A * lr (default "
                                   "0.25; the executable's --foam-alpha "
                                   "overrides it)"),
                          cl::value_desc("A"), cl::cat(category));
cl::opt<std::string> target(
    "target", cl::init("cpu"),
    cl::desc("Backend the executable runs on: cpu, or cuda (NVIDIA GPUs, "
             "sm_90 and newer; needs a spillwayc built with the CUDA "
             "toolkit). A cuda executable still runs on the CPU with "
             "--device cpu"),
    cl::cat(category));
cl::opt<std::string> precision(
    "precision",
    cl::desc("Numerics of the products (GEMMs, attention): fp32, or bf16 "
             "(bf16 inputs, fp32 accumulation, fp32 tensors and master "
             "weights; --target cuda only). Default: bf16 for cuda, fp32 "
             "for cpu"),
    cl::cat(category));
cl::opt<std::string> lrText("lr", cl::init("1e-3"),
                            cl::desc("Learning rate (default 1e-3)"),
                            cl::value_desc("number"), cl::cat(category));
cl::opt<std::string> beta1Text("beta1", cl::init("0.9"),
                               cl::desc("AdamW beta1 (default 0.9)"),
                               cl::value_desc("number"), cl::cat(category));
cl::opt<std::string> beta2Text("beta2", cl::init("0.999"),
                               cl::desc("AdamW beta2 (default 0.999)"),
                               cl::value_desc("number"), cl::cat(category));
cl::opt<std::string> epsText("eps", cl::init("1e-8"),
                             cl::desc("AdamW epsilon (default 1e-8)"),
                             cl::value_desc("number"), cl::cat(category));
cl::opt<std::string> weightDecayText(
    "weight-decay", cl::init("0.01"),
    cl::desc("Decoupled weight decay (every parameter; default 0.01)"),
    cl::value_desc("number"), cl::cat(category));
cl::opt<EmitKind> emit(
    "emit", cl::init(EmitKind::Exe), cl::desc("What to write to -o"),
    cl::values(clEnumValN(EmitKind::MLIR, "mlir",
                          "the training step in the train dialect (after "
                          "autodiff, the optimizer and, with --microbatches "
                          "or --schedule, the schedule)"),
               clEnumValN(EmitKind::LLVM, "llvm", "LLVM IR (text)"),
               clEnumValN(EmitKind::Obj, "obj", "an object file"),
               clEnumValN(EmitKind::Exe, "exe",
                          "a standalone executable (default)")),
    cl::cat(category));
cl::opt<std::string> runtimeLib("runtime-lib",
                                cl::desc("Runtime archive to link "
                                         "(default: the one built or "
                                         "installed with spillwayc)"),
                                cl::value_desc("libspillway_runtime.a"),
                                cl::cat(category));
cl::opt<bool> forwardOnly(
    "forward",
    cl::desc("Compile the forward computation only: the executable computes "
             "every graph output (written with --outputs DIR) and does not "
             "train; for inference checks and ONNX conformance"),
    cl::cat(category));
cl::opt<std::string> probeHw(
    "probe-hw",
    cl::desc("Measure this machine (memcpy, the CPU backend's matmul and "
             "AdamW kernels, each --ssd directory through the storage engine) "
             "and write a hardware profile; no model is compiled "
             "(docs/cost-model.md)"),
    cl::value_desc("PROFILE.json"), cl::cat(category));
cl::list<std::string> ssdDirs(
    "ssd", cl::CommaSeparated,
    cl::desc("SSD directories: --probe-hw measures each (default: the "
             "current directory); with --report, the profile's SSDs the plan "
             "may use (default: all of them); with an offload plan, the swap "
             "directories compiled into the executable (its --ssd "
             "overrides)"),
    cl::value_desc("DIR,..."), cl::cat(category));
cl::opt<std::string> probeSsdSize(
    "probe-ssd-size", cl::init("256M"),
    cl::desc("Bytes --probe-hw writes and reads per SSD directory and pass"),
    cl::value_desc("SIZE"), cl::cat(category));
cl::opt<std::string> probeSecondsText(
    "probe-seconds", cl::init("0.5"),
    cl::desc("How long --probe-hw repeats each compute and memcpy "
             "measurement (more than 0, at most 60; default 0.5)"),
    cl::value_desc("SECONDS"), cl::cat(category));
// Planning (docs/cost-model.md). --microbatches, --schedule and
// --overlap-optimizer also shape the executable (populateSchedulePipeline);
// the placement flags, with -o, give it an offload plan.
cl::opt<std::string> hwProfile(
    "hw",
    cl::desc("Hardware profile for the cost model (required by --report and "
             "--report-json; with --microbatches or --schedule and --schedule "
             "auto, the cost model picks the executable's order; "
             "profiles/cpu-ci.json, profiles/h200.json, or one --probe-hw "
             "wrote)"),
    cl::value_desc("PROFILE.json"), cl::cat(category));
cl::opt<bool> report(
    "report",
    cl::desc("Plan the iteration with the cost model and print, for the "
             "chosen plan and the horizontal baseline, the predicted "
             "iteration time, its bound, bytes per link per iteration and "
             "peak memory per tier. The executable follows a placement only "
             "with --place, --gpu-mem or --host-mem (an offload plan). "
             "Without -o nothing is compiled"),
    cl::cat(category));
cl::opt<std::string> passTiming(
    "pass-timing",
    cl::desc("Write the wall time and resident memory after each pass and "
             "phase of the compile as JSON"),
    cl::value_desc("FILE"), cl::cat(category));
spillway::CompileTiming timing;
cl::opt<std::string> reportJson(
    "report-json",
    cl::desc("Write the report as JSON (bytes_per_iteration, peak_bytes per "
             "tier, for the chosen plan and the baseline)"),
    cl::value_desc("FILE"), cl::cat(category));
cl::opt<unsigned> microbatches(
    "microbatches",
    cl::desc("Micro-batches per iteration (must divide the batch). The "
             "executable trains in M micro-batches with exact gradient "
             "accumulation (default 1: the whole batch); the plan fixes M "
             "(default: searched over 1, 2, 4, 8, 16)"),
    cl::value_desc("M"), cl::cat(category));
cl::opt<std::string> schedule(
    "schedule", cl::init("auto"),
    cl::desc("Layer order of the micro-batches: horizontal (ZeRO-Infinity), "
             "snake (GreedySnake), or auto (the plan's: the cost model's "
             "choice with --hw, snake without). The executable runs its "
             "micro-batches in this order; the plan searches both for auto"),
    cl::value_desc("horizontal|snake|auto"), cl::cat(category));
cl::opt<std::string> recompute(
    "recompute", cl::init("on"),
    cl::desc("With --microbatches or --schedule: on (the default, what the "
             "cost model assumes) keeps only layer-boundary activations "
             "between a layer's forward and backward and recomputes the rest "
             "inside the backward (sched-recompute); off keeps every "
             "activation the backward reads. The weights and losses are the "
             "same bit for bit"),
    cl::value_desc("on|off"), cl::cat(category));
cl::opt<std::string> overlapOptimizerText(
    "overlap-optimizer", cl::init("0"),
    cl::desc("Fraction F in [0, 1] of each layer's update moved into the next "
             "forward. The executable applies the update of the first F of "
             "each layer's parameter elements just before the layer's next "
             "forward and the rest as soon as its gradient is complete, with "
             "the same weights as ordinary training (default 0); the plan "
             "fixes F (default: searched over 0, 0.25, 0.5, 0.75, 1)"),
    cl::value_desc("F"), cl::cat(category));
cl::opt<std::string> gpuMem(
    "gpu-mem",
    cl::desc("GPU memory budget for the plan (default: the profile's "
             "gpu.memory_bytes); with -o, the executable gets an offload "
             "plan that must fit it. A plan that fits no budget is an error "
             "stating the budgets that would fit"),
    cl::value_desc("SIZE"), cl::cat(category));
cl::opt<std::string> hostMem(
    "host-mem",
    cl::desc("Host memory budget for the plan (default: the profile's "
             "host.memory_bytes); with -o, the executable's offload plan "
             "must fit it"),
    cl::value_desc("SIZE"), cl::cat(category));
cl::list<std::string> placeClasses(
    "place", cl::CommaSeparated,
    cl::desc("Pin tensor classes to tiers for the plan: classes params, "
             "master, optimizer, gradients, activations; tiers gpu, host, "
             "ssd. The planner decides the rest (with --hw; else the GPU). "
             "With -o the executable follows this offload plan "
             "(activations off the GPU need --recompute on, the default)"),
    cl::value_desc("CLASS=TIER,..."), cl::cat(category));
cl::opt<bool> verbose("v", cl::desc("Print each stage as it runs"),
                      cl::cat(category));

// The numeric flags' values, parsed by parseNumberFlags().
double lr, beta1, beta2, eps, weightDecay, foamAlpha, probeSeconds,
    overlapOptimizer;

namespace hp = spillway::hyperparams;
// Not optimizer hyper-parameters, but checked by the same strict parser.
constexpr hp::Range kOverlapOptimizer{"", "--overlap-optimizer", 0.0, 1.0,
                                      false, false, /*float32=*/false};
// A probe of a minute per measurement is already far past stable numbers;
// an unbounded one (inf, 1e300) would never end.
constexpr hp::Range kProbeSeconds{"", "--probe-seconds", 0.0, 60.0, true,
                                  false, /*float32=*/false};

/// Parses every numeric flag given as text; the first error's message, or
/// "" when all are valid.
std::string parseNumberFlags() {
  const std::tuple<const hp::Range *, cl::opt<std::string> *, double *>
      flags[] = {{&hp::kLr, &lrText, &lr},
                 {&hp::kBeta1, &beta1Text, &beta1},
                 {&hp::kBeta2, &beta2Text, &beta2},
                 {&hp::kEps, &epsText, &eps},
                 {&hp::kWeightDecay, &weightDecayText, &weightDecay},
                 {&hp::kFoamAlpha, &foamAlphaText, &foamAlpha},
                 {&kProbeSeconds, &probeSecondsText, &probeSeconds},
                 {&kOverlapOptimizer, &overlapOptimizerText,
                  &overlapOptimizer}};
  for (const auto &[range, text, value] : flags)
    if (std::string e = hp::parse_flag(*range, *text, *value); !e.empty())
      return e;
  return {};
}

void note(const Twine &message) {
  if (verbose)
    llvm::errs() << "spillwayc: " << message << "\n";
}

int fail(const Twine &message) {
  llvm::WithColor::error(llvm::errs(), "spillwayc") << message << "\n";
  return 1;
}

/// The runtime archive: --runtime-lib, else next to an installed spillwayc
/// (<prefix>/lib), else the build tree's.
std::string findRuntimeLibrary(const char *argv0) {
  if (!runtimeLib.empty())
    return runtimeLib;
  std::string self = llvm::sys::fs::getMainExecutable(
      argv0, reinterpret_cast<void *>(&findRuntimeLibrary));
  llvm::SmallString<256> installed(llvm::sys::path::parent_path(
      llvm::sys::path::parent_path(self)));
  llvm::sys::path::append(installed, "lib", "libspillway_runtime.a");
  if (llvm::sys::fs::exists(installed))
    return std::string(installed);
  return SPILLWAY_BUILD_RUNTIME_LIB;
}

/// The CUDA backend's archive: beside the runtime archive (installed, or
/// --runtime-lib's directory), else the build tree's.
std::string findCudaLibrary(StringRef runtimeLibrary) {
  llvm::SmallString<256> beside(llvm::sys::path::parent_path(runtimeLibrary));
  llvm::sys::path::append(beside, "libspillway_cuda.a");
  if (llvm::sys::fs::exists(beside))
    return std::string(beside);
#ifdef SPILLWAY_BUILD_CUDA_LIB
  return SPILLWAY_BUILD_CUDA_LIB;
#else
  return std::string(beside);
#endif
}

bool hasExtension(StringRef path, StringRef ext) {
  return llvm::sys::path::extension(path) == ext;
}

/// Where the initial weights go: beside the output, named after it, so the
/// executable finds them as `<EXE>.weights`.
std::string weightsPathFor(StringRef output) { return (output + ".weights").str(); }

/// The files a compile writes (the executable or what --emit names, and the
/// weights), each first under a temporary name beside it, `DEST.tmp.<pid>`;
/// commit() renames them into place at the end. Until then every way out (a
/// failed stage, an exception, SIGINT or SIGTERM) removes them: a failed
/// compile leaves nothing behind, and an existing executable is replaced
/// only by a finished one. A SIGKILL cannot be caught: the next compile to
/// the same destination removes what that left (`removeStale`).
class PendingOutputs {
public:
  /// Where to write `dest`'s content until commit().
  std::string add(StringRef dest) {
    removeStale(dest);
    std::string temp = tempName(dest, ::getpid());
    llvm::sys::RemoveFileOnSignal(temp);
    entries.push_back({temp, dest.str()});
    return temp;
  }
  /// A scratch file for `dest`'s compile (the object file linked into the
  /// executable), `DEST.tmp.<pid><suffix>`: removed on every way out, never
  /// committed, and by the next compile to `dest` after a SIGKILL.
  std::string scratch(StringRef dest, StringRef suffix) {
    removeStale(dest);
    std::string temp = tempName(dest, ::getpid()) + suffix.str();
    llvm::sys::RemoveFileOnSignal(temp);
    entries.push_back({temp, "", /*committed=*/false, /*scratch=*/true});
    return temp;
  }
  LogicalResult commit(std::string &error) {
    // A SIGINT or SIGTERM between the renames would leave the new weights
    // beside the old executable: the signals wait until both are in place.
    // A handler that only records the signal (not a thread's signal mask:
    // any of MLIR's threads may receive it), re-raised afterwards so LLVM's
    // handler still cleans up and the process still dies of it.
    const int signals[] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction defer = {}, previous[3];
    defer.sa_handler = [](int sig) { deferredSignal = sig; };
    sigemptyset(&defer.sa_mask);
    deferredSignal = 0;
    for (int i = 0; i < 3; ++i)
      sigaction(signals[i], &defer, &previous[i]);
    LogicalResult result = success();
    for (Entry &e : entries) {
      if (e.scratch)
        continue;
      if (std::error_code ec = llvm::sys::fs::rename(e.temp, e.dest)) {
        error = "cannot move '" + e.temp + "' to '" + e.dest +
                "': " + ec.message();
        result = failure();
        break;
      }
      llvm::sys::DontRemoveFileOnSignal(e.temp);
      e.committed = true;
    }
    for (int i = 0; i < 3; ++i)
      sigaction(signals[i], &previous[i], nullptr);
    if (deferredSignal)
      ::raise(deferredSignal);
    return result;
  }
  ~PendingOutputs() {
    for (Entry &e : entries)
      if (!e.committed) {
        llvm::sys::fs::remove(e.temp);
        llvm::sys::DontRemoveFileOnSignal(e.temp);
      }
  }

private:
  static std::string tempName(StringRef dest, long pid) {
    return (dest + ".tmp." + Twine(pid)).str();
  }
  /// Removes `dest`'s temporaries whose compile no longer runs.
  static void removeStale(StringRef dest) {
    llvm::SmallString<256> dir(llvm::sys::path::parent_path(dest));
    if (dir.empty())
      dir = ".";
    std::string prefix = (llvm::sys::path::filename(dest) + ".tmp.").str();
    std::error_code ec;
    for (llvm::sys::fs::directory_iterator it(dir, ec), end; !ec && it != end;
         it.increment(ec)) {
      StringRef name = llvm::sys::path::filename(it->path());
      long pid;
      // DEST.tmp.<pid>, or a scratch file DEST.tmp.<pid>.o.
      if (!name.consume_front(prefix) || name.consumeInteger(10, pid) ||
          !(name.empty() || name == ".o") || pid <= 0 || pid == ::getpid())
        continue;
      if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH)
        llvm::sys::fs::remove(it->path());
    }
  }
  struct Entry {
    std::string temp, dest;
    bool committed = false;
    bool scratch = false;
  };
  static inline volatile std::sig_atomic_t deferredSignal = 0;
  std::vector<Entry> entries;
};

/// "a character device" (for messages).
const char *fileKind(llvm::sys::fs::file_type t) {
  using llvm::sys::fs::file_type;
  switch (t) {
  case file_type::directory_file:
    return "a directory";
  case file_type::character_file:
    return "a character device";
  case file_type::block_file:
    return "a block device";
  case file_type::fifo_file:
    return "a FIFO";
  case file_type::socket_file:
    return "a socket";
  default:
    return "not a regular file";
  }
}

/// A file spillwayc writes: `what` ("-o 'x'") names it in messages. It
/// must be absent or a regular file (a rename onto a device node or a FIFO
/// would replace it, a write would block on a FIFO; the executable's --save
/// refuses them too), in an existing, writable directory. Checked before
/// anything compiles or measures; false with the message in `error`.
bool checkOutputFile(const std::string &what, StringRef path,
                     std::string &error) {
  namespace fs = llvm::sys::fs;
  llvm::SmallString<256> dir(llvm::sys::path::parent_path(path));
  if (dir.empty())
    dir = ".";
  fs::file_status st;
  if (std::error_code ec = fs::status(dir, st)) {
    error = what + ": " +
            (ec == std::errc::no_such_file_or_directory
                 ? "the directory '" + std::string(dir) + "' does not exist"
             : ec == std::errc::not_a_directory
                 ? "a part of the directory '" + std::string(dir) +
                       "' is not a directory"
                 : "cannot read the directory '" + std::string(dir) +
                       "': " + ec.message());
    return false;
  }
  if (st.type() != fs::file_type::directory_file) {
    error = what + ": '" + std::string(dir) + "' is " + fileKind(st.type()) +
            ", not a directory";
    if (st.type() == fs::file_type::regular_file)
      error = what + ": '" + std::string(dir) +
              "' is a regular file, not a directory";
    return false;
  }
  if (fs::access(dir, fs::AccessMode::Write)) {
    error = what + ": the directory '" + std::string(dir) +
            "' is not writable";
    return false;
  }
  if (std::error_code ec = fs::status(path, st)) {
    if (ec == std::errc::no_such_file_or_directory)
      return true;
    error = what + ": " + ec.message();
    return false;
  }
  if (st.type() == fs::file_type::regular_file)
    return true;
  error = what + " is " + fileKind(st.type()) +
          "; spillwayc writes a regular file there and will not replace "
          "it: pass the path of a regular file";
  return false;
}

/// Copies the weights file a .mlir input names (relative to the .mlir file)
/// to `dest`.
LogicalResult copyWeightsOfMLIR(ModuleOp module, StringRef mlirPath,
                                StringRef dest, std::string &error) {
  auto attr = module->getAttrOfType<StringAttr>(
      spillway::train::kWeightsAttrName);
  bool hasParams = !module.getOps<spillway::train::ParamOp>().empty();
  if (!attr) {
    if (!hasParams) {
      // No parameters: an empty weights file keeps the executable's contract.
      std::error_code ec;
      llvm::raw_fd_ostream out(dest, ec);
      if (ec)
        error = "cannot write '" + dest.str() + "': " + ec.message();
      return success(!ec);
    }
    error = "'" + mlirPath.str() + "' declares parameters but no weights file: "
            "add the module attribute train.weights = \"FILE\" (a path "
            "relative to the .mlir file)";
    return failure();
  }
  llvm::SmallString<256> src(llvm::sys::path::parent_path(mlirPath));
  llvm::sys::path::append(src, attr.getValue());
  if (llvm::sys::path::is_absolute(attr.getValue()))
    src = attr.getValue();
  if (!llvm::sys::fs::exists(src)) {
    error = "weights file '" + std::string(src) + "' named by '" +
            mlirPath.str() + "' (train.weights) does not exist";
    return failure();
  }
  // The file must be the one the parameters describe: the executable reads
  // exactly their bytes (or, from a .safetensors file, by name), and a file
  // of another size was written for another model.
  llvm::sys::fs::file_status status;
  if (std::error_code ec = llvm::sys::fs::status(src, status)) {
    error = "cannot read weights file '" + std::string(src) + "': " +
            ec.message();
    return failure();
  }
  if (status.type() != llvm::sys::fs::file_type::regular_file) {
    error = "weights file '" + std::string(src) + "' named by '" +
            mlirPath.str() + "' (train.weights) is not a regular file";
    return failure();
  }
  int64_t expected = 0;
  for (auto p : module.getOps<spillway::train::ParamOp>())
    expected = std::max<int64_t>(expected, p.getOffsetAttr().getInt() +
                                               p.getNumBytes());
  if (int64_t(status.getSize()) != expected) {
    // A .safetensors file: an 8-byte header length, then a JSON header.
    bool safetensors = false;
    if (auto buf = llvm::MemoryBuffer::getFileSlice(src, 9, 0)) {
      StringRef head = (*buf)->getBuffer();
      safetensors = head.size() == 9 && head[8] == '{';
    }
    if (!safetensors) {
      error = llvm::formatv("weights file '{0}' named by '{1}' "
                            "(train.weights) is {2} bytes, but its "
                            "parameters' offsets and types need {3}; was it "
                            "written for another model?",
                            src, mlirPath, status.getSize(), expected)
                  .str();
      return failure();
    }
  }
  // Copying a file onto itself would truncate it: the weights are already
  // where the executable looks for them.
  if (llvm::sys::fs::equivalent(src, dest))
    return success();
  if (std::error_code ec = llvm::sys::fs::copy_file(src, dest)) {
    error = "cannot copy weights '" + std::string(src) + "' to '" +
            dest.str() + "': " + ec.message();
    return failure();
  }
  return success();
}

/// "256M", "1G", "64MiB", "4096" (binary units): digits only (no spaces, no
/// sign), nonzero, and no more than 2^63 bytes (no wrap-around).
std::optional<uint64_t> parseSize(StringRef text) {
  StringRef digits = text;
  std::string lower = digits.lower();
  uint64_t unit = 1;
  for (auto [suffix, mult] :
       {std::pair<StringRef, uint64_t>{"kib", 1ull << 10}, {"mib", 1ull << 20},
        {"gib", 1ull << 30}, {"k", 1ull << 10}, {"m", 1ull << 20},
        {"g", 1ull << 30}, {"b", 1}}) {
    if (StringRef(lower).ends_with(suffix)) {
      digits = digits.drop_back(suffix.size());
      unit = mult;
      break;
    }
  }
  uint64_t n;
  if (digits.empty() || !llvm::all_of(digits, llvm::isDigit) ||
      digits.getAsInteger(10, n) || n == 0 || n > (uint64_t(1) << 63) / unit)
    return std::nullopt;
  return n * unit;
}

/// --probe-hw: measure, convert to a profile for the CPU backend, write it.
int probeHardware() {
  std::optional<uint64_t> ssdBytes = parseSize(probeSsdSize);
  if (!ssdBytes)
    return fail("--probe-ssd-size '" + probeSsdSize +
                "' is not a size (e.g. 256M, 1G)");
  spw::probe::ProbeOptions options;
  options.ssd_bytes = *ssdBytes;
  options.min_seconds = probeSeconds;
  std::vector<std::string> normalized;
  for (const std::string &d : ssdDirs) {
    llvm::SmallString<256> abs(d);
    llvm::sys::fs::make_absolute(abs);
    // One directory measured twice would count its SSD's bandwidth twice.
    llvm::SmallString<256> norm(abs);
    llvm::sys::path::remove_dots(norm, /*remove_dot_dot=*/true);
    while (norm.size() > 1 && llvm::sys::path::is_separator(norm.back()))
      norm.pop_back();
    if (llvm::is_contained(normalized, std::string(norm)))
      return fail("--ssd '" + d + "': the directory '" + std::string(norm) +
                  "' is already given; name each SSD once");
    normalized.push_back(std::string(norm));
    options.ssd_dirs.push_back(std::string(abs));
  }
  if (options.ssd_dirs.empty()) {
    llvm::SmallString<256> cwd;
    llvm::sys::fs::current_path(cwd);
    options.ssd_dirs.push_back(std::string(cwd));
  }
  options.progress = [](const std::string &s) {
    llvm::errs() << "spillwayc --probe-hw: " << s << "\n";
  };
  spw::probe::HostMeasurement m;
  std::string error;
  if (!spw::probe::probe_host(options, m, error))
    return fail("--probe-hw: " + error);

  // The CPU backend: the "GPU" is this CPU, running the runtime's kernels
  // (f32 whatever the model's precision), and host <-> "GPU" copies are
  // memcpys. Its memory is the arena --gpu-mem sizes; the profile records
  // the host's.
  spillway::schedule::HardwareProfile p;
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  p.name = host;
  p.backend = "cpu";
  p.gpuBf16TFlops = p.gpuFp32TFlops = m.matmul_gflops / 1e3;
  p.gpuMemoryBytes = m.memory_bytes;
  p.hostMemoryBytes = m.memory_bytes;
  p.hostMemcpyGBps = m.memcpy_gbps;
  p.cpuOptimizerParamsPerSec = m.adamw_params_per_s;
  p.h2dGBps = p.d2hGBps = p.bidirectionalGBps = m.memcpy_gbps;
  bool buffered = false;
  for (const spw::probe::SSDMeasurement &d : m.ssds) {
    p.ssds.push_back({d.dir, d.read_gbps, d.write_gbps, d.combined_gbps});
    buffered |= !d.direct;
  }
  p.source = llvm::formatv(
      "spillwayc --probe-hw on {0} ({1} CPUs), {2}: CPU backend. gpu = this "
      "CPU: the runtime's f32 matmul kernel on {3}x{3} matrices (one thread), "
      "used for bf16 and fp32 alike; gpu.memory_bytes = host memory (the "
      "arena's size is the --gpu-mem budget). pcie = one-thread memcpy of "
      "{4} MiB buffers, all three rates (bidirectional not measured "
      "separately). cpu_optimizer = the runtime's AdamW kernel. ssd: {5} MiB "
      "per pass, 1 MiB requests x 32 through the storage engine ({6}); "
      "combined = half read while the other half is written.",
      host, m.cores, date, m.matmul_size, options.memcpy_bytes >> 20,
      *ssdBytes >> 20,
      buffered ? "BUFFERED on some directory: the page cache inflates it"
               : "O_DIRECT");
  std::string out = spillway::schedule::writeHardwareProfile(p);
  // What we wrote must be what the compiler reads.
  if (!spillway::schedule::parseHardwareProfile(out, probeHw, error))
    return fail("internal error: the probe wrote an invalid profile: " + error);
  std::error_code ec;
  llvm::raw_fd_ostream os(probeHw, ec);
  if (ec)
    return fail("cannot write '" + probeHw + "': " + ec.message());
  os << out;
  llvm::errs() << "spillwayc --probe-hw: wrote " << probeHw << "\n";
  return 0;
}
/// What --report plans with: the flags, checked before anything compiles.
struct PlanningInputs {
  std::string profilePath;
  spillway::schedule::HardwareProfile profile;
  spillway::schedule::SearchSpace space;
  spillway::schedule::Budgets budgets;
  bool ssdUnlimited = false;
};

bool planningRequested() { return report || !reportJson.empty(); }

/// --place, --gpu-mem or --host-mem with an executable to build: the step
/// gets an offload plan (populateSchedulePipeline with OffloadOptions).
bool offloadRequested() {
  return !outputPath.empty() && !forwardOnly &&
         (placeClasses.getNumOccurrences() || gpuMem.getNumOccurrences() ||
          hostMem.getNumOccurrences());
}

/// --microbatches M (M > 1) or --schedule: the executable trains in a
/// schedule (populateSchedulePipeline). --microbatches 1 alone keeps the
/// plain step.
bool scheduleRequested() {
  return (microbatches.getNumOccurrences() && microbatches > 1) ||
         schedule.getNumOccurrences() ||
         overlapOptimizerText.getNumOccurrences();
}

/// The placement flags given without --report or --report-json; --hw too,
/// unless it picks the order of a requested schedule (--schedule auto).
std::string strayPlanningFlag() {
  const std::pair<const char *, cl::Option *> flags[] = {
      {"--gpu-mem", &gpuMem},
      {"--host-mem", &hostMem},
      {"--place", std::addressof(placeClasses)}};
  if (hwProfile.getNumOccurrences() &&
      !(scheduleRequested() && schedule == "auto") && !offloadRequested())
    return "--hw";
  for (auto [name, opt] : flags)
    if (opt->getNumOccurrences() && !offloadRequested())
      return name;
  return {};
}

/// Reads and checks the planning flags; an error message on failure.
std::optional<PlanningInputs> readPlanningInputs(std::string &error) {
  using namespace spillway::schedule;
  PlanningInputs in;
  if (hwProfile.empty()) {
    error = "--report and --report-json need a hardware profile: --hw "
            "PROFILE.json (profiles/cpu-ci.json for this machine's CPU "
            "backend, profiles/h200.json, or one --probe-hw wrote)";
    return std::nullopt;
  }
  in.profilePath = hwProfile;
  auto profile = readHardwareProfile(hwProfile, error);
  if (!profile)
    return std::nullopt;
  in.profile = std::move(*profile);

  // --ssd: the profile's SSDs the plan may use.
  if (!ssdDirs.empty()) {
    std::vector<SSDProfile> chosen;
    for (const std::string &d : ssdDirs) {
      llvm::SmallString<256> abs(d);
      llvm::sys::fs::make_absolute(abs);
      auto it = llvm::find_if(in.profile.ssds, [&](const SSDProfile &p) {
        return p.path == d || p.path == std::string(abs);
      });
      if (it == in.profile.ssds.end()) {
        std::string known;
        for (const SSDProfile &p : in.profile.ssds)
          known += (known.empty() ? "" : ", ") + p.path;
        error = "--ssd '" + d + "': the profile '" + hwProfile +
                "' has no measurement of it (its SSDs: " +
                (known.empty() ? std::string("none") : known) +
                "); measure it with --probe-hw --ssd";
        return std::nullopt;
      }
      // One device named twice would count its bandwidth twice.
      if (llvm::any_of(chosen, [&](const SSDProfile &p) {
            return p.path == it->path;
          })) {
        error = "--ssd '" + d + "': the SSD '" + it->path +
                "' is already chosen; name each SSD once";
        return std::nullopt;
      }
      chosen.push_back(*it);
    }
    in.profile.ssds = std::move(chosen);
  }

  if (schedule == "horizontal")
    in.space.orders = {Order::Horizontal};
  else if (schedule == "snake")
    in.space.orders = {Order::Snake};
  else if (schedule != "auto") {
    error = "--schedule '" + schedule +
            "' is not one of horizontal, snake, auto";
    return std::nullopt;
  }
  if (microbatches.getNumOccurrences()) {
    if (microbatches == 0) {
      error = "--microbatches must be at least 1";
      return std::nullopt;
    }
    in.space.microBatches = {microbatches};
  }
  if (overlapOptimizerText.getNumOccurrences())
    in.space.overlaps = {overlapOptimizer}; // checked by parseNumberFlags
  // FOAM's updates run whole (its state is per block of a row): no
  // optimizer overlap to plan.
  if (optimizer == "foam")
    in.space.overlaps = {0.0};
  llvm::StringMap<std::string> placedBy;
  for (const std::string &entry : placeClasses) {
    auto [cls, tier] = StringRef(entry).split('=');
    if (tier.empty() || cls.empty()) {
      error = "--place '" + entry + "' is not CLASS=TIER";
      return std::nullopt;
    }
    auto c = parseTensorClass(cls.trim().str());
    if (!c) {
      error = "--place: unknown tensor class '" + cls.str() +
              "' (params, master, optimizer, gradients, activations)";
      return std::nullopt;
    }
    auto t = parseTier(tier.trim().str());
    if (!t) {
      error = "--place: unknown tier '" + tier.str() + "' (gpu, host, ssd)";
      return std::nullopt;
    }
    if (*t == Tier::SSD && in.profile.ssds.empty()) {
      error = "--place " + entry + ": the profile '" + hwProfile +
              "' lists no SSD";
      return std::nullopt;
    }
    // The same class twice: which one holds is a guess, so neither does.
    auto [prev, inserted] = placedBy.try_emplace(cls.trim(), entry);
    if (!inserted) {
      error = "--place " + entry + ": '" + cls.trim().str() +
              "' is already placed (--place " + prev->second +
              "); place each tensor class once";
      return std::nullopt;
    }
    in.space.pinned[int(*c)] = *t;
  }
  auto budget = [&](cl::opt<std::string> &flag, const char *name,
                    uint64_t fallback, uint64_t &out) {
    if (flag.empty()) {
      out = fallback;
      return true;
    }
    std::optional<uint64_t> size = parseSize(flag);
    if (!size) {
      error = std::string(name) + " '" + flag +
              "' is not a size (e.g. 512M, 16G, 4096)";
      return false;
    }
    out = *size;
    return true;
  };
  if (!budget(gpuMem, "--gpu-mem", in.profile.gpuMemoryBytes,
              in.budgets.gpuBytes) ||
      !budget(hostMem, "--host-mem", in.profile.hostMemoryBytes,
              in.budgets.hostBytes))
    return std::nullopt;
  // No SSD budget flag: the SSDs hold whatever the plan puts there.
  in.budgets.ssdBytes = UINT64_MAX;
  in.ssdUnlimited = true;
  return in;
}

/// "123456 bytes (120.56 KiB)".
std::string bytesAndGiB(uint64_t b) {
  const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = -1;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  if (u < 0)
    return llvm::formatv("{0} bytes", b);
  return llvm::formatv("{0} bytes ({1:f2} {2})", b, v, units[u]);
}

/// Plans the training step in `module` (left unchanged: the partition runs
/// on a copy) and writes the report if one is asked for; `chosenOrder` is
/// the chosen plan's order. Fails on an over-budget plan.
int planAndReport(ModuleOp module, const PlanningInputs &in,
                  std::string &chosenOrder,
                  spillway::schedule::CostEstimate *chosen = nullptr,
                  std::vector<spillway::schedule::CostEstimate> *ranked =
                      nullptr) {
  using namespace spillway::schedule;
  OwningOpRef<ModuleOp> copy(module.clone());
  PassManager pm(module.getContext());
  spillway::populatePlanningPipeline(pm);
  note("partitioning the step into layers for the plan");
  if (failed(pm.run(*copy)))
    return 1;
  spillwayc::PlanReport r;
  std::string error;
  auto summary = summarizeIteration(*copy, error, &r.totals);
  if (!summary)
    return fail("--report: " + error);
  r.summary = std::move(*summary);
  if (microbatches.getNumOccurrences() && r.summary.batchSize &&
      r.summary.batchSize % microbatches)
    return fail(llvm::formatv("--microbatches {0} does not divide the batch "
                              "of {1} (the leading dimension of the step's "
                              "inputs)",
                              unsigned(microbatches), r.summary.batchSize));
  r.model = inputPath;
  r.profilePath = in.profilePath;
  r.profile = in.profile;
  r.budgets = in.budgets;
  r.ssdUnlimited = in.ssdUnlimited;
  r.offloadPlan = offloadRequested();
  copy->walk([&](spillway::train::FoamOp f) {
    r.foamParams.push_back(f.getParam().str());
    r.foamLevel = int64_t(f.getLevelAttr().getInt());
  });
  // The executor cannot yet move a layer's parameters when another layer
  // reads them too (tied weights, shared buffers): an offload plan keeps
  // the parameters on the GPU then unless --place says otherwise (which
  // sched-insert-transfers refuses, naming the parameter).
  SearchSpace space = in.space;
  if (r.offloadPlan && !space.pinned[int(TensorClass::Params)])
    if (auto layers = (*copy)->getAttrOfType<ArrayAttr>("train.layers"))
      if (llvm::any_of(layers, [](Attribute a) {
            auto d = dyn_cast<DictionaryAttr>(a);
            return d && (d.get("uses") || d.get("shared"));
          })) {
        note("the model shares parameters between layers: the offload plan "
             "keeps params on the GPU");
        space.pinned[int(TensorClass::Params)] = Tier::GPU;
      }
  note("searching the plans");
  r.choice = choose(r.summary, space, in.budgets, in.profile);
  if (!r.choice.best.valid) {
    // Say why with the first candidate of the space under the pins.
    Candidate c;
    c.order = in.space.orders.front();
    c.microBatches = in.space.microBatches.front();
    c.overlap = in.space.overlaps.front();
    for (int k = 0; k < kNumTensorClasses; ++k)
      if (in.space.pinned[k])
        c.placement.tier[k] = *in.space.pinned[k];
    CostEstimate e = estimate(r.summary, c, in.budgets, in.profile);
    return fail("no valid plan: " +
                (e.valid ? r.choice.best.invalidReason : e.invalidReason));
  }
  if (report)
    spillwayc::printReport(r, llvm::outs());
  if (!reportJson.empty()) {
    std::string err;
    auto out = openOutputFile(reportJson, &err);
    if (!out)
      return fail(err);
    out->os() << spillwayc::reportToJSON(r);
    out->keep();
  }
  const CostEstimate &best = r.choice.best;
  chosenOrder = orderName(best.candidate.order);
  if (chosen)
    *chosen = best;
  if (ranked)
    *ranked = r.choice.ranked;
  // An offload plan for an executable: the planner's exact arenas decide
  // what fits (main tries the ranked plans), not these estimates.
  if (!best.fits && ranked && offloadRequested() && !outputPath.empty()) {
    note("the cost model's estimates fit no plan in the budgets; the "
         "planner checks the ranked plans' exact arenas");
    return 0;
  }
  if (!best.fits) {
    const auto &need = best.neededBytes;
    return fail(
        "plan over budget: no plan fits gpu " +
        bytesAndGiB(in.budgets.gpuBytes) + ", host " +
        bytesAndGiB(in.budgets.hostBytes) + "; the closest (" +
        best.candidate.str() + ") needs at least gpu " +
        bytesAndGiB(need[int(Tier::GPU)]) + ", host " +
        bytesAndGiB(need[int(Tier::Host)]) + ", ssd " +
        bytesAndGiB(need[int(Tier::SSD)]));
  }
  return 0;
}
} // namespace

static int compilerMain(int argc, char **argv) {
  cl::HideUnrelatedOptions(category);
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "spillwayc (Spillway) built with LLVM/MLIR " LLVM_VERSION_STRING "\n";
  });
  cl::ParseCommandLineOptions(
      argc, argv,
      "spillwayc: compiles a model and its loss (ONNX or the train dialect) to "
      "a standalone training executable.\n\n"
      "  spillwayc mlp.onnx -o mlp [--bind batch=64] [--lr 1e-2]\n"
      "  ./mlp --input x=x.npy --input y=y.npy --steps 300\n\n"
      "The executable reads its initial weights from EXE.weights, written "
      "beside it.\n\n"
      "Schedule: --microbatches M and --schedule horizontal|snake|auto make "
      "the executable\ntrain each step in M micro-batches (M divides the "
      "batch; default 1) with exact gradient\naccumulation, run in that "
      "order; auto (the default) is the cost model's choice with\n--hw "
      "PROFILE.json, snake without.\n\n"
      "With a schedule, --recompute on|off (default on): between a layer's "
      "forward and\nbackward keep only its boundary activations; the backward "
      "recomputes the rest.\n\n"
      "  spillwayc model.onnx -o model --microbatches 4 --schedule snake\n\n"
      "Planning (docs/cost-model.md): --report / --report-json with --hw "
      "PROFILE.json and\n--microbatches, --schedule, --overlap-optimizer, "
      "--gpu-mem, --host-mem, --place, --ssd\nplan one iteration with the "
      "cost model and report it. --overlap-optimizer F also shapes the "
      "executable: the\nupdate of the first F of each layer's parameters runs "
      "just before the layer's next\nforward, the rest right after its "
      "gradient, with the weights of ordinary training.\n\n"
      "  spillwayc model.onnx --hw profiles/cpu-ci.json --report --gpu-mem 1G "
      "--host-mem 8G\n\n"
      "Offload (docs/compiler.md, \"Offload\"): --place CLASS=TIER,..., "
      "--gpu-mem and --host-mem\nwith -o give the executable a plan that "
      "keeps parameters, optimizer state and\ngradients on GPU, pinned host "
      "memory or SSD and moves them per layer; with --hw the\ncost model "
      "places the classes --place leaves open. The executable's --ssd "
      "names the\nswap directories and --stats-json reports the bytes moved "
      "next to the plan's.\n\n"
      "  spillwayc model.onnx -o model --microbatches 4 --schedule snake "
      "--place params=ssd,optimizer=ssd\n"
      "  ./model --input ... --ssd /mnt/nvme0 --stats-json stats.json\n");
  if (!passTiming.empty())
    timing.enable();
  llvm::scope_exit writeTiming([] {
    std::string e;
    if (timing.isEnabled() && !timing.write(passTiming, e))
      llvm::WithColor::error(llvm::errs(), "spillwayc") << e << "\n";
  });

  // The executable's ranges (hyperparams.h), on the text as typed: a value
  // compiled in here is one the executable's flags accept too.
  if (std::string e = parseNumberFlags(); !e.empty())
    return fail(e);
  // An empty budget would read as "no budget given".
  for (auto [name, flag] : {std::pair{"--gpu-mem", &gpuMem},
                            std::pair{"--host-mem", &hostMem}})
    if (flag->getNumOccurrences() && flag->empty())
      return fail(std::string(name) +
                  " '' is not a size (e.g. 512M, 16G, 4096)");
  if (!probeHw.empty()) {
    if (!inputPath.empty() || !outputPath.empty())
      return fail("--probe-hw measures this machine and compiles nothing: "
                  "give it no model and no -o");
    std::string error;
    if (!checkOutputFile("--probe-hw '" + probeHw + "'", probeHw, error))
      return fail(error);
    return probeHardware();
  }
  if (inputPath.empty())
    return fail("no input model given (spillwayc MODEL -o EXE; see --help)");
  // Until the sched passes offload, --ssd only measures and plans; a flag
  // that silently did nothing would mislead.
  const bool planning = planningRequested();
  const bool offload = offloadRequested();
  if (!ssdDirs.empty() && !planning && !offload)
    return fail("--ssd names SSD directories for --probe-hw, --report or an "
                "offload plan (--place, --gpu-mem, --host-mem); alone it "
                "does nothing");
  if (forwardOnly && (placeClasses.getNumOccurrences() ||
                      gpuMem.getNumOccurrences() ||
                      hostMem.getNumOccurrences()))
    return fail("--place, --gpu-mem and --host-mem plan a training "
                "iteration's offload; they do not apply to --forward");
  if (!planning) {
    std::string stray = strayPlanningFlag();
    if (!stray.empty())
      return fail(stray + " plans an iteration: give --report or "
                  "--report-json, or -o EXE with --place / --gpu-mem / "
                  "--host-mem for an executable that follows an offload "
                  "plan");
  }
  if (outputPath.empty() && !planning)
    return fail("no output given: -o EXE");
  if (forwardOnly && (microbatches.getNumOccurrences() ||
                      schedule.getNumOccurrences() ||
                      overlapOptimizerText.getNumOccurrences()))
    return fail("--microbatches, --schedule and --overlap-optimizer shape a "
                "training iteration; they do not apply to --forward");
  if (optimizer != "adamw" && optimizer != "foam")
    return fail("--optimizer '" + optimizer +
                "' is not one of adamw, foam");
  if (target != "cpu" && target != "cuda")
    return fail("--target '" + target + "' is not one of cpu, cuda");
  if (precision.getNumOccurrences() && precision != "fp32" &&
      precision != "bf16")
    return fail("--precision '" + precision + "' is not one of fp32, bf16");
  if (target == "cpu" && precision == "bf16")
    return fail("--precision bf16 needs --target cuda (the CPU kernels "
                "compute in fp32)");
#ifndef SPILLWAY_BUILD_CUDA_LIB
  if (target == "cuda" && emit == EmitKind::Exe)
    return fail("--target cuda: this spillwayc was built without the CUDA "
                "backend (no nvcc when it was configured); rebuild it where "
                "the CUDA toolkit is installed, or use --emit obj and link "
                "with a CUDA runtime library yourself");
#endif
  if (optimizer != "foam" &&
      (foamLevel.getNumOccurrences() || foamAlphaText.getNumOccurrences()))
    return fail("--foam-level and --foam-alpha need --optimizer foam");
  if (foamLevel < 0 || foamLevel > 16)
    return fail("--foam-level " + std::to_string(int64_t(foamLevel)) +
                " is outside [0, 16]");
  if (optimizer == "foam" && overlapOptimizer > 0)
    return fail("--overlap-optimizer with --optimizer foam: FOAM's folded "
                "state is kept per block of a row, so its updates are not "
                "split between iterations; use --overlap-optimizer 0 (or "
                "--optimizer adamw)");
  if (microbatches.getNumOccurrences() && microbatches == 0)
    return fail("--microbatches must be at least 1");
  if (schedule != "horizontal" && schedule != "snake" && schedule != "auto")
    return fail("--schedule '" + schedule +
                "' is not one of horizontal, snake, auto");
  const bool scheduled = scheduleRequested() || offload;
  if (recompute != "on" && recompute != "off")
    return fail("--recompute '" + recompute + "' is not one of on, off");
  if (recompute.getNumOccurrences() && !scheduled)
    return fail("--recompute applies to a scheduled step: give "
                "--microbatches M (M > 1), --schedule or an offload plan");
  // The executable's schedule: M (default 1) and the order; auto is the
  // cost model's choice with --hw (below), snake without.
  const int64_t exeMicrobatches =
      microbatches.getNumOccurrences() ? int64_t(microbatches) : 1;
  std::string exeOrder =
      schedule == "auto" ? std::string("snake") : schedule.getValue();
  std::optional<PlanningInputs> planningInputs;
  if (planning || (scheduled && schedule == "auto" && !hwProfile.empty()) ||
      (offload && !hwProfile.empty())) {
    if (forwardOnly)
      return fail("--report plans a training iteration; it does not apply "
                  "to --forward");
    std::string error;
    planningInputs = readPlanningInputs(error);
    if (!planningInputs)
      return fail(error);
    if (offload) {
      // The plan the executable follows: its own M and overlap. Without
      // recompute the backward reads forward intermediates the plan does
      // not move: activations stay on the GPU unless pinned (then
      // sched-place says what to do).
      using namespace spillway::schedule;
      planningInputs->space.microBatches = {unsigned(exeMicrobatches)};
      planningInputs->space.overlaps = {double(overlapOptimizer)};
      if (recompute != "on" &&
          !planningInputs->space.pinned[int(TensorClass::Activations)])
        planningInputs->space.pinned[int(TensorClass::Activations)] = Tier::GPU;
    }
  }

  DialectRegistry registry;
  spillway::registerAllDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // A diagnostic names the op and its location; dumping the whole module in
  // generic form would bury it for real models.
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagHandler(sourceMgr, &context);

  if (!llvm::sys::fs::exists(inputPath))
    return fail("input '" + inputPath + "' does not exist");
  if (!outputPath.empty() && llvm::sys::fs::exists(outputPath) &&
      llvm::sys::fs::equivalent(inputPath, outputPath))
    return fail("-o '" + outputPath + "' would overwrite the input model");

  std::string error;
  // Report only (no -o), or text to stdout (-o -): the importer's weights go
  // to a temporary file (not to "-.weights" in the working directory).
  llvm::SmallString<128> tempWeights;
  const bool toStdout = outputPath == "-";
  if (outputPath.empty() || toStdout)
    if (std::error_code ec = llvm::sys::fs::createTemporaryFile(
            "spillway-report", "weights", tempWeights))
      return fail("cannot create a temporary file: " + ec.message());
  llvm::FileRemover removeTempWeights(tempWeights);
  // The outputs are written under temporary names and renamed at the end
  // (PendingOutputs): checked here, before any work, is that they can be.
  const bool writesFiles = !outputPath.empty() && !toStdout;
  if (writesFiles) {
    if (llvm::sys::fs::is_directory(outputPath)) {
      StringRef dir = StringRef(outputPath).rtrim('/');
      return fail("-o '" + outputPath + "' is a directory; name the file to "
                  "write, e.g. -o " + (dir.empty() ? "" : dir) + "/model");
    }
    if (!checkOutputFile("-o '" + outputPath + "'", outputPath, error) ||
        !checkOutputFile("the weights file '" + weightsPathFor(outputPath) +
                             "' (beside -o)",
                         weightsPathFor(outputPath), error))
      return fail(error);
  }
  if (!reportJson.empty() && reportJson != "-" &&
      !checkOutputFile("--report-json '" + reportJson + "'", reportJson,
                       error))
    return fail(error);
  PendingOutputs pending;
  const std::string weightsFinal = writesFiles ? weightsPathFor(outputPath)
                                               : std::string(tempWeights);
  const std::string weightsOut =
      writesFiles ? pending.add(weightsFinal) : weightsFinal;
  // The executable, or what --emit names.
  const std::string outputOut =
      writesFiles ? pending.add(outputPath) : std::string(outputPath);
  bool isONNX = hasExtension(inputPath, ".onnx") ||
                hasExtension(inputPath, ".onnxtext");
  OwningOpRef<ModuleOp> module;
  if (isONNX) {
    spillway::ONNXImportOptions importOptions;
    for (const std::string &b : binds)
      if (failed(spillway::parseDimBindings(b, importOptions.dimBindings,
                                            error)))
        return fail(error);
    if (maxInlineConstantElements < 1)
      return fail("--max-inline-constant-elements must be positive");
    importOptions.maxInlineConstantElements = maxInlineConstantElements;
    importOptions.forwardOnly = forwardOnly;
    importOptions.constantInitializers.assign(constantInitializers.begin(),
                                              constantInitializers.end());
    importOptions.weightsPath = weightsOut;
    importOptions.weightsAttr =
        llvm::sys::path::filename(weightsFinal).str();
    note("importing " + inputPath);
    auto importing = timing.phase("import-onnx");
    module = spillway::importONNXFile(inputPath, context, importOptions);
    if (!module)
      return 1;
  } else if (hasExtension(inputPath, ".mlir")) {
    if (!binds.empty() || !constantInitializers.empty())
      return fail("--bind and --constant-initializers apply to ONNX inputs; "
                  "an MLIR model already has static shapes and parameters");
    note("parsing " + inputPath);
    if (auto buf = llvm::MemoryBuffer::getFile(inputPath, /*IsText=*/true))
      if (!spillway::checkNesting((*buf)->getBuffer(), inputPath,
                                  spillway::CommentStyle::MLIR, error))
        return fail(error);
    module = parseSourceFile<ModuleOp>(inputPath, sourceMgr, &context);
    if (!module)
      return 1;
    if (!outputPath.empty() &&
        failed(copyWeightsOfMLIR(*module, inputPath, weightsOut, error)))
      return fail(error);
    if (forwardOnly)
      for (auto fn : module->getOps<func::FuncOp>())
        fn->setAttr(spillway::train::kForwardOnlyAttrName,
                    UnitAttr::get(&context));
    module->getOperation()->setAttr(
        spillway::train::kWeightsAttrName,
        StringAttr::get(&context, llvm::sys::path::filename(weightsFinal)));
  } else {
    return fail("cannot tell the format of '" + inputPath +
                "': expected a .onnx, .onnxtext or .mlir file");
  }

  spillway::TrainingPipelineOptions trainOptions;
  trainOptions.fusePatterns = fusePatterns;
  trainOptions.optimizer = optimizer;
  trainOptions.lr = lr;
  trainOptions.beta1 = beta1;
  trainOptions.beta2 = beta2;
  trainOptions.eps = eps;
  trainOptions.weightDecay = weightDecay;
  trainOptions.foamLevel = foamLevel;
  trainOptions.foamAlpha = foamAlpha;

  {
    PassManager pm(&context);
    timing.attach(pm);
    if (forwardOnly) {
      spillway::populateForwardPipeline(pm, trainOptions);
      note("fusing patterns");
    } else {
      spillway::populateTrainingPipeline(pm, trainOptions);
      note("fusing patterns, running autodiff and attaching " + optimizer);
    }
    if (failed(pm.run(*module)))
      return 1;
  }

  spillway::schedule::CostEstimate chosenPlan;
  std::vector<spillway::schedule::CostEstimate> rankedPlans;
  if (planningInputs) {
    std::string chosenOrder;
    if (int rc = planAndReport(*module, *planningInputs, chosenOrder,
                               &chosenPlan, &rankedPlans))
      return rc;
    if (outputPath.empty())
      return 0;
    if (schedule == "auto")
      exeOrder = chosenOrder;
  }

  // The offload plan of a candidate: pinned classes as given, the rest from
  // the candidate with --hw, else the GPU.
  auto offloadFor = [&](const spillway::schedule::CostEstimate &plan)
      -> std::optional<spillway::OffloadOptions> {
    using namespace spillway::schedule;
    spillway::OffloadOptions o;
    for (const std::string &entry : placeClasses)
      o.placement += (o.placement.empty() ? "" : ",") + entry;
    if (planningInputs)
      for (TensorClass c : {TensorClass::Params, TensorClass::Optimizer,
                            TensorClass::Gradients, TensorClass::Activations})
        if (!planningInputs->space.pinned[int(c)] ||
            c == TensorClass::Activations)
          if (!llvm::any_of(placeClasses, [&](const std::string &e) {
                return StringRef(e).split('=').first.trim() ==
                       tensorClassName(c);
              }))
            o.placement += std::string(o.placement.empty() ? "" : ",") +
                           tensorClassName(c) + "=" +
                           tierName(plan.candidate.placement[c]);
    auto size = [&](cl::opt<std::string> &flag) -> std::optional<uint64_t> {
      if (flag.empty())
        return uint64_t(0);
      return parseSize(flag);
    };
    auto g = size(gpuMem), h = size(hostMem);
    if (!g || !h)
      return std::nullopt;
    o.gpuBytes = *g;
    o.hostBytes = *h;
    return o;
  };
  std::optional<spillway::OffloadOptions> offloadOptions;
  if (offload) {
    if (parseSize(gpuMem) == std::nullopt && !gpuMem.empty())
      return fail("--gpu-mem '" + gpuMem + "' is not a size (e.g. 512M, 16G)");
    if (parseSize(hostMem) == std::nullopt && !hostMem.empty())
      return fail("--host-mem '" + hostMem +
                  "' is not a size (e.g. 512M, 16G)");
    offloadOptions = offloadFor(chosenPlan);
  }

  // With --hw the cost model ranks the plans and the planner has the last
  // word on fitting: its arenas (homes, transfer slots, alignment) are
  // exact where the model's peaks are estimates. Take the first ranked plan
  // whose schedule the budgets hold; stop at the first that fails for
  // another reason (its error is the answer).
  bool planned = false; // the schedule pipeline already ran on `module`
  if (scheduled && offloadOptions && planningInputs && rankedPlans.size() > 1 &&
      (gpuMem.getNumOccurrences() || hostMem.getNumOccurrences())) {
    constexpr size_t kMaxPlans = 32;
    for (size_t i = 0; i < rankedPlans.size() && i < kMaxPlans; ++i) {
      const auto &plan = rankedPlans[i];
      auto o = offloadFor(plan);
      std::string order = schedule == "auto"
                              ? spillway::schedule::orderName(
                                    plan.candidate.order)
                              : exeOrder;
      OwningOpRef<ModuleOp> trial(module->clone());
      PassManager pm(&context);
      timing.attach(pm);
      spillway::populateSchedulePipeline(pm, exeMicrobatches, order,
                                         overlapOptimizer, recompute == "on",
                                         &*o, emit != EmitKind::MLIR);
      bool overBudget = false;
      LogicalResult ran = failure();
      {
        ScopedDiagnosticHandler quiet(&context, [&](Diagnostic &d) {
          overBudget = overBudget ||
                       StringRef(d.str()).contains("plan over budget");
          return success();
        });
        ran = pm.run(*trial);
      }
      if (succeeded(ran)) {
        module = std::move(trial);
        planned = true;
        if (i > 0) {
          note(llvm::formatv("the planner's arenas for the cost model's "
                             "first {0} plan(s) exceed the budgets; taking "
                             "{1}",
                             i, plan.candidate.str()));
          chosenPlan = plan;
          offloadOptions = o;
          exeOrder = order;
        }
        break;
      }
      if (!overBudget)
        break; // another error: the plain run below reports it
    }
  }

  if (scheduled) {
    PassManager pm(&context);
    timing.attach(pm);
    spillway::populateSchedulePipeline(
        pm, exeMicrobatches, exeOrder, overlapOptimizer, recompute == "on",
        offloadOptions ? &*offloadOptions : nullptr,
        /*outlineTasks=*/emit != EmitKind::MLIR);
    if (offloadOptions)
      note("offload plan: " + (offloadOptions->placement.empty()
                                   ? std::string("everything on the GPU")
                                   : offloadOptions->placement));
    note(llvm::formatv("scheduling the step: {0} micro-batch(es), {1} "
                       "order{2}, optimizer overlap {3}, {4}",
                       exeMicrobatches, exeOrder,
                       schedule != "auto"   ? ""
                       : planningInputs ? " (the cost model's choice)"
                                        : " (auto without --hw)",
                       llvm::format("%g", double(overlapOptimizer)),
                       recompute == "on" ? "recompute on (the backward keeps "
                                           "only layer-boundary activations)"
                                         : "recompute off"));
    if (!planned && failed(pm.run(*module)))
      return fail(
          offloadOptions
              ? llvm::formatv("cannot plan the step in {0} micro-batch(es) "
                              "in the {1} order with the offload plan "
                              "'{2}' (--place, --gpu-mem, --host-mem, "
                              "--microbatches, --schedule): see above",
                              exeMicrobatches, exeOrder,
                              offloadOptions->placement)
                    .str()
              : llvm::formatv("cannot train the step in {0} micro-batch(es) "
                              "in the {1} order (--microbatches, "
                              "--schedule): see above",
                              exeMicrobatches, exeOrder)
                    .str());
  }

  if (offload) {
    auto buffers = (*module)->getAttrOfType<DictionaryAttr>("sched.buffers");
    if (!buffers)
      return fail("internal error: the offload plan has no buffers");
    if (!ssdDirs.empty())
      (*module)->setAttr("sched.ssd_dirs",
                         StringAttr::get(&context, llvm::join(ssdDirs, ",")));
    auto links = buffers.getAs<DictionaryAttr>("bytes_per_iteration");
    auto get = [&](DictionaryAttr d, StringRef k) {
      return d.getAs<IntegerAttr>(k).getInt();
    };
    note(llvm::formatv("offload plan: gpu {0} bytes, host {1} bytes, ssd {2} "
                       "bytes; per iteration ssd_read {3}, ssd_write {4}, "
                       "h2d {5}, d2h {6}",
                       get(buffers, "gpu_bytes"), get(buffers, "host_bytes"),
                       get(buffers, "ssd_bytes"), get(links, "ssd_read"),
                       get(links, "ssd_write"), get(links, "h2d"),
                       get(links, "d2h")));
    // The transfers the passes wrote must move what the cost model
    // predicted for the same plan, byte for byte.
    if (planningInputs) {
      using namespace spillway::schedule;
      Builder b(&context);
      (*module)->setAttr(
          "sched.prediction",
          b.getDictionaryAttr(
              {b.getNamedAttr("iteration_s",
                              b.getF64FloatAttr(chosenPlan.iterationSec)),
               b.getNamedAttr("bound",
                              b.getStringAttr(boundName(chosenPlan.bound)))}));
      auto model = buffers.getAs<DictionaryAttr>("model_bytes");
      const auto &e = chosenPlan.bytes;
      const double want[4] = {e.ssdRead, e.ssdWrite, e.h2d, e.d2h};
      const char *keys[4] = {"ssd_read", "ssd_write", "h2d", "d2h"};
      for (int i = 0; i < 4; ++i)
        if (double(get(model, keys[i])) != want[i])
          return fail(llvm::formatv(
              "internal error: the offload plan moves {0} bytes over {1} per "
              "iteration but the cost model predicts {2:f0} for {3}",
              get(model, keys[i]), keys[i], want[i],
              chosenPlan.candidate.str()));
    }
  }

  if (emit == EmitKind::MLIR) {
    auto out = openOutputFile(outputOut, &error);
    if (!out)
      return fail(error);
    module->print(out->os());
    out->os().flush();
    if (out->os().has_error())
      return fail("cannot write '" + outputPath +
                  "': " + out->os().error().message());
    out->keep();
    out.reset();
    if (failed(pending.commit(error)))
      return fail(error);
    return 0;
  }

  PassManager lower(&context);
  timing.attach(lower);
  const std::string precisionName =
      precision.getNumOccurrences() ? std::string(precision)
                                    : target == "cuda" ? "bf16" : "fp32";
  spillway::populateLowerToRuntimePipeline(lower, target, precisionName);
  note("lowering to runtime calls");
  if (failed(lower.run(*module)))
    return 1;

  llvm::LLVMContext llvmContext;
  auto translateStart = spillway::CompileTiming::now();
  auto llvmModule =
      spillway::translateToHostLLVMIR(*module, llvmContext, error);
  timing.record("translate-to-llvm-ir", translateStart);
  if (!llvmModule)
    return fail(error);
  if (emit == EmitKind::LLVM) {
    auto out = openOutputFile(outputOut, &error);
    if (!out)
      return fail(error);
    llvmModule->print(out->os(), nullptr);
    out->os().flush();
    if (out->os().has_error())
      return fail("cannot write '" + outputPath +
                  "': " + out->os().error().message());
    out->keep();
    out.reset();
    if (failed(pending.commit(error)))
      return fail(error);
    return 0;
  }

  // An executable's object file: a scratch file beside it, removed on every
  // way out (the executable has it linked in) and, after a SIGKILL, by the
  // next compile to the same -o.
  std::string objectPath = emit == EmitKind::Exe
                               ? pending.scratch(outputPath, ".o")
                               : outputOut;
  note("emitting object code");
  if (auto codegen = timing.phase("llvm-codegen");
      failed(spillway::emitObjectFile(*llvmModule, objectPath, error)))
    return fail(error);
  if (emit == EmitKind::Obj) {
    if (failed(pending.commit(error)))
      return fail(error);
    return 0;
  }

  std::string runtime = findRuntimeLibrary(argv[0]);
  std::string cudaRuntime;
  if (target == "cuda")
    cudaRuntime = findCudaLibrary(runtime);
  note("linking " + outputPath + " with " + runtime +
       (cudaRuntime.empty() ? "" : " and " + cudaRuntime));
  LogicalResult linked = [&] {
    auto link = timing.phase("link");
    return spillway::linkExecutable(objectPath, runtime, outputOut, error,
                                    cudaRuntime);
  }();
  if (failed(linked))
    return fail(error);
  if (failed(pending.commit(error)))
    return fail(error);
  note("wrote " + outputPath + " and its initial weights " + weightsOut);
  return 0;
}

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  // The parsers, the verifier and the passes recurse once per nesting level
  // of the model: they run on a thread with room for kMaxNesting levels.
  return spillway::runWithLargeStack(
      [&] { return compilerMain(argc, argv); });
}
