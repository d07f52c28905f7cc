//===- checkpoints.h - checkpoints of a training run ----------------------===//
//
// What --checkpoint-dir writes and --resume restores (storage/checkpoint.h
// is the format): the parameters, the optimizer's moments and the step.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_DRIVER_CHECKPOINTS_H
#define SPILLWAY_RUNTIME_SRC_DRIVER_CHECKPOINTS_H

#include "context.h"
#include "driver/options.h"
#include "storage/checkpoint.h"
#include "storage/io_engine.h"

#include <cstdint>
#include <memory>
#include <string>

namespace spw::driver {

// FOAM's settings in effect, for checkpoints' metadata and the banner;
// empty when no parameter is folded.
std::string foam_string(const spw_ctx *ctx);

// Writes and restores everything a training step depends on: the parameters,
// the AdamW moments (where allocated) and the step counter. (The batch of a
// step follows from its number; the model itself keeps no state.)
class Checkpointer {
public:
  Checkpointer(spw_ctx *ctx, const Options &o, const AdamWHparams &hp);

  // Loads the newest valid checkpoint (with --resume) and returns its step,
  // or 0 to start from the weights. Without --resume, a directory that
  // already holds checkpoints is refused: they belong to another run.
  int64_t start();
  void write(int64_t step, bool report);
  std::string describe() const;

private:
  spw_ctx *ctx_;
  const Options &o_;
  AdamWHparams hp_;
  std::string hparams() const;
  std::string inputs_; // inputs_digest: the inputs do not change
  storage::CheckpointOptions copts_;
  std::unique_ptr<storage::CheckpointDirLock> lock_; // held for the run
  std::unique_ptr<storage::PinnedPool> pool_; // outlives the engine
  std::unique_ptr<storage::IoEngine> engine_;

  void check_restored(const std::string &dir);
  void restore(const storage::LoadedCheckpoint &c);
};

} // namespace spw::driver

#endif // SPILLWAY_RUNTIME_SRC_DRIVER_CHECKPOINTS_H
