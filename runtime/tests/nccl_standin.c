/*===- nccl_standin.c - NCCL's C API on host memory, for the tests --------===
 *
 * The loopback device's "GPU" memory is host memory, which NCCL cannot
 * reduce; this library, loaded instead of libnccl.so.2 through
 * SPILLWAY_NCCL_LIBRARY, implements the calls the runtime makes
 * (runtime/src/dist/nccl.cpp) on host memory with the Open MPI the runtime
 * already joined (its symbols found at run time, as the runtime finds
 * them). The loopback device stores every byte XOR 0xa5 (device.h,
 * kLoopbackScramble): the sums are taken on the plain values, as a GPU's
 * NCCL sums what its kernels wrote. It checks how the calls are made: one
 * id on every rank, float32 sums, a stream, a live communicator. At
 * ncclCommDestroy it tells stderr how many all-reduces it made (and, for
 * ZeRO, the reduces and broadcasts, each inside a group), so a test sees
 * the path was taken.
 *===----------------------------------------------------------------------===*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
  char internal[128];
} ncclUniqueId;
typedef struct Comm {
  uint64_t magic;
  int nranks, rank;
  long long reduces, floats;
  long long rooted_reduces, broadcasts, rooted_floats, ungrouped;
  long long bf16_broadcast; /* bf16 elements broadcast (sharded masters) */
} * ncclComm_t;
static int group_depth;

enum { kSuccess = 0, kInvalidArgument = 4, kInvalidUsage = 5, kSystem = 2 };
static const uint64_t kMagic = 0x6e63636c5374616eull;
static const char kTag[] = "spillway-nccl-standin";
static const unsigned char kScramble = 0xa5; /* device.h kLoopbackScramble */

typedef void *Handle;
static int (*mpi_initialized)(int *);
static int (*mpi_allreduce)(const void *, void *, int, Handle, Handle, Handle);
static int (*mpi_allgather)(const void *, int, Handle, void *, int, Handle,
                            Handle);
static int (*mpi_comm_size)(Handle, int *);
static int (*mpi_comm_rank)(Handle, int *);
static int (*mpi_reduce)(const void *, void *, int, Handle, Handle, int,
                         Handle);
static int (*mpi_bcast)(void *, int, Handle, int, Handle);
static Handle world, f32, byte, sum;

/* MPI as the runtime loaded it (RTLD_GLOBAL), or none (one rank alone). */
static int have_mpi(void) {
  if (!mpi_initialized) {
    mpi_initialized = (int (*)(int *))dlsym(RTLD_DEFAULT, "MPI_Initialized");
    if (!mpi_initialized)
      return 0;
    mpi_allreduce = (int (*)(const void *, void *, int, Handle, Handle,
                             Handle))dlsym(RTLD_DEFAULT, "MPI_Allreduce");
    mpi_allgather = (int (*)(const void *, int, Handle, void *, int, Handle,
                             Handle))dlsym(RTLD_DEFAULT, "MPI_Allgather");
    mpi_comm_size =
        (int (*)(Handle, int *))dlsym(RTLD_DEFAULT, "MPI_Comm_size");
    mpi_comm_rank =
        (int (*)(Handle, int *))dlsym(RTLD_DEFAULT, "MPI_Comm_rank");
    mpi_reduce = (int (*)(const void *, void *, int, Handle, Handle, int,
                          Handle))dlsym(RTLD_DEFAULT, "MPI_Reduce");
    mpi_bcast = (int (*)(void *, int, Handle, int, Handle))dlsym(RTLD_DEFAULT,
                                                                 "MPI_Bcast");
    world = dlsym(RTLD_DEFAULT, "ompi_mpi_comm_world");
    f32 = dlsym(RTLD_DEFAULT, "ompi_mpi_float");
    byte = dlsym(RTLD_DEFAULT, "ompi_mpi_byte");
    sum = dlsym(RTLD_DEFAULT, "ompi_mpi_op_sum");
  }
  int on = 0;
  return mpi_initialized(&on) == 0 && on;
}

const char *ncclGetErrorString(int r) {
  switch (r) {
  case kSuccess:
    return "no error";
  case kInvalidArgument:
    return "invalid argument (nccl stand-in)";
  case kInvalidUsage:
    return "invalid usage (nccl stand-in)";
  default:
    return "system error (nccl stand-in)";
  }
}

