/*===- tier.h - the memory tiers, shared by compiler and runtime -----------===
 *
 * The one definition of the tiers a tensor lives on: the runtime ABI
 * (spillway_rt.h's spw_move and friends take them as numbers), the storage
 * engine (storage::Tier), the cost model (schedule::Tier) and the sched
 * dialect (sched::Tier, static_asserted against them in SchedDialect.cpp)
 * all use these numbers. C, no dependency: the compiler includes it without the runtime.
 *===----------------------------------------------------------------------===*/
#ifndef SPILLWAY_RUNTIME_TIER_H
#define SPILLWAY_RUNTIME_TIER_H

/* Nearest to the GPU's compute first: a move goes one step at a time. */
enum spw_tier { SPW_TIER_GPU = 0, SPW_TIER_HOST = 1, SPW_TIER_SSD = 2 };
#define SPW_NUM_TIERS 3

#endif
