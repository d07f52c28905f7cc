//===- train.cpp - the training loop --------------------------------------===//

#include "driver/checkpoints.h"
#include "driver/driver.h"
#include "tiers.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>

namespace spw::driver {

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

namespace {

// The host copies of the parameters as .safetensors (after device_pull).
std::string params_safetensors(spw_ctx *ctx) {
  std::vector<NamedTensor> ts;
  for (const ParamInfo &p : ctx->params)
    ts.push_back({p.name, p.value.get()});
  return safetensors_bytes(ts);
}

} // namespace

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

namespace {

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

} // namespace

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
  const bool scan_weights = ctx->device->host_visible() && !has_tiers(ctx);
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
  if (ctx->device->step_arena_bytes() > 0 && ran > 2) {
    const double steady = std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - warm)
                              .count() /
                          double(ran - 2);
    std::printf("steady state: %.6f s/step (steps %lld..%lld)\n", steady,
                (long long)start + 3, (long long)o.steps);
  }
  return 0;
}

} // namespace spw::driver
