//===- checkpoints.cpp - writing and restoring training state -------------===//

#include "driver/checkpoints.h"
#include "driver/driver.h"
#include "tiers.h"

#include <chrono>
#include <cmath>
#include <cstdio>
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
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
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
                           const AdamWHparams &hp)
    : ctx_(ctx), o_(o), hp_(hp), inputs_(inputs_digest(ctx)) {
  // First: a second run on the same directory is refused before anything.
  lock_ = std::make_unique<storage::CheckpointDirLock>(o.checkpoint_dir);
  copts_.zstd = o.checkpoint_zstd;
  copts_.keep = int(o.keep_checkpoints);
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

int64_t Checkpointer::start() {
  const std::string &dir = o_.checkpoint_dir;
  if (!o_.resume) {
    auto existing = storage::list_checkpoints(dir);
    if (!existing.empty())
      fail("--checkpoint-dir '%s' already holds checkpoints (the newest: "
           "'%s'): pass --resume to continue that run, or choose another "
           "directory",
           dir.c_str(), existing.front().second.c_str());
    return 0;
  }
  std::optional<storage::LoadedCheckpoint> c =
      storage::load_newest_checkpoint(*engine_, dir, copts_);
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
         c->dir.c_str(), k->c_str(), optimizer_kind(ctx_).c_str());
  restore(*c);
  check_restored(c->dir);
  if (c->step > o_.steps)
    fail("checkpoint '%s' is at step %lld, beyond --steps %lld (--steps "
         "is the total step count, not the number of steps to add)",
         c->dir.c_str(), (long long)c->step, (long long)o_.steps);
  std::printf("  resume: from '%s' (step %lld of %lld)\n", c->dir.c_str(),
              (long long)c->step, (long long)o_.steps);
  if (const std::string *h = c->meta("adamw"); h && *h != hparams())
    std::fprintf(stderr,
                 "warning: checkpoint '%s' was written with AdamW %s; this "
                 "run uses %s, so it will not reproduce the interrupted "
                 "run\n",
                 c->dir.c_str(), h->c_str(), hparams().c_str());
  if (const std::string *h = c->meta("inputs");
      h && *h != inputs_)
    std::fprintf(stderr,
                 "warning: checkpoint '%s' was written with other --input "
                 "data; this run will not reproduce the interrupted run\n",
                 c->dir.c_str());
  return c->step;
}

void Checkpointer::write(int64_t step, bool report) {
  using storage::CheckpointTensorRef;
  if (has_tiers(ctx_))
    tiers_gather(ctx_);
  device_pull(ctx_);
  check_finite_weights(ctx_, "the checkpoint");
  std::vector<CheckpointTensorRef> ts;
  for (const ParamInfo &p : ctx_->params) {
    const std::vector<int64_t> dims(p.value->dims,
                                    p.value->dims + p.value->rank);
    ts.push_back({"param/" + p.name, p.value->dtype, dims, p.value->data,
                  uint64_t(p.value->bytes())});
    if (!p.adam_m.empty()) {
      // FOAM's folded moments keep their own [rows, folded] shape.
      const std::vector<int64_t> sdims = p.state_dims();
      ts.push_back({"adam_m/" + p.name, SPW_F32, sdims, p.adam_m.data(),
                    p.adam_m.size() * sizeof(float)});
      ts.push_back({"adam_v/" + p.name, SPW_F32, sdims, p.adam_v.data(),
                    p.adam_v.size() * sizeof(float)});
    }
  }
  const storage::Metadata meta = {
      {"model_fingerprint", model_fingerprint(ctx_)},
      {"parameters", std::to_string(ctx_->params.size())},
      {"adamw", hparams()},
      {"optimizer", optimizer_kind(ctx_)},
      {"inputs", inputs_},
      {"steps", std::to_string(o_.steps)}};
  const auto t0 = std::chrono::steady_clock::now();
  storage::CheckpointWriteResult r = storage::write_checkpoint(
      *engine_, o_.checkpoint_dir, step, ts, meta, copts_);
  if (has_tiers(ctx_))
    tiers_release_copies(ctx_);
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
  return adamw_string(hp_) + foam_string(ctx_);
}

