//===- train.cpp - the training loop --------------------------------------===//

#include "driver/checkpoints.h"
#include "driver/driver.h"

#include "dist/dist.h"
#include "dist/zero.h"
#include "tiers.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>

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
  if (has_tiers(ctx) && ctx->failed())
    tiers_step_failed(ctx);
  if (ctx->failed())
    fail("%s: %s", label.c_str(), ctx->error.c_str());
  if (!ctx->loss)
    fail("%s: the model did not set a loss (spw_set_loss)", label.c_str());
  float loss = 0.0f;
  read_tensor(ctx, *ctx->loss, &loss);
  // Data parallel: the loss one process with every rank's rows would log,
  // the mean of the ranks' (as the micro-batch mean: a float32 sum over
  // the replicas divided by their count).
  if (dist::active()) {
    dist::allreduce_sum(&loss, 1);
    loss = loss / float(dist::size());
  }
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

// A parameter that is not finite: nothing is written, nor rescued.
struct NonFiniteWeights : Error {
  using Error::Error;
};

// A file written in pieces at offsets (pwrite), with write_file_atomic's
// protocol: DEST.tmp.PID (what a dead writer of DEST left is removed
// first), fsync, rename over DEST (a symlink's target), fsync the directory;
// or, `direct`, a new file created exclusively at DEST (a rescue copy), as
// write_file_synced writes one. Destroyed uncommitted, it removes what it
// made.
class StreamedFile {
public:
  StreamedFile(const std::string &given, bool direct) {
    path_ = direct ? given : resolve_symlinks(given);
    if (direct) {
      tmp_ = path_;
    } else {
      struct stat st;
      if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
        fail("'%s' is %s; refusing to replace it with a regular file",
             path_.c_str(), file_kind(st.st_mode));
      const size_t slash = path_.find_last_of('/');
      remove_files_of_dead_writers(
          slash == std::string::npos ? "."
          : slash == 0               ? "/"
                                     : path_.substr(0, slash),
          (slash == std::string::npos ? path_ : path_.substr(slash + 1)) +
              ".tmp.",
          '\0');
      tmp_ = path_ + ".tmp." + std::to_string(::getpid());
      // A new file: whatever has this name is not opened.
      ::unlink(tmp_.c_str());
      if (test_write_fault(given))
        fail("cannot write '%s' at offset 0: %s (SPILLWAY_TEST_ENOSPC)",
             tmp_.c_str(), std::strerror(ENOSPC));
    }
    // O_NONBLOCK: a FIFO there fails to open instead of waiting.
    fd_ = ::open(tmp_.c_str(),
                 O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NONBLOCK |
                     O_NOCTTY,
                 0644);
    if (fd_ < 0)
      fail("cannot create '%s': %s", tmp_.c_str(), std::strerror(errno));
  }
  ~StreamedFile() {
    if (fd_ >= 0)
      ::close(fd_);
    if (!committed_)
      ::unlink(tmp_.c_str());
  }
  StreamedFile(const StreamedFile &) = delete;
  StreamedFile &operator=(const StreamedFile &) = delete;

  void write(uint64_t at, const void *data, uint64_t n) {
    const char *p = static_cast<const char *>(data);
    uint64_t done = 0;
    while (done < n) {
      const ssize_t k =
          ::pwrite(fd_, p + done, size_t(std::min<uint64_t>(n - done, 1 << 30)),
                   off_t(at + done));
      if (k < 0 && errno == EINTR)
        continue;
      if (k <= 0)
        fail("cannot write '%s' at offset %llu: %s", tmp_.c_str(),
             (unsigned long long)(at + done),
             std::strerror(k < 0 ? errno : ENOSPC));
      done += uint64_t(k);
    }
  }

