//===- checkpoints.cpp - writing and restoring training state -------------===//

#include "driver/checkpoints.h"

#include "dist/dist.h"
#include "dist/zero.h"
#include "driver/driver.h"
#include "tiers.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>
#include <xxhash.h>

namespace spw::driver {

namespace {

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
  uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  // Data parallel: the job's inputs, every rank's rows (a collective).
  if (dist::active()) {
    const std::vector<uint64_t> all = dist::allgather(h);
    h = XXH3_64bits(all.data(), all.size() * sizeof(uint64_t));
  }
  return format("%016llx", (unsigned long long)h);
}

std::string adamw_string(const AdamWHparams &h) {
  return format("lr=%.17g beta1=%.17g beta2=%.17g eps=%.17g "
                "weight_decay=%.17g",
                h.lr, h.beta1, h.beta2, h.eps, h.weight_decay);
}

} // namespace

// FOAM's settings in effect, for checkpoints' metadata and the banner;
// empty when no parameter is folded.
std::string foam_string(const spw_ctx *ctx) {
  for (const ParamInfo &p : ctx->params)
    if (p.foam_level >= 0)
      return format(" foam_level=%d foam_alpha=%.17g", p.foam_level,
                    ctx->overrides.foam_alpha.value_or(p.foam_alpha));
  return {};
}

namespace {

// Which optimizer state a checkpoint holds: "adamw", or "foam level L" when
// parameters are folded (the folded moments are means over 2^L elements:
// another level's state has another meaning even where its shape agrees).
std::string optimizer_kind(const spw_ctx *ctx) {
  for (const ParamInfo &p : ctx->params)
    if (p.foam_level >= 0)
      return format("foam level %d", p.foam_level);
  return "adamw";
}

} // namespace

