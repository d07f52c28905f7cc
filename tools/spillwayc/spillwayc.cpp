//===- spillwayc.cpp - compile a model and its loss to a training executable -===//
//
// Parses flags and calls the pipelines in lib/Pipelines: import (ONNX) or
// parse (MLIR), the training pipeline, lowering to runtime calls, LLVM IR,
// object code, link. Nothing here transforms IR itself.
//
//===----------------------------------------------------------------------===//

#include "OutputFiles.h"
#include "ProbeHardware.h"
#include "Report.h"
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
#include "spillway/Pipelines/Planning.h"
#include "spillway/Pipelines/PredictedTrace.h"
#include "spillway/Support/CompileTiming.h"
#include "spillway/Support/OutputFile.h"
#include "spillway/Support/ToolMain.h"
#include "spillway/Target/ONNX/ImportONNX.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

// The runtime's flag ranges (plain C++, no MLIR): a value compiled in is
// one the executable's flags accept.
#include "spillway/runtime/hyperparams.h"
#include "spillway/runtime/zero_shard.h"

#include <tuple>

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
cl::opt<std::string> stateDictPrefix(
    "state-dict-prefix",
    cl::desc("What the exported module put before the names of the model's "
             "own state_dict, e.g. 'model.' for a forward(ids, labels) -> "
             "loss wrapper around an HF model: --save writes the names "
             "without it. Found by itself in dynamo exports; TorchScript "
             "exports name no module classes, so give it there ('' for none)"),
    cl::value_desc("PREFIX"), cl::init("\x01"), cl::cat(category));
cl::opt<std::string> exportedStateDict(
    "exported-state-dict",
    cl::desc("The exported model's own state_dict as a .safetensors file "
             "(model.save_pretrained(DIR)'s DIR/model.safetensors, or "
             "safetensors.torch.save_file(model.state_dict(), FILE)) before "
             "training: a parameter torch.onnx.export's optimizer folded into "
             "a constant of some of its rows (GPT-2's position table at "
             "arange(seq)) is restored whole from it, so it trains and "
             "--save writes it as torch's state_dict has it"),
    cl::value_desc("FILE"), cl::cat(category));
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
cl::opt<std::string> gradClipText(
    "grad-clip", cl::init("0"),
    cl::desc("Global gradient-norm clipping, as torch.nn.utils."
             "clip_grad_norm_(params, F) before each AdamW step: the norm of "
             "all gradients is a barrier every update follows (with "
             "--overlap-optimizer only the deferred part overlaps, in the "
             "next forward; an offload plan takes each layer's norms where "
             "its gradient is complete, moving no more bytes). F is the "
             "executable's default max_norm (its --grad-clip overrides it); "
             "0: off (default). Not with --optimizer foam"),
    cl::value_desc("F"), cl::cat(category));
cl::opt<std::string> target(
    "target", cl::init("cpu"),
    cl::desc("Backend the executable runs on: cpu, or cuda (NVIDIA GPUs, "
             "sm_90 and newer; needs a spillwayc built with the CUDA "
             "toolkit). A cuda executable still runs on the CPU with "
             "--device cpu"),
    cl::cat(category));
cl::opt<std::string> precision(
    "precision",
    cl::desc("Numerics: fp32; bf16 (products only: GEMMs and attention "
             "take bf16 inputs and accumulate in fp32, every tensor stays "
             "fp32; --target cuda only); or bf16-mixed (as PyTorch "
             "Lightning's: the working weights and every activation stored "
             "as bf16, each op computing in fp32 from them, fp32 master "
             "weights, gradients accumulated in fp32, fp32 optimizer state "
             "unless --optimizer-state-dtype bf16; docs/compiler.md, "
             "\"Precision\"). Default: bf16 for cuda, fp32 for cpu"),
    cl::cat(category));
