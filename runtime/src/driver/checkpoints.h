//===- checkpoints.h - checkpoints of a training run ----------------------===//
//
// What --checkpoint-dir writes and --resume restores (storage/checkpoint.h
// is the format): the parameters, the optimizer's moments and the step.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_DRIVER_CHECKPOINTS_H
#define SPILLWAY_RUNTIME_SRC_DRIVER_CHECKPOINTS_H

#include "context.h"
#include "dist/dist.h"
#include "driver/driver.h"
#include "driver/options.h"
#include "storage/checkpoint.h"
#include "storage/io_engine.h"

#include <cstdint>
#include <memory>
#include <string>

namespace spw::driver {

// Stops, before a file is written, when element begin + i of `w` (n elements
// of parameter `p`'s values) is not finite: check_finite_weights' message,
// for values that stream through in pieces (an offload plan's blocks).
void check_finite_range(const spw_ctx *ctx, const ParamInfo &p,
                        const float *w, int64_t begin, int64_t n,
                        const char *before);

// FOAM's settings in effect, for checkpoints' metadata and the banner;
// empty when no parameter is folded.
std::string foam_string(const spw_ctx *ctx);

// Writes and restores everything a training step depends on: the parameters,
// the AdamW moments (where allocated), the step counter and --data's
// position. (An --input batch follows from the step's number; the model
// itself keeps no state.)
class Checkpointer {
public:
  // `data` (may be null or empty): the --data feed, whose position (the
  // windows drawn) a checkpoint records and a resume restores.
  Checkpointer(spw_ctx *ctx, const Options &o, const AdamWHparams &hp,
               DataFeed *data = nullptr);

  // Loads the newest valid checkpoint (with --resume) and returns its step,
  // or 0 to start from the weights. Without --resume, a directory that
  // already holds checkpoints is refused: they belong to another run.
  // With an offload plan (tiers_start first), the blocks' parameters and
  // state are restored straight into their homes, block by block.
  int64_t start();
  // Whether start() restored a checkpoint (else the caller loads the
  // weights, and an offload plan's homes with them and zero state).
  bool restored() const { return restored_; }
  // The checkpoint directory start() restored ("" when none).
  const std::string &restored_dir() const { return restored_dir_; }
  // Streams the parameters and state to a new checkpoint: an offload plan's
  // blocks one at a time from their homes (tiers_stream_out), never all in
  // host memory.
  void write(int64_t step, bool report);
  std::string describe() const;

private:
  spw_ctx *ctx_;
  const Options &o_;
  AdamWHparams hp_;
  DataFeed *data_;
  std::string hparams() const;
  std::string inputs_; // inputs_digest: the inputs do not change
  storage::CheckpointOptions copts_;
  std::unique_ptr<storage::CheckpointDirLock> lock_; // held for the run
  std::unique_ptr<storage::PinnedPool> pool_; // outlives the engine
  std::unique_ptr<storage::IoEngine> engine_;

  bool restored_ = false;
  std::string restored_dir_;
  // Data parallel: only rank 0 takes the lock and writes (dist.h).
  const bool writer_ = dist::rank() == 0;

  void check_compatible(const storage::CheckpointReader &c);
  void restore(storage::CheckpointReader &c);
};

} // namespace spw::driver

#endif // SPILLWAY_RUNTIME_SRC_DRIVER_CHECKPOINTS_H
