//===- tiers.cpp - an offload plan's blocks on GPU, host and SSD -----------===//
//
// The runtime side of sched-insert-transfers / sched-assign-buffers: each
// block (a layer's parameters, AdamW state, gradients) is a TensorStore
// tensor whose home copy sits at the plan's offset; the generated step moves
// copies along the links and binds the parameters and state the kernels use.
// Every byte moved goes through the store, whose counters are what
// --stats-json reports against the plan's prediction. A bf16-mixed plan
// (master blocks) keeps the f32 values the optimizer updates in its master
// blocks and their bf16 rounding, which the steps read, in its params
// blocks: half the bytes to load per layer.
//
// The GPU tier is the run's device's memory (Device::make_tier_memory):
// device tensors point into it, and everything that reads or writes it
// (gradients staged, activations put and taken, the mean for the update,
// scatter and gather) goes through the device, never a host memcpy, so a
// device whose memory the host cannot read (CUDA, loopback) runs the plan
// as the CPU device does, with the same float arithmetic.
//
//===----------------------------------------------------------------------===//

#include "tiers.h"

#include "dist/dist.h"
#include "dist/nccl.h"
#include "dist/zero.h"

#include "host_optimizer.h"
#include "spillway/runtime/zero_shard.h"
#include "storage/tensor_store.h"
#include "trace.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <sys/stat.h>

using namespace spw;
using namespace spw::storage;

namespace spw {

namespace {
using Clock = std::chrono::steady_clock;

// Indexed by spw_block_class: the table lists the values 0, 1, ... in order.
const char *const kClassNames[] = {
#define SPW_BLOCK_CLASS(ENUM, name, value) #name,
#include "spillway/runtime/block_classes.def"
};
constexpr int kNumClasses = int(std::size(kClassNames));
constexpr bool classes_in_value_order() {
  int i = 0;
#define SPW_BLOCK_CLASS(ENUM, name, value)                                     \
  if (SPW_BLOCK_##ENUM != i++)                                                 \
    return false;
#include "spillway/runtime/block_classes.def"
  return true;
}
static_assert(classes_in_value_order(),
              "block_classes.def must list the values 0, 1, ... in order");

const char *class_name(int c) {
  return c >= 0 && c < kNumClasses ? kClassNames[c] : "?";
}
} // namespace

struct Tiers {
  struct Block {
    int cls = 0, layer = 0;
    uint64_t bytes = 0;
    int home = -1;
    uint64_t home_offset = 0;
    std::vector<int32_t> params;
    std::vector<uint64_t> offsets;
    TensorId id = 0; // part 0, or the whole block
    std::string name;
    // Split by the optimizer overlap (spw_declare_split): part 0 holds the
    // first `split` bytes of the members (of m and of v, each at the front
    // of its half, for the optimizer class), part 1 (`id1`) the rest. Each
    // part is its own tensor; in a copy of the block part 1 starts at part
    // 0's bytes rounded up to the plan's granule (back to back on the GPU).
    uint64_t split = 0;
    TensorId id1 = 0;
    // Bytes per member element: 2 for a bf16-mixed plan's params blocks
    // (the working copies) and for bf16 optimizer state, else 4 (f32
    // values and state).
    uint64_t elem = 4;
    // Cut between two tiers (spw_declare_part_home): part 0's home, at byte
    // part0_offset of that tier's arena; part 1 keeps `home`. -1: not cut.
    int part0_home = -1;
    uint64_t part0_offset = 0;
    // Where the copy that part k is in starts on each tier while it has
    // one there (the part at base + part_offset). A block's parts share a
    // copy; a cut block's are placed apart, as its moves say.
    int64_t base[2][3] = {{-1, -1, -1}, {-1, -1, -1}};

    int parts() const { return split ? 2 : 1; }
    TensorId part_id(int k) const { return k == 0 ? id : id1; }
    bool cut() const { return part0_home >= 0; }
    // Part k's home tier (-1: none), and its home copy's start there.
    int home_of(int k) const { return k == 0 && cut() ? part0_home : home; }
    uint64_t home_at(int k) const {
      return k == 0 && cut() ? part0_offset
                             : home_offset + part_offset(k, home);
    }
    // The part homed on `tier`, -1: none (a cut block's parts are homed
    // apart; a block that is not has both or neither there).
    int part_homed_on(int tier) const {
      for (int k = 0; k < parts(); ++k)
        if (home_of(k) == tier)
          return k;
      return -1;
    }
    // Bytes of m (the optimizer class) or of the members (the others).
    uint64_t span() const { return cls == 1 ? bytes / 2 : bytes; }
    // Bytes of the span in part 0: all of it when the block is whole.
    uint64_t span0() const { return split ? split : span(); }
    uint64_t part_bytes(int k) const {
      const uint64_t p0 = cls == 1 ? 2 * span0() : span0();
      return k == 0 ? p0 : bytes - p0;
    }
    uint64_t part_offset(int k, int tier) const {
      static const uint64_t granule[3] = {256, 4096, 4096};
      return k == 0 ? 0
                    : (part_bytes(0) + granule[tier] - 1) / granule[tier] *
                          granule[tier];
    }
    // An activation block: the type put into it (dims[0..rank)), -1: none.
    int32_t dtype = -1, rank = 0;
    int64_t dims[kMaxRank] = {};
    // The CPU optimizer's updates of each part's host copy still in flight
    // (host_optimizer.h), and the tier of the last spw_bind (-1: none).
    std::vector<Token> host_updates[2];
    int bound_tier = -1;
    // ZeRO: the all-gathers of the values the CPU optimizer updated in
    // this params block's host copy (tiers_defer_gather), run once those
    // updates are done and before anything moves, frees or binds the copy.
    // Every rank records and runs the same ones at the same points of the
    // plan (they are collective).
    // A master block cut for the ranks also leaves, in each copy of this
    // params block spw_alloc_copy rounds from it, only this rank's shard
    // of the working copies: a `rounding` gather of elements [begin, end)
    // of `param`, which the update's own all-gather of them replaces
    // (tiers_gathering), else runs before the copy moves or is dropped, on
    // whichever tier it is, or at the step's end (an update that does not
    // run: the overlap's first deferred task, a validation step). A bind
    // leaves it to the update the bind is for.
    struct Gather {
      int part;
      std::function<void()> run;
      bool rounding = false;
      int32_t param = -1;
      int64_t begin = 0, end = 0;
    };
    std::vector<Gather> gathers;
    // ZeRO stage 2: what completes the reduce-scatters spw_stage_grads left
    // running on this (gradstage or gradients) block, overlapped with the
    // next layer's backward: each waits for its exchange and puts the
    // rank's shard in the block's GPU copy. Run before anything else
    // touches the block (every entry point finds it with Tiers::block) and
    // at the step's end.
    std::vector<std::function<void()>> exchanges;
  };
  // Declared.
  uint64_t gpu_bytes = 0, host_bytes = 0, ssd_bytes = 0;
  std::string ssd_dirs;
  LinkBytes predicted;
  bool predicted_given = false; // spw_declare_tiers had the plan's bytes
  double predicted_s = -1; // spw_declare_prediction; -1: none
  std::string predicted_bound;
  std::vector<Block> blocks;
  std::map<std::pair<int, int>, size_t> by_key;
  // A master block was declared: the params blocks hold bf16 working
  // copies (tiers_bf16_params).
  bool bf16_params = false;

  // Started.
  Device *device = nullptr; // the context's; outlives the tiers (~spw_ctx)
  std::unique_ptr<DeviceMemory> gpu;
  std::unique_ptr<PinnedPool> pool;
  std::unique_ptr<IoEngine> engine;
  std::unique_ptr<SwapSpace> swap;
  std::unique_ptr<TensorStore> store;
  std::vector<std::string> dirs_used;

  // The step's moves.
  struct Move {
    std::vector<Token> tokens; // one per part moved
    Clock::time_point issued;
    Tier to = Tier::Gpu;
    std::string block; // its name, for the trace's waits
    // Awaited by the compute stream only (spw_await into the GPU tier): the
    // host has not seen it complete.
    bool device_awaited = false;
  };
  std::vector<Move> moves;
  // Statistics.
  LinkBytes at_step_begin;
  std::vector<LinkBytes> per_step;
  // Per block class (spw_block_class): the last step's bytes.
  static constexpr int kNumClasses = spw::kNumClasses;
  std::array<LinkBytes, kNumClasses> class_at_step_begin{}, class_last_step{};
  double wait_s = 0, busy_s = 0;      // all steps
  Clock::time_point busy_until{};     // end of the last in-flight interval
  // The CPU optimizer (host_optimizer.h); per parameter, the index of its
  // params, optimizer and master blocks (-1: none), made at its first
  // update: an update writes all three.
  std::unique_ptr<HostOptimizer> host;
  std::vector<std::array<int, 3>> param_blocks;
  // Telemetry of each step (tiers_step_begin/end; the progress line and
  // --stats-json): seconds, time in tasks (the device busy), time compute
  // waited in spw_await, time at least one move was in flight (from issue to
  // completion), time the host optimizer ran.
  struct StepTelemetry {
    double seconds = 0, busy_s = 0, wait_s = 0, transfer_s = 0,
           host_optimizer_s = 0;
  };
  std::vector<StepTelemetry> telemetry;
  // tiers_count_steps(false): the steps run (validation) but add nothing to
  // the statistics; wait_s and busy_s as they were at the step's start.
  bool counting = true;
  double uncounted_wait_s = 0, uncounted_busy_s = 0;
  int64_t step_begin_us = 0, step_task_us = 0;
  double step_wait_s = 0, step_host_optimizer_s = 0;

  ~Tiers() {
    host.reset(); // its tasks write the host arena
    moves.clear();
    store.reset(); // waits for its moves before the engine goes
    swap.reset();
    engine.reset();
    if (device && pool)
      device->unregister_host_memory(pool->base());
  }