Checkpointer::Checkpointer(spw_ctx *ctx, const Options &o,
                           const AdamWHparams &hp, DataFeed *data)
    : ctx_(ctx), o_(o), hp_(hp), data_(data && *data ? data : nullptr),
      inputs_(inputs_digest(ctx)) {
  // First: a second run on the same directory is refused before anything.
  // Data parallel: rank 0 writes for the job (every rank holds the same
  // parameters and state), the other ranks only read it on --resume.
  if (writer_)
    lock_ = std::make_unique<storage::CheckpointDirLock>(o.checkpoint_dir);
  copts_.zstd = o.checkpoint_zstd;
  copts_.keep = int(o.keep_checkpoints);
  // Test-only: small chunks, so that a test's small model spans many and a
  // flipped byte fails a chunk in the middle of a restore.
  if (const char *c = std::getenv("SPILLWAY_TEST_CHECKPOINT_CHUNK"))
    copts_.chunk_bytes = uint64_t(std::max(1LL, std::atoll(c)));
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

namespace {

// A chunk of the checkpoint being restored failed its checksum (or did not
// decompress): the checkpoint is invalid, the next older one is tried.
struct BadChunk : Error {
  using Error::Error;
};

// Runs pieces of work inside a stream of an offload plan's blocks, whose
// callback must not throw (tiers_stream_in/out then skip putting the block
// back): the first failure is kept, the later pieces are skipped, and
// rethrow() raises it once the stream is over.
struct FirstFailure {
  std::exception_ptr e;
  template <class F> void run(F &&f) {
    if (e)
      return;
    try {
      f();
    } catch (...) {
      e = std::current_exception();
    }
  }
  void rethrow() {
    if (e)
      std::rethrow_exception(e);
  }
};

// Which parameters an offload plan's blocks of class `cls` hold (their
// values or state stream through tiers_stream_in/out); none without one.
std::vector<char> streamed(const spw_ctx *ctx, int cls) {
  std::vector<char> in(ctx->params.size(), 0);
  if (!has_tiers(ctx))
    return in;
  for (int32_t i : tiers_stream_members(ctx, cls)) {
    if (in[size_t(i)])
      fail("the offload plan's %s blocks hold parameter '%s' twice",
           cls == SPW_BLOCK_PARAMS ? "params" : "optimizer",
           ctx->params[size_t(i)].name.c_str());
    in[size_t(i)] = 1;
  }
  return in;
}

} // namespace

int64_t Checkpointer::start() {
  const std::string &dir = o_.checkpoint_dir;
  restored_ = false;
  if (!o_.resume && !writer_)
    return 0;
  if (!o_.resume) {
    auto existing = storage::list_checkpoints(dir);
    if (!existing.empty())
      fail("--checkpoint-dir '%s' already holds checkpoints (the newest: "
           "'%s'): pass --resume to continue that run, or choose another "
           "directory",
           dir.c_str(), existing.front().second.c_str());
    return 0;
  }
  // Newest first; one whose chunk fails its checksum while it is restored
  // is skipped as the loader skips it, and the next older one restores
  // everything again (an offload plan's homes are overwritten in full).
  int64_t below = INT64_MAX;
  while (true) {
    std::optional<storage::CheckpointReader> c =
        storage::open_newest_checkpoint(*engine_, dir, copts_, below);
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
           c->dir().c_str(), k->c_str(), optimizer_kind(ctx_).c_str());
    check_compatible(*c);
    {
      // Older checkpoints have no "ranks": one process wrote them.
      const std::string *r = c->meta("ranks");
      const std::string have = r ? *r : "1";
      if (have != std::to_string(dist::size()))
        fail("checkpoint '%s' was written by a job of %s rank%s; this one "
             "has %d: resume with the same number of ranks (%s)%s%s",
             c->dir().c_str(), have.c_str(), have == "1" ? "" : "s",
             dist::size(),
             dist::launch_command(std::atoi(have.c_str())).c_str(),
             have == "1" ? " or alone" : "",
             ctx_->declared_shards > 0
                 ? format(", with an executable compiled for them (this "
                          "one's offload plan is cut for %d ranks: %s)",
                          ctx_->declared_shards,
                          have == "1"
                              ? "recompile it without --zero"
                              : format("spillwayc --zero %d --ranks %s",
                                       zero::cut_stage(ctx_), have.c_str())
                                    .c_str())
                       .c_str()
                 : "");
    }
    const auto t0 = std::chrono::steady_clock::now();
    try {
      restore(*c);
    } catch (const BadChunk &e) {
      if (writer_) // the other ranks skip it as rank 0 does
        storage::reject_checkpoint(copts_, c->dir(), e.what());
      below = c->step();
      continue;
    } catch (const storage::CheckpointReadError &e) {
      throw storage::CheckpointReadError(
          storage::unreadable_checkpoint_message(dir, c->dir(), e.what()));
    }
    if (c->step() > o_.steps)
      fail("checkpoint '%s' is at step %lld, beyond --steps %lld (--steps "
           "is the total step count, not the number of steps to add)",
           c->dir().c_str(), (long long)c->step(), (long long)o_.steps);
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
    std::printf("  resume: from '%s' (step %lld of %lld): %s in %.1f ms\n",
                c->dir().c_str(), (long long)c->step(), (long long)o_.steps,
                human_bytes(int64_t(c->raw_bytes())).c_str(), ms);
    if (const std::string *h = c->meta("adamw"); h && *h != hparams())
      std::fprintf(stderr,
                   "warning: checkpoint '%s' was written with AdamW %s; this "
                   "run uses %s, so it will not reproduce the interrupted "
                   "run\n",
                   c->dir().c_str(), h->c_str(), hparams().c_str());
    if (const std::string *h = c->meta("inputs"); h && *h != inputs_)
      std::fprintf(stderr,
                   "warning: checkpoint '%s' was written with other --input "
                   "data; this run will not reproduce the interrupted run\n",
                   c->dir().c_str());
    {
      const std::string *ls = c->meta("lr_schedule");
      const std::string want =
          o_.cosine || o_.warmup ? lr_schedule_string(o_, hp_.lr) : "";
      if ((ls ? *ls : std::string()) != want)
        std::fprintf(stderr,
                     "warning: checkpoint '%s' was written with learning "
                     "rate schedule '%s'; this run uses '%s', so it will not "
                     "reproduce the interrupted run\n",
                     c->dir().c_str(), ls ? ls->c_str() : "none",
                     want.empty() ? "none" : want.c_str());
    }
    if (data_) {
      // The data stream goes on where the checkpointed run left it.
      const std::string *pos = c->meta("data_position");
      const std::string *fp = c->meta("data");
      int64_t p = -1;
      if (pos && !pos->empty() &&
          pos->find_first_not_of("0123456789") == std::string::npos)
        p = std::atoll(pos->c_str());
      if (p < 0) {
        p = c->step() * data_->rows;
        std::fprintf(stderr,
                     "warning: checkpoint '%s' records no --data position "
                     "(it was written by a run without --data); the token "
                     "windows continue as if this run had drawn all of its "
                     "%lld steps' windows\n",
                     c->dir().c_str(), (long long)c->step());
      } else if (fp && *fp != data_->fingerprint()) {
        std::fprintf(stderr,
                     "warning: checkpoint '%s' was written with --data %s; "
                     "this run has %s, so it will not reproduce the "
                     "interrupted run\n",
                     c->dir().c_str(), fp->c_str(),
                     data_->fingerprint().c_str());
      }
      data_->position = p;
    }
    restored_ = true;
    restored_dir_ = c->dir();
    return c->step();
  }
}