  void commit() {
    if (::fsync(fd_) != 0)
      fail("cannot fsync '%s': %s", tmp_.c_str(), std::strerror(errno));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0)
      fail("cannot close '%s': %s", tmp_.c_str(), std::strerror(errno));
    if (tmp_ != path_ && ::rename(tmp_.c_str(), path_.c_str()) != 0)
      fail("cannot rename '%s' to '%s': %s", tmp_.c_str(), path_.c_str(),
           std::strerror(errno));
    committed_ = true;
    // Make the rename durable; failure here is not worth failing the run
    // for (some file systems refuse fsync on directories).
    std::string dir = path_.substr(0, path_.find_last_of('/') + 1);
    const int dfd = ::open(dir.empty() ? "." : dir.c_str(),
                           O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
  }

private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// An offload plan whose masters are cut for ZeRO's ranks streams the values
// from every rank's shards: each write of them is collective. Rank 0 says
// before each stream whether one follows (1) or not (0, when save_params
// is done); the other ranks take part in each (join_save).
bool collective_writes(const spw_ctx *ctx) {
  return dist::active() && tiers_shards_masters(ctx);
}
// Set when such a stream failed here by itself (a block that could not be
// read, not this file): the other ranks are still inside it, so this rank
// starts no other collective; its error ends the job (main aborts it).
bool g_stream_broken = false;
void announce_write(const spw_ctx *ctx, int32_t more) {
  if (collective_writes(ctx) && !g_stream_broken)
    dist::broadcast(&more, sizeof more);
}

// The parameters' values as .safetensors (safetensors_bytes' layout, byte
// for byte): the header from their names and shapes, then each one's bytes
// at its offset, the plain copies (after device_pull) from memory and an
// offload plan's blocks one at a time from their homes (tiers_stream_out).
// Memory: the header and a block, whatever the model's size. Throws
// NonFiniteWeights (and writes nothing usable) when a value is not finite.
void write_params(spw_ctx *ctx, const std::string &path, bool direct,
                  const char *what) {
  std::vector<char> in_p(ctx->params.size(), 0);
  for (int32_t i : tiers_stream_members(ctx, SPW_BLOCK_PARAMS))
    in_p[size_t(i)] = 1;
  auto check = [&](const ParamInfo &p, const float *w, int64_t begin,
                   int64_t n) {
    try {
      check_finite_range(ctx, p, w, begin, n, what);
    } catch (const Error &e) {
      throw NonFiniteWeights(e.what());
    }
  };
  for (size_t i = 0; i < ctx->params.size(); ++i) {
    const ParamInfo &p = ctx->params[i];
    if (!in_p[i] && p.value->dtype == SPW_F32)
      check(p, p.value->as<float>(), 0, p.value->numel);
  }
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  // Each parameter's copies: under its name and its ties' (state_dict has
  // both, and safetensors has no shared tensors).
  std::vector<std::vector<uint64_t>> at(ctx->params.size());
  uint64_t offset = 0;
  for (size_t i = 0; i < ctx->params.size(); ++i) {
    const ParamInfo &p = ctx->params[i];
    const spw_tensor &t = *p.value;
    std::vector<std::string> names{saved_name(ctx, p.name)};
    for (const std::string &a : p.aliases)
      names.push_back(saved_name(ctx, a));
    for (const std::string &name : names) {
      header += "," + json_string(name) + ":{\"dtype\":\"" +
                safetensors_dtype(t.dtype) + "\",\"shape\":[";
      for (int d = 0; d < t.rank; ++d)
        header += (d ? "," : "") + std::to_string(t.dims[d]);
      header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
                std::to_string(offset + uint64_t(t.bytes())) + "]}";
      at[i].push_back(offset);
      offset += uint64_t(t.bytes());
    }
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string head;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    head += char((n >> (8 * i)) & 0xff);
  head += header;
  const uint64_t data0 = head.size();
  StreamedFile f(path, direct);
  f.write(0, head.data(), head.size());
  for (size_t i = 0; i < ctx->params.size(); ++i)
    if (!in_p[i] && ctx->params[i].value->bytes())
      for (uint64_t a : at[i])
        f.write(data0 + a, ctx->params[i].value->data,
                uint64_t(ctx->params[i].value->bytes()));
  if (has_tiers(ctx)) {
    // The stream's callback must not throw (the block would not go back
    // to its home properly): the first failure ends the work, then rises.
    std::exception_ptr failure;
    std::vector<int64_t> streamed(ctx->params.size(), 0);
    announce_write(ctx, 1);
    try {
      tiers_stream_out(ctx, SPW_BLOCK_PARAMS, [&](const BlockRange &r) {
        if (failure)
          return;
        try {
          const float *w = static_cast<const float *>(r.data);
          check(ctx->params[size_t(r.param)], w, r.begin, r.count);
          for (uint64_t a : at[size_t(r.param)])
            f.write(data0 + a + uint64_t(r.begin) * 4, w,
                    uint64_t(r.count) * 4);
          streamed[size_t(r.param)] += r.count;
        } catch (...) {
          failure = std::current_exception();
        }
      });
    } catch (const Error &e) {
      if (!collective_writes(ctx))
        throw;
      g_stream_broken = true;
      fail("%s: %s; the other ranks are still sending their shards of the "
           "master weights, so no rescue copy can be written: resume the job "
           "from its last complete checkpoint if it wrote any, else run it "
           "again",
           what, e.what());
    } catch (...) {
      g_stream_broken = collective_writes(ctx);
      throw;
    }
    if (failure)
      std::rethrow_exception(failure);
    // Every element of every block's parameter, or the file would hold
    // zeros where the stream missed some.
    for (size_t i = 0; i < ctx->params.size(); ++i)
      if (in_p[i] && streamed[i] != ctx->params[i].value->numel)
        fail("%s: parameter '%s' streamed %lld of its %lld elements from "
             "the offload plan's blocks",
             what, ctx->params[i].name.c_str(), (long long)streamed[i],
             (long long)ctx->params[i].value->numel);
  }
  f.commit();
}

// Writes the trained weights that could not go where they were asked to,
// streamed as write_params does, so the run's result is not lost: to
// $TMPDIR (else /tmp), else the current directory, under a new name.
// Returns the path, or "" when nothing took them. NonFiniteWeights passes through.
std::string rescue_params(spw_ctx *ctx, const std::string &asked) {
  std::string base = std::filesystem::path(asked).filename().string();
  if (base.empty())
    base = "weights.safetensors";
  const std::string name = format("%s.rescued-%ld.safetensors", base.c_str(),
                                  long(::getpid()));
  const char *tmp = std::getenv("TMPDIR");
  for (std::string dir : {std::string(tmp && *tmp ? tmp : "/tmp"),
                          std::string(".")}) {
    const std::string path = dir + "/" + name;
    try {
      write_params(ctx, path, /*direct=*/true, "the rescue copy");
      return path;
    } catch (const NonFiniteWeights &) {
      throw;
    } catch (const Error &) {
      if (g_stream_broken)
        throw;
    }
  }
  return {};
}

} // namespace

void join_save(spw_ctx *ctx) {
  if (!collective_writes(ctx))
    return;
  device_pull(ctx);
  for (;;) {
    int32_t more = 0;
    dist::broadcast(&more, sizeof more);
    if (!more)
      return;
    tiers_stream_out(ctx, SPW_BLOCK_PARAMS, [](const BlockRange &) {});
  }
}

// Writes the final parameters to --save; when that fails at the end of a
// run, to a rescue path, named in the error.
void save_params(spw_ctx *ctx, const std::string &path) {
  // However it ends, the other ranks hear that no write follows.
  struct Done {
    const spw_ctx *ctx;
    ~Done() {
      try {
        announce_write(ctx, 0);
      } catch (const Error &) {
        // A rank is gone: the job fails anyway.
      }
    }
  } done{ctx};
  device_pull(ctx);
  try {
    write_params(ctx, path, /*direct=*/false, "--save");
  } catch (const NonFiniteWeights &) {
    throw;
  } catch (const Error &e) {
    if (g_stream_broken) // no other rank can take part in another write
      throw;
    const std::string rescued = rescue_params(ctx, path);
    if (rescued.empty())
      fail("--save: %s; writing the weights to $TMPDIR, /tmp or the current "
           "directory failed too: they are lost",
           e.what());
    fail("--save: %s; the trained weights were written to '%s' instead",
         e.what(), rescued.c_str());
  }
  std::printf("saved %zu parameters to %s\n", ctx->params.size(),
              path.c_str());
  for (const ParamInfo &p : ctx->params) {
    if (p.folded_from.empty())
      continue;
    const std::string source = saved_name(ctx, p.folded_from);
    std::fprintf(stderr,
                 "note: --save wrote '%s' %s under its own name: it is the "
                 "rows of the model's '%s' the export reads (the exporter's "
                 "optimizer folded the parameter into them); compile with "
                 "spillwayc --exported-state-dict FILE to train and save "
                 "'%s' whole\n",
                 saved_name(ctx, p.name).c_str(), p.value->shape().c_str(),
                 source.c_str(), source.c_str());
  }
}

namespace {

// Applies the deferred updates of parameters `only` (spw_adamw_flush with
// the others' set aside).
void apply_deferred(spw_ctx *ctx, const std::vector<int32_t> &only) {
  std::vector<char> keep(ctx->params.size(), 0);
  for (int32_t i : only)
    keep[size_t(i)] = 1;
  std::vector<std::vector<PendingAdamW>> aside(ctx->params.size());
  for (size_t i = 0; i < ctx->params.size(); ++i)
    if (!keep[i])
      aside[i].swap(ctx->params[i].pending);
  ctx->error.clear();
  spw_adamw_flush(ctx);
  for (size_t i = 0; i < ctx->params.size(); ++i)
    if (!keep[i])
      aside[i].swap(ctx->params[i].pending);
  if (ctx->failed())
    fail("%s", ctx->error.c_str());
}

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
  if (!has_tiers(ctx)) {
    ctx->error.clear();
    spw_adamw_flush(ctx);
    if (ctx->failed())
      fail("%s", ctx->error.c_str());
    return;
  }
  // An offload plan's parameters and state live in its blocks: a layer at
  // a time on copies bound as a step binds them (outside the steps, so the
  // per-step bytes stay the plan's), never the whole model gathered.
  tiers_flush_deferred(ctx, [&](const std::vector<int32_t> &members) {
    apply_deferred(ctx, members);
  });
  std::vector<int32_t> rest; // parameters no params block holds
  for (size_t i = 0; i < ctx->params.size(); ++i)
    if (!ctx->params[i].pending.empty())
      rest.push_back(int32_t(i));
  if (!rest.empty())
    apply_deferred(ctx, rest);
}

// Test-only: SPILLWAY_TEST_KILL_RANK=R:S[:TERM] sends rank R (of a job or
// alone, R = 0) SIGKILL (or SIGTERM, as mpirun stops a rank) once step S is
// done (S = 0: before the first step), as `kill -9` (`kill`) would.
void test_kill_hook(int64_t s) {
  if (const char *k = std::getenv("SPILLWAY_TEST_KILL_RANK")) {
    long long r = -1, at = -1;
    char sig[8] = {};
    if (std::sscanf(k, "%lld:%lld:%7s", &r, &at, sig) >= 2 &&
        r == dist::rank() && at == s) {
      flush_stdout();
      std::raise(std::strcmp(sig, "TERM") == 0 ? SIGTERM : SIGKILL);
    }
  }
}

// An output failed during the run (a checkpoint, a --log-json line): the
// weights of the steps run so far go to --save, or to a rescue path, before
// the error ends the run. Deferred updates are applied first (they belong to
// the weights of the steps run).
// What to do when the weights of a job's steps cannot be written.
std::string go_on_from(const Options &o) {
  return o.checkpoint_dir.empty()
             ? "this job writes no checkpoints: run it again (with "
               "--checkpoint-dir DIR, a job that fails resumes from its last "
               "complete checkpoint)"
             : "resume the job from its last complete checkpoint (--resume)";
}

[[noreturn]] void output_failed(spw_ctx *ctx, const Options &o,
                                const Error &e) {
  // ZeRO: applying a deferred update is collective (each rank updates its
  // shard and they all-gather); this rank alone cannot finish them.
  if (dist::active() && zero::active(ctx) &&
      std::any_of(ctx->params.begin(), ctx->params.end(),
                  [](const ParamInfo &p) { return !p.pending.empty(); }))
    fail("%s; the weights after step %lld are not written: with --zero 1 "
         "the optimizer overlap's pending updates are every rank's to apply; "
         "%s",
         e.what(), (long long)ctx->step, go_on_from(o).c_str());
  // Masters cut for the ranks: every rank holds a shard of the values.
  if (dist::active() && tiers_shards_masters(ctx))
    fail("%s; the weights after step %lld are not written: this offload "
         "plan's master weights are sharded over the ranks (spillwayc --zero "
         "1 --ranks %d --precision bf16-mixed), which one rank cannot write "
         "alone; %s",
         e.what(), (long long)ctx->step, dist::size(), go_on_from(o).c_str());
  flush_deferred_updates(ctx);
  device_pull(ctx);
  // Streamed from the homes like --save; a non-finite parameter: nothing
  // worth keeping.
  std::string to;
  try {
    if (!o.save.empty()) {
      try {
        write_params(ctx, o.save, /*direct=*/false, "--save");
        to = o.save;
      } catch (const NonFiniteWeights &) {
        throw;
      } catch (const Error &) {
      }
    }
    if (to.empty())
      to = rescue_params(ctx, o.save.empty() ? "weights.safetensors" : o.save);
  } catch (const NonFiniteWeights &) {
    throw e;
  }
  if (to.empty())
    throw e;
  fail("%s; the weights after step %lld were written to '%s' (pass them as "
       "--weights to go on)",
       e.what(), (long long)ctx->step, to.c_str());
}

} // namespace

