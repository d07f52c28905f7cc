//===- options.h - the executable's command line --------------------------===//
//
// The flags spw_main takes (Options), --help's text and parse_args, which
// checks every flag's syntax and range; what needs the model (a flag a
// forward-only model rejects, an unknown --input name) is checked by run in
// main.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_DRIVER_OPTIONS_H
#define SPILLWAY_RUNTIME_SRC_DRIVER_OPTIONS_H

#include "context.h"
#include "storage/io_engine.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace spw::driver {

struct UsageError : Error {
  using Error::Error;
};

struct Options {
  std::vector<std::pair<std::string, std::string>> inputs; // name, file
  int64_t steps = 1;
  uint64_t seed = 0;
  AdamWOverrides adamw;
  std::string log_json, save, weights;
  // Another rank than 0 of a job whose rank 0 saves (--save, cleared here):
  // it takes part when the values stream from every rank's shards.
  bool rank0_saves = false;
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
  int64_t optimizer_threads = 0; // 0: default_host_threads()
  int zero = 0; // --zero: 1 shards the optimizer state over the ranks
  bool zero_given = false; // --zero on the command line
  // --collectives auto|mpi|nccl: how device gradients are averaged
  // (dist/nccl.h; main.cpp's start_collectives).
  std::string collectives = "auto";
  // --overlap-exchanges auto|on|off: ZeRO stage 2's reduce-scatters through
  // host memory on the exchange thread (main.cpp's start_exchanges).
  std::string overlap_exchanges = "auto";
  // CPU kernels (cpu/parallel.h): --kernels fast|reference, --threads N.
  bool reference_kernels = false;
  int64_t threads = 0; // 0: the CPUs this process may run on
  // Backend (device.h): "" is the compile target's (spillwayc --target).
  std::string device;
  int64_t device_arena = 0; // step arena bytes; 0: the backend's default
  std::optional<uint64_t> loopback_delays; // --loopback-delays SEED
  // Token files (data.cpp): --data, --val-data, --data-labels same|shifted
  // ("": by the labels input's name), --eval-every N (0: after the last
  // step only), --eval-batches K.
  std::string data, val_data, data_labels;
  int64_t eval_every = 0, eval_batches = 8;
  // The learning rate per step (scheduled_lr, train.cpp): --lr-schedule,
  // --warmup, --min-lr.
  bool cosine = false;
  int64_t warmup = 0;
  double min_lr = 0.0;
  bool min_lr_given = false;
};

// --help's text, a printf format taking the program's name twice.
extern const char kUsage[];

// Parses argv[1..argc-1]; a bad flag or value throws UsageError.
Options parse_args(int argc, char **argv);

} // namespace spw::driver

#endif // SPILLWAY_RUNTIME_SRC_DRIVER_OPTIONS_H