  Block &block(int cls, int layer, const char *what) {
    auto it = by_key.find({cls, layer});
    if (it == by_key.end())
      fail("%s: the plan declares no %s block for layer %d", what,
           class_name(cls), layer);
    Block &b = blocks[it->second];
    settle(b);
    return b;
  }
  static void settle(Block &b) {
    std::vector<std::function<void()>> pending;
    pending.swap(b.exchanges);
    for (const std::function<void()> &finish : pending)
      finish();
  }
  TensorStore &started(const char *what) {
    if (!store)
      fail("%s: the offload plan was not started (the driver calls "
           "tiers_start before the first step)",
           what);
    return *store;
  }
  char *address(const Block &b, int tier) {
    return static_cast<char *>(tier == int(Tier::Gpu)
                                   ? store->gpu_address(b.id)
                                   : store->host_address(b.id));
  }
};

bool has_tiers(const spw_ctx *ctx) { return ctx->tiers != nullptr; }

bool tiers_bf16_params(const spw_ctx *ctx) {
  return ctx->tiers && ctx->tiers->bf16_params;
}

bool tiers_hold(const spw_ctx *ctx, size_t param, int cls) {
  if (!ctx->tiers)
    return false;
  for (const Tiers::Block &b : ctx->tiers->blocks)
    if (b.cls == cls &&
        std::find(b.params.begin(), b.params.end(), int32_t(param)) !=
            b.params.end())
      return true;
  return false;
}

// The plan of an entry point (whose name `guarded` puts in front of the
// error); a model that declared none is an error, not a null dereference.
static Tiers &tiers_of(spw_ctx *ctx) {
  if (!ctx->tiers)
    fail("no offload plan declared (spw_declare_tiers must come first)");
  return *ctx->tiers;
}

static Tier tier_of(int32_t t, const char *what) {
  if (t < 0 || t > 2)
    fail("%s: unknown tier %d", what, t);
  return Tier(t);
}

static std::vector<std::string> split_dirs(const std::string &s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos)
      comma = s.size();
    if (comma > start)
      out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

static void check_blocks(spw_ctx *ctx);

void tiers_start(spw_ctx *ctx, const std::vector<std::string> &ssd_dirs,
                 Backend backend) {
  Tiers &t = *ctx->tiers;
  check_blocks(ctx);
  t.dirs_used = ssd_dirs.empty() ? split_dirs(t.ssd_dirs) : ssd_dirs;
  if (t.dirs_used.empty())
    t.dirs_used = {"."};
  // Data parallel: each rank swaps to its own directory under each one
  // (--ssd's, spillwayc's or the current one), created when it swaps.
  if (dist::active())
    for (std::string &d : t.dirs_used) {
      d += "/rank-" + std::to_string(dist::rank());
      if (t.ssd_bytes > 0 && ::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST)
        fail("--ssd: cannot create rank %d's directory '%s': %s", dist::rank(),
             d.c_str(), std::strerror(errno));
    }
  t.device = ctx->device.get();
  t.gpu = t.device->make_tier_memory(std::max<uint64_t>(t.gpu_bytes, 256));
  // The host arena, plus room for the I/O engine's alignment slack.
  t.pool = std::make_unique<PinnedPool>(size_t(t.host_bytes + (64 << 10)));
  t.device->register_host_memory(t.pool->base(), t.pool->size());
  EngineConfig cfg;
  cfg.backend = backend;
  cfg.pool = t.pool.get();
  t.engine = std::make_unique<IoEngine>(cfg);
  if (t.ssd_bytes > 0) {
    try {
      t.swap = std::make_unique<SwapSpace>(*t.engine, t.dirs_used, t.ssd_bytes);
    } catch (const Error &e) {
      fail("cannot create the SSD swap space of the offload plan: %s; pass "
           "--ssd DIR[,DIR...] naming directories with room",
           e.what());
    }
  }
  TensorStoreConfig sc;
  sc.host_bytes = std::max<uint64_t>(t.host_bytes, 4096);
  t.store = std::make_unique<TensorStore>(*t.gpu, *t.pool, t.swap.get(), sc);
  for (int tier = 1; tier <= 2; ++tier)
    if ((tier == 1 || t.swap) && t.store->granule(Tier(tier)) > 4096)
      fail("the %s tier needs %llu-byte alignment; the plan was laid out "
           "for 4096 (use --ssd on a file system with 4 KiB O_DIRECT "
           "alignment)",
           tier_name(Tier(tier)),
           (unsigned long long)t.store->granule(Tier(tier)));
  for (Tiers::Block &b : t.blocks) {
    b.id = t.store->add(b.split ? b.name + "#0" : b.name, b.part_bytes(0),
                        b.cls);
    if (b.split)
      b.id1 = t.store->add(b.name + "#1", b.part_bytes(1), b.cls);
    for (int k = 0; k < b.parts(); ++k) {
      const int home = b.home_of(k);
      if (home < 0)
        continue;
      t.store->place(b.part_id(k), Tier(home), b.home_at(k));
      b.base[k][home] = int64_t(b.home_at(k) - b.part_offset(k, home));
    }
  }
}

// Member i's elements (b.elem bytes each) in a block's parts: its value
// (or m; `v` for AdamW's v) below element *split at byte at[0] of part 0,
// the rest at byte at[1] of part 1.
static void member_offsets(const Tiers::Block &b, size_t i, bool v,
                           int64_t numel, uint64_t at[2], int64_t *split) {
  const uint64_t off = b.offsets[i], s0 = b.span0();
  const int64_t s =
      s0 > off ? std::min<int64_t>(numel, int64_t((s0 - off) / b.elem)) : 0;
  *split = s;
  at[0] = (v ? s0 : 0) + off;
  at[1] = s < numel
              ? (v ? b.span() - s0 : 0) + (off + b.elem * uint64_t(s) - s0)
              : 0;
}

// The same in a copy whose parts start at part[0], part[1] (null: absent):
// out[k] null where the part is absent or holds none of them.
static void member_elements(const Tiers::Block &b, size_t i,
                            char *const part[2], bool v, int64_t numel,
                            char *out[2], int64_t *split) {
  uint64_t at[2];
  member_offsets(b, i, v, numel, at, split);
  const int64_t s = *split;
  out[0] = s > 0 && part[0] ? part[0] + at[0] : nullptr;
  out[1] = s < numel && part[1] ? part[1] + at[1] : nullptr;
}

// ZeRO over the ranks (spw_declare_optimizer_shards): a bf16-mixed plan's
// master blocks are cut as the optimizer blocks are, each member's slot
// holding one rank's shard of its values (the optimizer, which updates
// them, is their only reader; the steps read the params blocks' working
// copies, every element of which each rank keeps).
static bool cut_for_ranks(const spw_ctx *ctx, int cls) {
  return cls == SPW_BLOCK_MASTER && ctx->declared_shards > 0;
}

// ZeRO stage 2 (spw_declare_gradient_shards): the gradient and gradstage
// blocks hold each member's shard of its f32 gradient, in the slot of the
// largest rank's shard, laid out as a master block cut for the ranks.
static bool grads_cut(const spw_ctx *ctx, int cls) {
  return ctx->gradient_shards &&
         (cls == SPW_BLOCK_GRADIENTS || cls == SPW_BLOCK_GRADSTAGE);
}

// Bytes member `p` takes in a block of class `cls` whose elements are
// `elem` bytes: m (the optimizer class: the state, or its slot for one
// rank's shard under ZeRO; v follows at the same offset of the second
// half), a pending block's leading element, else the value.
static uint64_t member_bytes(const spw_ctx *ctx, int cls, const ParamInfo &p,
                             uint64_t elem) {
  return cls == SPW_BLOCK_OPTIMIZER || cut_for_ranks(ctx, cls) ||
                 grads_cut(ctx, cls)
             ? elem * uint64_t(zero::slot_numel(ctx, p))
         : cls == SPW_BLOCK_PENDING ? 4
                                    : elem * uint64_t(p.value->numel);
}

// True when p's moments in the optimizer blocks (and its f32 values in a
// bf16-mixed plan's master blocks) are this rank's shard.
static bool sharded_state(const spw_ctx *ctx, const ParamInfo &p) {
  return ctx->declared_shards > 0 && p.shard_hi >= 0;
}

// Elements a member's geometry is asked about when its slot is laid out by
// the split (member_offsets then takes the part-0 share from the offsets).
constexpr int64_t kAnyElements = int64_t(1) << 56;

// ZeRO's sharded optimizer block split by the overlap: the global element
// where member i's deferred elements end, from the layer's params block
// (split at the same global element: it is not sharded).
static int64_t deferred_end(const spw_ctx *ctx, const Tiers &t,
                            const Tiers::Block &ob, size_t i) {
  auto it = t.by_key.find({SPW_BLOCK_PARAMS, ob.layer});
  if (it == t.by_key.end() || !t.blocks[it->second].split)
    fail("%s is split, but the layer's params block is not: the plan "
         "defers no elements there",
         ob.name.c_str());
  const Tiers::Block &pb = t.blocks[it->second];
  int64_t left = int64_t(pb.split / pb.elem);
  for (size_t k = 0; k < i; ++k)
    left -= ctx->params[size_t(ob.params[k])].state_numel();
  return std::clamp<int64_t>(left, 0,
                             ctx->params[size_t(ob.params[i])].state_numel());
}

// A sharded split block's member i: the elements of this rank's shard in
// part 0 ([lo, min(hi, t))) and part 1 ([max(lo, t), hi)), as (first,
// count) each.
struct ShardParts {
  int64_t first[2], count[2];
};
static ShardParts shard_parts(const ParamInfo &p, int64_t t) {
  ShardParts s;
  s.first[0] = p.shard_lo;
  s.count[0] = std::max<int64_t>(0, std::min(p.shard_hi, t) - p.shard_lo);
  s.first[1] = std::max(p.shard_lo, t);
  s.count[1] = std::max<int64_t>(0, p.shard_hi - s.first[1]);
  return s;
}

// Member i of block b cut for the ranks (an optimizer block's moment `v`,
// a master block's values): this rank's shard as pieces in the parts
// (shard_parts; one piece when b is whole) and their byte offsets there.
static ShardParts shard_in_block(const spw_ctx *ctx, const Tiers &t,
                                 const Tiers::Block &b, size_t i, bool v,
                                 uint64_t at[2]) {
  const ParamInfo &p = ctx->params[size_t(b.params[i])];
  int64_t split;
  member_offsets(b, i, v, b.split ? kAnyElements : p.state_local_numel(), at,
                 &split);
  return b.split
             ? shard_parts(p, deferred_end(ctx, t, b, i))
             : ShardParts{{p.shard_lo, p.shard_hi}, {p.state_local_numel(), 0}};
}

// This rank's shard of member i of a master block cut for the ranks (its
// parts at mpart), as up to two pieces, and where each goes in a copy of
// the member's bf16 working copy (`work`: its elements [0, split) in part
// 0, the rest in part 1): from[k], to[k] (null where the piece is empty or
// that part is absent) and count[k] elements.
static void shard_pieces(const spw_ctx *ctx, const Tiers &t,
                         const Tiers::Block &mb, size_t i, char *const mpart[2],
                         char *const work[2], int64_t split, char *from[2],
                         char *to[2], int64_t count[2]) {
  uint64_t at[2];
  const ShardParts sp = shard_in_block(ctx, t, mb, i, false, at);
  for (int k = 0; k < 2; ++k) {
    const int64_t g = sp.first[k];
    const int in = g < split ? 0 : 1;
    count[k] = sp.count[k];
    from[k] = mpart[k] && count[k] > 0 ? mpart[k] + at[k] : nullptr;
    to[k] = count[k] > 0 && work[in]
                ? work[in] + sizeof(bf16) * uint64_t(in == 0 ? g : g - split)
                : nullptr;
  }
}

static void check_fits(const spw_ctx *ctx, const Tiers::Block &b,
                       const ParamInfo &p, int64_t offset, uint64_t elem) {
  const uint64_t span = b.span(), member = member_bytes(ctx, b.cls, p, elem);
  if (offset < 0 || offset % int64_t(elem) != 0 || uint64_t(offset) > span ||
      member > span - uint64_t(offset))
    fail("block %s: parameter '%s' at offset %lld does not fit in %llu "
         "bytes",
         b.name.c_str(), p.name.c_str(), (long long)offset,
         (unsigned long long)span);
}

static std::string member_names(const spw_ctx *ctx, const Tiers::Block &b) {
  std::string s;
  for (int32_t i : b.params)
    s += (s.empty() ? "'" : ", '") + ctx->params[size_t(i)].name + "'";
  return s.empty() ? "none" : s;
}

// A layer's split blocks (params, master, optimizer) split at the same
// element (their binds share ParamInfo::bound_split), or none is split.
static void check_same_split(const Tiers::Block &a, const Tiers::Block &b) {
  if (a.split / a.elem == b.split / b.elem)
    return;
  if (a.elem == b.elem)
    fail("%s is split at %llu bytes but %s at %llu: a layer's parameters "
         "and optimizer state split at the same bytes (or neither)",
         a.name.c_str(), (unsigned long long)a.split, b.name.c_str(),
         (unsigned long long)b.split);
  fail("%s is split at %llu bytes (element %llu) but %s at %llu bytes "
       "(element %llu): a layer's params (2-byte bf16 elements in a "
       "bf16-mixed plan), master and optimizer blocks (2-byte elements with "
       "bf16 state) split at the same element (or none is split)",
       a.name.c_str(), (unsigned long long)a.split,
       (unsigned long long)(a.split / a.elem), b.name.c_str(),
       (unsigned long long)b.split, (unsigned long long)(b.split / b.elem));
}

// A block cut for the ranks of 4-byte elements (a master block, or a
// gradient or gradstage block under ZeRO stage 2): its members' offsets,
// split and bytes are spw_zero_sharded_layout's (sched-assign-buffers'),
// `deferred` elements deferred (a master block's: what the layer's params
// block defers); else binding it would read other elements than the
// runtime's shards hold.
static void check_cut_layout(const spw_ctx *ctx, const Tiers::Block &b,
                             int64_t deferred) {
  std::vector<int64_t> n, offsets(b.params.size());
  for (int32_t i : b.params)
    n.push_back(ctx->params[size_t(i)].value->numel);
  int64_t split = 0;
  const int64_t bytes = spw_zero_sharded_layout(
      n.data(), int64_t(n.size()), ctx->declared_shards,
      ctx->declared_shard_align, deferred, 4, 256, offsets.data(), &split);
  bool same = uint64_t(bytes) == b.bytes && uint64_t(split) == b.split;
  for (size_t i = 0; i < offsets.size() && same; ++i)
    same = uint64_t(offsets[i]) == b.offsets[i];
  if (!same)
    fail("%s (%llu bytes, split at %llu) is not laid out as a %s block "
         "cut for %lld ranks is (%lld bytes, split at %lld): the plan and "
         "the runtime disagree on the shards",
         b.name.c_str(), (unsigned long long)b.bytes,
         (unsigned long long)b.split, class_name(b.cls),
         (long long)ctx->declared_shards, (long long)bytes, (long long)split);
}

// What spw_declare_block and spw_declare_split could not check while the
// plan might still declare a master block: the params blocks' element
// size, a bf16-mixed plan's params and master blocks in pairs, the splits.
static void check_blocks(spw_ctx *ctx) {
  Tiers &t = *ctx->tiers;
  for (Tiers::Block &b : t.blocks)
    if (b.cls == SPW_BLOCK_PARAMS) {
      b.elem = t.bf16_params ? 2 : 4;
      for (size_t i = 0; i < b.params.size(); ++i)
        check_fits(ctx, b, ctx->params[size_t(b.params[i])],
                   int64_t(b.offsets[i]), b.elem);
    }
  auto find = [&](int cls, int layer) -> Tiers::Block * {
    auto it = t.by_key.find({cls, layer});
    return it == t.by_key.end() ? nullptr : &t.blocks[it->second];
  };
  if (t.bf16_params)
    for (const Tiers::Block &b : t.blocks) {
      if ((b.cls != SPW_BLOCK_PARAMS && b.cls != SPW_BLOCK_MASTER) ||
          b.params.empty())
        continue;
      const int other_cls =
          b.cls == SPW_BLOCK_PARAMS ? SPW_BLOCK_MASTER : SPW_BLOCK_PARAMS;
      const Tiers::Block *o = find(other_cls, b.layer);
      const std::string o_name =
          format("%s/layer%d", class_name(other_cls), b.layer);
      if (!o)
        fail("%s holds %s but the plan declares no %s: a bf16-mixed plan "
             "keeps a layer's bf16 working copies in its params block and "
             "their f32 master weights in its master block",
             b.name.c_str(), member_names(ctx, b).c_str(), o_name.c_str());
      if (o->params != b.params)
        fail("%s holds %s but %s holds %s: a bf16-mixed plan's params and "
             "master blocks hold the same parameters in the same order",
             b.name.c_str(), member_names(ctx, b).c_str(), o->name.c_str(),
             member_names(ctx, *o).c_str());
    }
  for (const Tiers::Block &b : t.blocks) {
    if ((b.cls == SPW_BLOCK_PARAMS || b.cls == SPW_BLOCK_MASTER) &&
        ctx->declared_shards <= 0) // (sharded: deferred_end)
      if (const Tiers::Block *o = find(SPW_BLOCK_OPTIMIZER, b.layer))
        check_same_split(b, *o);
    const Tiers::Block *m =
        b.cls == SPW_BLOCK_PARAMS ? find(SPW_BLOCK_MASTER, b.layer) : nullptr;
    // Masters cut for the ranks split where the params block does
    // (deferred_end), laid out as the compiler lays them out.
    if (m && cut_for_ranks(ctx, m->cls)) {
      check_cut_layout(ctx, *m, b.split ? int64_t(b.split / b.elem) : 0);
      continue;
    }
    if (grads_cut(ctx, b.cls))
      check_cut_layout(ctx, b, 0);
    if (!m)
      continue;
    check_same_split(b, *m);
    // The same element of each member, not only of the concatenation: a
    // member's working copy and master share one bound_split.
    for (size_t i = 0; i < b.params.size() && i < m->params.size(); ++i) {
      const int64_t n = ctx->params[size_t(b.params[i])].value->numel;
      uint64_t at[2];
      int64_t sb, sm;
      member_offsets(b, i, false, n, at, &sb);
      member_offsets(*m, i, false, n, at, &sm);
      if (sb != sm)
        fail("%s splits parameter '%s' at element %lld but %s at %lld: lay "
             "out a bf16-mixed plan's params and master blocks alike "
             "(offsets in proportion, 2 to 4 bytes)",
             b.name.c_str(), ctx->params[size_t(b.params[i])].name.c_str(),
             (long long)sb, m->name.c_str(), (long long)sm);
    }
  }
}

// Runs `body` with a host copy of block `b`'s parts: a part's home on the
// host tier, or a copy in the host arena of one homed on SSD, released
// however `body` or the copies end; null for a part homed on the GPU, which
// the caller reads or writes through the device (a cut block may have one
// part there and the other not). Both parts at once: a member's ranges in
// both parts are visited in order (a checkpoint appends each tensor whole).
template <class F> static void with_host_copy(Tiers &t, Tiers::Block &b,
                                              bool load, bool store_back,
                                              F &&body) {
  TensorStore &s = *t.store;
  char *part[2] = {nullptr, nullptr};
  struct Release {
    TensorStore &s;
    const Tiers::Block &b;
    bool made[2] = {false, false};
    ~Release() {
      for (int k = 0; k < 2; ++k)
        if (made[k])
          s.release(b.part_id(k), Tier::Host);
    }
  } release{s, b};
  for (int k = 0; k < b.parts(); ++k) {
    const int home = b.home_of(k);
    if (home == int(Tier::Ssd)) {
      s.allocate(b.part_id(k), Tier::Host);
      release.made[k] = true;
      if (load)
        s.move(b.part_id(k), Tier::Ssd, Tier::Host, Priority::Demand).wait();
    }
    if (home != int(Tier::Gpu))
      part[k] = static_cast<char *>(s.host_address(b.part_id(k)));
  }
  body(part);
  for (int k = 0; k < b.parts() && store_back; ++k)
    if (release.made[k])
      s.move(b.part_id(k), Tier::Host, Tier::Ssd, Priority::Demand).wait();
}

// Waits for all of the CPU optimizer's updates; the blocks forget their
// tokens. Returns the first update's error, or "".
// The block's pending all-gathers of part `part` (-1: every part), in the
// order they were recorded.
// Which: spw_alloc_copy's rounding gathers (a copy on any tier, ready when
// recorded), the updates' (of a host copy: after the CPU optimizer's tasks,
// wait_host_updates), or both.
enum class Gathers { All, Rounding, Updates };
static void run_gathers(Tiers::Block &b, int part = -1,
                        Gathers which = Gathers::All) {
  std::vector<Tiers::Block::Gather> pending, kept;
  pending.swap(b.gathers);
  for (Tiers::Block::Gather &g : pending)
    if ((part < 0 || g.part == part) &&
        (which == Gathers::All || g.rounding == (which == Gathers::Rounding)))
      g.run();
    else
      kept.push_back(std::move(g));
  b.gathers = std::move(kept);
}

static std::string finish_host_updates(spw_ctx *ctx, bool step_end) {
  std::string error = host_optimizer_finish(ctx, step_end);
  for (Tiers::Block &b : ctx->tiers->blocks) {
    for (std::vector<Token> &u : b.host_updates)
      u.clear();
    run_gathers(b); // every rank's, whether its updates failed or not
  }
  return error;
}

// The plain copy of range r's tensor (value, m or v) at r.begin; null for
// state not made yet (fresh: zeros).
static float *plain_at(spw_ctx *ctx, const BlockRange &r) {
  ParamInfo &p = ctx->params[size_t(r.param)];
  if (r.kind == kTensorValue)
    return p.value->owned ? reinterpret_cast<float *>(p.value->owned.get()) +
                                r.begin
                          : nullptr;
  // ZeRO: the plain copies hold this rank's shard (shard_lo: 0 without).
  std::vector<float> &state = r.kind == kTensorAdamM ? p.adam_m : p.adam_v;
  return state.empty() ? nullptr : state.data() + (r.begin - p.shard_lo);
}

// Gradients are not scattered or gathered: every iteration's first flush
// writes them (and the deferred slices every deferring update).
void tiers_scatter(spw_ctx *ctx) {
  for (int cls : {SPW_BLOCK_PARAMS, SPW_BLOCK_OPTIMIZER})
    tiers_stream_in(ctx, cls, [&](const BlockRange &r) {
      const size_t n = size_t(r.count) * sizeof(float);
      if (const float *from = plain_at(ctx, r))
        std::memcpy(r.data, from, n);
      else
        std::memset(r.data, 0, n); // fresh state
    });
  tiers_release_copies(ctx);
}

// The class of the blocks that hold the parameters' f32 values: master in
// a bf16-mixed plan, else params.
static int value_class(const Tiers &t) {
  return t.bf16_params ? SPW_BLOCK_MASTER : SPW_BLOCK_PARAMS;
}

// Frees the plain copies of what the blocks hold: the parameters of params
// (master) blocks and the AdamW state of optimizer blocks live only on
// their tiers between tiers_scatter and tiers_gather (that is the point of
// offloading).
void tiers_release_copies(spw_ctx *ctx) {
  Tiers &t = *ctx->tiers;
  for (const Tiers::Block &b : t.blocks)
    for (int32_t i : b.params) {
      ParamInfo &p = ctx->params[size_t(i)];
      if (b.cls == value_class(t)) {
        p.value->owned.reset();
        p.value->data = nullptr;
        p.dev_value->data = nullptr;
      } else if (b.cls == 1) {
        std::vector<float>().swap(p.adam_m);
        std::vector<float>().swap(p.adam_v);
      }
    }
}

static void stream(spw_ctx *ctx, int cls, bool in, const BlockRangeFn &fn,
                   bool to_root);

void tiers_gather(spw_ctx *ctx) {
  Tiers &t = *ctx->tiers;
  // (Each rank would get its own shard of the values only.)
  if (tiers_shards_masters(ctx))
    fail("tiers_gather: this plan's master blocks hold each rank's shard of "
         "the values; stream them out (tiers_stream_out) instead");
  if (std::string e = finish_host_updates(ctx, false); !e.empty())
    fail("%s", e.c_str());
  for (Tiers::Block &b : t.blocks)
    b.bound_tier = -1; // the pointers are the plain copies' again
  for (ParamInfo &p : ctx->params) {
    if (!p.value->owned)
      p.value->owned = alloc_buffer(p.value->bytes());
    p.value->data = p.value->owned.get();
    p.bound_m = p.bound_v = StateMem{};
    p.bound_split = -1;
    p.state_first[0] = p.state_first[1] = -1;
    p.value_first[0] = p.value_first[1] = -1;
    p.w_on_device = p.state_on_device = p.work_on_device = false;
    for (int k = 0; k < 2; ++k) {
      p.bound_w_part[k] = nullptr;
      p.bound_m_part[k] = p.bound_v_part[k] = StateMem{};
      p.bound_work_part[k] = nullptr;
    }
    if (p.dev_work && !p.work_owned)
      p.dev_work->data = nullptr; // a view of the params block's copy
  }
  // The state exists once a step has run (else it stays empty: fresh).
  for (const Tiers::Block &b : t.blocks)
    if (b.home >= 0 && b.cls == SPW_BLOCK_OPTIMIZER && ctx->step > 0)
      for (int32_t i : b.params) {
        ParamInfo &p = ctx->params[size_t(i)];
        p.adam_m.resize(size_t(p.state_local_numel()));
        p.adam_v.resize(size_t(p.state_local_numel()));
      }
  // Each rank's plain copies of a sharded state hold its shard.
  for (int cls : {SPW_BLOCK_PARAMS, SPW_BLOCK_OPTIMIZER})
    stream(
        ctx, cls, false,
        [&](const BlockRange &r) {
          if (float *to = plain_at(ctx, r))
            std::memcpy(to, r.data, size_t(r.count) * sizeof(float));
        },
        false);
}

// The ranges of block b's members, as (part, byte offset in the part,
// BlockRange without data), in member order.
struct PartRange {
  int part;
  uint64_t at;
  BlockRange r;
};
static std::vector<PartRange> block_ranges(const spw_ctx *ctx,
                                           const Tiers::Block &b) {
  std::vector<PartRange> out;
  const bool state = b.cls == SPW_BLOCK_OPTIMIZER;
  for (size_t i = 0; i < b.params.size(); ++i) {
    const ParamInfo &p = ctx->params[size_t(b.params[i])];
    // ZeRO: the block holds elements [shard_lo, shard_hi) of each moment
    // (of the values, in a master block cut for the ranks).
    const bool shard =
        (state || cut_for_ranks(ctx, b.cls)) && sharded_state(ctx, p);
    const int64_t first = shard ? p.shard_lo : 0;
    const int64_t n = shard    ? p.state_local_numel()
                      : !state ? p.value->numel
                               : p.state_numel();
    for (int kind : !state ? std::vector<int>{kTensorValue}
                           : std::vector<int>{kTensorAdamM, kTensorAdamV}) {
      uint64_t at[2];
      int64_t s;
      if (shard && b.split) { // the two pieces of the shard
        member_offsets(b, i, kind == kTensorAdamV, kAnyElements, at, &s);
        const ShardParts sp =
            shard_parts(p, deferred_end(ctx, *ctx->tiers, b, i));
        for (int k = 0; k < 2; ++k)
          if (sp.count[k] > 0)
            out.push_back(
                {k,
                 at[k],
                 {b.params[i], kind, sp.first[k], sp.count[k], nullptr}});
        continue;
      }
      member_offsets(b, i, kind == kTensorAdamV, n, at, &s);
      const int64_t lo[2] = {0, s}, hi[2] = {s, n};
      for (int k = 0; k < 2; ++k)
        if (hi[k] > lo[k])
          out.push_back(
              {k,
               at[k],
               {b.params[i], kind, first + lo[k], hi[k] - lo[k], nullptr}});
    }
  }
  return out;
}

// `fn` on range r whose elements are at `bytes` in the block's copy: f32
// elements as they are; bf16 state (2-byte optimizer elements) through a
// float32 copy, a piece of at most kStreamStagingBytes at a time, widened
// for `fn` to read or rounded to nearest even from what it wrote (`in`).
static void visit_range(const Tiers::Block &b, bool in, BlockRange r,
                        char *bytes, std::vector<float> &wide,
                        const BlockRangeFn &fn) {
  if (b.elem == 4) {
    r.data = bytes;
    return fn(r);
  }
  const int64_t per = int64_t(kStreamStagingBytes / 4);
  bf16 *at = reinterpret_cast<bf16 *>(bytes);
  for (int64_t e = 0; e < r.count; e += per) {
    BlockRange piece = r;
    piece.begin = r.begin + e;
    piece.count = std::min(per, r.count - e);
    wide.resize(size_t(piece.count));
    if (!in)
      for (int64_t i = 0; i < piece.count; ++i)
        wide[size_t(i)] = to_float(at[e + i]);
    piece.data = wide.data();
    fn(piece);
    if (in)
      round_to_bf16(wide.data(), at + e, piece.count);
  }
}

// The blocks of class `cls` (params of an fp32 plan, master, optimizer:
// f32 elements, or bf16 optimizer state, which `fn` sees as f32) streamed
// as tiers_stream_in/out say.
static void stream_blocks(spw_ctx *ctx, int cls, bool in,
                          const BlockRangeFn &fn) {
  Tiers &t = *ctx->tiers;
  TensorStore &s = *t.store;
  std::vector<char> staging;
  std::vector<float> wide;
  for (Tiers::Block &b : t.blocks) {
    if (b.home < 0 || b.cls != cls)
      continue;
    if (b.elem != 4 && cls != SPW_BLOCK_OPTIMIZER)
      fail("%s: its %llu-byte elements are not streamed (the master "
           "blocks hold the values)",
           b.name.c_str(), (unsigned long long)b.elem);
    const std::vector<PartRange> ranges = block_ranges(ctx, b);
    // A part homed on the GPU: the device's memory, through its copy
    // engines, a staging buffer's worth at a time.
    const uint64_t per = kStreamStagingBytes / b.elem;
    auto through_device = [&](const PartRange &pr) {
      const uint64_t base = s.extent(b.part_id(pr.part), Tier::Gpu)->offset;
      const std::string name = s.name(b.part_id(pr.part));
      for (int64_t e = 0; e < pr.r.count; e += int64_t(per)) {
        BlockRange r = pr.r;
        r.begin = pr.r.begin + e;
        r.count = std::min<int64_t>(int64_t(per), pr.r.count - e);
        const uint64_t bytes = uint64_t(r.count) * b.elem;
        const uint64_t off = base + pr.at + uint64_t(e) * b.elem;
        if (staging.size() < bytes)
          staging.resize(size_t(
              std::min<uint64_t>(kStreamStagingBytes, b.part_bytes(pr.part))));
        if (in) {
          visit_range(b, in, r, staging.data(), wide, fn);
          t.gpu->copy_h2d(off, staging.data(), bytes, name).wait();
        } else {
          t.gpu->copy_d2h(staging.data(), off, bytes, name).wait();
          visit_range(b, in, r, staging.data(), wide, fn);
        }
      }
    };
    with_host_copy(t, b, !in, in, [&](char *const *part) {
      for (const PartRange &pr : ranges)
        if (part[pr.part])
          visit_range(b, in, pr.r, part[pr.part] + pr.at, wide, fn);
        else
          through_device(pr);
    });
  }
}

// A bf16-mixed plan's params blocks from their master blocks: each
// member's elements rounded to nearest even, a layer at a time (the
// master's bytes in host memory, then the params block's host copy).
static void fill_working_copies(spw_ctx *ctx) {
  Tiers &t = *ctx->tiers;
  TensorStore &s = *t.store;
  std::vector<char> master, staging;
  for (Tiers::Block &pb : t.blocks) {
    if (pb.cls != SPW_BLOCK_PARAMS || pb.home < 0 || pb.params.empty())
      continue;
    Tiers::Block &mb = t.block(SPW_BLOCK_MASTER, pb.layer, "tiers_stream");
    // The master's parts back to back (part 1 after part 0's bytes).
    master.assign(size_t(mb.bytes), 0);
    char *mpart[2] = {master.data(), master.data() + mb.part_bytes(0)};
    with_host_copy(t, mb, true, false, [&](char *const *part) {
      for (int k = 0; k < mb.parts(); ++k)
        if (part[k])
          std::memcpy(mpart[k], part[k], size_t(mb.part_bytes(k)));
        else // homed on the GPU
          t.gpu
              ->copy_d2h(mpart[k], s.extent(mb.part_id(k), Tier::Gpu)->offset,
                         mb.part_bytes(k), s.name(mb.part_id(k)))
              .wait();
    });
    auto fill = [&](char *const *ppart) {
      for (size_t i = 0; i < pb.params.size(); ++i) {
        const ParamInfo &p = ctx->params[size_t(pb.params[i])];
        const int64_t n = p.value->numel;
        char *from[2], *to[2];
        int64_t split;
        if (!cut_for_ranks(ctx, mb.cls) || !sharded_state(ctx, p)) {
          member_elements(mb, i, mpart, false, n, from, &split);
          member_elements(pb, i, ppart, false, n, to, &split); // the same
          const int64_t count[2] = {split, n - split};
          for (int k = 0; k < 2; ++k)
            round_to_bf16(reinterpret_cast<const float *>(from[k]),
                          reinterpret_cast<bf16 *>(to[k]), count[k]);
          continue;
        }
        // Masters cut for the ranks: this rank rounds its shard, then the
        // ranks all-gather the working copies (in each part of the block).
        char *work[2];
        member_elements(pb, i, ppart, false, n, work, &split);
        int64_t count[2];
        shard_pieces(ctx, t, mb, i, mpart, work, split, from, to, count);
        for (int k = 0; k < 2; ++k)
          if (from[k] && to[k])
            round_to_bf16(reinterpret_cast<const float *>(from[k]),
                          reinterpret_cast<bf16 *>(to[k]), count[k]);
        zero::gather_work(ctx, p, 0, split, reinterpret_cast<bf16 *>(work[0]),
                          /*host=*/true);
        zero::gather_work(ctx, p, split, n, reinterpret_cast<bf16 *>(work[1]),
                          /*host=*/true);
      }
    };
    // A part homed on the GPU is filled in a staging copy, then uploaded.
    with_host_copy(t, pb, false, true, [&](char *const *host) {
      char *ppart[2] = {host[0], host[1]};
      if (pb.part_homed_on(int(Tier::Gpu)) >= 0)
        staging.assign(size_t(pb.bytes), 0);
      for (int k = 0; k < pb.parts(); ++k)
        if (!host[k])
          ppart[k] = staging.data() + (k ? pb.part_bytes(0) : 0);
      fill(ppart);
      for (int k = 0; k < pb.parts(); ++k)
        if (!host[k])
          t.gpu
              ->copy_h2d(s.extent(pb.part_id(k), Tier::Gpu)->offset, ppart[k],
                         pb.part_bytes(k), s.name(pb.part_id(k)))
              .wait();
    });
  }
}

// ZeRO over the ranks (spw_declare_optimizer_shards): each rank's blocks
// of class `cls` hold its shard of the moments (optimizer) or of the f32
// values (a bf16-mixed plan's masters). Streamed out (a checkpoint, --save),
// every rank
// reads its block and the members' shards go to rank 0 a piece at a time
// (collective: every rank streams the same blocks in the same order),
// where `fn` sees each whole moment in element order, as one process
// streams it. Memory: the block's host copy (a GPU-homed block's pieces
// come through a piece-sized staging buffer), and a piece.
static void stream_shards_out(spw_ctx *ctx, int cls, const BlockRangeFn &fn) {
  Tiers &t = *ctx->tiers;
  TensorStore &s = *t.store;
  std::vector<char> staging;
  // Member i's moment (`v`) of block b, this rank's shard to rank 0: its
  // parts' copies at host[k], or at GPU arena offsets gpu[k] (`on_gpu`).
  // A split block holds the shard in two pieces (shard_parts).
  auto member = [&](const Tiers::Block &b, size_t i, bool v,
                    char *const host[2], const uint64_t gpu[2], bool on_gpu) {
    const int32_t param = b.params[i];
    const ParamInfo &p = ctx->params[size_t(param)];
    uint64_t at[2];
    const ShardParts sp = shard_in_block(ctx, t, b, i, v, at);
    // Elements [g, g + count) of the moment (inside one part) as f32.
    auto copy = [&](int k, int64_t g, int64_t count, float *out) {
      const uint64_t off = at[k] + uint64_t(g - sp.first[k]) * b.elem;
      const uint64_t bytes = uint64_t(count) * b.elem;
      const char *src = on_gpu ? nullptr : host[k] + off;
      if (on_gpu) {
        staging.resize(size_t(bytes));
        t.gpu->copy_d2h(staging.data(), gpu[k] + off, bytes, b.name).wait();
        src = staging.data();
      }
      if (b.elem == 4)
        std::memcpy(out, src, size_t(bytes));
      else
        for (int64_t e = 0; e < count; ++e)
          out[e] = to_float(reinterpret_cast<const bf16 *>(src)[e]);
    };
    const int kind = cls == SPW_BLOCK_MASTER ? kTensorValue
                     : v                     ? kTensorAdamV
                                             : kTensorAdamM;
    zero::gather_to_root_in_pieces(
        p,
        [&](int64_t first, int64_t count, float *out) {
          // Local elements [first, first + count) are global ones from
          // shard_lo on, part 0's before part 1's.
          int64_t g = p.shard_lo + first, done = 0;
          for (int k = 0; k < 2 && done < count; ++k) {
            const int64_t end = sp.first[k] + sp.count[k];
            if (g >= end)
              continue;
            const int64_t from = std::max(g, sp.first[k]);
            const int64_t n = std::min(count - done, end - from);
            copy(k, from, n, out + done);
            done += n;
            g = from + n;
          }
        },
        [&](int64_t begin, int64_t count, const float *x) {
          fn({param, kind, begin, count, const_cast<float *>(x)});
        });
  };
  // m then v of each member of an optimizer block; a master's values.
  const std::vector<bool> halves = cls == SPW_BLOCK_OPTIMIZER
                                       ? std::vector<bool>{false, true}
                                       : std::vector<bool>{false};
  for (Tiers::Block &b : t.blocks) {
    if (b.home < 0 || b.cls != cls)
      continue;
    if (b.home == int(Tier::Gpu)) {
      const uint64_t gpu[2] = {
          s.extent(b.part_id(0), Tier::Gpu)->offset,
          b.parts() > 1 ? s.extent(b.part_id(1), Tier::Gpu)->offset : 0};
      char *const none[2] = {nullptr, nullptr};
      for (size_t i = 0; i < b.params.size(); ++i)
        for (bool v : halves)
          member(b, i, v, none, gpu, true);
      continue;
    }
    with_host_copy(t, b, true, false, [&](char *const *part) {
      const uint64_t none[2] = {0, 0};
      for (size_t i = 0; i < b.params.size(); ++i)
        for (bool v : halves)
          member(b, i, v, part, none, false);
    });
  }
}

// `to_root`: a sharded plan's optimizer blocks (and master blocks) streamed
// out go to rank 0 whole (stream_shards_out), else each rank sees its
// shard.
static void stream(spw_ctx *ctx, int cls, bool in, const BlockRangeFn &fn,
                   bool to_root) {
  Tiers &t = *ctx->tiers;
  if (cls != SPW_BLOCK_PARAMS && cls != SPW_BLOCK_OPTIMIZER)
    fail("tiers_stream: block class %d holds no parameter or state", cls);
  if (std::string e = finish_host_updates(ctx, false); !e.empty())
    fail("%s", e.c_str());
  t.started("tiers_stream");
  const int from = cls == SPW_BLOCK_PARAMS ? value_class(t) : cls;
  if (to_root && !in &&
      (cls == SPW_BLOCK_OPTIMIZER || cut_for_ranks(ctx, from)) &&
      ctx->declared_shards > 0 && dist::active())
    return stream_shards_out(ctx, from, fn);
  stream_blocks(ctx, from, in, fn);
  if (in && from == SPW_BLOCK_MASTER)
    fill_working_copies(ctx);
}

void tiers_stream_in(spw_ctx *ctx, int cls, const BlockRangeFn &fn) {
  stream(ctx, cls, true, fn, false);
}

void tiers_stream_out(spw_ctx *ctx, int cls, const BlockRangeFn &fn) {
  stream(ctx, cls, false, fn, true);
}

static int64_t us(Clock::time_point p) {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             p.time_since_epoch())
      .count();
}

// The CPU optimizer's task time (host_optimizer.h, summed over its workers).
static double host_optimizer_s(const Tiers &t) {
  return t.host ? double(t.host->busy_ns.load()) * 1e-9 : 0.0;
}

static void telemetry_step_begin(Tiers &t) {
  t.step_begin_us = trace::now_us();
  t.step_task_us = trace::task_us();
  t.step_wait_s = t.wait_s;
  t.step_host_optimizer_s = host_optimizer_s(t);
}

// After the step's moves completed: its telemetry.
static void telemetry_step_end(Tiers &t) {
  Tiers::StepTelemetry st;
  st.seconds = double(trace::now_us() - t.step_begin_us) * 1e-6;
  st.busy_s = double(trace::task_us() - t.step_task_us) * 1e-6;
  st.wait_s = t.wait_s - t.step_wait_s;
  st.host_optimizer_s = host_optimizer_s(t) - t.step_host_optimizer_s;
  // The union of the moves' [issue, completion] intervals.
  std::vector<std::pair<int64_t, int64_t>> in_flight;
  for (const Tiers::Move &m : t.moves) {
    int64_t end = -1;
    for (const Token &k : m.tokens)
      if (k.completion())
        end = std::max(end, k.completion()->done_us());
    if (end >= 0)
      in_flight.push_back({us(m.issued), end});
  }
  std::sort(in_flight.begin(), in_flight.end());
  int64_t total = 0, from = 0, to = -1;
  for (const auto &[b, e] : in_flight) {
    if (b > to) {
      total += std::max<int64_t>(0, to - from);
      from = b;
    }
    to = std::max(to, e);
  }
  total += std::max<int64_t>(0, to - from);
  st.transfer_s = double(total) * 1e-6;
  t.telemetry.push_back(st);
}

static const std::array<int, 3> &param_blocks(const spw_ctx *ctx,
                                              int32_t param);

float *tiers_pending_grad(spw_ctx *ctx, int32_t param, int64_t begin,
                          int64_t end, bool on_gpu) {
  if (!ctx->tiers || !ctx->tiers->store)
    return nullptr;
  Tiers &t = *ctx->tiers;
  for (Tiers::Block &b : t.blocks) {
    if (b.cls != SPW_BLOCK_PENDING)
      continue;
    for (size_t i = 0; i < b.params.size(); ++i) {
      if (b.params[i] != param)
        continue;
      const uint64_t room =
          (i + 1 < b.params.size() ? b.offsets[i + 1] : b.bytes) -
          b.offsets[i];
      if (begin != 0 || end < begin || uint64_t(end - begin) * 4 > room)
        fail("%s holds %llu deferred elements of '%s', not [%lld, %lld)",
             b.name.c_str(), (unsigned long long)(room / 4),
             ctx->params[size_t(param)].name.c_str(), (long long)begin,
             (long long)end);
      if (b.home != int(on_gpu ? Tier::Gpu : Tier::Host))
        fail("%s is homed on %s, but the update of '%s' runs on the %s",
             b.name.c_str(), b.home < 0 ? "no tier" : tier_name(Tier(b.home)),
             ctx->params[size_t(param)].name.c_str(),
             on_gpu ? "device" : "host");
      // The CPU optimizer's task applying the previous deferral may still
      // read the slice: the new one waits for it.
      for (int c : param_blocks(ctx, param)) {
        if (c < 0 || !t.host)
          continue;
        for (std::vector<Token> &updates : t.blocks[size_t(c)].host_updates) {
          for (const Token &u : updates)
            t.host->wait(u);
          updates.clear();
        }
      }
      return reinterpret_cast<float *>(t.address(b, b.home) + b.offsets[i]);
    }
  }
  return nullptr;
}

void tiers_step_begin(spw_ctx *ctx) {
  Tiers &t = *ctx->tiers;
  t.store->wait_all();
  t.moves.clear();
  t.uncounted_wait_s = t.wait_s;
  t.uncounted_busy_s = t.busy_s;
  telemetry_step_begin(t);
  t.at_step_begin = t.store->moved();
  for (int c = 0; c < Tiers::kNumClasses; ++c)
    t.class_at_step_begin[size_t(c)] = t.store->moved_by_tag(c);
}

static LinkBytes minus(const LinkBytes &a, const LinkBytes &b) {
  LinkBytes d;
  d.ssd_read = a.ssd_read - b.ssd_read;
  d.ssd_write = a.ssd_write - b.ssd_write;
  d.h2d = a.h2d - b.h2d;
  d.d2h = a.d2h - b.d2h;
  return d;
}

void tiers_step_failed(spw_ctx *ctx) {
  for (Tiers::Block &b : ctx->tiers->blocks)
    b.exchanges.clear();
}

void tiers_step_end(spw_ctx *ctx) {
  Tiers &t = *ctx->tiers;
  // A plan always touches a staged block again; what is left settles here.
  guarded(ctx, "tiers_step_end", [&] {
    for (Tiers::Block &b : t.blocks)
      Tiers::settle(b);
  });
  if (std::string e = finish_host_updates(ctx, true); !e.empty())
    ctx->set_error(e);
  t.store->wait_all();
  // A copy awaited by the compute stream only (CUDA) has not reported to
  // the host: its error fails the step here, naming the block.
  for (const Tiers::Move &m : t.moves)
    for (const Token &k : m.tokens)
      if (std::string e = k.error(); !e.empty())
        ctx->set_error("the step's copy of " + m.block + " failed: " + e);
  if (!t.counting) {
    t.wait_s = t.uncounted_wait_s;
    t.busy_s = t.uncounted_busy_s;
    t.moves.clear();
    return;
  }
  t.per_step.push_back(minus(t.store->moved(), t.at_step_begin));
  for (int c = 0; c < Tiers::kNumClasses; ++c)
    t.class_last_step[size_t(c)] =
        minus(t.store->moved_by_tag(c), t.class_at_step_begin[size_t(c)]);
  telemetry_step_end(t);
  t.moves.clear();
}

void tiers_count_steps(spw_ctx *ctx, bool counting) {
  ctx->tiers->counting = counting;
}

HostOptimizer *tiers_host_optimizer(const spw_ctx *ctx) {
  if (!ctx->tiers)
    return nullptr;
  if (!ctx->tiers->host)
    ctx->tiers->host = std::make_unique<HostOptimizer>();
  return ctx->tiers->host.get();
}

// Parameter `param`'s params, optimizer and master blocks (-1: none), in
// that order.
static const std::array<int, 3> &param_blocks(const spw_ctx *ctx,
                                              int32_t param) {
  Tiers &t = *ctx->tiers;
  if (t.param_blocks.size() != ctx->params.size()) {
    t.param_blocks.assign(ctx->params.size(), {-1, -1, -1});
    for (size_t i = 0; i < t.blocks.size(); ++i) {
      const int cls = t.blocks[i].cls;
      const int slot = cls == SPW_BLOCK_PARAMS      ? 0
                       : cls == SPW_BLOCK_OPTIMIZER ? 1
                       : cls == SPW_BLOCK_MASTER    ? 2
                                                    : -1;
      if (slot >= 0)
        for (int32_t q : t.blocks[i].params)
          t.param_blocks[size_t(q)][size_t(slot)] = int(i);
    }
  }
  return t.param_blocks[size_t(param)];
}

bool tiers_hold_work(const spw_ctx *ctx, int32_t param) {
  return ctx->tiers && ctx->tiers->bf16_params && param >= 0 &&
         size_t(param) < ctx->params.size() && param_blocks(ctx, param)[0] >= 0;
}

bool tiers_shards_masters(const spw_ctx *ctx) {
  return ctx->tiers && ctx->tiers->bf16_params && ctx->declared_shards > 0;
}

bool tiers_host_bound(const spw_ctx *ctx, int32_t param) {
  if (!ctx->tiers || param < 0 || size_t(param) >= ctx->params.size())
    return false;
  const std::array<int, 3> &pb = param_blocks(ctx, param);
  // The master too in a bf16-mixed plan: the update writes all three.
  const int needed = ctx->tiers->bf16_params ? 3 : 2;
  for (int c = 0; c < needed; ++c)
    if (pb[size_t(c)] < 0 ||
        ctx->tiers->blocks[size_t(pb[size_t(c)])].bound_tier != int(Tier::Host))
      return false;
  return true;
}

// The params block's part that elements [begin, end) of `param` lie in, for
// a gather of its host copy to wait on (the overlap's ranges never
// straddle the split).
static Tiers::Block &gathered_block(spw_ctx *ctx, int32_t param, int64_t begin,
                                    int64_t end, int *part) {
  const int pb = param_blocks(ctx, param)[0];
  ParamInfo &p = ctx->params[size_t(param)];
  if (pb < 0)
    fail("parameter '%s': no params block holds the values its update wrote",
         p.name.c_str());
  const int64_t s = p.bound_split;
  *part = s < 0 ? 0 : end <= s ? 0 : begin >= s ? 1 : -1;
  if (*part < 0)
    fail("parameter '%s': elements [%lld, %lld) straddle its split at %lld",
         p.name.c_str(), (long long)begin, (long long)end, (long long)s);
  return ctx->tiers->blocks[size_t(pb)];
}

void tiers_defer_gather(spw_ctx *ctx, int32_t param, int64_t begin, int64_t end,
                        float *at) {
  int part;
  Tiers::Block &b = gathered_block(ctx, param, begin, end, &part);
  ParamInfo &p = ctx->params[size_t(param)];
  b.gathers.push_back({part, [ctx, &p, begin, end, at] {
                         zero::gather_values(ctx, p, begin, end, at,
                                             /*host=*/true);
                       }});
}

void tiers_gathering(spw_ctx *ctx, int32_t param, int64_t begin, int64_t end) {
  const int pb = param_blocks(ctx, param)[0];
  if (pb < 0)
    return;
  std::vector<Tiers::Block::Gather> &gs =
      ctx->tiers->blocks[size_t(pb)].gathers;
  gs.erase(std::remove_if(gs.begin(), gs.end(),
                          [&](const Tiers::Block::Gather &g) {
                            return g.rounding && g.param == param &&
                                   g.begin >= begin && g.end <= end;
                          }),
           gs.end());
}

void tiers_defer_gather(spw_ctx *ctx, int32_t param, int64_t begin, int64_t end,
                        bf16 *at) {
  tiers_gathering(ctx, param, begin, end);
  int part;
  Tiers::Block &b = gathered_block(ctx, param, begin, end, &part);
  const ParamInfo &p = ctx->params[size_t(param)];
  b.gathers.push_back({part, [ctx, &p, begin, end, at] {
                         zero::gather_work(ctx, p, begin, end, at,
                                           /*host=*/true);
                       }});
}

void tiers_note_host_update(spw_ctx *ctx, int32_t param, int parts,
                            const Token &t) {
  for (int c : param_blocks(ctx, param)) {
    if (c < 0)
      continue;
    Tiers::Block &b = ctx->tiers->blocks[size_t(c)];
    for (int k = 0; k < b.parts(); ++k)
      if (parts & (1 << k))
        b.host_updates[k].push_back(t);
  }
}

std::string tiers_describe(const spw_ctx *ctx) {
  const Tiers &t = *ctx->tiers;
  std::string dirs;
  for (const std::string &d : t.dirs_used)
    dirs += (dirs.empty() ? "" : ",") + d;
  return format("  offload: %zu blocks; gpu arena %s, pinned host %s, ssd %s "
                "in %s (I/O %s)",
                t.blocks.size(), human_bytes(t.gpu_bytes).c_str(),
                human_bytes(t.host_bytes).c_str(),
                human_bytes(t.ssd_bytes).c_str(),
                t.ssd_bytes ? dirs.c_str() : "-",
                backend_name(t.engine->backend()));
}

std::string tiers_summary(const spw_ctx *ctx, double seconds, int64_t steps) {
  const Tiers &t = *ctx->tiers;
  std::string s = format("offload: %.4g s per iteration measured",
                         steps ? seconds / double(steps) : 0.0);
  if (t.predicted_s >= 0)
    s += format(" (predicted %.4g s, %s-bound)", t.predicted_s,
                t.predicted_bound.c_str());
  bool match = !t.per_step.empty();
  for (const LinkBytes &b : t.per_step)
    match = match && b == t.predicted;
  const LinkBytes last = t.per_step.empty() ? LinkBytes{} : t.per_step.back();
  s += format("; bytes per iteration ssd_read %llu, ssd_write %llu, h2d %llu, "
              "d2h %llu: %s",
              (unsigned long long)last.ssd_read,
              (unsigned long long)last.ssd_write, (unsigned long long)last.h2d,
              (unsigned long long)last.d2h,
              match ? "as planned" : "NOT as planned");
  return s;
}

namespace {
// The swap drives' wear: the SSD bytes the training steps wrote (those
// tiers_count_steps counts), each step's against the plan's, and apart
// the writes outside them (the start's scatter, validation steps, the
// checkpoints' flushes of deferred updates), which no plan predicts.
struct SsdWrites {
  uint64_t bytes = 0, outside = 0;
  size_t steps = 0;
  bool as_planned = true;
  double per_step() const { return steps ? double(bytes) / double(steps) : 0; }
};

SsdWrites ssd_writes(const Tiers &t) {
  SsdWrites w;
  w.steps = t.per_step.size();
  for (const LinkBytes &b : t.per_step) {
    w.bytes += b.ssd_write;
    w.as_planned = w.as_planned && b.ssd_write == t.predicted.ssd_write;
  }
  const uint64_t all = t.store ? t.store->moved().ssd_write : w.bytes;
  w.outside = all > w.bytes ? all - w.bytes : 0;
  return w;
}

// Decimal units, as drives rate their endurance: "639 KB", "1.23 GB".
std::string decimal_bytes(double b) {
  static const char *const kUnits[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (b >= 999.5 && u < 5) {
    b /= 1000;
    ++u;
  }
  return format("%.3g %s", b, kUnits[u]);
}
} // namespace

std::string tiers_ssd_writes(const spw_ctx *ctx, int64_t tokens_per_step) {
  const Tiers &t = *ctx->tiers;
  const SsdWrites w = ssd_writes(t);
  if (w.steps == 0 || (w.bytes == 0 && t.predicted.ssd_write == 0))
    return "";
  std::string s = format("ssd writes: %s in %zu step%s (%s/step",
                         decimal_bytes(double(w.bytes)).c_str(), w.steps,
                         w.steps == 1 ? "" : "s",
                         decimal_bytes(w.per_step()).c_str());
  if (tokens_per_step > 0)
    s += format(", %s/token",
                decimal_bytes(w.per_step() / double(tokens_per_step)).c_str());
  s += ")";
  if (w.outside)
    s += format(", and %s outside the training steps (the start, "
                "validation, checkpoints)",
                decimal_bytes(double(w.outside)).c_str());
  if (t.predicted_given)
    s += w.as_planned
             ? std::string(", as planned")
             : format(", NOT as planned (the plan writes %llu bytes per step)",
                      (unsigned long long)t.predicted.ssd_write);
  return s;
}

// Of a step's telemetry: time in tasks over the step, and the transfer
// time compute did not wait for over the transfer time (1: nothing moved).
static double busy_fraction(double busy_s, double seconds) {
  return seconds > 0 ? std::min(1.0, busy_s / seconds) : 0.0;
}
static double transfer_overlap(double wait_s, double transfer_s) {
  return transfer_s > 0 ? std::clamp(1.0 - wait_s / transfer_s, 0.0, 1.0)
                        : 1.0;
}

std::string tiers_progress(const spw_ctx *ctx) {
  const Tiers &t = *ctx->tiers;
  if (t.telemetry.empty())
    return "";
  const Tiers::StepTelemetry &st = t.telemetry.back();
  std::string s = format("busy %.0f%%  wait %.2fs  overlap %.0f%%",
                         100 * busy_fraction(st.busy_s, st.seconds),
                         st.wait_s,
                         100 * transfer_overlap(st.wait_s, st.transfer_s));
  if (st.host_optimizer_s > 0)
    s += format("  cpu optimizer %.2fs", st.host_optimizer_s);
  return s;
}

static std::string telemetry_json(const Tiers::StepTelemetry &st) {
  return format("{\"seconds\": %.6f, \"busy_s\": %.6f, \"busy_fraction\": "
                "%.4f, \"wait_s\": %.6f, \"transfer_s\": %.6f, "
                "\"transfer_overlap\": %.4f, \"host_optimizer_s\": %.6f}",
                st.seconds, st.busy_s, busy_fraction(st.busy_s, st.seconds),
                st.wait_s, st.transfer_s,
                transfer_overlap(st.wait_s, st.transfer_s),
                st.host_optimizer_s);
}

std::string tiers_step_json(const spw_ctx *ctx) {
  const Tiers &t = *ctx->tiers;
  return t.telemetry.empty() ? "" : telemetry_json(t.telemetry.back());
}

static std::string links_json(const LinkBytes &b) {
  return format("{\"ssd_read\": %llu, \"ssd_write\": %llu, \"h2d\": %llu, "
                "\"d2h\": %llu}",
                (unsigned long long)b.ssd_read,
                (unsigned long long)b.ssd_write, (unsigned long long)b.h2d,
                (unsigned long long)b.d2h);
}

std::string tiers_stats_json(const spw_ctx *ctx, double seconds,
                             int64_t steps, int64_t tokens_per_step) {
  const Tiers &t = *ctx->tiers;
  std::string per;
  for (const LinkBytes &b : t.per_step)
    per += (per.empty() ? "" : ", ") + links_json(b);
  const LinkBytes last = t.per_step.empty() ? LinkBytes{} : t.per_step.back();
  const double overlap = t.busy_s > 0 ? 1.0 - t.wait_s / t.busy_s : 1.0;
  // The last step's bytes of each block class (the same step as
  // bytes_per_iteration; they sum to it).
  std::string by_class;
  for (int c = 0; c < Tiers::kNumClasses; ++c)
    by_class += format("%s\"%s\": %s", c ? ", " : "", class_name(c),
                       links_json(t.class_last_step[size_t(c)]).c_str());
  // The telemetry of every step, and of all of them together.
  Tiers::StepTelemetry all;
  std::string tel;
  for (const Tiers::StepTelemetry &st : t.telemetry) {
    all.seconds += st.seconds;
    all.busy_s += st.busy_s;
    all.wait_s += st.wait_s;
    all.transfer_s += st.transfer_s;
    all.host_optimizer_s += st.host_optimizer_s;
    tel += (tel.empty() ? "" : ", ") + telemetry_json(st);
  }
  const std::string prediction =
      t.predicted_s < 0
          ? std::string("null")
          : format("{\"seconds_per_iteration\": %.6g, \"bound\": %s}",
                   t.predicted_s, json_string(t.predicted_bound).c_str());
  const SsdWrites w = ssd_writes(t);
  const bool per_token = tokens_per_step > 0 && w.steps > 0;
  const std::string wear = format(
      "{\"bytes\": %llu, \"steps\": %zu, \"bytes_per_step\": %.17g, "
      "\"tokens_per_step\": %s, \"bytes_per_token\": %s, "
      "\"planned_bytes_per_step\": %s, \"as_planned\": %s, "
      "\"outside_steps_bytes\": %llu}",
      (unsigned long long)w.bytes, w.steps, w.per_step(),
      tokens_per_step > 0 ? format("%lld", (long long)tokens_per_step).c_str()
                          : "null",
      per_token
          ? format("%.17g", w.per_step() / double(tokens_per_step)).c_str()
          : "null",
      t.predicted_given
          ? format("%llu", (unsigned long long)t.predicted.ssd_write).c_str()
          : "null",
      !t.predicted_given ? "null" : w.as_planned ? "true" : "false",
      (unsigned long long)w.outside);
  // The step's own tensors: the device's step arena, the most they held
  // in it, and what the plan's GPU budget left them (null: no budget).
  const Device *dev = ctx->device.get();
  const std::string step_arena =
      format("{\"bytes\": %lld, \"peak\": %lld, \"planned\": %s}",
             (long long)(dev ? dev->step_arena_bytes() : 0),
             (long long)(dev ? dev->step_bytes_peak() : 0),
             ctx->step_arena_budget < 0
                 ? "null"
                 : format("%lld", (long long)ctx->step_arena_budget).c_str());
  return format(
      "{\"schema\": \"spillway-stats-1\", \"steps\": %lld, "
      "\"seconds\": %.6f, \"seconds_per_iteration\": %.6f,\n"
      " \"predicted\": %s,\n"
      " \"bytes_per_iteration\": %s,\n \"predicted_bytes_per_iteration\": "
      "%s,\n \"bytes_per_iteration_by_class\": {%s},\n"
      " \"bytes_per_step\": [%s],\n"
      " \"peak_bytes\": {\"gpu\": %llu, \"host\": %llu, \"ssd\": %llu},\n"
      " \"planned_bytes\": {\"gpu\": %llu, \"host\": %llu, \"ssd\": %llu},\n"
      " \"step_arena\": %s,\n"
      " \"io_wait_s\": %.6f, \"io_busy_s\": %.6f, \"overlap\": %.4f,\n"
      " \"telemetry\": %s,\n \"telemetry_per_step\": [%s],\n"
      " \"ssd_writes\": %s}\n",
      (long long)steps, seconds, steps ? seconds / double(steps) : 0.0,
      prediction.c_str(), links_json(last).c_str(),
      links_json(t.predicted).c_str(), by_class.c_str(), per.c_str(),
      (unsigned long long)t.store->usage(Tier::Gpu).peak,
      (unsigned long long)t.store->usage(Tier::Host).peak,
      (unsigned long long)(t.swap ? t.store->usage(Tier::Ssd).peak : 0),
      (unsigned long long)t.gpu_bytes, (unsigned long long)t.host_bytes,
      (unsigned long long)t.ssd_bytes, step_arena.c_str(), t.wait_s, t.busy_s,
      overlap, telemetry_json(all).c_str(), tel.c_str(), wear.c_str());
}

} // namespace spw

// ---- the C entry points -------------------------------------------------------

extern "C" {

void spw_declare_tiers(spw_ctx *ctx, int64_t gpu_bytes, int64_t host_bytes,
                       int64_t ssd_bytes, const char *ssd_dirs,
                       const int64_t *predicted) {
  guarded(ctx, "spw_declare_tiers", [&] {
    if (gpu_bytes < 0 || host_bytes < 0 || ssd_bytes < 0)
      fail("negative arena size");
    auto t = std::make_shared<Tiers>();
    t->gpu_bytes = uint64_t(gpu_bytes);
    t->host_bytes = uint64_t(host_bytes);
    t->ssd_bytes = uint64_t(ssd_bytes);
    t->ssd_dirs = ssd_dirs ? ssd_dirs : "";
    if (predicted) {
      t->predicted = {uint64_t(predicted[0]), uint64_t(predicted[1]),
                      uint64_t(predicted[2]), uint64_t(predicted[3])};
      t->predicted_given = true;
    }
    ctx->tiers = std::move(t);
  });
}

void spw_declare_prediction(spw_ctx *ctx, double seconds, const char *bound) {
  guarded(ctx, "spw_declare_prediction", [&] {
    tiers_of(ctx);
    if (!(seconds >= 0))
      fail("predicted seconds %g", seconds);
    ctx->tiers->predicted_s = seconds;
    ctx->tiers->predicted_bound = bound ? bound : "";
  });
}

void spw_declare_step_arena(spw_ctx *ctx, int64_t bytes) {
  guarded(ctx, "spw_declare_step_arena", [&] {
    if (bytes < 0)
      fail("negative step arena (%lld bytes)", (long long)bytes);
    ctx->step_arena_budget = bytes;
  });
}

void spw_declare_block(spw_ctx *ctx, int32_t cls, int32_t layer,
                       int64_t bytes, int32_t home, int64_t home_offset,
                       int32_t n, const int64_t *params,
                       const int64_t *offsets) {
  guarded(ctx, "spw_declare_block", [&] {
    Tiers &t = tiers_of(ctx);
    if (cls < 0 ||
        (cls > 3 && cls != SPW_BLOCK_PENDING && cls != SPW_BLOCK_MASTER) ||
        layer < 0 || bytes <= 0 || home < -1 || home > 2 || home_offset < 0 ||
        n < 0 || (n > 0 && (!params || !offsets)))
      fail("invalid block (class %d, layer %d, %lld bytes, home %d)", cls,
           layer, (long long)bytes, home);
    if (t.by_key.count({cls, layer}))
      fail("block %s of layer %d declared twice", class_name(cls), layer);
    // Parameters and their state live only in their blocks (no host copy
    // is made for them): such a block needs a home.
    if (home < 0 && n > 0 &&
        (cls == SPW_BLOCK_PARAMS || cls == SPW_BLOCK_OPTIMIZER ||
         cls == SPW_BLOCK_MASTER))
      fail("block %s of layer %d holds %d parameter%s but has no home",
           class_name(cls), layer, n, n == 1 ? "" : "s");
    if (cls == SPW_BLOCK_MASTER && !ctx->bf16_mixed)
      fail("block master/layer%d: master blocks hold the f32 master weights "
           "of a bf16-mixed model (spw_declare_bf16_mixed must come before "
           "the tiers)",
           layer);
    Tiers::Block b;
    b.cls = cls;
    b.layer = layer;
    b.bytes = uint64_t(bytes);
    b.home = home;
    b.home_offset = uint64_t(home_offset);
    b.name = format("%s/layer%d", class_name(cls), layer);
    // A params block holds bf16 working copies once the plan has a master
    // block. Declared before one, it is checked with the bf16 size in a
    // bf16-mixed model, and again with its final size at tiers_start.
    b.elem = (cls == SPW_BLOCK_PARAMS && t.bf16_params) ||
                     (cls == SPW_BLOCK_OPTIMIZER && ctx->state_bf16)
                 ? 2
                 : 4;
    const uint64_t check_elem =
        cls == SPW_BLOCK_PARAMS && ctx->bf16_mixed ? 2 : b.elem;
    for (int32_t i = 0; i < n; ++i) {
      if (params[i] < 0 || size_t(params[i]) >= ctx->params.size())
        fail("block %s: parameter index %lld out of range", b.name.c_str(),
             (long long)params[i]);
      const ParamInfo &p = ctx->params[size_t(params[i])];
      if (p.value->dtype != SPW_F32)
        fail("block %s: parameter '%s' is %s; blocks hold f32 parameters",
             b.name.c_str(), p.name.c_str(), dtype_name(p.value->dtype));
      // An optimizer block holds m (then v) of the member's state size:
      // FOAM's folded state is smaller than the parameter.
      // A pending block holds each member's leading deferred elements only.
      check_fits(ctx, b, p, offsets[i], check_elem);
      b.params.push_back(int32_t(params[i]));
      b.offsets.push_back(uint64_t(offsets[i]));
    }
    if (cls == SPW_BLOCK_MASTER && !t.bf16_params) {
      t.bf16_params = true;
      for (Tiers::Block &o : t.blocks)
        if (o.cls == SPW_BLOCK_PARAMS)
          o.elem = 2;
    }
    t.by_key[{cls, layer}] = t.blocks.size();
    t.blocks.push_back(std::move(b));
    t.param_blocks.clear(); // made again with this block
  });
}

void spw_declare_split(spw_ctx *ctx, int32_t cls, int32_t layer,
                       int64_t split_bytes) {
  guarded(ctx, "spw_declare_split", [&] {
    Tiers &t = tiers_of(ctx);
    if (t.store)
      fail("the offload plan has started; blocks are split before");
    Tiers::Block &b = t.block(cls, layer, "spw_declare_split");
    if (cls != SPW_BLOCK_PARAMS && cls != SPW_BLOCK_OPTIMIZER &&
        cls != SPW_BLOCK_MASTER)
      fail("%s: only params, master and optimizer blocks are split",
           b.name.c_str());
    if (split_bytes <= 0 || uint64_t(split_bytes) >= b.span() ||
        split_bytes % 256 != 0)
      fail("%s: split at %lld bytes of %llu (a multiple of 256 inside the "
           "block)",
           b.name.c_str(), (long long)split_bytes,
           (unsigned long long)b.span());
    if (b.split)
      fail("%s split twice", b.name.c_str());
    // The parameters, their master weights and their AdamW state split at
    // the same element: the binds share one split point per parameter.
    // A params block's element size is known once the plan has a master
    // block or cannot have one; else tiers_start compares it.
    auto unsure = [&](const Tiers::Block &x) {
      return x.cls == SPW_BLOCK_PARAMS && ctx->bf16_mixed && !t.bf16_params;
    };
    for (int c : {SPW_BLOCK_PARAMS, SPW_BLOCK_OPTIMIZER, SPW_BLOCK_MASTER}) {
      auto other = t.by_key.find({c, layer});
      if (c == cls || other == t.by_key.end())
        continue;
      const Tiers::Block &o = t.blocks[other->second];
      // ZeRO: a sharded optimizer (or master) block holds one rank's
      // elements, cut by the same global element (deferred_end).
      const bool sharded =
          ctx->declared_shards > 0 &&
          (c == SPW_BLOCK_OPTIMIZER || cls == SPW_BLOCK_OPTIMIZER ||
           c == SPW_BLOCK_MASTER || cls == SPW_BLOCK_MASTER);
      if (sharded || !o.split || unsure(o) || unsure(b) ||
          o.split / o.elem == uint64_t(split_bytes) / b.elem)
        continue;
      if (o.elem == b.elem)
        fail("%s split at %lld bytes, but %s at %llu: a layer's parameters "
             "and optimizer state split at the same bytes",
             b.name.c_str(), (long long)split_bytes, o.name.c_str(),
             (unsigned long long)o.split);
      fail("%s split at %lld bytes (element %llu), but %s at %llu bytes "
           "(element %llu): a layer's params (2-byte bf16 elements in a "
           "bf16-mixed plan), master and optimizer blocks (2-byte elements "
           "with bf16 state) split at the same element",
           b.name.c_str(), (long long)split_bytes,
           (unsigned long long)(uint64_t(split_bytes) / b.elem), o.name.c_str(),
           (unsigned long long)o.split, (unsigned long long)(o.split / o.elem));
    }
    b.split = uint64_t(split_bytes);
  });
}

void spw_declare_part_home(spw_ctx *ctx, int32_t cls, int32_t layer,
                           int32_t home, int64_t offset) {
  guarded(ctx, "spw_declare_part_home", [&] {
    Tiers &t = tiers_of(ctx);
    if (t.store)
      fail("the offload plan has started; a part's home is declared before");
    Tiers::Block &b = t.block(cls, layer, "spw_declare_part_home");
    if (cls != SPW_BLOCK_PARAMS && cls != SPW_BLOCK_OPTIMIZER &&
        cls != SPW_BLOCK_MASTER)
      fail("%s: only params, master and optimizer blocks are cut between two "
           "tiers",
           b.name.c_str());
    // Each part is then read and written at its own home, which the
    // shards' streaming and gathers do not do.
    if (ctx->declared_shards > 0)
      fail("%s: a block sharded over the ranks (ZeRO) is not cut between "
           "two tiers",
           b.name.c_str());
    if (!b.split)
      fail("%s is not split: spw_declare_split cuts it in two parts first",
           b.name.c_str());
    if (b.cut())
      fail("%s: part 0's home declared twice", b.name.c_str());
    if (home < 0 || home > 2)
      fail("%s: unknown tier %d for part 0's home", b.name.c_str(), home);
    if (b.home < 0)
      fail("%s has no home for part 1 to keep", b.name.c_str());
    if (home == b.home)
      fail("%s: part 0's home is the block's own (%s); a cut block's parts "
           "are homed on two tiers",
           b.name.c_str(), tier_name(Tier(home)));
    const uint64_t granule = home == int(Tier::Gpu) ? 256 : 4096;
    const uint64_t arena[3] = {t.gpu_bytes, t.host_bytes, t.ssd_bytes};
    if (offset < 0 || uint64_t(offset) % granule != 0 ||
        uint64_t(offset) > arena[home] ||
        b.part_bytes(0) > arena[home] - uint64_t(offset))
      fail("%s: part 0 (%llu bytes) homed at byte %lld of the %s arena "
           "(%llu bytes): the offset is a multiple of %llu and the part "
           "lies inside",
           b.name.c_str(), (unsigned long long)b.part_bytes(0),
           (long long)offset, tier_name(Tier(home)),
           (unsigned long long)arena[home], (unsigned long long)granule);
    b.part0_home = home;
    b.part0_offset = uint64_t(offset);
  });
}

// True when the device's kernels and copies may take `t`'s data: a device
// tensor, or any tensor on a device whose memory is the host's.
static bool in_device_memory(const spw_ctx *ctx, const spw_tensor &t) {
  return t.on_device || ctx->device->host_visible();
}

// A device tensor of `like`'s type over `data` (GPU-tier memory), for the
// kernels that work on tier copies.
static std::unique_ptr<spw_tensor> device_view(const spw_tensor &like,
                                               void *data) {
  auto v = make_tensor(like.dtype, like.rank, like.dims, "tier copy",
                       /*allocate=*/false);
  v->data = data;
  v->on_device = true;
  return v;
}

// Runs a kernel of the C ABI on the context's device; its error (the
// context's) ends the calling entry point.
static void device_kernel(spw_ctx *ctx, KernelEntry k, spw_tensor *const *ins,
                          spw_tensor *const *outs) {
  k(ctx, ins, outs, nullptr, nullptr);
  if (ctx->failed())
    throw Error(ctx->error);
}

// Waits for the CPU optimizer's updates of part `part` (-1: all) of b's host
// copy: what reads, overwrites, frees or binds that copy comes after them.
// `which`: the gathers then run (a bind leaves the rounding ones to the
// update it is for).
static void wait_host_updates(Tiers &t, Tiers::Block &b, int part,
                              Gathers which = Gathers::All) {
  for (int k = 0; k < 2; ++k)
    if (part < 0 || k == part) {
      for (const Token &u : b.host_updates[k])
        t.host->wait(u);
      b.host_updates[k].clear();
    }
  run_gathers(b, part, which);
}

// Gives part k of block b a copy's extent on tier d: beside the block's
// other part there, else at the plan's offset `at` (the copy's start). A
// cut block's part goes at `at` always: its other part on d may be at its
// home, not in the slot the plan gives this copy.
static void place_part(TensorStore &s, Tiers::Block &b, int k, Tier d,
                       int64_t at) {
  const int64_t beside =
      b.parts() > 1 && !b.cut() ? b.base[1 - k][int(d)] : int64_t(-1);
  const int64_t start = beside >= 0 ? beside : at;
  if (start < 0)
    fail("%s: no offset for its copy%s on %s", b.name.c_str(),
         b.cut() ? format(" of part %d", k).c_str() : "", tier_name(d));
  s.place(b.part_id(k), d, uint64_t(start) + b.part_offset(k, int(d)));
  b.base[k][int(d)] = start;
}

// Moves part `part` (-1: every part) of block (cls, layer).
static int32_t move_parts(spw_ctx *ctx, const char *what, int32_t cls,
                          int32_t layer, int32_t part, int32_t from,
                          int32_t to, int32_t prio, int64_t at) {
  int32_t token = -1;
  guarded(ctx, what, [&] {
    Tiers &t = tiers_of(ctx);
    TensorStore &s = t.started(what);
    Tiers::Block &b = t.block(cls, layer, what);
    Tier f = tier_of(from, what), d = tier_of(to, what);
    if (prio < 0 || prio > 2)
      fail("unknown priority %d", prio);
    if (part < -1 || part >= b.parts())
      fail("%s has no part %d (%d part%s)", b.name.c_str(), part, b.parts(),
           b.parts() == 1 ? "" : "s");
    // A copy of this block the compute stream waited for may still be in
    // flight from the host's view (CUDA), and the store refuses a move that
    // reads or overwrites a copy a move still uses: the next move of the
    // block waits for it on the host. It is ordered before the kernels
    // issued since, so by now it has usually long completed.
    for (Tiers::Move &o : t.moves)
      if (o.device_awaited && o.block == b.name) {
        for (const Token &k : o.tokens)
          k.wait();
        o.device_awaited = false;
      }
    Tiers::Move m;
    m.issued = Clock::now();
    m.to = d;
    m.block = b.name;
    for (int k = 0; k < b.parts(); ++k) {
      if (part >= 0 && k != part)
        continue;
      const TensorId id = b.part_id(k);
      if (f == Tier::Host || d == Tier::Host)
        wait_host_updates(t, b, k);
      else
        run_gathers(b, k, Gathers::Rounding); // a GPU copy's
      if (!s.resident(id, d))
        place_part(s, b, k, d, at);
      m.tokens.push_back(s.move(id, f, d, Priority(prio)));
    }
    t.moves.push_back(std::move(m));
    token = int32_t(t.moves.size() - 1);
  });
  return token;
}

int32_t spw_move(spw_ctx *ctx, int32_t cls, int32_t layer, int32_t from,
                 int32_t to, int32_t prio, int64_t at) {
  return move_parts(ctx, "spw_move", cls, layer, -1, from, to, prio, at);
}

int32_t spw_move_part(spw_ctx *ctx, int32_t cls, int32_t layer, int32_t part,
                      int32_t from, int32_t to, int32_t prio, int64_t at) {
  if (part < 0) {
    guarded(ctx, "spw_move_part", [&] { fail("part %d (0 or 1)", part); });
    return -1;
  }
  return move_parts(ctx, "spw_move_part", cls, layer, part, from, to, prio,
                    at);
}

void spw_alloc_copy(spw_ctx *ctx, int32_t cls, int32_t layer, int32_t part,
                    int32_t tier, int64_t at) {
  guarded(ctx, "spw_alloc_copy", [&] {
    Tiers &t = tiers_of(ctx);
    TensorStore &s = t.started("spw_alloc_copy");
    Tiers::Block &b = t.block(cls, layer, "spw_alloc_copy");
    Tier d = tier_of(tier, "spw_alloc_copy");
    if (cls != SPW_BLOCK_PARAMS || !t.bf16_params)
      fail("%s: only a bf16-mixed plan's params blocks get a copy rounded "
           "from their masters",
           b.name.c_str());
    if (d == Tier::Ssd)
      fail("%s: a copy made by compute is on gpu or host, not ssd",
           b.name.c_str());
    if (part < -1 || part >= b.parts())
      fail("%s has no part %d (%d part%s)", b.name.c_str(), part, b.parts(),
           b.parts() == 1 ? "" : "s");
    // The working copies are the masters' rounding: made from the layer's
    // master block bound on the same tier, whatever the update does next
    // (one it skips leaves them right).
    Tiers::Block &mb = t.block(SPW_BLOCK_MASTER, layer, "spw_alloc_copy");
    if (mb.bound_tier != int(d))
      fail("%s: its master block is not bound on %s, where its copy is made "
           "from it (the plan binds the masters first)",
           b.name.c_str(), tier_name(d));
    if (d == Tier::Host)
      wait_host_updates(t, mb, -1);
    auto address = [&](TensorId id) {
      return static_cast<char *>(d == Tier::Gpu ? s.gpu_address(id)
                                                : s.host_address(id));
    };
    char *mpart[2] = {nullptr, nullptr}, *ppart[2] = {nullptr, nullptr};
    for (int k = 0; k < mb.parts(); ++k)
      if (s.resident(mb.part_id(k), d))
        mpart[k] = address(mb.part_id(k));
    for (int k = 0; k < b.parts(); ++k) {
      if (part >= 0 && k != part)
        continue;
      const TensorId id = b.part_id(k);
      if (s.resident(id, d))
        fail("%s already has a copy of part %d on %s: making one would lose "
             "it",
             b.name.c_str(), k, tier_name(d));
      if (d == Tier::Host)
        wait_host_updates(t, b, k);
      place_part(s, b, k, d, at);
      ppart[k] = address(id);
    }
    for (size_t i = 0; i < b.params.size(); ++i) {
      const ParamInfo &p = ctx->params[size_t(b.params[i])];
      const int64_t n = p.value->numel;
      char *from[2], *to[2];
      int64_t split;
      member_elements(b, i, ppart, false, n, to, &split);
      int64_t count[2] = {split, n - split};
      if (cut_for_ranks(ctx, mb.cls) && sharded_state(ctx, p)) {
        // Masters cut for the ranks: this rank's shard of each part, into
        // its place; an all-gather brings the other ranks' (the update's,
        // or the one recorded below). The loopback device, there to catch
        // what a GPU does with memory nobody wrote, makes them NaN until
        // then (bf16 0xffff), on either tier.
        if (ctx->device->name() == "loopback")
          for (int k = 0; k < 2; ++k)
            if (to[k] && count[k] > 0) {
              if (d == Tier::Host)
                std::memset(to[k], 0xff, size_t(count[k]) * 2);
              else
                ctx->device->fill(to[k], 0xff, count[k] * 2);
            }
        char *work[2] = {to[0], to[1]};
        shard_pieces(ctx, t, mb, i, mpart, work, split, from, to, count);
      } else {
        member_elements(mb, i, mpart, false, n, from, &split);
      }
      for (int k = 0; k < 2; ++k) {
        if (!to[k] || count[k] == 0)
          continue;
        if (!from[k])
          fail("%s: part %d of its master block is not on %s, where the "
               "copy of '%s' is rounded from it",
               b.name.c_str(), k, tier_name(d), p.name.c_str());
        const float *x = reinterpret_cast<const float *>(from[k]);
        bf16 *y = reinterpret_cast<bf16 *>(to[k]);
        if (d == Tier::Host)
          round_to_bf16(x, y, count[k]);
        else
          round_to_bf16_on_device(ctx, x, y, count[k]);
      }
      if (!cut_for_ranks(ctx, mb.cls) || !sharded_state(ctx, p))
        continue;
      // Each part this copy holds of the member: elements [0, split) in
      // part 0, the rest in part 1 (tiers.h, Block::Gather).
      char *whole[2];
      member_elements(b, i, ppart, false, n, whole, &split);
      const int64_t lo[2] = {0, split}, hi[2] = {split, n};
      for (int k = 0; k < 2; ++k)
        if (whole[k] && hi[k] > lo[k]) {
          bf16 *at = reinterpret_cast<bf16 *>(whole[k]);
          const int64_t first = lo[k], last = hi[k];
          const bool host = d == Tier::Host;
          b.gathers.push_back({b.split ? k : 0,
                               [ctx, &p, first, last, at, host] {
                                 zero::gather_work(ctx, p, first, last, at,
                                                   host);
                               },
                               /*rounding=*/true, b.params[i], first, last});
        }
    }
  });
}

void spw_await(spw_ctx *ctx, int32_t token) {
  guarded(ctx, "spw_await", [&] {
    Tiers &t = tiers_of(ctx);
    if (token < 0 || size_t(token) >= t.moves.size())
      fail("unknown token %d", token);
    Tiers::Move &m = t.moves[size_t(token)];
    const auto t0 = Clock::now();
    // The consumer of a copy into the GPU tier is the device's compute: it
    // waits there (CUDA: the compute stream waits on the copy's event; the
    // host blocks only where compute is the calling thread). Copies into
    // host or SSD are read by host code (the CPU optimizer, the next link,
    // the gradient accumulator): the host waits.
    for (const Token &k : m.tokens) {
      if (m.to == Tier::Gpu)
        t.gpu->compute_waits(k);
      else
        k.wait();
    }
    m.device_awaited = m.to == Tier::Gpu;
    const auto t1 = Clock::now();
    t.wait_s += std::chrono::duration<double>(t1 - t0).count();
    if (trace::enabled())
      trace::span(trace::Lane::Compute, 0, "wait " + m.block, us(t0), us(t1));
    // Time with a move in flight: the union of [issued, awaited] intervals
    // (they are awaited roughly in issue order).
    const auto start = std::max(m.issued, t.busy_until);
    if (t1 > start)
      t.busy_s += std::chrono::duration<double>(t1 - start).count();
    t.busy_until = std::max(t.busy_until, t1);
  });
}

static void drop_parts(spw_ctx *ctx, const char *what, int32_t cls,
                       int32_t layer, int32_t part, int32_t tier) {
  guarded(ctx, what, [&] {
    Tiers &t = tiers_of(ctx);
    TensorStore &s = t.started(what);
    Tiers::Block &b = t.block(cls, layer, what);
    Tier d = tier_of(tier, what);
    const int homed = b.part_homed_on(int(d));
    if (homed >= 0 && !b.cut())
      fail("%s: its home copy on %s cannot be dropped", b.name.c_str(),
           tier_name(d));
    if (part < -1 || part >= b.parts())
      fail("%s has no part %d (%d part%s)", b.name.c_str(), part, b.parts(),
           b.parts() == 1 ? "" : "s");
    // A cut block: only the part homed elsewhere has a copy to drop here.
    if (homed >= 0 && part < 0)
      fail("%s: part %d's home copy is on %s and cannot be dropped; drop "
           "part %d's copy there instead (spw_drop_part)",
           b.name.c_str(), homed, tier_name(d), 1 - homed);
    if (homed >= 0 && part == homed)
      fail("%s: part %d's home copy on %s cannot be dropped", b.name.c_str(),
           part, tier_name(d));
    if (d == Tier::Host)
      wait_host_updates(t, b, part);
    else
      run_gathers(b, part, Gathers::Rounding);
    for (int k = 0; k < b.parts(); ++k)
      if (part < 0 || k == part) {
        if (part >= 0 || s.resident(b.part_id(k), d) || b.parts() == 1)
          s.release(b.part_id(k), d);
        b.base[k][int(d)] = -1;
      }
  });
}

void spw_drop(spw_ctx *ctx, int32_t cls, int32_t layer, int32_t tier) {
  drop_parts(ctx, "spw_drop", cls, layer, -1, tier);
}

void spw_drop_part(spw_ctx *ctx, int32_t cls, int32_t layer, int32_t part,
                   int32_t tier) {
  if (part < 0) {
    guarded(ctx, "spw_drop_part", [&] { fail("part %d (0 or 1)", part); });
    return;
  }
  drop_parts(ctx, "spw_drop_part", cls, layer, part, tier);
}

void spw_bind(spw_ctx *ctx, int32_t cls, int32_t layer, int32_t tier) {
  guarded(ctx, "spw_bind", [&] {
    Tiers &t = tiers_of(ctx);
    TensorStore &s = t.started("spw_bind");
    Tiers::Block &b = t.block(cls, layer, "spw_bind");
    Tier d = tier_of(tier, "spw_bind");
    if (cls != SPW_BLOCK_PARAMS && cls != SPW_BLOCK_OPTIMIZER &&
        cls != SPW_BLOCK_MASTER)
      fail("%s: only params, master and optimizer blocks are bound",
           b.name.c_str());
    if (d == Tier::Host)
      wait_host_updates(t, b, -1, Gathers::Updates);
    b.bound_tier = int(d);
    char *part[2] = {nullptr, nullptr};
    bool any = false;
    for (int k = 0; k < b.parts(); ++k)
      if (d != Tier::Ssd && s.resident(b.part_id(k), d)) {
        part[k] = static_cast<char *>(d == Tier::Gpu
                                          ? s.gpu_address(b.part_id(k))
                                          : s.host_address(b.part_id(k)));
        any = true;
      }
    if (!any)
      fail("%s has no copy on %s to compute with", b.name.c_str(),
           tier_name(d));
    // A GPU-tier copy is what the device's kernels and optimizer read
    // (the parameter's device tensor points at it); a host-tier copy is for
    // host code only (the CPU optimizer: the value's host tensor).
    const bool gpu = d == Tier::Gpu;
    // The f32 values: a params block, or a bf16-mixed plan's master block
    // (whose params block holds the working copies instead).
    const bool values = cls == value_class(t);
    const bool work = cls == SPW_BLOCK_PARAMS && !values;
    auto f32 = [](char *x) { return reinterpret_cast<float *>(x); };
    const bool half = cls == SPW_BLOCK_OPTIMIZER && b.elem == 2; // bf16 state
    for (size_t i = 0; i < b.params.size(); ++i) {
      ParamInfo &p = ctx->params[size_t(b.params[i])];
      const int64_t n =
          cls == SPW_BLOCK_OPTIMIZER ? p.state_numel() : p.value->numel;
      char *at[2];
      int64_t split;
      member_elements(b, i, part, false, n, at, &split);
      if (work) {
        bf16 *w[2] = {reinterpret_cast<bf16 *>(at[0]),
                      reinterpret_cast<bf16 *>(at[1])};
        p.work_on_device = gpu;
        p.bound_split = b.split ? split : -1;
        p.bound_work_part[0] = w[0];
        p.bound_work_part[1] = b.split ? w[1] : nullptr;
        if (!gpu)
          continue; // for the CPU optimizer's writes only
        if (!p.dev_work || p.work_owned) {
          if (p.dev_work && p.dev_work->data)
            ctx->device->release(p.dev_work->data);
          p.dev_work = make_tensor(SPW_BF16, p.value->rank, p.value->dims,
                                   p.name.c_str(), /*allocate=*/false);
          p.dev_work->on_device = true;
          p.work_owned = false;
        }
        // Read whole only where it is in one piece, as a value.
        p.dev_work->data = !b.split                               ? w[0]
                           : split == n                           ? w[0]
                           : split == 0                           ? w[1]
                           : w[0] && w[1] && w[1] == w[0] + split ? w[0]
                                                                  : nullptr;
        continue;
      }
      spw_tensor &value = values && gpu ? *p.dev_value : *p.value;
      (values ? p.w_on_device : p.state_on_device) = gpu;
      if (values && cut_for_ranks(ctx, cls) && sharded_state(ctx, p)) {
        // This rank's shard of the f32 masters, bound as the sharded state
        // is (ParamInfo::value_first); value's data stays unbound: the
        // whole parameter is not here, and only the optimizer reads it.
        float *w[2] = {nullptr, nullptr};
        if (b.split) {
          const int64_t tt = deferred_end(ctx, t, b, i);
          const ShardParts sp = shard_parts(p, tt);
          member_elements(b, i, part, false, kAnyElements, at, &split);
          p.bound_split = tt;
          p.value_first[0] = sp.first[0];
          p.value_first[1] = sp.first[1];
          w[0] = f32(at[0]);
          w[1] = f32(at[1]);
        } else {
          member_elements(b, i, part, false, p.state_local_numel(), at, &split);
          p.bound_split = -1;
          p.value_first[0] = p.shard_lo;
          p.value_first[1] = -1;
          w[0] = f32(at[0]);
        }
        p.bound_w_part[0] = w[0];
        p.bound_w_part[1] = w[1];
        value.data = nullptr;
        continue;
      }
      if (!b.split) {
        // One part: the plain pointers.
        p.bound_split = -1;
        if (values) {
          value.data = at[0];
        } else {
          char *v[2];
          member_elements(b, i, part, true, n, v, &split);
          p.bound_m = {at[0], half};
          p.bound_v = {v[0], half};
        }
        continue;
      }
      p.bound_split = split;
      if (values) {
        float *w[2] = {f32(at[0]), f32(at[1])};
        p.bound_w_part[0] = w[0];
        p.bound_w_part[1] = w[1];
        // Forward and backward read the whole parameter: only where it is
        // in one piece (else reading it is the unbound-parameter error).
        value.data = split == n                             ? w[0]
                     : split == 0                           ? w[1]
                     : w[0] && w[1] && w[1] == w[0] + split ? w[0]
                                                            : nullptr;
      } else {
        char *v[2];
        p.state_first[0] = p.state_first[1] = -1;
        if (sharded_state(ctx, p)) {
          // This rank's shard in two pieces: [lo, t) in part 0, the rest
          // in part 1 (ParamInfo::state_first).
          const int64_t tt = deferred_end(ctx, t, b, i);
          const ShardParts sp = shard_parts(p, tt);
          member_elements(b, i, part, false, kAnyElements, at, &split);
          member_elements(b, i, part, true, kAnyElements, v, &split);
          p.bound_split = tt;
          p.state_first[0] = sp.first[0];
          p.state_first[1] = sp.first[1];
        } else {
          member_elements(b, i, part, true, n, v, &split);
        }
        p.bound_m_part[0] = {at[0], half};
        p.bound_m_part[1] = {at[1], half};
        p.bound_v_part[0] = {v[0], half};
        p.bound_v_part[1] = {v[1], half};
        p.bound_m = p.bound_v = StateMem{};
      }
    }
  });
}

// A 1-D device tensor of n float32 values at `data`.
static std::unique_ptr<spw_tensor> f32_view(void *data, int64_t n) {
  auto v = make_tensor(SPW_F32, 1, &n, "tier copy", /*allocate=*/false);
  v->data = data;
  v->on_device = true;
  return v;
}

// ZeRO stage 2 (grads_cut): parameter p's `runs` gradients of this backward
// (grads[0], grads[stride], ...) summed whole, left to right; that sum's
// mean over the ranks reduce-scattered (the mean of this rank's shard, the
// arithmetic of the unsharded average: zero::reduce_scatter_mean); then the
// shard copied into its slot at `slot` (mode 0) or added to what the slot
// holds (mode 1: the horizontal order's later micro-batches on the GPU).
// Only the shard then leaves the GPU.
// Through host memory (MPI, Gloo) the exchange is left running on the
// exchange thread (dist.h) while the step goes on, overlapped with the next
// layer's backward where the plan puts it (sched-insert-transfers); the
// shard waits to go into its slot in b.exchanges (Tiers::settle). On a
// device whose memory is the host's the sum is made in the exchange's
// buffer; on another it is downloaded there and freed at once.
// `on_device`: NCCL's exchange, issued in the device's stream order, where
// the copy after it and the sum's release follow it; the caller waits once
// for the layer's.
static void stage_shard(spw_ctx *ctx, Tiers::Block &b, ParamInfo &p,
                        spw_tensor *const *grads, size_t stride, size_t runs,
                        int32_t mode, char *slot, bool on_device) {
  const spw_tensor &v = *p.value;
  Device &d = *ctx->device;
  const int64_t count = p.shard_hi - p.shard_lo;
  // The shard at `mine` (device memory) into the slot.
  auto place = [ctx, slot, mode, count](void *mine) {
    if (count <= 0)
      return;
    if (mode == 0) {
      ctx->device->copy(slot, mine, count * int64_t(sizeof(float)));
    } else {
      auto acc = f32_view(slot, count), add = f32_view(mine, count);
      spw_tensor *ins[] = {acc.get(), add.get()}, *outs[] = {acc.get()};
      device_kernel(ctx, spw_op_add, ins, outs);
    }
  };
  auto sum_into = [&](spw_tensor *sum) {
    d.copy(sum->data, grads[0]->data, sum->bytes());
    for (size_t j = 1; j < runs; ++j) {
      spw_tensor *ins[] = {sum, grads[j * stride]}, *outs[] = {sum};
      device_kernel(ctx, spw_op_add, ins, outs);
    }
  };
  if (on_device) {
    spw_tensor *sum = alloc_step_tensor(ctx, SPW_F32, v.rank, v.dims,
                                        "gradient sum (reduce-scattered)");
    sum_into(sum);
    zero::reduce_scatter_mean(ctx, p, sum, /*wait=*/false);
    place(sum->as<float>() + p.shard_lo);
    // The whole sum goes now (reused only after the copy, in stream order).
    d.step_free(sum->data);
    sum->data = nullptr;
    return;
  }
  std::shared_ptr<dist::ReduceScatter> job = zero::exchange_for(p);
  std::function<void()> exchanged;
  if (d.host_visible()) {
    auto sum = make_tensor(SPW_F32, v.rank, v.dims, "gradient sum",
                           /*allocate=*/false);
    sum->data = job->x.data();
    sum->on_device = true;
    sum_into(sum.get());
    exchanged = zero::start_reduce_scatter_mean(ctx, p, sum.get(), job);
  } else {
    spw_tensor *sum = alloc_step_tensor(ctx, SPW_F32, v.rank, v.dims,
                                        "gradient sum (reduce-scattered)");
    sum_into(sum);
    exchanged = zero::start_reduce_scatter_mean(ctx, p, sum, job);
    d.step_free(sum->data); // downloaded
    sum->data = nullptr;
  }
  b.exchanges.push_back([ctx, job, exchanged, place, count,
                         host = d.host_visible()] {
    exchanged();
    if (host) {
      place(job->out.data());
      return;
    }
    // Uploaded where the slot is (mode 0), or beside it to be added.
    if (count <= 0)
      return;
    const int64_t n = count;
    spw_tensor *up = alloc_step_tensor(ctx, SPW_F32, 1, &n,
                                       "gradient shard (reduce-scattered)");
    ctx->device->upload(up->data, job->out.data(),
                        count * int64_t(sizeof(float)));
    place(up->data);
    ctx->device->step_free(up->data);
    up->data = nullptr;
  });
}

void spw_stage_grads(spw_ctx *ctx, int32_t cls, int32_t layer, int32_t mode,
                     int32_t n, spw_tensor *const *grads, int64_t at) {
  guarded(ctx, "spw_stage_grads", [&] {
    Tiers &t = tiers_of(ctx);
    TensorStore &s = t.started("spw_stage_grads");
    Tiers::Block &b = t.block(cls, layer, "spw_stage_grads");
    const size_t k = b.params.size();
    if (mode != 0 && mode != 1)
      fail("%s: mode %d (0 first, 1 add)", b.name.c_str(), mode);
    if (k == 0 || n <= 0 || size_t(n) % k != 0 || !grads)
      fail("%s: %d gradients for %zu parameters", b.name.c_str(), n, k);
    if (!s.resident(b.id, Tier::Gpu)) {
      if (mode != 0 || at < 0)
        fail("%s has no GPU copy to add to", b.name.c_str());
      s.place(b.id, Tier::Gpu, uint64_t(at));
    }
    char *base = t.address(b, int(Tier::Gpu));
    // ZeRO stage 2 over NCCL on the device: the layer's exchanges are
    // issued in stream order and waited for once (each member's wait would
    // drain the device's other streams, the prefetches and write-backs).
    const bool batched =
        grads_cut(ctx, b.cls) && zero::exchanges_on_device(ctx);
    for (size_t i = 0; i < k; ++i) {
      ParamInfo &p = ctx->params[size_t(b.params[i])];
      const size_t numel = size_t(p.value->numel);
      for (size_t j = 0; j < size_t(n) / k; ++j) {
        spw_tensor *g = grads[j * k + i];
        if (!g || g->dtype != SPW_F32 || size_t(g->numel) != numel)
          fail("%s: gradient %zu of '%s' is not f32 of %zu elements",
               b.name.c_str(), j, p.name.c_str(), numel);
        if (!in_device_memory(ctx, *g) || !g->data)
          fail("%s: gradient %zu of '%s' is not a device tensor",
               b.name.c_str(), j, p.name.c_str());
      }
      if (grads_cut(ctx, b.cls)) {
        stage_shard(ctx, b, p, grads + i, k, size_t(n) / k, mode,
                    base + b.offsets[i], batched);
        continue;
      }
      auto acc = device_view(*p.value, base + b.offsets[i]);
      for (size_t j = 0; j < size_t(n) / k; ++j) {
        spw_tensor *g = grads[j * k + i];
        // Left to right, as sched.accumulate adds the micro-batches: acc =
        // acc + g element by element (the add kernel, in place).
        if (j == 0 && mode == 0) {
          ctx->device->copy(acc->data, g->data, g->bytes());
        } else {
          spw_tensor *ins[] = {acc.get(), g}, *outs[] = {acc.get()};
          device_kernel(ctx, spw_op_add, ins, outs);
        }
      }
    }
    // The device is waited for where the block is next touched, after the
    // next layer's backward was issued behind the exchanges (stream order):
    // the time counted is that wait.
    if (batched)
      b.exchanges.push_back([ctx] {
        const auto t0 = std::chrono::steady_clock::now();
        ctx->device->synchronize();
        dist::note_zero_traffic(
            0, 0,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                .count());
      });
  });
}

void spw_accumulate_grads(spw_ctx *ctx, int32_t layer, int32_t mode,
                          int32_t tier, int64_t at) {
  guarded(ctx, "spw_accumulate_grads", [&] {
    Tiers &t = tiers_of(ctx);
    TensorStore &s = t.started("spw_accumulate_grads");
    Tiers::Block &acc = t.block(2, layer, "spw_accumulate_grads");
    Tiers::Block &stage = t.block(3, layer, "spw_accumulate_grads");
    Tier d = tier_of(tier, "spw_accumulate_grads");
    if (d != Tier::Host)
      fail("gradients are accumulated on host, not %s", tier_name(d));
    if (mode != 0 && mode != 1)
      fail("%s: mode %d (0 first, 1 add)", acc.name.c_str(), mode);
    if (acc.bytes != stage.bytes)
      fail("%s (%llu bytes) and %s (%llu bytes) differ in size",
           acc.name.c_str(), (unsigned long long)acc.bytes,
           stage.name.c_str(), (unsigned long long)stage.bytes);
    if (!s.resident(stage.id, d))
      fail("%s has no copy on host", stage.name.c_str());
    if (!s.resident(acc.id, d)) {
      if (mode != 0 || at < 0)
        fail("%s has no copy on host to add to", acc.name.c_str());
      s.place(acc.id, d, uint64_t(at));
    }
    float *a = reinterpret_cast<float *>(t.address(acc, tier));
    const float *g = reinterpret_cast<const float *>(t.address(stage, tier));
    const size_t n = acc.bytes / sizeof(float);
    if (mode == 0)
      std::memcpy(a, g, acc.bytes);
    else
      for (size_t e = 0; e < n; ++e)
        a[e] = a[e] + g[e];
  });
}

// The gradient of parameter `v` whose accumulated elements [first, first +
// count) are at `at` (a gradient block's copy: the whole member, or under
// ZeRO stage 2 this rank's shard), as a step tensor of v's shape holding
// their mean over the M micro-batches as the resident schedule's
// sched.accumulate computes it: x / float(M) element by element. On the
// device (the device's optimizer) a device step tensor, else a host one
// (the CPU optimizer). Elements outside the range are not read (the
// update is this rank's shard's): on host they are NaN, so a reader would
// show.
static spw_tensor *mean_gradient(spw_ctx *ctx, const spw_tensor &v, char *at,
                                 int64_t first, int64_t count, bool on_gpu,
                                 int64_t divisor) {
  const float m = float(divisor);
  if (on_gpu) {
    spw_tensor *g = alloc_step_tensor(ctx, v.dtype, v.rank, v.dims, "gradient");
    if (count <= 0)
      return g;
    float *dst = g->as<float>() + first;
    if (divisor == 1) {
      ctx->device->copy(dst, at, count * int64_t(sizeof(float)));
    } else {
      auto in = f32_view(at, count), out = f32_view(dst, count);
      spw_tensor *ins[] = {in.get(),
                           spw_constant(ctx, SPW_F32, 0, nullptr, &m)},
                 *outs[] = {out.get()};
      device_kernel(ctx, spw_op_div, ins, outs);
    }
    return g;
  }
  ctx->step_tensors.push_back(make_tensor(v.dtype, v.rank, v.dims, "gradient"));
  spw_tensor *g = ctx->step_tensors.back().get();
  g->releasable = true; // a copy: spw_release may free it
  float *dst = g->as<float>();
  if (count < g->numel)
    std::fill(dst, dst + g->numel, std::numeric_limits<float>::quiet_NaN());
  const float *src = reinterpret_cast<const float *>(at);
  for (int64_t e = 0; e < count; ++e)
    dst[first + e] = divisor == 1 ? src[e] : src[e] / m;
  return g;
}

spw_tensor *spw_gradient(spw_ctx *ctx, int32_t param, int32_t layer,
                         int32_t tier, int64_t divisor) {
  if (!ctx)
    return nullptr;
  spw_tensor *out = &ctx->dummy;
  guarded(ctx, "spw_gradient", [&] {
    Tiers &t = tiers_of(ctx);
    TensorStore &s = t.started("spw_gradient");
    Tiers::Block &b = t.block(2, layer, "spw_gradient");
    Tier d = tier_of(tier, "spw_gradient");
    if (d == Tier::Ssd || !s.resident(b.id, d))
      fail("%s has no copy on %s", b.name.c_str(), tier_name(d));
    if (divisor < 1)
      fail("divisor %lld", (long long)divisor);
    size_t i = 0;
    while (i < b.params.size() && b.params[i] != param)
      ++i;
    if (i == b.params.size())
      fail("%s does not hold the gradient of parameter %d", b.name.c_str(),
           param);
    ParamInfo &p = ctx->params[size_t(param)];
    char *at = t.address(b, tier) + b.offsets[i];
    // ZeRO stage 2: the block holds the shard's mean over the ranks
    // (stage_shard), so the step's gradient counts as averaged
    // (reduce_grad leaves it).
    if (grads_cut(ctx, b.cls)) {
      p.reduced_step = ctx->step;
      out = mean_gradient(ctx, *p.value, at, p.shard_lo,
                          p.shard_hi - p.shard_lo, d == Tier::Gpu, divisor);
      return;
    }
    out = mean_gradient(ctx, *p.value, at, 0, p.value->numel, d == Tier::Gpu,
                        divisor);
  });
  return out;
}

void spw_grad_norms(spw_ctx *ctx, int32_t layer, int32_t tier,
                    int64_t divisor) {
  guarded(ctx, "spw_grad_norms", [&] {
    Tiers &t = tiers_of(ctx);
    TensorStore &s = t.started("spw_grad_norms");
    Tiers::Block &b = t.block(2, layer, "spw_grad_norms");
    Tier d = tier_of(tier, "spw_grad_norms");
    if (!ctx->grad_clip.declared)
      fail("the model takes gradient norms but declared no gradient "
           "clipping (spw_declare_grad_clip)");
    if (d == Tier::Ssd || !s.resident(b.id, d))
      fail("%s has no copy on %s", b.name.c_str(), tier_name(d));
    if (divisor < 1)
      fail("divisor %lld", (long long)divisor);
    if (ctx->evaluate_only || effective_grad_clip(ctx) <= 0)
      return; // no coefficient is computed from them
    GradClip &c = ctx->grad_clip;
    c.part_norm.resize(ctx->params.size());
    c.part_step.resize(ctx->params.size(), 0);
    // Each member's mean gradient as spw_gradient divides it, then its norm
    // as spw_clip_grad_norm takes it of the resident plan's mean.
    char *base = t.address(b, tier);
    for (size_t i = 0; i < b.params.size(); ++i) {
      const size_t k = size_t(b.params[i]);
      const spw_tensor &v = *ctx->params[k].value;
      // Data parallel: the norm is the mean gradient's, so the ranks'
      // sums are averaged here, in the accumulator, before spw_gradient
      // divides by M (and the update entry points leave them as they are).
      ParamInfo &p = ctx->params[k];
      float *g = reinterpret_cast<float *>(base + b.offsets[i]);
      // ZeRO stage 2: the block holds the shard's mean over the ranks
      // already (stage_shard).
      if (grads_cut(ctx, b.cls)) {
        p.reduced_step = ctx->step;
        c.part_norm[k] =
            zero::grad_norm_of_shard(ctx, p, g, d == Tier::Gpu, float(divisor));
        c.part_step[k] = ctx->step;
        continue;
      }
      // ZeRO: the shard's mean, and the norm from the ranks' block sums
      // (zero::grad_norm_of_shards: grad_norm's bits).
      if (dist::active() && zero::active(ctx) && p.shard_hi >= 0) {
        auto view = make_tensor(SPW_F32, v.rank, v.dims, "gradient",
                                /*allocate=*/false);
        view->data = g;
        view->on_device = d == Tier::Gpu;
        if (p.reduced_step != ctx->step)
          zero::reduce_scatter_mean(ctx, p, view.get());
        p.reduced_step = ctx->step;
        c.part_norm[k] =
            zero::grad_norm_of_shards(ctx, p, view.get(), float(divisor));
        c.part_step[k] = ctx->step;
        continue;
      }
      if ((dist::active() || nccl::active()) && p.reduced_step != ctx->step) {
        reduce_mean(ctx, g, d == Tier::Gpu, v.numel,
                    format("'%s'", p.name.c_str()));
        p.reduced_step = ctx->step;
      }
      c.part_norm[k] =
          grad_norm(ctx, g, d == Tier::Gpu, v.numel, float(divisor));
      c.part_step[k] = ctx->step;
    }
  });
}

// ---- activations off the GPU ---------------------------------------------------

namespace {
constexpr int32_t kActivations = SPW_BLOCK_ACTIVATIONS;
}

void spw_declare_activation(spw_ctx *ctx, int32_t index, int64_t bytes) {
  guarded(ctx, "spw_declare_activation", [&] {
    Tiers &t = tiers_of(ctx);
    if (index < 0 || bytes <= 0)
      fail("invalid activation block (index %d, %lld bytes)", index,
           (long long)bytes);
    if (t.by_key.count({kActivations, index}))
      fail("activation block %d declared twice", index);
    Tiers::Block b;
    b.cls = kActivations;
    b.layer = index;
    b.bytes = uint64_t(bytes);
    b.name = format("activations/%d", index);
    t.by_key[{kActivations, index}] = t.blocks.size();
    t.blocks.push_back(std::move(b));
  });
}

void spw_put_activation(spw_ctx *ctx, int32_t index, spw_tensor *x,
                        int64_t at) {
  guarded(ctx, "spw_put_activation", [&] {
    Tiers &t = tiers_of(ctx);
    TensorStore &s = t.started("spw_put_activation");
    Tiers::Block &b = t.block(kActivations, index, "spw_put_activation");
    if (!x || !x->data)
      fail("%s: no tensor to put (null, or already freed)", b.name.c_str());
    if (uint64_t(x->bytes()) != b.bytes)
      fail("%s: the tensor %s %s has %lld bytes, the block %llu",
           b.name.c_str(), dtype_name(x->dtype), x->shape().c_str(),
           (long long)x->bytes(), (unsigned long long)b.bytes);
    if (s.resident(b.id, Tier::Gpu))
      fail("%s already has a GPU copy (put twice without a drop)",
           b.name.c_str());
    if (at < 0)
      fail("%s: no offset for its GPU copy", b.name.c_str());
    if (!in_device_memory(ctx, *x))
      fail("%s: the tensor is not a device tensor", b.name.c_str());
    s.place(b.id, Tier::Gpu, uint64_t(at));
    ctx->device->copy(t.address(b, int(Tier::Gpu)), x->data,
                      int64_t(b.bytes));
    b.dtype = x->dtype;
    b.rank = x->rank;
    std::memcpy(b.dims, x->dims, sizeof b.dims);
    // The point of offloading: the tensor's own memory goes now (reused
    // only after the copy, which is in stream order before it).
    if (x->releasable)
      ctx->device->step_free(x->data);
    x->owned.reset();
    x->data = nullptr;
  });
}

spw_tensor *spw_take_activation(spw_ctx *ctx, int32_t index, int32_t dtype,
                                int32_t rank, const int64_t *dims) {
  if (!ctx)
    return nullptr;
  spw_tensor *out = &ctx->dummy;
  guarded(ctx, "spw_take_activation", [&] {
    Tiers &t = tiers_of(ctx);
    TensorStore &s = t.started("spw_take_activation");
    Tiers::Block &b = t.block(kActivations, index, "spw_take_activation");
    if (b.dtype < 0)
      fail("%s: nothing was put into it", b.name.c_str());
    if (dtype != b.dtype || rank != b.rank || (rank > 0 && !dims) ||
        !std::equal(b.dims, b.dims + b.rank, dims))
      fail("%s: taken as another type than the %s %s that was put",
           b.name.c_str(), dtype_name(b.dtype),
           shape_str(b.dims, b.rank).c_str());
    if (!s.resident(b.id, Tier::Gpu))
      fail("%s has no GPU copy (move it back host -> gpu before taking it)",
           b.name.c_str());
    spw_tensor *x =
        alloc_step_tensor(ctx, b.dtype, b.rank, b.dims, "activation");
    ctx->device->copy(x->data, t.address(b, int(Tier::Gpu)),
                      int64_t(b.bytes));
    out = x;
  });
  return out;
}

} // extern "C"

// ---- checkpoints, --save and the deferred updates, streamed --------------------
// (driver/checkpoints.cpp, driver/train.cpp: see tiers.h)

namespace spw {

std::vector<int32_t> tiers_stream_members(const spw_ctx *ctx, int cls) {
  std::vector<int32_t> out;
  if (!ctx->tiers)
    return out;
  // The values stream from a bf16-mixed plan's master blocks (stream).
  if (cls == SPW_BLOCK_PARAMS)
    cls = value_class(*ctx->tiers);
  for (const Tiers::Block &b : ctx->tiers->blocks)
    if (b.home >= 0 && b.cls == cls)
      out.insert(out.end(), b.params.begin(), b.params.end());
  return out;
}

void tiers_flush_deferred(
    spw_ctx *ctx, const std::function<void(const std::vector<int32_t> &)> &apply) {
  Tiers &t = *ctx->tiers;
  TensorStore &s = t.started("tiers_flush_deferred");
  auto finish = [&] {
    if (std::string e = finish_host_updates(ctx, false); !e.empty())
      fail("%s", e.c_str());
  };
  auto bind = [&](int cls, int layer, Tier d) {
    ctx->error.clear();
    spw_bind(ctx, cls, layer, int(d));
    if (ctx->failed())
      fail("%s", ctx->error.c_str());
  };
  finish();
  for (size_t bi = 0; bi < t.blocks.size(); ++bi) {
    Tiers::Block &pb = t.blocks[bi];
    if (pb.cls != SPW_BLOCK_PARAMS || pb.home < 0)
      continue;
    std::vector<int32_t> members;
    for (int32_t i : pb.params)
      if (!ctx->params[size_t(i)].pending.empty())
        members.push_back(i);
    if (members.empty())
      continue;
    auto homed = [&](int cls) -> Tiers::Block * {
      auto it = t.by_key.find({cls, pb.layer});
      return it != t.by_key.end() && t.blocks[it->second].home >= 0
                 ? &t.blocks[it->second]
                 : nullptr;
    };
    Tiers::Block *ob = homed(SPW_BLOCK_OPTIMIZER);
    // A bf16-mixed plan's master block: the values the update writes (and
    // then their rounding into pb's working copies).
    Tiers::Block *mb = t.bf16_params ? homed(SPW_BLOCK_MASTER) : nullptr;
    if (t.bf16_params && !mb)
      fail("%s: the plan has no homed master block for layer %d",
           pb.name.c_str(), pb.layer);
    // The blocks the update reads and writes, as the step binds them.
    std::vector<Tiers::Block *> bound{&pb};
    if (mb)
      bound.push_back(mb);
    if (ob)
      bound.push_back(ob);
    // The update runs where the optimizer state lives, as in a step: on the
    // GPU tier when it is homed there (or, without an optimizer block, the
    // parameters' values are), else on host copies; the other tier when
    // that one has no room for the copies (the arenas are sized for the
    // steps).
    // (The deferred elements are part 0's of a split block: a cut block's
    // part 0 says.)
    const bool gpu_first = ob   ? ob->home_of(0) == int(Tier::Gpu)
                           : mb ? mb->home_of(0) == int(Tier::Gpu)
                                : pb.home_of(0) == int(Tier::Gpu);
    std::vector<std::pair<TensorId, Tier>> copies; // made here: id, home
    auto unbind = [&](Tiers::Block &b) {
      b.bound_tier = -1;
      for (int32_t i : b.params) {
        ParamInfo &p = ctx->params[size_t(i)];
        p.bound_split = -1;
        if (b.cls == SPW_BLOCK_PARAMS && t.bf16_params) {
          p.work_on_device = false;
          p.bound_work_part[0] = p.bound_work_part[1] = nullptr;
          if (p.dev_work && !p.work_owned)
            p.dev_work->data = nullptr;
        } else if (b.cls == value_class(t)) {
          p.value->data = nullptr;
          p.dev_value->data = nullptr;
          p.w_on_device = false;
          p.bound_w_part[0] = p.bound_w_part[1] = nullptr;
        } else {
          p.bound_m = p.bound_v = StateMem{};
          p.state_on_device = false;
          for (int k = 0; k < 2; ++k)
            p.bound_m_part[k] = p.bound_v_part[k] = StateMem{};
        }
      }
    };
    // One copy from `from` to `to` (the copy on `to` allocated), through a
    // host copy between SSD and the GPU, which are not one link apart.
    auto carry = [&](TensorId id, Tier from, Tier to) {
      if ((from != Tier::Ssd && to != Tier::Ssd) || from == Tier::Host ||
          to == Tier::Host) {
        s.move(id, from, to, Priority::Demand).wait();
        return;
      }
      const bool staged = !s.resident(id, Tier::Host);
      if (staged)
        s.allocate(id, Tier::Host);
      try {
        s.move(id, from, Tier::Host, Priority::Demand).wait();
        s.move(id, Tier::Host, to, Priority::Demand).wait();
      } catch (...) {
        if (staged)
          s.release(id, Tier::Host);
        throw;
      }
      if (staged)
        s.release(id, Tier::Host);
    };
    // Copies of the blocks on `d`, loaded from their homes; false (and
    // nothing left allocated) when `d` has no room for them. A copy that
    // fails to load (an I/O error) is that error, not a lack of room.
    auto bring_both = [&](Tier d) {
      bool no_room = false;
      auto bring = [&](Tiers::Block &b) {
        for (int k = 0; k < b.parts(); ++k) {
          const int home = b.home_of(k);
          if (home == int(d))
            continue;
          try {
            s.allocate(b.part_id(k), d);
          } catch (const Error &) {
            no_room = true;
            throw;
          }
          copies.push_back({b.part_id(k), Tier(home)});
          carry(b.part_id(k), Tier(home), d);
        }
      };
      try {
        for (Tiers::Block *b : bound)
          bring(*b);
        return true;
      } catch (const Error &) {
        for (auto &[id, home] : copies)
          if (s.resident(id, d))
            s.release(id, d);
        copies.clear();
        if (!no_room)
          throw;
        return false;
      }
    };
    Tier d = gpu_first ? Tier::Gpu : Tier::Host;
    if (!bring_both(d)) {
      d = gpu_first ? Tier::Host : Tier::Gpu;
      if (!bring_both(d)) {
        std::string others;
        for (size_t k = 1; k < bound.size(); ++k)
          others += (k + 1 == bound.size() ? " and " : ", ") + bound[k]->name;
        fail("%s: neither the GPU nor the host tier has room for copies of "
             "it%s to apply the deferred updates",
             pb.name.c_str(), others.c_str());
      }
    }
    try {
      for (Tiers::Block *b : bound)
        bind(b->cls, b->layer, d);
      apply(members);
      finish();
      for (auto &[id, home] : copies) {
        carry(id, d, home);
        s.release(id, d);
      }
    } catch (...) {
      try {
        (void)finish_host_updates(ctx, false);
      } catch (...) {
      }
      for (auto &[id, home] : copies)
        if (s.resident(id, d))
          s.release(id, d);
      for (Tiers::Block *b : bound)
        unbind(*b);
      throw;
    }
    for (Tiers::Block *b : bound)
      unbind(*b);
  }
}

} // namespace spw