double scheduled_lr(const Options &o, double lr, int64_t step) {
  // nanoGPT's get_lr(it), it = step - 1, lr_decay_iters = --steps.
  const int64_t it = step - 1;
  if (it < o.warmup)
    return lr * double(it + 1) / double(o.warmup + 1);
  if (!o.cosine)
    return lr;
  if (it >= o.steps)
    return o.min_lr;
  const double ratio = double(it - o.warmup) / double(o.steps - o.warmup);
  const double coeff = 0.5 * (1.0 + std::cos(M_PI * ratio));
  return o.min_lr + coeff * (lr - o.min_lr);
}

std::string lr_schedule_string(const Options &o, double lr) {
  std::string s;
  if (o.warmup)
    s = format("linear warmup over %lld steps (lr * s / %lld at step s), "
               "then ",
               (long long)o.warmup, (long long)(o.warmup + 1));
  if (o.cosine)
    s += format("cosine from %g to %g at step %lld", lr, o.min_lr,
                (long long)(o.steps + 1));
  else
    s += format("constant %g", lr);
  return s;
}

namespace {

// "950", "12.3k", "4.56M", "1.23G", ...
std::string si(double v) {
  const char *units[] = {"", "k", "M", "G", "T", "P", "E"};
  int u = 0;
  while (std::fabs(v) >= 1000 && u < 6) {
    v /= 1000;
    ++u;
  }
  return u == 0 ? format("%.0f", v) : format("%.3g%s", v, units[u]);
}
// "950 ", "12.3 k", "4.56 M": a prefix for a unit.
std::string si_prefix(double v) {
  std::string s = si(v);
  if (!s.empty() && std::isalpha(static_cast<unsigned char>(s.back())))
    s.insert(s.size() - 1, " ");
  else
    s += " ";
  return s;
}

// "12.3s", "4m05s", "2h03m".
std::string duration(double s) {
  if (!std::isfinite(s) || s < 0)
    return "?";
  if (s < 60)
    return format("%.1fs", s);
  const long long t = (long long)std::llround(s);
  if (t < 3600)
    return format("%lldm%02llds", t / 60, t % 60);
  return format("%lldh%02lldm", t / 3600, (t % 3600) / 60);
}

// The mean loss over --eval-batches validation batches of the weights after
// step `s`: the step without its update (evaluate_only: the gradients are
// computed and dropped). Deferred updates are applied first, as before a
// checkpoint: they belong to these weights, and applying them now or a step
// later gives the same bits, so evaluating does not change the training.
double evaluate(spw_ctx *ctx, const Options &o, DataFeed &data, int64_t s) {
  const auto t0 = std::chrono::steady_clock::now();
  flush_deferred_updates(ctx);
  ctx->evaluate_only = true;
  // An offload plan runs the steps as planned, outside its statistics.
  if (has_tiers(ctx))
    tiers_count_steps(ctx, false);
  struct Restore {
    spw_ctx *c;
    DataFeed &d;
    std::chrono::steady_clock::time_point t0;
    ~Restore() {
      c->evaluate_only = false;
      if (has_tiers(c))
        tiers_count_steps(c, true);
      d.eval_seconds += std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - t0)
                            .count();
    }
  } restore{ctx, data, t0};
  double sum = 0;
  for (int64_t k = 0; k < o.eval_batches; ++k) {
    data.feed_val(ctx, k);
    const std::string label =
        format("validation batch %lld after step %lld", (long long)k,
               (long long)s);
    try {
      sum += double(run_step(ctx, s - 1, label));
    } catch (const Error &e) {
      const std::string why = e.what();
      if (why.find("out of range") == std::string::npos)
        throw;
      fail("%s%s", why.c_str(), data.context().c_str());
    }
  }
  return sum / double(o.eval_batches);
}

} // namespace