cl::opt<std::string> optimizerStateDtype(
    "optimizer-state-dtype", cl::init("fp32"),
    cl::desc("How the optimizer stores its moments (AdamW's and FOAM's m "
             "and v): fp32 (default), or bf16: 2 bytes per element instead "
             "of 4, rounded to nearest even as they are stored (the update "
             "computes in fp32), which halves the optimizer state's memory "
             "and its SSD traffic. With any --precision; docs/compiler.md, "
             "\"Optimizer state dtype\""),
    cl::value_desc("fp32|bf16"), cl::cat(category));
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
cl::opt<bool> copyWeights(
    "copy-weights",
    cl::desc("Write EXE.weights as the weights' bytes themselves, copied "
             "(streamed) from the model's external data files. Without it, "
             "a model whose parameters are ONNX external data gets a weights "
             "map: EXE.weights names those files (absolute paths, with their "
             "size, mtime and a checksum) and the executable reads them in "
             "place; they must stay where and as they are"),
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
             "peak memory per tier, and for a plan that writes to SSD its "
             "bytes written per iteration and per trained token (SSD wear; "
             "--ssd-tbw adds the drive's lifetime). The executable follows "
             "a placement only "
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
cl::opt<std::string> reportTrace(
    "report-trace",
    cl::desc("With -o and an offload plan (--place, --gpu-mem, --host-mem) "
             "and --hw: write the plan's predicted iteration as a Chrome "
             "trace, in the lanes of the executable's --trace (compute, h2d, "
             "d2h, ssd read, ssd write, cpu optimizer 0), to open beside a "
             "measured one in Perfetto (docs/cost-model.md, \"The predicted "
             "trace\")"),
    cl::value_desc("FILE"), cl::cat(category));
cl::opt<std::string> ssdTbwText(
    "ssd-tbw",
    cl::desc("With --report / --report-json: the SSDs' rated endurance in "
             "terabytes written (TBW, 10^12 bytes, e.g. 600). The report "
             "adds how long each drive lasts writing the chosen plan's SSD "
             "bytes at its predicted speed, training 24/7 (the bytes per "
             "iteration and per trained token are reported without it)"),
    cl::value_desc("TB"), cl::cat(category));
cl::opt<unsigned> ranks(
    "ranks", cl::init(1),
    cl::desc("With --hw: cost the plan for N data-parallel ranks (the "
             "executable under mpirun -np N), each with the budgets and the "
             "step's batch: the report adds the network link, the bytes "
             "each rank sends per iteration to average the gradients and "
             "its time (the profile's \"network\" rate). The executable "
             "runs under any number of ranks (default 1), except with "
             "--zero 1 and an offload plan: its optimizer blocks are cut "
             "for N ranks (no --hw needed), and it runs under N only"),
    cl::value_desc("N"), cl::cat(category));
cl::opt<unsigned> zeroStage(
    "zero", cl::init(0),
    cl::desc("With --ranks N: cost the ranks running the executable with "
             "--zero 1 (ZeRO stage 1): each keeps the AdamW state of 1/N "
             "of every parameter's elements; the gradients reduce-scattered "
             "and the updated values all-gathered. With an offload plan "
             "(--place, --gpu-mem, --host-mem) the optimizer blocks hold one "
             "rank's shards (and with --precision bf16-mixed the master "
             "blocks one rank's shard of the f32 masters, the bf16 working "
             "copies all-gathered) and the executable runs under mpirun -np "
             "N only (AdamW, fp32 or bf16 state); 2 (ZeRO stage 2, offload "
             "plans only): the gradient blocks hold one rank's shard too, "
             "each layer's gradients reduce-scattered on the GPU as its "
             "backward completes, so only the shard crosses PCIe, host "
             "memory and the SSD; 0: the whole state on every rank "
             "(default)"),
    cl::value_desc("0|1|2"), cl::cat(category));
cl::opt<unsigned> microbatches(
    "microbatches",
    cl::desc("Micro-batches per iteration (must divide the batch). The "
             "executable trains in M micro-batches with exact gradient "
             "accumulation (default 1: the whole batch, and an offload "
             "plan's with -o); --report's search fixes M (default: "
             "searched over 1, 2, 4, 8, 16)"),
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
             "fixes F (default: searched over 0, 0.25, 0.5, 0.75, 1). With "
             "--grad-clip every update waits for the norm after the last "
             "backward, and only the deferred F moves"),
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
             "ssd (master: the fp32 master weights of --precision "
             "bf16-mixed, whose params are bf16; on the GPU exactly when "
             "optimizer is, by default with it). A class may be split by "
             "layer between host and ssd (params and activations may keep "
             "layers on the gpu too): "
             "CLASS[BEGIN:END]=TIER pins layers BEGIN..END-1 (spillwayc "
             "--report lists them), CLASS=host:0.75,ssd:0.25 (not for "
             "activations) puts the first "
             "layers holding 3/4 of its bytes on host and the rest on SSD. "
             "A layer's params, optimizer or master block may be cut: "
             "CLASS[LAYER]=host:0.4,ssd:0.6 puts its first 40% on host, the "
             "rest on SSD (give the class's other layers a tier too, e.g. "
             "optimizer=ssd). "
             "The planner decides the rest (with --hw; else the GPU). "
             "With -o the executable follows this offload plan "
             "(activations off the GPU need --recompute on, the default)"),
    cl::value_desc("CLASS=TIER,..."), cl::cat(category));
cl::opt<std::string> splitPlacement(
    "split-placement",
    cl::desc("on (default): the planner may split a class by layer between "
             "host and SSD, filling the host budget with the blocks that "
             "save the most SSD time per byte and cutting one block between "
             "them for the rest (docs/cost-model.md, \"Placement by "
             "layer\"); off: every class on one tier"),
    cl::value_desc("on|off"), cl::init("on"), cl::cat(category));
cl::opt<bool> verbose("v", cl::desc("Print each stage as it runs"),
                      cl::cat(category));
cl::opt<bool> printPipeline(
    "print-pipeline",
    cl::desc("Print (to stderr) the spillway-opt command that schedules this "
             "compile's training step as it does: spillway-opt "
             "--spillway-schedule=\"...\" STEP.mlir, where STEP.mlir is this "
             "compile with --emit=mlir and without --microbatches, "
             "--schedule, --overlap-optimizer, --recompute and the offload "
             "flags"),
    cl::cat(category));