// A checkpoint's checksums say its bytes are the ones written, not that
// they make sense: anyone can recompute them. The writer never writes
// non-finite weights, so a NaN here was put there; refused at the resume,
// naming the tensor, instead of failing steps later. v may be +Inf (a
// finite gradient above 1.8e19 squares to it, and the update is then 0),
// never NaN or negative.
void Checkpointer::check_restored(const std::string &dir) {
  auto refuse = [&](const std::string &tensor, const char *shape,
                    const char *what, int64_t i) {
    fail("checkpoint '%s': %s %s holds %s at flat index %lld, which "
         "training never writes (its checksums match, so it was written "
         "so, or crafted): move it out of --checkpoint-dir to resume from "
         "the one before, or start a new --checkpoint-dir",
         dir.c_str(), tensor.c_str(), shape, what, (long long)i);
  };
  for (const ParamInfo &p : ctx_->params) {
    if (p.value->dtype != SPW_F32)
      continue;
    const float *w = p.value->as<float>();
    const int64_t bad = first_non_finite(w, p.value->numel);
    if (bad >= 0)
      refuse(format("parameter '%s'", p.name.c_str()),
             p.value->shape().c_str(), non_finite_name(w[bad]), bad);
    const std::string sshape =
        shape_str(p.state_dims().data(), int(p.state_dims().size()));
    const int64_t m_bad =
        first_non_finite(p.adam_m.data(), int64_t(p.adam_m.size()));
    if (m_bad >= 0)
      refuse(format("the first moment (adam_m) of '%s'", p.name.c_str()),
             sshape.c_str(), non_finite_name(p.adam_m[size_t(m_bad)]),
             m_bad);
    for (size_t i = 0; i < p.adam_v.size(); ++i)
      if (std::isnan(p.adam_v[i]) || p.adam_v[i] < 0)
        refuse(format("the second moment (adam_v) of '%s'", p.name.c_str()),
               sshape.c_str(),
               std::isnan(p.adam_v[i])
                   ? "NaN"
                   : format("a negative value (%g)", double(p.adam_v[i]))
                         .c_str(),
               int64_t(i));
  }
}

void Checkpointer::restore(const storage::LoadedCheckpoint &c) {
  const char *other = "; it was written for another model: pass another "
                      "--checkpoint-dir to train this one";
  size_t in_ckpt = 0;
  for (const storage::CheckpointTensor &t : c.tensors)
    in_ckpt += t.name.rfind("param/", 0) == 0;
  for (const ParamInfo &p : ctx_->params) {
    const storage::CheckpointTensor *t = c.find("param/" + p.name);
    if (!t)
      fail("checkpoint '%s' has no parameter '%s'%s", c.dir.c_str(),
           p.name.c_str(), other);
    const std::vector<int64_t> dims(p.value->dims,
                                    p.value->dims + p.value->rank);
    if (t->dtype != p.value->dtype || t->shape != dims)
      fail("checkpoint '%s': parameter '%s' is %s %s, the model's is %s "
           "%s%s",
           c.dir.c_str(), p.name.c_str(), dtype_name(t->dtype),
           shape_str(t->shape.data(), int(t->shape.size())).c_str(),
           dtype_name(p.value->dtype), p.value->shape().c_str(), other);
  }
  const std::string *fp = c.meta("model_fingerprint");
  if (in_ckpt != ctx_->params.size() || !fp ||
      *fp != model_fingerprint(ctx_))
    fail("checkpoint '%s' holds %zu parameters, the model has %zu (or "
         "they are declared in another order)%s",
         c.dir.c_str(), in_ckpt, ctx_->params.size(), other);
  for (ParamInfo &p : ctx_->params) {
    const storage::CheckpointTensor *t = c.find("param/" + p.name);
    if (t->bytes)
      std::memcpy(p.value->data, c.data(*t), size_t(t->bytes));
    const storage::CheckpointTensor *m = c.find("adam_m/" + p.name);
    const storage::CheckpointTensor *v = c.find("adam_v/" + p.name);
    if (!m && !v) { // never updated yet
      p.adam_m.clear();
      p.adam_v.clear();
      continue;
    }
    const uint64_t want = uint64_t(p.state_numel()) * sizeof(float);
    if (!m || !v || m->dtype != SPW_F32 || v->dtype != SPW_F32 ||
        m->shape != p.state_dims() || v->shape != p.state_dims())
      fail("checkpoint '%s': the %s state of '%s' is incomplete or of "
           "another shape than %s (was it written with another --optimizer "
           "or --foam-level?)%s",
           c.dir.c_str(), p.foam_level >= 0 ? "FOAM" : "AdamW",
           p.name.c_str(),
           shape_str(p.state_dims().data(), int(p.state_dims().size()))
               .c_str(),
           other);
    p.adam_m.resize(size_t(p.state_numel()));
    p.adam_v.resize(size_t(p.state_numel()));
    if (want) {
      std::memcpy(p.adam_m.data(), c.data(*m), size_t(want));
      std::memcpy(p.adam_v.data(), c.data(*v), size_t(want));
    }
  }
}

} // namespace spw::driver