// Runs steps start+1 .. o.steps (`start` > 0 after a resume), checkpointing
// when `ck` is given; the weights it leaves have no update pending.
int train(spw_ctx *ctx, const Options &o, const AdamWHparams &hp,
          Checkpointer *ck, int64_t start, DataFeed &data) {
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
  // Tokens a step trains on (0: no token input to count), and the model's
  // FLOPs per token by the usual estimate, 6 * parameters (forward 2,
  // backward 4; attention's own FLOPs left out). Data parallel: the job's,
  // every rank's tokens (rank 0 prints for the job).
  const int64_t tokens = tokens_per_step(ctx, data) * dist::size();
  double params = 0;
  for (const ParamInfo &p : ctx->params)
    params += double(p.value->numel);
  const bool scheduled = o.cosine || o.warmup;
  // The schedule sets each step's learning rate as the --lr flag would:
  // the update reads it when the step runs it, and a deferred update keeps
  // its step's (PendingAdamW::h).
  const std::optional<double> flag_lr = ctx->overrides.lr;
  struct RestoreLr {
    spw_ctx *c;
    std::optional<double> lr;
    ~RestoreLr() { c->overrides.lr = lr; }
  } restore_lr{ctx, flag_lr};
  const auto t0 = std::chrono::steady_clock::now();
  // The steps' exchanges, not the start's (sharded masters' working copies
  // are all-gathered when the weights are loaded).
  const dist::Traffic before = dist::traffic();
  // On a device the first steps also reserve the arena and pick GEMM
  // algorithms: the steady state is timed from the end of the second.
  std::chrono::steady_clock::time_point warm;
  float loss = NAN, prev_loss = NAN, first_loss = NAN;
  // The host copies are the weights only on the CPU without an offload
  // plan; elsewhere they are checked before each checkpoint and --save.
  const bool scan_weights = ctx->device->host_visible() && !has_tiers(ctx);
  test_kill_hook(0);
  // From here a rank stopped by its launcher has trained (its SIGTERM line
  // says to resume).
  dist::training_started();
  for (int64_t s = start + 1; s <= o.steps; ++s) {
    ctx->step = s;
    prev_loss = loss;
    const double lr = scheduled ? scheduled_lr(o, hp.lr, s) : hp.lr;
    if (scheduled)
      ctx->overrides.lr = lr;
    if (data)
      data.feed_train(ctx);
    // A loss that grew before it (or a gradient) broke is a divergence,
    // which the learning rate causes; one that breaks from a steady value
    // more likely meets data or an operation undefined on it.
    const bool grew = s > start + 2 && std::isfinite(first_loss) &&
                      std::fabs(prev_loss) > 4 * std::fabs(first_loss) + 1e-6;
    const std::string growth =
        grew ? format("the loss grew from %g (step %lld) to %g (step %lld): "
                      "the training diverged; lower --lr (now %g)",
                      double(first_loss), (long long)(start + 1),
                      double(prev_loss), (long long)(s - 1),
                      lr)
             : std::string();
    try {
      loss = run_step(ctx, s - 1, format("step %lld", (long long)s));
    } catch (const Error &e) {
      // An index out of range on a --data batch: a token the model's
      // vocabulary does not have.
      if (data && std::string(e.what()).find("out of range") !=
                      std::string::npos)
        fail("%s%s", e.what(), data.context().c_str());
      if (!grew)
        throw;
      fail("%s; %s", e.what(), growth.c_str());
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    const double eta =
        elapsed / double(s - start) * double(o.steps - s);
    const double tok_s = elapsed > 0 ? double(tokens * (s - start)) / elapsed
                                     : 0.0;
    // Validation (before the log line, which carries it).
    const bool eval = data.val && std::isfinite(loss) &&
                      (s == o.steps ||
                       (o.eval_every && s % o.eval_every == 0));
    const double val_loss = eval ? evaluate(ctx, o, data, s) : NAN;
    if (s == start + 2)
      warm = std::chrono::steady_clock::now();
    if (s == start + 1)
      first_loss = loss;
    // Gradient clipping's total norm of this step, before clipping (what
    // torch's clip_grad_norm_ returns); NaN when it was not computed.
    const bool clipping = effective_grad_clip(ctx) > 0;
    const double grad_norm =
        clipping && ctx->grad_clip.step == s ? ctx->grad_clip.norm : NAN;
    // A failed log line is reported after the loss and weight checks (a
    // broken loss says more), with the weights of this step kept.
    std::string log_error;
    if (log) {
      errno = 0;
      std::string line = format("{\"step\": %lld, \"loss\": ", (long long)s);
      line += std::isfinite(loss) ? format("%.9g", double(loss)) : "null";
      line += format(", \"lr\": %.9g", lr);
      if (clipping)
        line += std::isfinite(grad_norm)
                    ? format(", \"grad_norm\": %.9g", grad_norm)
                    : std::string(", \"grad_norm\": null");
      if (eval)
        line += std::isfinite(val_loss)
                    ? format(", \"val_loss\": %.9g", val_loss)
                    : std::string(", \"val_loss\": null");
      if (tokens)
        line += format(", \"tokens\": %lld, \"tokens_per_s\": %.6g, "
                       "\"flops_per_s\": %.6g",
                       (long long)(tokens * s), tok_s, 6 * params * tok_s);
      line += format(", \"elapsed_s\": %.6f, \"eta_s\": %.6f", elapsed, eta);
      if (has_tiers(ctx))
        if (const std::string t = tiers_step_json(ctx); !t.empty())
          line += ", \"offload\": " + t;
      line += "}\n";
      std::fputs(line.c_str(), log);
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
      if (data)
        batches += format("%s the batch of token file '%s' (windows drawn "
                          "%lld to %lld)",
                          batches.empty() ? "" : ",", data.train->path.c_str(),
                          (long long)(data.position - data.rows),
                          (long long)(data.position - 1));
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
           "(e.g. the log of 0) or a constant it trains as a parameter (an "
           "exponent, an eps: `spillwayc -v` lists the parameters, "
           "`spillwayc --constant-initializers` freezes one); if it recurs "
           "on other data, lower --lr (now %g)",
           non_finite_name(loss), (long long)s, (long long)(s - 1),
           double(prev_loss),
           scan_weights ? ", from finite weights" : "", batches.c_str(),
           lr);
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
             double(loss), lr, hp.weight_decay);
      }
    }
    if (!log_error.empty())
      output_failed(ctx, o, Error(log_error));
    const bool progress = s % every == 0 || s == o.steps;
    if (progress) {
      std::string line = format("step %lld/%lld  loss %.6f  lr %.3e",
                                (long long)s, (long long)o.steps,
                                double(loss), lr);
      if (clipping)
        line += format("  grad_norm %.4g", grad_norm);
      if (tokens)
        line += format("  %s tok/s  %sFLOP/s", si(tok_s).c_str(),
                       si_prefix(6 * params * tok_s).c_str());
      else
        line += format("  %.3g steps/s",
                       elapsed > 0 ? double(s - start) / elapsed : 0.0);
      line += format("  elapsed %s  eta %s", duration(elapsed).c_str(),
                     duration(eta).c_str());
      if (has_tiers(ctx))
        line += "  " + tiers_progress(ctx);
      std::printf("%s\n", line.c_str());
      flush_stdout();
    }
    if (eval) {
      std::printf("val step %lld/%lld  loss %.6f  (%lld batch%s of %lld x "
                  "%lld tokens from %s)\n",
                  (long long)s, (long long)o.steps, val_loss,
                  (long long)o.eval_batches, o.eval_batches == 1 ? "" : "es",
                  (long long)(data.rows * dist::size()), (long long)data.seq,
                  data.val->path.c_str());
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
    test_kill_hook(s);
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
  // Data parallel: rank 0's averages (the others' are alike), measured.
  if (dist::active() && ran > 0) {
    dist::Traffic t = dist::traffic();
    t.bytes -= before.bytes;
    t.reduce_scattered -= before.reduce_scattered;
    t.allgathered -= before.allgathered;
    t.seconds -= before.seconds;
    t.overlapped -= before.overlapped;
    t.waited -= before.waited;
    const double n = dist::size(), ring = (n - 1) / n;
    // ZeRO stage 2 through host memory: the reduce-scatters ran on the
    // exchange thread during the next layer's backward (dist.h). The step's
    // time in the exchanges is its own collectives and its waits for those.
    const std::string overlapped =
        t.overlapped > 0
            ? format("; besides, the exchange thread reduce-scattered for "
                     "%.3f ms per step from each layer's staging on, of "
                     "which the step waited %.3f ms (counted above)",
                     1e3 * t.overlapped / double(ran),
                     1e3 * t.waited / double(ran))
            : "";
    t.seconds += t.waited - t.overlapped;
    if (zero::active(ctx))
      // ZeRO: a ring reduce-scatter and a ring all-gather each send
      // (N-1)/N of their buffer per rank, an all-reduce twice that.
      std::printf(
          "data parallel: %d ranks, zero %d; rank 0 reduce-scattered %s "
          "(gradients), all-gathered %s (updated %s%s) and "
          "all-reduced %s (loss%s) per step (a ring sends about %s per rank "
          "for them) in %.3f ms per step, %.1f%% of the step time%s\n",
          dist::size(), ctx->zero_stage,
          human_bytes(t.reduce_scattered / ran).c_str(),
          human_bytes(t.allgathered / ran).c_str(),
          tiers_shards_masters(ctx) ? "bf16 working copies" : "values",
          ctx->grad_clip.declared ? ", and the norm's per-block sums" : "",
          human_bytes(t.bytes / ran).c_str(),
          // The loss is 4 bytes a step; more: gradients whose parameter the
          // runtime did not know (spw_clip_grad_norm), averaged whole.
          t.bytes / ran > int64_t(sizeof(float)) ? " and gradients" : "",
          human_bytes(int64_t(ring * double(t.reduce_scattered / ran) +
                              ring * double(t.allgathered / ran) +
                              2 * ring * double(t.bytes / ran)))
              .c_str(),
          1e3 * t.seconds / double(ran),
          secs > 0 ? 100.0 * t.seconds / secs : 0.0, overlapped.c_str());
    else
      std::printf(
          "data parallel: %d ranks; rank 0 averaged %s per step "
          "(gradients and loss; a ring all-reduce sends about %s per "
          "rank for it) in %.3f ms per step, %.1f%% of the step "
          "time\n",
          dist::size(), human_bytes(t.bytes / ran).c_str(),
          human_bytes(int64_t(2 * ring * double(t.bytes / ran))).c_str(),
          1e3 * t.seconds / double(ran),
          secs > 0 ? 100.0 * t.seconds / secs : 0.0);
  }
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