// The numeric flags' values, parsed by parseNumberFlags().
double lr, beta1, beta2, eps, weightDecay, foamAlpha, probeSeconds,
    overlapOptimizer, ssdTbw, gradClip;

namespace hp = spillway::hyperparams;
// Not optimizer hyper-parameters, but checked by the same strict parser.
constexpr hp::Range kOverlapOptimizer{"", "--overlap-optimizer", 0.0, 1.0,
                                      false, false, /*float32=*/false};
// A probe of a minute per measurement is already far past stable numbers;
// an unbounded one (inf, 1e300) would never end.
constexpr hp::Range kProbeSeconds{"", "--probe-seconds", 0.0, 60.0, true,
                                  false, /*float32=*/false};

// A rating past a zettabyte is a typo, not a drive.
constexpr hp::Range kSsdTbw{"", "--ssd-tbw", 0.0, 1e9, true, false,
                            /*float32=*/false};

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
                  &overlapOptimizer},
                 {&hp::kGradClip, &gradClipText, &gradClip}};
  for (const auto &[range, text, value] : flags)
    if (std::string e = hp::parse_flag(*range, *text, *value); !e.empty())
      return e;
  if (ssdTbwText.getNumOccurrences())
    if (std::string e = hp::parse_flag(kSsdTbw, ssdTbwText, ssdTbw);
        !e.empty())
      return e + " (the SSD's rated endurance in terabytes written, from its "
                 "data sheet, e.g. 600)";
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

bool planningRequested() { return report || !reportJson.empty(); }

/// --place, --gpu-mem or --host-mem (an offload plan's flags).
bool placementGiven() {
  return placeClasses.getNumOccurrences() || gpuMem.getNumOccurrences() ||
         hostMem.getNumOccurrences();
}

/// --place, --gpu-mem or --host-mem with an executable to build: the step
/// gets an offload plan (spillway::planOffload).
bool offloadRequested() {
  return !outputPath.empty() && !forwardOnly && placementGiven();
}

/// --zero 1 --ranks N (N > 1) with an offload plan's flags: its optimizer
/// blocks hold one rank's shards (train.optimizer_state_shards), in the
/// executable and in the report.
bool shardedBlocksRequested() {
  return zeroStage >= 1 && ranks > 1 && !forwardOnly && placementGiven();
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
      {"--place", std::addressof(placeClasses)},
      {"--split-placement", &splitPlacement}};
  if (hwProfile.getNumOccurrences() &&
      !(scheduleRequested() && schedule == "auto") && !offloadRequested())
    return "--hw";
  for (auto [name, opt] : flags)
    if (opt->getNumOccurrences() && !offloadRequested())
      return name;
  return {};
}

/// A budget flag's bytes, when given; false with the message in `error`
/// when it is not a size (`examples` for the message).
bool readBudget(cl::opt<std::string> &flag, const char *name,
                const char *examples, std::optional<uint64_t> &bytes,
                std::string &error) {
  if (flag.empty())
    return true;
  bytes = parseSize(flag);
  if (!bytes)
    error = std::string(name) + " '" + flag + "' is not a size (e.g. " +
            examples + ")";
  return bool(bytes);
}

int writeReportJson(const spillwayc::PlanReport &r);

/// --report and --report-json for the plans `search` ranked; `r` is the
/// report as written (an offload compile's JSON waits for its plan:
/// planAndSchedule writes it).
int writeReport(const spillway::PlanSearch &search,
                const spillway::PlanSpace &space, spillwayc::PlanReport &r) {
  r.summary = search.summary;
  r.totals = search.totals;
  r.choice = search.choice;
  r.foamParams = search.foamParams;
  r.foamLevel = search.foamLevel;
  r.model = inputPath;
  r.profilePath = space.profilePath;
  r.profile = space.profile;
  r.budgets = space.budgets;
  r.ssdUnlimited = space.ssdUnlimited;
  r.offloadPlan = offloadRequested();
  if (ssdTbwText.getNumOccurrences())
    r.ssdTbw = ssdTbw;
  if (report)
    spillwayc::printReport(r, llvm::outs());
  // An offload compile writes the JSON once its plan is known (with the
  // executable's plan where the planner changed the chosen one).
  if (!reportJson.empty() && !offloadRequested())
    return writeReportJson(r);
  return 0;
}

/// --report-json FILE.
int writeReportJson(const spillwayc::PlanReport &r) {
  if (!reportJson.empty()) {
    std::string err;
    if (!spillway::writeOutputFile(
            reportJson,
            [&](llvm::raw_ostream &os) { os << spillwayc::reportToJSON(r); },
            err))
      return fail("--report-json: " + err);
  }
  return 0;
}
/// The products' numerics the lowering gives the target: bf16 (bf16 inputs,
/// fp32 accumulation) or fp32. bf16-mixed multiplies bf16 values: on a GPU,
/// bf16 products; on the CPU, fp32 products of them are the same products,
/// exactly.
std::string productsPrecision() {
  if (!precision.getNumOccurrences() || precision == "bf16-mixed")
    return target == "cuda" ? "bf16" : "fp32";
  return precision;
}

