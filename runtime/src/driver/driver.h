//===- driver.h - what the driver files share -----------------------------===//
//
// spw_main (main.cpp) parses the flags (options.cpp), checks every file the
// run reads and writes (weights.cpp, inputs.cpp, output_files.cpp), then runs
// the gradient check (gradcheck.cpp), the training loop with its checkpoints
// (train.cpp, checkpoints.cpp) or a forward-only model (forward.cpp). These
// are the functions one of them calls in another; each file keeps the rest to
// itself.
//
// Only these files refer to spw_model_declare / spw_model_step, which
// generated code defines, and nothing but spw_main refers to them from outside:
// a program that does not call spw_main pulls none of them in, so it links
// without a model.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_DRIVER_DRIVER_H
#define SPILLWAY_RUNTIME_SRC_DRIVER_DRIVER_H

#include "context.h"
#include "driver/options.h"
#include "formats.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <sys/types.h>
#include <unistd.h>
#include <utility>
#include <vector>

extern "C" void spw_model_declare(spw_ctx *ctx);
extern "C" void spw_model_step(spw_ctx *ctx);

namespace spw::driver {

class Checkpointer; // checkpoints.h

// ---- main.cpp
// Progress goes to stdout, which may go away (`| head -3`: SIGPIPE is
// ignored, see spw_main) or fill up (`> /dev/full`): that must not stop the
// training or lose its result. The first failed write is said once on
// stderr, and stdout then goes to /dev/null; the exit status does not
// change.
void flush_stdout();
// "512 B", "1.5 KiB", "2.25 GiB".
std::string human_bytes(int64_t b);

// ---- weights.cpp
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
bool read_at(int fd, void *dst, size_t bytes, int64_t offset);
// The first non-finite element of n floats, or -1.
int64_t first_non_finite(const float *x, int64_t n);
// "NaN", "+Inf" or "-Inf".
const char *non_finite_name(float v);
// The first f32 parameter holding a NaN or infinity (host copies), with
// the element; nullptr when all are finite.
const ParamInfo *non_finite_param(const spw_ctx *ctx, int64_t *element);

// A run of the logical weights blob that a weights map (docs/runtime.md,
// "Weights") gives: bytes [logical, logical + length) are at `offset` of
// source `source` (-1: the map file itself).
struct WeightsSegment {
  int64_t logical = 0, length = 0;
  int32_t source = -1;
  int64_t offset = 0;
};
// Where each parameter's bytes are, in a checked weights file: the raw
// layout spillwayc writes, a .safetensors file, or a weights map into other
// files (the ONNX model's external data). read() reads any byte range of a
// parameter in place, whenever the run needs it: into the parameter's buffer
// (read_weights) or straight into an offload plan's block (stream_weights).
struct WeightsPlan {
  std::string path;
  FdCloser fd;
  // Per parameter: its first byte in the file (raw, .safetensors) or in the
  // logical blob (a map); empty: nothing to read.
  std::vector<int64_t> offsets;
  bool map = false;
  std::vector<std::string> source_paths; // a map's sources, opened:
  std::vector<FdCloser> source_fds;
  // The first source that is missing or changed (check_weights): its
  // error; its fd is closed.
  std::string source_problem;
  std::vector<WeightsSegment> segments; // sorted, disjoint
  // Reads bytes [begin, begin + bytes) of parameter `param` into dst;
  // errors name the file and the parameter.
  void read(const spw_ctx *ctx, size_t param, int64_t begin, size_t bytes,
            void *dst) const;
};
// Checks the weights file against the declared parameters (before they have
// buffers), and a map's sources against what spillwayc recorded;
// read_weights then reads the parameters that have a buffer
// (require_finite: training), and stream_weights the rest (those the offload
// plan's params blocks hold, which get no host copy) into their homes, with
// the optimizer blocks' state zeroed. Both keep the files open.
// `defer_sources` (a --resume): a map's source that is missing or changed
// is not an error yet but plan.source_problem, for the caller to report
// unless a checkpoint then restores every parameter.
WeightsPlan check_weights(const spw_ctx *ctx, const std::string &path,
                          bool explicit_path, bool defer_sources = false);
WeightsPlan check_weights_file(const spw_ctx *ctx, const std::string &path,
                               bool explicit_path);
void read_weights(spw_ctx *ctx, WeightsPlan &plan, bool require_finite);
void stream_weights(spw_ctx *ctx, const WeightsPlan &plan);

// ---- inputs.cpp
// An --input file whose header was checked against its input; its data is
// read once the memory for all of them is known to be there (read_input).
struct InputPlan {
  InputInfo *in = nullptr;
  std::string file;
  FdCloser fd;
  NpyHeader h;
  int64_t batches = 0;
  int64_t bytes = 0; // of the input's buffer: batches * the input's bytes
  // Data parallel (dist.h): each of the file's batches holds `ranks` x the
  // input's rows, of which this process reads those of `rank`.
  int64_t ranks = 1, rank = 0;
};
// Checks an --input file's header against input `in`; read_input then reads
// its data into a new buffer (require_finite: training).
InputPlan check_input(InputInfo &in, const std::string &file);
void read_input(InputPlan &plan, bool require_finite);
// Points every input's view (and device view) at batch step0 % B.
void select_batch(spw_ctx *ctx, int64_t step0);

// ---- data.cpp
// A token file (--data, --val-data), memory-mapped: nanoGPT's raw
// little-endian uint16 tokens, or llm.c's format (a 256 x int32 header:
// magic 20240520, version 1 (uint16 tokens) or 2 (uint32), token count).
class TokenFile {
public:
  TokenFile() = default;
  TokenFile(const TokenFile &) = delete;
  TokenFile &operator=(const TokenFile &) = delete;
  ~TokenFile();
  // Opens, checks and maps `file`; errors name `flag` and the file.
  void open(const std::string &file, const char *flag);
  uint32_t at(int64_t i) const; // token i
  std::string path, real_path;
  int64_t count = 0;
  const char *format_name = "";

private:
  void *map_ = nullptr;
  int64_t map_bytes_ = 0, data_offset_ = 0;
  int item_bytes_ = 2;
};
// What --data feeds: the token input, window[0:S] of each row's window, and
// the labels input if there is one, the same window (Hugging Face's
// convention: the model shifts) or window[1:S+1] (nanoGPT's targets). Row r
// of the batch drawn at position p (windows drawn so far) starts at the
// (p + r)-th output of SplitMix64 seeded with --seed, modulo the number of
// window starts; validation batch k uses outputs k*B.. of seed + 1.
struct DataFeed {
  std::unique_ptr<TokenFile> train, val; // train null: no --data
  InputInfo *tokens = nullptr, *labels = nullptr;
  bool shifted = false;
  int64_t rows = 0, seq = 0, window = 0;
  uint64_t seed = 0;
  // The vocabulary, from the token embedding's rows when the model names
  // one as the usual models do (wte, embed_tokens, ...); 0: unknown.
  int64_t vocab = 0;
  std::string embedding; // its name and shape
  int64_t position = 0; // training windows drawn (checkpoints record it)
  double eval_seconds = 0; // spent in validation, not training
  explicit operator bool() const { return bool(train); }
  void allocate();
  // The next training batch into the fed inputs (and their device copies).
  void feed_train(spw_ctx *ctx);
  // Validation batch `batch` (0 .. --eval-batches - 1).
  void feed_val(spw_ctx *ctx, int64_t batch);
  // For an error in a step: where its batch came from.
  std::string context() const;
  std::string describe() const;   // the banner's lines
  std::string fingerprint() const; // a checkpoint's "data" metadata
  std::string label_rule() const;

private:
  int64_t fill(spw_ctx *ctx, const TokenFile &f, uint64_t seed,
               uint64_t first);
  std::vector<int64_t> last_starts;
  const TokenFile *last_file = nullptr;
  int64_t last_largest = 0;
};
// Checks --data and --val-data against the model's inputs (UsageError for a
// model --data cannot feed) and opens the files; empty without --data.
DataFeed plan_data(spw_ctx *ctx, const Options &o);
// The tokens one step trains on, for tokens/s: the --data batch, else the
// elements of the one integer [B, S] input that --data would take as the
// token input; 0 when there is none.
int64_t tokens_per_step(const spw_ctx *ctx, const DataFeed &data);

// ---- output_files.cpp
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
FileRole file_role(std::string role, const std::string &path);
// What the run reads: its --input files, the weights and the executable.
std::vector<FileRole> run_inputs(const Options &o, const std::string &weights,
                                 const std::string &exe);
// Refuses an output that is an input or another output (UsageError).
void refuse_overwrites(const std::vector<FileRole> &outs,
                       const std::vector<FileRole> &ins, const Options &o);
// An output file the run writes or replaces, checked before the run.
void check_output_file(const char *flag, const std::string &given);
// Every destination the run writes, before anything else.
void check_outputs(const Options &o, const std::vector<FileRole> &ins);
// The files the run writes (--save, --log-json, --stats-json, --trace).
std::vector<FileRole> output_roles(const Options &o);
// Opens --log-json (appending after a resume).
FILE *open_log(const std::string &path, bool append);
// Stops, before a file is written, when a float parameter is not finite.
void check_finite_weights(const spw_ctx *ctx, const char *before);

// ---- gradcheck.cpp
// --check-gradients: the gradients against central finite differences on
// batch 0; 0 when all elements checked agree, else 1.
int check_gradients(spw_ctx *ctx, const Options &o);

// ---- train.cpp
// Runs one step on batch step0 % B; returns the loss.
float run_step(spw_ctx *ctx, int64_t step0, const std::string &label);
// Writes the final parameters to --save (or a rescue path, named in the error).
void save_params(spw_ctx *ctx, const std::string &path);
// The other ranks' side of rank 0's save_params when the values stream from
// every rank's shards (tiers_shards_masters): each write rank 0 tries
// (--save, then each rescue path) is collective. Nothing otherwise.
void join_save(spw_ctx *ctx);
// Runs steps start+1 .. o.steps (`start` > 0 after a resume), checkpointing
// when `ck` is given; the weights it leaves have no update pending.
// `data` feeds the token inputs when --data is given, and evaluates.
int train(spw_ctx *ctx, const Options &o, const AdamWHparams &hp,
          Checkpointer *ck, int64_t start, DataFeed &data);
// The learning rate of step `step` (from 1) for base rate `lr`: nanoGPT's
// get_lr(step - 1) with lr_decay_iters = --steps, i.e. lr * step /
// (warmup + 1) for step <= --warmup, then lr (constant) or min_lr +
// (lr - min_lr) * (1 + cos(pi * (step - 1 - warmup) / (steps - warmup))) / 2
// (cosine).
double scheduled_lr(const Options &o, double lr, int64_t step);
// The schedule in words (the banner; a checkpoint's "lr_schedule").
std::string lr_schedule_string(const Options &o, double lr);

// ---- forward.cpp
// Runs a forward-only model's steps and writes --outputs.
int run_forward(spw_ctx *ctx, const Options &o, int64_t steps,
                const std::vector<FileRole> &ins);

} // namespace spw::driver

#endif // SPILLWAY_RUNTIME_SRC_DRIVER_DRIVER_H