int ncclGetVersion(int *version) {
  if (!version)
    return kInvalidArgument;
  *version = 22800;
  return kSuccess;
}

int ncclGetUniqueId(ncclUniqueId *id) {
  if (!id)
    return kInvalidArgument;
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "%s %d", kTag, (int)getpid());
  return kSuccess;
}

int ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks ||
      strncmp(id.internal, kTag, sizeof kTag - 1) != 0)
    return kInvalidArgument;
  if (nranks > 1) {
    int size = 0, me = -1;
    if (!have_mpi())
      return kInvalidUsage;
    mpi_comm_size(world, &size);
    mpi_comm_rank(world, &me);
    if (size != nranks || me != rank)
      return kInvalidArgument;
    /* Every rank must hold rank 0's id (the runtime broadcasts it). */
    char *all = malloc((size_t)nranks * sizeof id);
    if (!all)
      return kSystem;
    mpi_allgather(&id, (int)sizeof id, byte, all, (int)sizeof id, byte, world);
    for (int r = 1; r < nranks; ++r)
      if (memcmp(all, all + (size_t)r * sizeof id, sizeof id) != 0) {
        free(all);
        return kInvalidArgument;
      }
    free(all);
  }
  ncclComm_t c = calloc(1, sizeof *c);
  if (!c)
    return kSystem;
  c->magic = kMagic;
  c->nranks = nranks;
  c->rank = rank;
  *comm = c;
  return kSuccess;
}

int ncclAllReduce(const void *send, void *recv, size_t count, int dtype, int op,
                  ncclComm_t comm, void *stream) {
  if (!comm || comm->magic != kMagic || !stream || !send || !recv ||
      dtype != 7 /* ncclFloat32 */ || op != 0 /* ncclSum */)
    return kInvalidArgument;
  if (send != recv)
    memmove(recv, send, count * sizeof(float));
  if (comm->nranks > 1) {
    if (!have_mpi())
      return kInvalidUsage;
    const size_t piece = (size_t)1 << 24;
    float *plain = malloc((count < piece ? count : piece) * sizeof(float));
    if (!plain)
      return kSystem;
    for (size_t at = 0; at < count; at += piece) {
      const size_t n = count - at < piece ? count - at : piece;
      unsigned char *dev = (unsigned char *)((float *)recv + at);
      unsigned char *p = (unsigned char *)plain;
      for (size_t i = 0; i < n * sizeof(float); ++i)
        p[i] = dev[i] ^ kScramble;
      if (mpi_allreduce((void *)1 /* MPI_IN_PLACE */, plain, (int)n, f32, sum,
                        world) != 0) {
        free(plain);
        return kSystem;
      }
      for (size_t i = 0; i < n * sizeof(float); ++i)
        dev[i] = p[i] ^ kScramble;
    }
    free(plain);
  }
  comm->reduces += 1;
  comm->floats += (long long)count;
  return kSuccess;
}

int ncclGroupStart(void) {
  ++group_depth;
  return kSuccess;
}

int ncclGroupEnd(void) {
  if (group_depth <= 0)
    return kInvalidUsage;
  --group_depth;
  return kSuccess;
}

/* The plain values of n device floats (the loopback's bytes XOR'd). */
static void unscramble(float *plain, const void *dev, size_t n) {
  const unsigned char *d = (const unsigned char *)dev;
  unsigned char *p = (unsigned char *)plain;
  for (size_t i = 0; i < n * sizeof(float); ++i)
    p[i] = d[i] ^ kScramble;
}
static void scramble(void *dev, const float *plain, size_t n) {
  unsigned char *d = (unsigned char *)dev;
  const unsigned char *p = (const unsigned char *)plain;
  for (size_t i = 0; i < n * sizeof(float); ++i)
    d[i] = p[i] ^ kScramble;
}

/* ZeRO's reduce-scatter: one call per rank rooted at it (nccl.h). The
 * stand-in runs each at once; NCCL would run the group together. */