/// --zero 1 --ranks N with an offload plan whose parameters are each small
/// enough to be one rank's whole (the shards are cut at multiples of 64
/// elements, 64 Ki with gradient clipping): every rank would keep the whole
/// state, which the user asked to shard. Said, not refused: the plan runs.
void warnIfNothingSharded(ModuleOp module) {
  const int64_t ranks = spillway::train::optimizerStateShards(module);
  if (ranks <= 1)
    return;
  const int64_t align = spillway::train::optimizerStateShardAlign(module);
  bool sharded = false;
  module.walk([&](Operation *u) {
    if (!spillway::train::isOptimizerUpdate(u))
      return;
    auto p = module.lookupSymbol<spillway::train::ParamOp>(
        spillway::train::getUpdatedParam(u));
    const int64_t n = p ? p.getType().getNumElements() : 0;
    sharded |= spw_zero_shard_slot(n, ranks, align) < n;
  });
  if (!sharded)
    llvm::WithColor::warning(llvm::errs(), "spillwayc")
        << "--zero " << zeroStage << " --ranks " << ranks
        << " shards nothing here: the shards "
        << "are cut at multiples of " << align << " elements"
        << (align == SPW_ZERO_SHARD_ALIGN_CLIPPED
                ? " (--grad-clip: the norm's blocks)"
                : "")
        << " and no parameter is large enough to be cut, so one rank keeps "
        << "each whole and every rank's blocks hold the whole optimizer "
        << "state" << (zeroStage == 2 ? " and gradients" : "")
        << "; compile without --zero " << zeroStage
        << " (the ranks then run --zero 0)\n";
}

/// The planning and schedule flags, each read once, into `planOptions`;
/// with a profile to plan with, `planSpace`. The exit status (0: go on).
int readPlanningFlags(bool planning, bool offload,
                      spillway::PlanningOptions &planOptions,
                      std::optional<spillway::PlanSpace> &planSpace) {
  planOptions.optimizer = optimizer == "foam" ? spillway::OptimizerKind::Foam
                                              : spillway::OptimizerKind::AdamW;
  planOptions.products = productsPrecision() == "bf16"
                             ? spillway::schedule::Precision::BF16
                             : spillway::schedule::Precision::FP32;
  if (microbatches.getNumOccurrences())
    planOptions.microbatches = microbatches;
  if (overlapOptimizerText.getNumOccurrences())
    planOptions.overlap = overlapOptimizer;
  if (ranks < 1 || ranks > 2147483647u)
    return fail("--ranks must be in [1, 2147483647] (the data-parallel "
                "ranks the plan is costed for; MPI numbers ranks with an "
                "int)");
  planOptions.ranks = ranks;
  if (zeroStage > 2)
    return fail("--zero " + std::to_string(zeroStage) +
                ": expected 0 (every rank keeps the whole optimizer state), "
                "1 (ZeRO stage 1: the ranks shard it) or 2 (ZeRO stage 2: an "
                "offload plan's gradient blocks sharded too)");
  planOptions.zero = zeroStage;
  if (std::string e = spillway::validatePlanningOptions(planOptions);
      !e.empty())
    return fail(e);
  if (schedule != "auto") {
    planOptions.order = spillway::schedule::parseOrder(schedule);
    if (!planOptions.order)
      return fail("--schedule '" + schedule +
                  "' is not one of horizontal, snake, auto");
  }
  const bool scheduled = scheduleRequested() || offload;
  if (recompute != "on" && recompute != "off")
    return fail("--recompute '" + recompute + "' is not one of on, off");
  if (recompute.getNumOccurrences() && !scheduled)
    return fail("--recompute applies to a scheduled step: give "
                "--microbatches M (M > 1), --schedule or an offload plan");
  planOptions.recompute = recompute == "on";
  // Without spaces: the pipeline's options (--print-pipeline) read them back.
  planOptions.place.clear();
  for (const std::string &item : placeClasses) {
    std::string compact;
    for (char c : item)
      if (c != ' ' && c != '\t')
        compact += c;
    planOptions.place.push_back(compact);
  }
  if (splitPlacement != "on" && splitPlacement != "off")
    return fail("--split-placement '" + splitPlacement +
                "' is not one of on, off");
  planOptions.splitByLayer = splitPlacement == "on";
  if (splitPlacement.getNumOccurrences() && !hwProfile.getNumOccurrences())
    return fail("--split-placement chooses how the cost model places "
                "classes: give --hw PROFILE.json (without it --place alone "
                "places them, split as it says)");
  planOptions.offload = offload;
  planOptions.ssdDirs.assign(ssdDirs.begin(), ssdDirs.end());
  // An executable is compiled from the outlined step; --emit mlir prints
  // every op of it.
  planOptions.outlineTasks = emit != EmitKind::MLIR;
  planOptions.instrument = [](PassManager &pm) { timing.attach(pm); };
  // With a profile the cost model plans: the report, the order of a
  // --schedule auto, the tiers an offload plan leaves open.
  const bool costModel =
      planning || (scheduled && schedule == "auto" && !hwProfile.empty()) ||
      (offload && !hwProfile.empty());
  if (costModel && forwardOnly)
    return fail("--report plans a training iteration; it does not apply "
                "to --forward");
  const bool placed = zeroStage && placementGiven();
  const std::string zeroFlag = "--zero " + std::to_string(zeroStage);
  if (zeroStage == 2 && !placementGiven())
    return fail("--zero 2 shards an offload plan's gradient blocks over the "
                "ranks; a resident plan keeps each gradient on the GPU for "
                "one step only: give the offload plan's flags (--place, "
                "--gpu-mem, --host-mem), or use --zero 1");
  if (placed && ranks.getNumOccurrences() && ranks == 1)
    return fail(zeroFlag +
                " --ranks 1 with an offload plan: one rank keeps "
                "the whole optimizer state, so there is nothing to shard: "
                "give the job's ranks (--ranks N, N > 1), or drop --zero");
  if (placed && !ranks.getNumOccurrences())
    return fail(zeroFlag +
                " with an offload plan cuts its optimizer blocks "
                "for the ranks that run it: give --ranks N (the executable "
                "then runs under mpirun -np N)");
  if (placed && ranks > uint64_t(spillway::train::kMaxOptimizerStateShards))
    return fail(zeroFlag +
                " with an offload plan cuts its optimizer blocks "
                "for at most " +
                std::to_string(spillway::train::kMaxOptimizerStateShards) +
                " ranks (--ranks " + std::to_string(ranks) + ")");
  if (zeroStage && !placed && (!costModel || !ranks.getNumOccurrences()))
    return fail("--zero 1 costs the ranks' sharded optimizer state: give it "
                "with --ranks N, --hw PROFILE.json and --report or "
                "--report-json (the executable takes its own --zero 1 under "
                "mpirun)");
  if (zeroStage && optimizer == "foam")
    return fail(zeroFlag + " shards AdamW's state; FOAM's is folded "
                           "already: drop --zero or use --optimizer adamw");
  if (ranks.getNumOccurrences() && !costModel && !placed)
    return fail("--ranks costs a plan for data-parallel ranks: give it with "
                "--hw PROFILE.json and --report, --report-json or an offload "
                "plan's choice (the executable itself runs under any "
                "mpirun -np)");
  if (costModel || offload) {
    std::string error;
    const char *examples = costModel ? "512M, 16G, 4096" : "512M, 16G";
    if (!readBudget(gpuMem, "--gpu-mem", examples, planOptions.gpuMem,
                    error) ||
        !readBudget(hostMem, "--host-mem", examples, planOptions.hostMem,
                    error))
      return fail(error);
  }
  if (costModel) {
    std::string error;
    planSpace = spillway::readPlanSpace(planOptions, hwProfile, error);
    if (!planSpace)
      return fail(error);
  }
  return 0;
}

