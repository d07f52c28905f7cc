/*===- zero_shard.h - ZeRO's shards, shared by compiler and runtime --------===
 *
 * Where rank k's shard of a parameter's n optimizer-state elements starts
 * when `ranks` ranks shard it (--zero 1): contiguous ranges in rank order,
 * cut at multiples of 64 elements (whole vectors for every kernel), the last
 * ending at n. The runtime (runtime/src/dist/zero.h) keeps its state so and
 * the cost model sizes each rank's state from it (spillwayc --zero 1).
 * k = ranks gives n. C, no dependency: the compiler includes it without the
 * runtime.
 *===----------------------------------------------------------------------===*/
#ifndef SPILLWAY_RUNTIME_ZERO_SHARD_H
#define SPILLWAY_RUNTIME_ZERO_SHARD_H

#include <stdint.h>

#define SPW_ZERO_SHARD_ALIGN 64

static inline int64_t spw_zero_shard_begin(int64_t n, int64_t k,
                                           int64_t ranks) {
  if (k >= ranks)
    return n;
  /* n * k / ranks without overflow for any n below 2^62. */
  int64_t at = (n / ranks) * k + (n % ranks) * k / ranks;
  at = at / SPW_ZERO_SHARD_ALIGN * SPW_ZERO_SHARD_ALIGN;
  return at < n ? at : n;
}

#endif