int ncclReduce(const void *send, void *recv, size_t count, int dtype, int op,
               int root, ncclComm_t comm, void *stream) {
  if (!comm || comm->magic != kMagic || !stream || !send ||
      dtype != 7 /* ncclFloat32 */ || op != 0 /* ncclSum */ || root < 0 ||
      root >= comm->nranks || (root == comm->rank && !recv) ||
      count > (size_t)1 << 30)
    return kInvalidArgument;
  float *plain = malloc((count ? count : 1) * sizeof(float));
  float *out = malloc((count ? count : 1) * sizeof(float));
  if (!plain || !out) {
    free(plain);
    free(out);
    return kSystem;
  }
  unscramble(plain, send, count);
  int rc = kSuccess;
  if (comm->nranks > 1) {
    if (!have_mpi())
      rc = kInvalidUsage;
    else if (mpi_reduce(plain, out, (int)count, f32, sum, root, world) != 0)
      rc = kSystem;
  } else {
    memcpy(out, plain, count * sizeof(float));
  }
  if (rc == kSuccess && root == comm->rank)
    scramble(recv, out, count);
  free(plain);
  free(out);
  comm->rooted_reduces += 1;
  comm->rooted_floats += (long long)count;
  comm->ungrouped += group_depth == 0;
  return rc;
}

/* ZeRO's all-gather: float32 values, or the bf16 working copies of an
 * offload plan's sharded masters (ncclBfloat16, counted apart). */
int ncclBroadcast(const void *send, void *recv, size_t count, int dtype,
                  int root, ncclComm_t comm, void *stream) {
  if (!comm || comm->magic != kMagic || !stream || !recv ||
      (dtype != 7 /* ncclFloat32 */ && dtype != 9 /* ncclBfloat16 */) ||
      root < 0 || root >= comm->nranks || (root == comm->rank && !send) ||
      count > (size_t)1 << 30)
    return kInvalidArgument;
  /* Moved as bytes: one MPI call's int count of them. */
  const size_t bytes = count * (dtype == 9 ? 2 : 4);
  if (bytes > 0x7fffffff)
    return kInvalidArgument;
  const size_t words = (bytes + 3) / 4;
  float *plain = malloc((words ? words : 1) * sizeof(float));
  if (!plain)
    return kSystem;
  if (root == comm->rank) {
    const unsigned char *d = (const unsigned char *)send;
    unsigned char *p = (unsigned char *)plain;
    for (size_t i = 0; i < bytes; ++i)
      p[i] = d[i] ^ kScramble;
  }
  int rc = kSuccess;
  if (comm->nranks > 1) {
    if (!have_mpi())
      rc = kInvalidUsage;
    else if (mpi_bcast(plain, (int)bytes, byte, root, world) != 0)
      rc = kSystem;
  }
  if (rc == kSuccess) {
    unsigned char *d = (unsigned char *)recv;
    const unsigned char *p = (const unsigned char *)plain;
    for (size_t i = 0; i < bytes; ++i)
      d[i] = p[i] ^ kScramble;
  }
  free(plain);
  comm->broadcasts += 1;
  if (dtype == 9)
    comm->bf16_broadcast += (long long)count;
  else
    comm->rooted_floats += (long long)count;
  comm->ungrouped += group_depth == 0;
  return rc;
}

int ncclCommDestroy(ncclComm_t comm) {
  if (!comm || comm->magic != kMagic)
    return kInvalidArgument;
  fprintf(stderr,
          "nccl-standin: rank %d of %d: %lld all-reduces of %lld "
          "floats\n",
          comm->rank, comm->nranks, comm->reduces, comm->floats);
  if (comm->rooted_reduces || comm->broadcasts)
    fprintf(stderr,
            "nccl-standin: rank %d of %d: %lld reduces and %lld broadcasts "
            "of %lld floats, %lld outside a group\n",
            comm->rank, comm->nranks, comm->rooted_reduces, comm->broadcasts,
            comm->rooted_floats, comm->ungrouped);
  if (comm->bf16_broadcast)
    fprintf(stderr,
            "nccl-standin: rank %d of %d: %lld bf16 elements broadcast\n",
            comm->rank, comm->nranks, comm->bf16_broadcast);
  comm->magic = 0;
  free(comm);
  return kSuccess;
}
