/*===- zero_shard.h - ZeRO's shards, shared by compiler and runtime --------===
 *
 * Where rank k's shard of a parameter's n optimizer-state elements starts
 * when `ranks` ranks shard it (--zero 1): contiguous ranges in rank order,
 * cut at multiples of 64 elements (whole vectors for every kernel; with
 * gradient clipping at multiples of the norm's 64 Ki-element blocks), the
 * last ending at n. The runtime (runtime/src/dist/zero.h) keeps its state
 * so and the cost model sizes each rank's state from it (spillwayc --zero).
 * k = ranks gives n. C, no dependency: the compiler includes it without the
 * runtime.
 *===----------------------------------------------------------------------===*/
#ifndef SPILLWAY_RUNTIME_ZERO_SHARD_H
#define SPILLWAY_RUNTIME_ZERO_SHARD_H

#include <stdint.h>

#define SPW_ZERO_SHARD_ALIGN 64
/* With gradient clipping: the norm's blocks (optimizer.cpp sums the squares
 * of 64 Ki elements per block), so each rank sums whole blocks and the
 * norm from the shards is the whole gradient's, bit for bit. */
#define SPW_ZERO_SHARD_ALIGN_CLIPPED 65536

/* Where shard k of n elements starts, cut at multiples of `align`. */
static inline int64_t spw_zero_shard_cut(int64_t n, int64_t k, int64_t ranks,
                                         int64_t align) {
  if (k >= ranks)
    return n;
  /* n * k / ranks without overflow for any n below 2^62. */
  int64_t at = (n / ranks) * k + (n % ranks) * k / ranks;
  at = at / align * align;
  return at < n ? at : n;
}

/* The most elements any rank's shard of n holds: what an offload plan's
 * optimizer block keeps per moment (every rank lays its block out alike). */
static inline int64_t spw_zero_shard_slot(int64_t n, int64_t ranks,
                                          int64_t align) {
  int64_t most = 0;
  for (int64_t k = 0; k < ranks; ++k) {
    const int64_t s = spw_zero_shard_cut(n, k + 1, ranks, align) -
                      spw_zero_shard_cut(n, k, ranks, align);
    most = s > most ? s : most;
  }
  return most;
}

/* The most elements of [a, b) any rank's shard of n holds: with the
 * optimizer overlap a member's slot is two of these, its deferred
 * elements [0, t) and the rest [t, n). */
static inline int64_t spw_zero_shard_slot_in(int64_t n, int64_t ranks,
                                             int64_t align, int64_t a,
                                             int64_t b) {
  int64_t most = 0;
  for (int64_t k = 0; k < ranks; ++k) {
    int64_t lo = spw_zero_shard_cut(n, k, ranks, align);
    int64_t hi = spw_zero_shard_cut(n, k + 1, ranks, align);
    lo = lo > a ? lo : a;
    hi = hi < b ? hi : b;
    most = hi - lo > most ? hi - lo : most;
  }
  return most;
}

/* One rank's optimizer block of a layer sharded over `ranks` (ZeRO with
 * an offload plan; sched-assign-buffers lays it out, the cost model sizes
 * it): each of the `count` members' moments (n[i] elements of `elem`
 * bytes) in a slot of the largest rank's shard. When the optimizer overlap
 * defers the layer's first `deferred` elements (0 < deferred < all), the
 * member the deferral ends in gets two sub-slots, the most any rank holds
 * of its deferred elements and then of the rest, and part 0 ends on
 * `granule` bytes. Writes each member's byte offset (`offsets`, may be
 * null) and the split in bytes (`split`, may be null; 0: none); returns a
 * moment's bytes (m; v follows at the same offsets). */
static inline int64_t spw_zero_sharded_layout(const int64_t *n, int64_t count,
                                              int64_t ranks, int64_t align,
                                              int64_t deferred, int64_t elem,
                                              int64_t granule,
                                              int64_t *offsets,
                                              int64_t *split) {
  int64_t total = 0, at = 0, cut = 0, left = deferred, i;
  for (i = 0; i < count; ++i)
    total += n[i];
  if (deferred <= 0 || deferred >= total)
    left = 0;
  for (i = 0; i < count; ++i) {
    const int64_t t = left < 0 ? 0 : left < n[i] ? left : n[i];
    left -= t;
    if (offsets)
      offsets[i] = at;
    if (t > 0 && t < n[i]) {
      at += elem * spw_zero_shard_slot_in(n[i], ranks, align, 0, t);
      at = (at + granule - 1) / granule * granule;
      cut = at;
      at += elem * spw_zero_shard_slot_in(n[i], ranks, align, t, n[i]);
      continue;
    }
    at += elem * spw_zero_shard_slot(n[i], ranks, align);
    if (t > 0 && t == n[i] && left == 0 && !cut) /* the deferral ends here */
      cut = at = (at + granule - 1) / granule * granule;
  }
  if (split)
    *split = cut;
  return at;
}

static inline int64_t spw_zero_shard_begin(int64_t n, int64_t k,
                                           int64_t ranks) {
  return spw_zero_shard_cut(n, k, ranks, SPW_ZERO_SHARD_ALIGN);
}

#endif