/// Plans the training step (with a profile: the report, the order of a
/// --schedule auto, an offload plan's tiers) and schedules it as the flags
/// and the plan say. The exit status (0: go on).
int planAndSchedule(OwningOpRef<ModuleOp> &module,
                    const spillway::PlanningOptions &planOptions,
                    const std::optional<spillway::PlanSpace> &planSpace,
                    bool scheduled) {
  MLIRContext &context = *module->getContext();
  const bool offload = planOptions.offload;
  std::string error;
  std::optional<spillway::PlanSearch> search;
  spillwayc::PlanReport reported;
  if (planSpace) {
    note("partitioning the step into layers for the plan");
    search = spillway::searchPlans(*module, planOptions, *planSpace, error);
    if (!search)
      return error.empty() ? 1 : fail(error);
    note("searching the plans");
    if (int rc = writeReport(*search, *planSpace, reported))
      return rc;
    // An offload plan for an executable: the planner's exact arenas decide
    // what fits (planOffload tries the ranked plans), not these estimates.
    std::string over = spillway::costModelOverBudget(*search, *planSpace);
    if (!over.empty() && offload)
      note("the cost model's estimates fit no plan in the budgets; the "
           "planner checks the ranked plans' exact arenas");
    else if (!over.empty())
      return fail(over);
    if (outputPath.empty())
      return 0;
  }

  // The notes of the schedule about to run, and its pipeline.
  auto announce = [&](const spillway::ScheduleOptions &s) {
    if (s.offload)
      note("offload plan: " + (s.offload->placement.empty()
                                   ? std::string("everything on the GPU")
                                   : s.offload->placement));
    note(llvm::formatv("scheduling the step: {0} micro-batch(es), {1} "
                       "order{2}, optimizer overlap {3}, {4}",
                       s.microbatches, spillway::schedule::orderName(s.order),
                       schedule != "auto" ? ""
                       : search           ? " (the cost model's choice)"
                                          : " (auto without --hw)",
                       llvm::format("%g", s.overlapFraction),
                       s.recompute ? "recompute on (the backward keeps "
                                     "only layer-boundary activations)"
                                   : "recompute off"));
    if (printPipeline)
      llvm::errs() << "spillwayc: the schedule as a pipeline: spillway-opt "
                      "--spillway-schedule=\""
                   << s.pipelineOptions() << "\" STEP.mlir\n";
  };
  if (offload) {
    // --report-trace plays the plan in the sched dialect: a copy of the
    // step before it is scheduled.
    OwningOpRef<ModuleOp> unplanned;
    if (!reportTrace.empty())
      unplanned = module->clone();
    spillway::OffloadOutcome planned = spillway::planOffload(
        module, planOptions, search ? &*search : nullptr,
        [&](const spillway::OffloadPlan &plan) {
          if (plan.rank > 0)
            note(llvm::formatv("the planner's arenas for the cost model's "
                               "first {0} plan(s) exceed the budgets; taking "
                               "{1}",
                               plan.rank, plan.estimate->candidate.str()));
          announce(plan.schedule);
        });
    // The planner's exact arenas may have changed the report's plan (the
    // JSON waited for it; written whether or not the plan fits).
    if (search && planned.succeeded && planned.plan.estimate &&
        planned.plan.estimate->candidate.str() !=
            reported.choice.best.candidate.str()) {
      reported.executable = *planned.plan.estimate;
      if (report)
        spillwayc::printExecutablePlan(*planned.plan.estimate, llvm::outs());
    }
    // The exact arenas of the plan compiled: the peaks above are the
    // model's estimates.
    if (planned.succeeded)
      if (auto b = (*module)->getAttrOfType<DictionaryAttr>("sched.buffers")) {
        auto get = [&](StringRef key) -> int64_t {
          auto v = b.getAs<IntegerAttr>(key);
          return v ? v.getInt() : -1;
        };
        reported.arenas = spillwayc::PlanReport::Arenas{
            uint64_t(std::max<int64_t>(0, get("gpu_bytes"))),
            uint64_t(std::max<int64_t>(0, get("host_bytes"))),
            uint64_t(std::max<int64_t>(0, get("ssd_bytes"))),
            get("step_arena_bytes")};
      }
    if (search && !reportJson.empty())
      if (int rc = writeReportJson(reported))
        return rc;
    const spillway::ScheduleOptions &s = planned.plan.schedule;
    if (!planned.succeeded)
      return fail(llvm::formatv("cannot plan the step in {0} micro-batch(es) "
                                "in the {1} order with the offload plan "
                                "'{2}' (--place, --gpu-mem, --host-mem, "
                                "--microbatches, --schedule): see above",
                                s.microbatches, spillway::schedule::orderName(s.order),
                                s.offload->placement)
                      .str());
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
    if (unplanned && search) {
      spillway::ScheduleOptions traced = s;
      traced.stopInSched = true;
      traced.outlineTasks = false;
      PassManager pm(&context);
      spillway::populateSchedulePipeline(pm, traced);
      std::string error;
      std::optional<spillway::PredictedTrace> trace;
      if (succeeded(pm.run(*unplanned)))
        trace = spillway::predictTrace(*unplanned, search->summary,
                                       search->profile, error);
      else
        error = "the plan did not schedule again (see above)";
      if (!trace)
        return fail("--report-trace: " + error);
      std::string err;
      if (!spillway::writeOutputFile(
              reportTrace,
              [&](llvm::raw_ostream &os) { os << trace->json << "\n"; }, err))
        return fail("--report-trace: " + err);
      note(llvm::formatv("predicted trace: {0} ({1} spans; the iteration "
                         "ends at {2:e3} s, the cost model's roofline says "
                         "{3:e3} s)",
                         reportTrace, trace->spans, trace->iterationSec,
                         planned.plan.estimate
                             ? planned.plan.estimate->iterationSec
                             : search->choice.best.iterationSec));
    }
    // The report's SSD wear is the cost model's, before the swap's 4 KiB
    // alignment; the executable's plan has the bytes it will write.
    if (planned.plan.estimate && !planned.plan.estimate->splitNote.empty())
      note("offload plan: " + planned.plan.estimate->splitNote);
    if (report && search)
      spillwayc::printPlanSsdWear(
          reported, uint64_t(get(links, "ssd_write")),
          planned.plan.estimate ? planned.plan.estimate->iterationSec
                                : reported.choice.best.iterationSec,
          llvm::outs());
  } else if (scheduled) {
    spillway::ScheduleOptions s = spillway::residentSchedule(
        planOptions, search ? &search->choice.best : nullptr);
    announce(s);
    PassManager pm(&context);
    timing.attach(pm);
    spillway::populateSchedulePipeline(pm, s);
    if (failed(pm.run(*module)))
      return fail(llvm::formatv("cannot train the step in {0} micro-batch(es) "
                                "in the {1} order (--microbatches, "
                                "--schedule): see above",
                                s.microbatches, spillway::schedule::orderName(s.order))
                      .str());
  } else if (printPipeline) {
    llvm::errs() << "spillwayc: the schedule as a pipeline: none (the step "
                    "trains the whole batch at once)\n";
  }
  return 0;
}

} // namespace

