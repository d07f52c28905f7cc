/*===- gloo_abi.h - the C ABI of the Gloo shim ---------------------------===*
 *
 * Collectives of a torchrun-style job go through Gloo (the CPU collectives
 * library torch.distributed uses under torchrun). Gloo is C++ and a shared
 * library the GPU machine and a user's laptop may lack, so executables do
 * not link it: libspillway_gloo.so (gloo_shim.cpp) does, and carries its
 * bytes inside the runtime (gloo.cpp loads them when a job asks for Gloo).
 * Between the two only this C ABI: plain pointers and sizes, and each call
 * returns 0 or writes the error into err (NUL-terminated, errlen bytes).
 *
 *===----------------------------------------------------------------------===*/
#ifndef SPILLWAY_RUNTIME_SRC_DIST_GLOO_ABI_H
#define SPILLWAY_RUNTIME_SRC_DIST_GLOO_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a declaration below changes: the runtime refuses a shim
 * of another version. */
#define SPW_GLOO_ABI_VERSION 5

/* The rendezvous store (store.h), called back by Gloo's rendezvous. Each
 * returns 0, or nonzero with the error written into err. `get` hands back
 * a malloc'd buffer the shim frees. */
typedef struct spw_gloo_store {
  void *self;
  int (*set)(void *self, const char *key, const void *data, size_t n, char *err,
             size_t errlen);
  int (*get)(void *self, const char *key, void **data, size_t *n, char *err,
             size_t errlen);
  int (*wait)(void *self, const char *const *keys, size_t nkeys, char *err,
              size_t errlen);
} spw_gloo_store;

enum { SPW_GLOO_F32 = 0, SPW_GLOO_F64 = 1 };

typedef struct spw_gloo_api {
  int version; /* SPW_GLOO_ABI_VERSION */
  /* Joins ranks 0..size-1 over TCP: this rank's address is `hostname`, or
   * the interface `iface` when not empty. Connecting waits at most
   * connect_ms, every collective after it at most timeout_ms. */
  void *(*connect)(int rank, int size, const spw_gloo_store *store,
                   const char *hostname, const char *iface, int64_t connect_ms,
                   int64_t timeout_ms, char *err, size_t errlen);
  void (*close)(void *ctx);
  /* x = the sum over ranks of x (n elements of dtype). */
  int (*allreduce_sum)(void *ctx, void *x, size_t n, int dtype, char *err,
                       size_t errlen);
  /* Rank r's out = the sum over ranks, in rank order, of their counts[r]
   * floats of x (those from counts[0] + ... + counts[r - 1] on): a
   * reduce-scatter, each rank sending the others their parts directly
   * ((N - 1) / N of x). */
  int (*reduce_scatter_sum)(void *ctx, const float *x, float *out,
                            const size_t *counts, char *err, size_t errlen);
  /* Rank r's counts[r] bytes at in to every rank's out, in rank order. */
  int (*allgatherv)(void *ctx, const void *in, void *out, const size_t *counts,
                    char *err, size_t errlen);
  /* Each rank's `bytes` bytes at in into root's out, in rank order. */
  int (*gather)(void *ctx, const void *in, void *out, size_t bytes, int root,
                char *err, size_t errlen);
  /* Root's n bytes at x to every rank. */
  int (*broadcast)(void *ctx, void *x, size_t n, int root, char *err,
                   size_t errlen);
  int (*barrier)(void *ctx, char *err, size_t errlen);
} spw_gloo_api;

/* The shim's one symbol. */
const spw_gloo_api *spw_gloo_api_get(void);

#ifdef __cplusplus
}
#endif

#endif /* SPILLWAY_RUNTIME_SRC_DIST_GLOO_ABI_H */