void Checkpointer::write(int64_t step, bool report) {
  using storage::CheckpointTensorSpec;
  // The plain copies (parameters no block holds, and every one of a run
  // without a plan) come from the device; the blocks' from their homes.
  // ZeRO: every rank's shard of the moments goes to rank 0 as it writes
  // them, a parameter at a time (zero::gather_moment, below); the other
  // ranks take part in the same order.
  std::vector<char> sharded;
  if (zero::active(ctx_)) {
    device_pull(ctx_);
    sharded = zero::state_present(ctx_);
  }
  std::vector<float> gathered;
  if (!writer_) {
    for (size_t i = 0; i < sharded.size(); ++i)
      if (sharded[i]) {
        zero::gather_moment(ctx_->params[i], false, gathered);
        zero::gather_moment(ctx_->params[i], true, gathered);
      }
    // An offload plan's sharded blocks stream to rank 0 too, in rank 0's
    // order: the master blocks' values, then the optimizer blocks.
    if (tiers_shards_masters(ctx_))
      tiers_stream_out(ctx_, SPW_BLOCK_PARAMS, [](const BlockRange &) {});
    if (has_tiers(ctx_) && ctx_->declared_shards > 0 && ctx_->step > 0)
      tiers_stream_out(ctx_, SPW_BLOCK_OPTIMIZER, [](const BlockRange &) {});
    return; // rank 0 writes the job's checkpoint
  }
  if (sharded.empty())
    device_pull(ctx_);
  const std::vector<char> in_p = streamed(ctx_, SPW_BLOCK_PARAMS),
                          in_o = streamed(ctx_, SPW_BLOCK_OPTIMIZER);
  // The blocks' state exists once a step has run (else: fresh, not written).
  const bool block_state = has_tiers(ctx_) && ctx_->step > 0;
  for (size_t i = 0; i < ctx_->params.size(); ++i) {
    const ParamInfo &p = ctx_->params[i];
    if (!in_p[i] && p.value->dtype == SPW_F32)
      check_finite_range(ctx_, p, p.value->as<float>(), 0, p.value->numel,
                         "the checkpoint");
  }
  // The raw stream's order: the plain copies in parameter order (each with
  // its moments: a run without a plan writes what it always wrote), then
  // the params blocks' members and the optimizer blocks' in visit order.
  std::vector<CheckpointTensorSpec> ts;
  struct Source {
    int32_t param;
    int kind; // kTensorValue, kTensorAdamM, kTensorAdamV
    const void *plain; // null: streamed from a block
  };
  std::vector<Source> src;
  auto add = [&](size_t i, int kind, const void *plain) {
    const ParamInfo &p = ctx_->params[i];
    if (kind == kTensorValue) {
      const std::vector<int64_t> dims(p.value->dims,
                                      p.value->dims + p.value->rank);
      ts.push_back({"param/" + p.name, p.value->dtype, dims,
                    uint64_t(p.value->bytes())});
    } else {
      // FOAM's folded moments keep their own [rows, folded] shape.
      ts.push_back({(kind == kTensorAdamM ? "adam_m/" : "adam_v/") + p.name,
                    SPW_F32, p.state_dims(),
                    uint64_t(p.state_numel()) * sizeof(float)});
    }
    src.push_back({int32_t(i), kind, plain});
  };
  for (size_t i = 0; i < ctx_->params.size(); ++i) {
    const ParamInfo &p = ctx_->params[i];
    if (!in_p[i])
      add(i, kTensorValue, p.value->data);
    if (!sharded.empty() && p.shard_hi >= 0) {
      if (sharded[i]) { // gathered when written
        add(i, kTensorAdamM, nullptr);
        add(i, kTensorAdamV, nullptr);
      }
    } else if (!in_o[i] && !p.adam_m.empty()) {
      add(i, kTensorAdamM, p.adam_m.data());
      add(i, kTensorAdamV, p.adam_v.data());
    }
  }
  const size_t first_streamed = ts.size();
  for (int32_t i : tiers_stream_members(ctx_, SPW_BLOCK_PARAMS))
    add(size_t(i), kTensorValue, nullptr);
  if (block_state)
    for (int32_t i : tiers_stream_members(ctx_, SPW_BLOCK_OPTIMIZER)) {
      add(size_t(i), kTensorAdamM, nullptr);
      add(size_t(i), kTensorAdamV, nullptr);
    }
  storage::Metadata meta = {{"model_fingerprint", model_fingerprint(ctx_)},
                            {"parameters", std::to_string(ctx_->params.size())},
                            {"adamw", hparams()},
                            {"optimizer", optimizer_kind(ctx_)},
                            {"inputs", inputs_},
                            {"steps", std::to_string(o_.steps)},
                            {"ranks", std::to_string(dist::size())}};
  if (o_.cosine || o_.warmup)
    meta.push_back({"lr_schedule", lr_schedule_string(o_, hp_.lr)});
  if (data_) {
    meta.push_back({"data", data_->fingerprint()});
    meta.push_back({"data_position", std::to_string(data_->position)});
  }
  const auto t0 = std::chrono::steady_clock::now();
  storage::CheckpointWriter w(*engine_, o_.checkpoint_dir, step, ts, meta,
                              copts_);
  for (size_t k = 0; k < first_streamed; ++k) {
    const void *from = src[k].plain;
    if (!from && src[k].kind != kTensorValue) { // a ZeRO moment
      zero::gather_moment(ctx_->params[size_t(src[k].param)],
                          src[k].kind == kTensorAdamV, gathered);
      from = gathered.data();
    }
    if (ts[k].bytes)
      w.append(from, ts[k].bytes);
  }
  // A block's ranges come in the order the tensors were listed: one
  // tensor's ranges one after another, in element order (split blocks'
  // parts included). Checked, so that a plan visiting them otherwise is an
  // error here, not a checkpoint with bytes in the wrong places.
  size_t next = first_streamed;
  int64_t done = 0; // elements of tensor `next` appended
  FirstFailure failure;
  auto take = [&](const BlockRange &r) {
    failure.run([&] {
      while (next < ts.size() && ts[next].bytes == 0)
        ++next;
      if (next >= ts.size() || src[next].param != r.param ||
          src[next].kind != r.kind || r.begin != done)
        fail("the offload plan's blocks give elements [%lld, %lld) of "
             "parameter '%s' (tensor kind %d) out of the checkpoint's "
             "order",
             (long long)r.begin, (long long)(r.begin + r.count),
             ctx_->params[size_t(r.param)].name.c_str(), r.kind);
      const ParamInfo &p = ctx_->params[size_t(r.param)];
      if (r.kind == kTensorValue)
        check_finite_range(ctx_, p, static_cast<const float *>(r.data),
                           r.begin, r.count, "the checkpoint");
      w.append(r.data, uint64_t(r.count) * sizeof(float));
      done += r.count;
      if (uint64_t(done) * sizeof(float) == ts[next].bytes) {
        ++next;
        done = 0;
      }
    });
  };
  if (has_tiers(ctx_)) {
    tiers_stream_out(ctx_, SPW_BLOCK_PARAMS, take);
    if (block_state)
      tiers_stream_out(ctx_, SPW_BLOCK_OPTIMIZER, take);
  }
  failure.rethrow();
  storage::CheckpointWriteResult r = w.finish();
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

std::string Checkpointer::describe() const {
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

std::string Checkpointer::hparams() const {
  // Gradient clipping's max_norm shapes the trajectory as the rest do: a
  // resume with another one warns.
  std::string clip;
  if (ctx_->grad_clip.declared)
    clip = format(" grad_clip=%.17g", effective_grad_clip(ctx_));
  return adamw_string(hp_) + foam_string(ctx_) + clip;
}

namespace {

// A checkpoint's checksums say its bytes are the ones written, not that
// they make sense: anyone can recompute them. The writer never writes
// non-finite weights, so a NaN here was put there; refused at the resume,
// naming the tensor, instead of failing steps later. v may be +Inf (a
// finite gradient above 1.8e19 squares to it, and the update is then 0),
// never NaN or negative. `x` holds elements [begin, begin + n) of the
// tensor.
void check_restored(const std::string &dir, const ParamInfo &p, int kind,
                    const float *x, int64_t begin, int64_t n) {
  auto refuse = [&](const std::string &tensor, const std::string &shape,
                    const std::string &what, int64_t i) {
    fail("checkpoint '%s': %s %s holds %s at flat index %lld, which "
         "training never writes (its checksums match, so it was written "
         "so, or crafted): move it out of --checkpoint-dir to resume from "
         "the one before, or start a new --checkpoint-dir",
         dir.c_str(), tensor.c_str(), shape.c_str(), what.c_str(),
         (long long)i);
  };
  if (p.value->dtype != SPW_F32)
    return;
  const std::string sshape =
      shape_str(p.state_dims().data(), int(p.state_dims().size()));
  if (kind == kTensorValue) {
    const int64_t bad = first_non_finite(x, n);
    if (bad >= 0)
      refuse(format("parameter '%s'", p.name.c_str()), p.value->shape(),
             non_finite_name(x[bad]), begin + bad);
  } else if (kind == kTensorAdamM) {
    const int64_t bad = first_non_finite(x, n);
    if (bad >= 0)
      refuse(format("the first moment (adam_m) of '%s'", p.name.c_str()),
             sshape, non_finite_name(x[bad]), begin + bad);
  } else {
    for (int64_t i = 0; i < n; ++i)
      if (std::isnan(x[i]) || x[i] < 0)
        refuse(format("the second moment (adam_v) of '%s'", p.name.c_str()),
               sshape,
               std::isnan(x[i]) ? std::string("NaN")
                                : format("a negative value (%g)",
                                         double(x[i])),
               begin + i);
  }
}

} // namespace

// What restore() relies on, checked before anything is overwritten: every
// parameter there with the model's dtype and shape, the same model (the
// fingerprint), and each one's moments both or neither, of its state shape.
void Checkpointer::check_compatible(const storage::CheckpointReader &c) {
  const char *other = "; it was written for another model: pass another "
                      "--checkpoint-dir to train this one";
  size_t in_ckpt = 0;
  for (const storage::CheckpointTensor &t : c.tensors())
    in_ckpt += t.name.rfind("param/", 0) == 0;
  for (const ParamInfo &p : ctx_->params) {
    const storage::CheckpointTensor *t = c.find("param/" + p.name);
    if (!t)
      fail("checkpoint '%s' has no parameter '%s'%s", c.dir().c_str(),
           p.name.c_str(), other);
    const std::vector<int64_t> dims(p.value->dims,
                                    p.value->dims + p.value->rank);
    if (t->dtype != p.value->dtype || t->shape != dims)
      fail("checkpoint '%s': parameter '%s' is %s %s, the model's is %s "
           "%s%s",
           c.dir().c_str(), p.name.c_str(), dtype_name(t->dtype),
           shape_str(t->shape.data(), int(t->shape.size())).c_str(),
           dtype_name(p.value->dtype), p.value->shape().c_str(), other);
  }
  const std::string *fp = c.meta("model_fingerprint");
  if (in_ckpt != ctx_->params.size() || !fp ||
      *fp != model_fingerprint(ctx_))
    fail("checkpoint '%s' holds %zu parameters, the model has %zu (or "
         "they are declared in another order)%s",
         c.dir().c_str(), in_ckpt, ctx_->params.size(), other);
  for (const ParamInfo &p : ctx_->params) {
    const storage::CheckpointTensor *m = c.find("adam_m/" + p.name);
    const storage::CheckpointTensor *v = c.find("adam_v/" + p.name);
    if (!m && !v) // never updated yet
      continue;
    if (!m || !v || m->dtype != SPW_F32 || v->dtype != SPW_F32 ||
        m->shape != p.state_dims() || v->shape != p.state_dims())
      fail("checkpoint '%s': the %s state of '%s' is incomplete or of "
           "another shape than %s (was it written with another --optimizer "
           "or --foam-level?)%s",
           c.dir().c_str(), p.foam_level >= 0 ? "FOAM" : "AdamW",
           p.name.c_str(),
           shape_str(p.state_dims().data(), int(p.state_dims().size()))
               .c_str(),
           other);
  }
}

// The plain copies are read into new buffers and replace the old ones only
// once everything read and checked (a bad chunk then leaves them as they
// were, for an older checkpoint or the weights); an offload plan's blocks
// are read straight into their homes, block by block, which a fallback
// overwrites again in full. Memory: the plain copies once more (a run
// without a plan: its parameters and state), plus a block.
void Checkpointer::restore(storage::CheckpointReader &c) {
  auto read = [&](const storage::CheckpointTensor &t, uint64_t off,
                  uint64_t n, void *dst) {
    try {
      c.read(t, off, n, dst);
    } catch (const storage::CheckpointReadError &) {
      throw;
    } catch (const Error &e) {
      throw BadChunk(e.what());
    }
  };
  const std::vector<char> in_p = streamed(ctx_, SPW_BLOCK_PARAMS),
                          in_o = streamed(ctx_, SPW_BLOCK_OPTIMIZER);
  struct Plain {
    Buffer value; // null: the value streams into a block
    std::vector<float> m, v;
    bool state = false; // m and v restored (else: cleared)
  };
  std::vector<Plain> plain(ctx_->params.size());
  std::string bad; // this rank's bad chunk
  try {
    for (size_t i = 0; i < ctx_->params.size(); ++i) {
      const ParamInfo &p = ctx_->params[i];
      Plain &q = plain[i];
      if (!in_p[i]) {
        const storage::CheckpointTensor *t = c.find("param/" + p.name);
        q.value = alloc_buffer(std::max<int64_t>(1, p.value->bytes()));
        read(*t, 0, t->bytes, q.value.get());
        if (p.value->dtype == SPW_F32)
          check_restored(c.dir(), p, kTensorValue,
                         reinterpret_cast<const float *>(q.value.get()), 0,
                         p.value->numel);
      }
      const storage::CheckpointTensor *m = c.find("adam_m/" + p.name);
      const storage::CheckpointTensor *v = c.find("adam_v/" + p.name);
      if (!in_o[i] && m && v) {
        q.state = true;
        q.m.resize(size_t(p.state_numel()));
        q.v.resize(size_t(p.state_numel()));
        read(*m, 0, m->bytes, q.m.data());
        read(*v, 0, v->bytes, q.v.data());
        check_restored(c.dir(), p, kTensorAdamM, q.m.data(), 0,
                       int64_t(q.m.size()));
        check_restored(c.dir(), p, kTensorAdamV, q.v.data(), 0,
                       int64_t(q.v.size()));
      }
    }
  } catch (const BadChunk &e) {
    bad = e.what();
  }
  // Every rank streams its blocks in whatever it found so far: a plan
  // whose masters are cut for the ranks all-gathers the working copies
  // there (collective), so a rank must not skip it for a bad chunk.
  try {
    if (has_tiers(ctx_)) {
      FirstFailure failure;
      auto fill = [&](const BlockRange &r) {
        const uint64_t bytes = uint64_t(r.count) * sizeof(float);
        if (failure.e || !bad.empty()) {
          std::memset(r.data, 0, size_t(bytes)); // overwritten again later
          return;
        }
        failure.run([&] {
          const ParamInfo &p = ctx_->params[size_t(r.param)];
          const char *prefix = r.kind == kTensorValue   ? "param/"
                               : r.kind == kTensorAdamM ? "adam_m/"
                                                        : "adam_v/";
          const storage::CheckpointTensor *t = c.find(prefix + p.name);
          if (!t) { // no state yet (never updated): fresh, zeros
            std::memset(r.data, 0, size_t(bytes));
            return;
          }
          read(*t, uint64_t(r.begin) * sizeof(float), bytes, r.data);
          check_restored(c.dir(), p, r.kind, static_cast<const float *>(r.data),
                         r.begin, r.count);
        });
        if (failure.e)
          std::memset(r.data, 0, size_t(bytes));
      };
      tiers_stream_in(ctx_, SPW_BLOCK_PARAMS, fill);
      tiers_stream_in(ctx_, SPW_BLOCK_OPTIMIZER, fill);
      failure.rethrow();
    }
  } catch (const BadChunk &e) {
    if (bad.empty())
      bad = e.what();
  }
  // A sharded plan's ranks read different chunks (each its shard of the
  // moments): a chunk bad on any rank skips the checkpoint on every rank,
  // before any of them takes its plain copies.
  if (dist::active()) {
    const std::vector<uint64_t> failed = dist::allgather(bad.empty() ? 0 : 1);
    std::string ranks;
    int count = 0;
    for (size_t r = 0; r < failed.size(); ++r)
      if (failed[r] && int(r) != dist::rank()) {
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
        ++count;
      }
    if (!bad.empty() && dist::rank() != 0)
      std::fprintf(stderr, "rank %d: warning: checkpoint '%s': %s\n",
                   dist::rank(), c.dir().c_str(), bad.c_str());
    if (bad.empty() && count)
      bad = format("rank%s %s found a bad chunk in %s part of it (%s "
                   "warning says which)",
                   count > 1 ? "s" : "", ranks.c_str(),
                   count > 1 ? "their" : "its", count > 1 ? "their" : "its");
  }
  if (!bad.empty())
    throw BadChunk(bad);
  for (size_t i = 0; i < ctx_->params.size(); ++i) {
    ParamInfo &p = ctx_->params[i];
    Plain &q = plain[i];
    if (q.value && p.value->bytes())
      std::memcpy(p.value->data, q.value.get(), size_t(p.value->bytes()));
    if (in_o[i])
      continue;
    if (q.state) {
      p.adam_m = std::move(q.m);
      p.adam_v = std::move(q.v);
      // ZeRO: this rank keeps its shard.
      zero::keep_shard(p, p.adam_m);
      zero::keep_shard(p, p.adam_v);
    } else {
      p.adam_m.clear();
      p.adam_v.clear();
    }
  }
}

} // namespace spw::driver