/// --pass-timing's file could not be written (the compile's exit status).
static bool timingUnwritten = false;

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
      "beside it: the\nweights themselves when the model holds them, a "
      "weights map naming the ONNX external\ndata files (read in place by "
      "the executable, never at compile time) when it does\nnot; "
      "--copy-weights copies them into EXE.weights instead. A shapes-only "
      "model\n(initializers without data) can be planned with --report "
      "(no -o), not compiled.\n\n"
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
      "gradient, with the weights of ordinary training. A plan that "
      "writes to SSD reports\nits bytes written per iteration and per "
      "trained token; --ssd-tbw TB (the drive's\nrated endurance) adds the "
      "drive's lifetime at the predicted speed.\n\n"
      "  spillwayc model.onnx --hw profiles/cpu-ci.json --report --gpu-mem 1G "
      "--host-mem 8G [--ssd-tbw 600]\n\n"
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
  // Written however the compile ends; a file it could not write fails the
  // run (scripts read it), but after what the compile itself reported.
  llvm::scope_exit writeTiming([] {
    std::string e;
    if (timing.isEnabled() && !timing.write(passTiming, e)) {
      llvm::WithColor::error(llvm::errs(), "spillwayc")
          << "--pass-timing: " << e << "\n";
      timingUnwritten = true;
    }
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
    if (!spillwayc::checkOutputFile("--probe-hw '" + probeHw + "'", probeHw, error))
      return fail(error);
    std::optional<uint64_t> ssdBytes = parseSize(probeSsdSize);
    if (!ssdBytes)
      return fail("--probe-ssd-size '" + probeSsdSize +
                  "' is not a size (e.g. 256M, 1G)");
    return spillwayc::probeHardware(probeHw, *ssdBytes, probeSeconds,
                                    ssdDirs);
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
  if (reportTrace.getNumOccurrences() && reportTrace.empty())
    return fail("--report-trace needs a file name (--report-trace FILE)");
  if (!reportTrace.empty() &&
      (reportTrace == outputPath || reportTrace == reportJson))
    return fail("--report-trace '" + reportTrace + "' is also " +
                (reportTrace == outputPath ? "-o" : "--report-json") +
                "'s file: name another");
  if (!reportTrace.empty() && !(offload && hwProfile.getNumOccurrences()))
    return fail("--report-trace draws the offload plan an executable "
                "follows, as the cost model predicts it: give -o EXE with "
                "--place, --gpu-mem or --host-mem, and --hw PROFILE.json");
  if (std::string error;
      !reportTrace.empty() && reportTrace != "-" &&
      !spillwayc::checkOutputFile("--report-trace '" + reportTrace + "'",
                                  reportTrace, error))
    return fail(error);
  if (ssdTbwText.getNumOccurrences() && !planning)
    return fail("--ssd-tbw rates the SSDs for the report's drive lifetime: "
                "give --report or --report-json with it");
  if (outputPath.empty() && !planning)
    return fail("no output given: -o EXE");
  if (copyWeights && (outputPath.empty() || outputPath == "-"))
    return fail("--copy-weights writes EXE.weights beside -o: give -o FILE");
  if (forwardOnly && (microbatches.getNumOccurrences() ||
                      schedule.getNumOccurrences() ||
                      overlapOptimizerText.getNumOccurrences()))
    return fail("--microbatches, --schedule and --overlap-optimizer shape a "
                "training iteration; they do not apply to --forward");
  if (forwardOnly && gradClipText.getNumOccurrences())
    return fail("--grad-clip clips a training step's gradients; it does not "
                "apply to --forward");
  if (optimizer != "adamw" && optimizer != "foam")
    return fail("--optimizer '" + optimizer +
                "' is not one of adamw, foam");
  if (optimizerStateDtype != "fp32" && optimizerStateDtype != "bf16")
    return fail("--optimizer-state-dtype '" + optimizerStateDtype +
                "' is not one of fp32, bf16");
  if (forwardOnly && optimizerStateDtype.getNumOccurrences())
    return fail("--optimizer-state-dtype stores a training step's optimizer "
                "state; it does not apply to --forward");
  if (target != "cpu" && target != "cuda")
    return fail("--target '" + target + "' is not one of cpu, cuda");
  if (precision.getNumOccurrences() && precision != "fp32" &&
      precision != "bf16" && precision != "bf16-mixed")
    return fail("--precision '" + precision +
                "' is not one of fp32, bf16, bf16-mixed");
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
  if (gradClip > 0 && optimizer == "foam")
    return fail("--grad-clip with --optimizer foam: FOAM updates take no "
                "clip coefficient; use --optimizer adamw, or no --grad-clip");
  if (foamLevel < 0 || foamLevel > 16)
    return fail("--foam-level " + std::to_string(int64_t(foamLevel)) +
                " is outside [0, 16]");
  spillway::PlanningOptions planOptions;
  std::optional<spillway::PlanSpace> planSpace;
  if (int rc = readPlanningFlags(planning, offload, planOptions, planSpace))
    return rc;
  const bool scheduled = scheduleRequested() || offload;

  DialectRegistry registry;
  spillway::registerAllDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // A diagnostic names the op and its location; dumping the whole module in
  // generic form would bury it for real models.
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagHandler(sourceMgr, &context);
  // A diagnostic without a location (an imported model's module-level
  // ones: the plan's budgets, a placement) is the tool's own, as its other
  // errors are: "spillwayc: error: ...", not "<unknown>:0: error: ...".
  ScopedDiagnosticHandler unlocated(&context, [](Diagnostic &d) {
    if (!isa<UnknownLoc>(d.getLocation()))
      return failure();
    auto print = [](const Diagnostic &x) {
      const char *kind =
          x.getSeverity() == DiagnosticSeverity::Error     ? "error"
          : x.getSeverity() == DiagnosticSeverity::Warning ? "warning"
          : x.getSeverity() == DiagnosticSeverity::Note    ? "note"
                                                           : "remark";
      llvm::errs() << "spillwayc: " << kind << ": " << x << "\n";
    };
    print(d);
    for (const Diagnostic &n : d.getNotes())
      print(n);
    return success();
  });

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
    if (!spillwayc::checkOutputFile("-o '" + outputPath + "'", outputPath, error) ||
        !spillwayc::checkOutputFile("the weights file '" + weightsPathFor(outputPath) +
                             "' (beside -o)",
                         weightsPathFor(outputPath), error))
      return fail(error);
  }
  if (!reportJson.empty() && reportJson != "-" &&
      !spillwayc::checkOutputFile("--report-json '" + reportJson + "'", reportJson,
                       error))
    return fail(error);
  spillwayc::PendingOutputs pending;
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
    // Report only: nothing reads the parameters' bytes, and a shapes-only
    // model (initializers declared without data) is accepted.
    importOptions.weightsPath = outputPath.empty() ? "" : weightsOut;
    importOptions.copyWeights = copyWeights;
    if (stateDictPrefix != "\x01")
      importOptions.stateDictPrefix = stateDictPrefix.getValue();
    if (exportedStateDict.getNumOccurrences())
      importOptions.exportedStateDict = exportedStateDict.getValue();
    if (verbose)
      importOptions.parameterLog = &llvm::errs();
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
    if (stateDictPrefix != "\x01" || exportedStateDict.getNumOccurrences())
      return fail("--state-dict-prefix and --exported-state-dict apply to "
                  "ONNX inputs; an MLIR model already names its parameters");
    note("parsing " + inputPath);
    if (auto buf = llvm::MemoryBuffer::getFile(inputPath, /*IsText=*/true))
      if (!spillway::checkNesting((*buf)->getBuffer(), inputPath,
                                  spillway::CommentStyle::MLIR, error))
        return fail(error);
    module = parseSourceFile<ModuleOp>(inputPath, sourceMgr, &context);
    if (!module)
      return 1;
    if (!outputPath.empty() &&
        failed(spillwayc::copyWeightsOfMLIR(*module, inputPath, weightsOut,
                                            copyWeights, error)))
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
  // An MLIR input train-mixed-precision already ran on is bf16-mixed: its
  // casts are the policy, so --precision may only agree with it.
  const bool mixedInput =
      (*module)->hasAttr(spillway::train::kPrecisionAttrName);
  if (mixedInput && precision.getNumOccurrences() &&
      precision != "bf16-mixed")
    return fail("'" + inputPath + "' is bf16-mixed already (" +
                spillway::train::kPrecisionAttrName.str() +
                ": train-mixed-precision ran on it), so its casts round "
                "whatever --precision says: compile it with --precision "
                "bf16-mixed or without --precision, or give the module from "
                "before that pass");
  if (precision == "bf16-mixed" && !mixedInput)
    trainOptions.precision = spillway::StoragePrecision::BF16Mixed;
  trainOptions.optimizer = optimizer;
  trainOptions.lr = lr;
  trainOptions.beta1 = beta1;
  trainOptions.beta2 = beta2;
  trainOptions.eps = eps;
  trainOptions.weightDecay = weightDecay;
  trainOptions.foamLevel = foamLevel;
  trainOptions.foamAlpha = foamAlpha;
  trainOptions.gradClip = gradClip;
  trainOptions.optimizerStateDtype = optimizerStateDtype;
  // ZeRO with an offload plan: its optimizer blocks hold one rank's shards.
  if (shardedBlocksRequested()) {
    trainOptions.optimizerStateShards = ranks;
    trainOptions.gradientShards = zeroStage == 2;
  }

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
  warnIfNothingSharded(*module);

  if (int rc = planAndSchedule(module, planOptions, planSpace, scheduled))
    return rc;
  if (outputPath.empty())
    return 0; // --report only

  if (emit == EmitKind::MLIR) {
    if (!spillway::writeOutputFile(
            outputOut, [&](llvm::raw_ostream &os) { module->print(os); },
            error))
      return fail("-o '" + outputPath + "': " + error);
    if (failed(pending.commit(error)))
      return fail(error);
    return 0;
  }

  PassManager lower(&context);
  timing.attach(lower);
  spillway::populateLowerToRuntimePipeline(lower, target,
                                           productsPrecision());
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
    if (!spillway::writeOutputFile(
            outputOut,
            [&](llvm::raw_ostream &os) { llvmModule->print(os, nullptr); },
            error))
      return fail("-o '" + outputPath + "': " + error);
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
  note("wrote " + outputPath + " and its initial weights " + weightsFinal);
  return 0;
}

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  // The parsers, the verifier and the passes recurse once per nesting level
  // of the model: they run on a thread with room for kMaxNesting levels.
  int rc =
      spillway::runWithLargeStack([&] { return compilerMain(argc, argv); });
  return rc ? rc : int(timingUnwritten);
}
