//===- runtime_internal.h - CPU runtime internals --------------------------===//
//
// What the C entry points share, and what the unit tests reach into: the
// tensor and context structs, the error type, the .npy reader and the
// .safetensors writer. Plain C++20; nothing here crosses the C ABI.
//
// Errors: inside the runtime a failure is a spw::Error exception. Every C
// entry point catches it and records the message in the context (a sticky
// error); later entry points of the same step return at once, and spw_main
// reports the first error after spw_model_step returns. Exceptions therefore
// never unwind through generated code.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_RUNTIME_INTERNAL_H
#define SPILLWAY_RUNTIME_SRC_RUNTIME_INTERNAL_H

#include "device.h"
#include "spillway/runtime/spillway_rt.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace spw {

constexpr int kMaxRank = 8;

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Formats like printf and throws spw::Error.
[[noreturn]] void fail(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

int64_t dtype_size(int32_t dtype);      // 0 for an unknown dtype
const char *dtype_name(int32_t dtype);  // "f32", "i64", "i32", "bool", "?"
std::string shape_str(const int64_t *dims, int rank);  // "[2,3]"

// A 64-byte aligned heap buffer.
struct AlignedFree {
  void operator()(void *p) const;
};
using Buffer = std::unique_ptr<void, AlignedFree>;
Buffer alloc_buffer(int64_t bytes);

} // namespace spw

struct spw_tensor {
  int32_t dtype = SPW_F32;
  int32_t rank = 0;
  int64_t dims[spw::kMaxRank] = {};
  int64_t numel = 1;
  void *data = nullptr;
  spw::Buffer owned; // null when data points into storage owned elsewhere
  // data is the context's device memory (device.h), not host memory.
  bool on_device = false;
  // A step tensor of spw_alloc / spw_constant: spw_release may free it.
  bool releasable = false;

  int64_t bytes() const { return numel * spw::dtype_size(dtype); }
  std::string shape() const { return spw::shape_str(dims, rank); }
  template <class T> T *as() const { return static_cast<T *>(data); }
};

namespace spw {

struct AdamWHparams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
};

// An AdamW update of elements [begin, end) of a parameter, deferred by
// spw_adamw_defer at `step`: applying it later with these very inputs gives
// the update that step would have made, bit for bit.
struct PendingAdamW {
  int64_t begin = 0, end = 0;
  int64_t step = 0;
  AdamWHparams h;        // the effective hyper-parameters at `step`
  std::vector<float> grad; // gradient elements [begin, end)
  // The offload plan's copy of them instead (tiers_pending_grad): null when
  // `grad` holds them.
  float *planned = nullptr;
  const float *grad_data() const { return planned ? planned : grad.data(); }
};

struct ParamInfo {
  std::string name;
  int64_t offset = 0;
  std::unique_ptr<spw_tensor> value;
  std::vector<char> grad;   // last recorded gradient (bytes), empty if none
  std::vector<float> adam_m, adam_v; // lazily allocated; state_numel each
  // FOAM (spw_declare_foam): the state is folded in blocks of 2^foam_level
  // elements of each row; -1: AdamW, one state element per element.
  int32_t foam_level = -1;
  double foam_alpha = 0.25; // the compile-time default
  // Elements of each moment (m, v) the parameter's optimizer keeps.
  int64_t state_numel() const;
  // The shape of each moment: the parameter's, or [rows, folded columns].
  std::vector<int64_t> state_dims() const;
  // An offload plan's bound AdamW state (spw_bind of an optimizer block);
  // null: adam_m / adam_v.
  float *bound_m = nullptr, *bound_v = nullptr;
  // A parameter of a block split by the optimizer overlap (bound_split >=
  // 0): its elements below bound_split are in part 0, the rest in part 1.
  // Element e of the value / m / v is at bound_*[0] + e below the split and
  // at bound_*[1] + (e - bound_split) from it; null: that part has no copy
  // where the block was bound. value->data is set only where the whole
  // parameter is contiguous. bound_split < 0: value->data, bound_m and
  // bound_v as above.
  int64_t bound_split = -1;
  float *bound_w_part[2] = {}, *bound_m_part[2] = {}, *bound_v_part[2] = {};
  std::vector<PendingAdamW> pending; // deferred updates not yet applied
  // Gradient buffers of applied deferred updates, reused by the next defer
  // (a fresh allocation every step would fault its pages in again).
  std::vector<std::vector<float>> spare_grads;
  // On a device (device.h): the parameter's device copy, which the step
  // reads and the optimizer updates (`value` is refreshed from it by
  // device_pull), and the device's m and v (state_numel each, zero until
  // the first update: state_live).
  std::unique_ptr<spw_tensor> dev_value;
  float *dev_m = nullptr, *dev_v = nullptr;
  bool state_live = false;
};

struct Tiers; // tiers.cpp: an offload plan's blocks and the tensor store

struct InputInfo {
  std::string name;
  std::unique_ptr<spw_tensor> view; // data points into `batches`
  Buffer batches;                   // B consecutive batches
  int64_t num_batches = 0;
  // On a device: all B batches there, and the step's batch in them.
  std::unique_ptr<spw_tensor> dev_view;
  void *dev_batches = nullptr;
};

// A forward-only model's output (spw_declare_output). `value` has the
// declared dtype and shape; spw_set_output copies the step's tensor into it.
struct OutputInfo {
  std::string name;
  std::unique_ptr<spw_tensor> value;
  bool set = false; // set during the current step
};

struct AdamWOverrides {
  std::optional<double> lr, beta1, beta2, eps, weight_decay;
  std::optional<double> foam_alpha; // FOAM's alpha (--foam-alpha)
};

} // namespace spw

struct spw_ctx {
  int64_t weights_bytes = -1; // from spw_declare_weights; -1 = not declared
  std::vector<spw::ParamInfo> params;
  std::vector<spw::InputInfo> inputs;
  std::vector<spw::OutputInfo> outputs; // non-empty: a forward-only model
  std::optional<spw::AdamWHparams> declared_adamw;
  spw::AdamWOverrides overrides;
  std::shared_ptr<spw::Tiers> tiers; // set by spw_declare_tiers
  // Bytes the step's tensors may take on the device beside the plan's GPU
  // arena (spw_declare_step_arena); -1: no bound declared.
  int64_t step_arena_budget = -1;
  // Backend: the model's compile target (spw_use_cuda registers the CUDA
  // factory) and precision; `device` is set once the executable starts one
  // (--device), null on the CPU backend.
  spw::DeviceFactory cuda_factory = nullptr;
  spw::Precision precision = spw::Precision::FP32;
  std::unique_ptr<spw::Device> device;
  // spw_constant's device copies, uploaded once: generated code passes the
  // same compile-time data every step. Keyed by address, size and a hash
  // of the bytes, so a caller that reuses a buffer gets a fresh copy.
  std::map<std::tuple<const void *, int64_t, uint64_t>, void *>
      device_constants;

  // Per-step state.
  std::vector<std::unique_ptr<spw_tensor>> step_tensors;
  spw_tensor *loss = nullptr;
  int64_t step = 0;            // global step number, counted from 1
  bool evaluate_only = false;  // spw_adamw records gradients but does not update
  // The declarations make no buffers for parameters, inputs and outputs
  // (spw_main: it checks the files and the memory first, then calls
  // allocate_declared).
  bool defer_alloc = false;
  std::string error;           // first error; sticky until the driver clears it
  // The first non-finite gradient of the step (spw_adamw & co. record it and
  // skip the updates from there on): the driver reports it after reading the
  // loss, which, when it is non-finite too, is the better diagnosis.
  std::string grad_error;
  spw_tensor dummy;            // returned by entry points after an error
  float dummy_storage = 0.0f;

  bool failed() const { return !error.empty(); }
  void set_error(const std::string &msg) {
    if (error.empty())
      error = msg;
  }
};

namespace spw {

std::unique_ptr<spw_ctx> make_context();
// Gives the parameters and outputs that were declared with defer_alloc their
// buffers (outputs zeroed; parameters are read from the weights next); the
// inputs get theirs when loaded.
void allocate_declared(spw_ctx *ctx);
// Frees all step-lifetime tensors and forgets the loss and which outputs the
// step set.
void clear_step(spw_ctx *ctx);
// Makes a tensor with owned, uninitialized storage; validates dtype and dims.
// allocate = false: no storage (data null), only the checks and the shape.
std::unique_ptr<spw_tensor> make_tensor(int32_t dtype, int32_t rank,
                                        const int64_t *dims, const char *what,
                                        bool allocate = true);
// Copies a parameter's gradient (checked against its dtype and shape).
void record_grad(spw_ctx *ctx, int32_t param, const spw_tensor *grad);
// A step tensor on the context's device (uninitialized) or host.
spw_tensor *alloc_step_tensor(spw_ctx *ctx, int32_t dtype, int32_t rank,
                              const int64_t *dims, const char *what);
// Copies the bytes of tensor `t` (host or device) into `host`.
void read_tensor(spw_ctx *ctx, const spw_tensor &t, void *host);
// With a device: creates the device copies of the parameters, their
// optimizer state and the input batches (device_start), refreshes the host
// copies from the device (device_pull: parameters and live optimizer state)
// and the device from the host (device_push, after the host copies changed:
// a checkpoint restored, a gradient check's perturbation). No-ops without.
void device_start(spw_ctx *ctx, std::unique_ptr<Device> device);
void device_pull(spw_ctx *ctx);
void device_push(spw_ctx *ctx);
void device_push_param(spw_ctx *ctx, size_t param);
// The CPU optimizer arithmetic on raw arrays (optimizer.cpp): one AdamW
// update of n elements, one FOAM update of a [rows, cols] weight with
// state folded at `level`; every backend's kernels match them.
void adamw_kernel(float *w, float *m, float *v, const float *g, int64_t n,
                  int64_t step, const AdamWHparams &h);
void foam_kernel(float *w, float *m, float *v, const float *g, int64_t rows,
                 int64_t cols, int level, int64_t step, const AdamWHparams &h,
                 double alpha);
// Runs kernel `op` on the context's device (guarded: errors go to the
// context); `host` is the op's CPU kernel.
void run_on_device(spw_ctx *ctx, Op op, KernelEntry host,
                   spw_tensor *const *ins, spw_tensor *const *outs,
                   const int64_t *iattrs, const double *fattrs);
// The AdamW hyper-parameters in effect for a call with these defaults.
AdamWHparams effective_adamw(const spw_ctx *ctx, const AdamWHparams &call);

// Runs an entry point's body unless the context already failed; turns a
// thrown spw::Error into the context's error, prefixed with `what`.
template <class F> void guarded(spw_ctx *ctx, const char *what, F &&body) {
  if (!ctx || ctx->failed())
    return;
  try {
    body();
  } catch (const Error &e) {
    ctx->set_error(std::string(what) + ": " + e.what());
  } catch (const std::bad_alloc &) {
    ctx->set_error(std::string(what) + ": out of memory");
  } catch (const std::exception &e) {
    ctx->set_error(std::string(what) + ": " + e.what());
  }
}

// ---- .npy -----------------------------------------------------------------
struct NpyArray {
  char kind = 0;         // 'f', 'i', 'u', 'b', ... from descr
  int itemsize = 0;      // bytes per element
  bool big_endian = false;
  bool fortran_order = false;
  std::string descr;     // as written in the header, e.g. "<f4"
  std::vector<int64_t> shape;
  std::vector<char> data; // raw bytes, numel * itemsize
  int64_t numel() const;
};
// Parses a whole .npy file image; `what` names it in errors.
NpyArray parse_npy(const std::string &bytes, const std::string &what);
NpyArray read_npy(const std::string &path);
// What the header of a .npy file says, checked against the file's size:
// the data (numel * itemsize bytes, overflow-checked) starts at data_offset
// and ends the file. `head` is the file's start (at least the whole header
// when the file has one: npy_header_bytes tells how much to read).
struct NpyHeader {
  char kind = 0;
  int itemsize = 0;
  bool big_endian = false;
  bool fortran_order = false;
  std::string descr;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t data_offset = 0;
  int64_t data_bytes = 0;
};
// The header's length, from the first 12 bytes (or fewer, a short file)
// with the preamble; -1 when `head` is too short to tell. Errors name `what`.
int64_t npy_header_bytes(const std::string &head, const std::string &what);
NpyHeader parse_npy_header(const std::string &head, int64_t file_size,
                           const std::string &what);
// Serializes a little-endian C-order array (v1.0 header); used by tests.
std::string write_npy(const std::string &descr,
                      const std::vector<int64_t> &shape, const void *data,
                      size_t bytes);

// A JSON string literal of `s` (quotes, backslashes and control characters
// escaped); the safetensors header and checkpoint manifests use it.
std::string json_string(const std::string &s);

// ---- .safetensors ---------------------------------------------------------
struct NamedTensor {
  std::string name;
  const spw_tensor *tensor;
};
std::string safetensors_bytes(const std::vector<NamedTensor> &tensors);
// A parsed .safetensors header. Tensors keep the header's order.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;          // "F32", "I64", ... (a known safetensors dtype)
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0; // data_offsets, relative to the data section
};
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;
  std::vector<std::pair<std::string, std::string>> metadata;
};
// The safetensors name of a runtime dtype ("F32", "I64", "I32"; "?").
const char *safetensors_dtype(int32_t dtype);
// Bytes per element of a safetensors dtype name; 0 for an unknown one.
int64_t safetensors_dtype_size(const std::string &dtype);
// Parses and validates the JSON header of a .safetensors file whose data
// section (everything after the header) is `data_size` bytes: strict JSON,
// known dtypes, data_offsets that match dtype and shape and tile the data
// section. Errors (spw::Error) start with `what` (e.g. "weights file 'F'").
SafetensorsHeader parse_safetensors_header(const std::string &json,
                                           int64_t data_size,
                                           const std::string &what);
// Writes to `path` through a temporary file and rename. A symlink at `path`
// is followed: its target is replaced (the temporary is made beside it).
void write_file_atomic(const std::string &path, const std::string &bytes);
// Removes the regular files in `dir` named `prefix` + `<pid>` (followed by
// `sep` and anything, when `sep` is not '\0') whose process is gone: what a
// killed writer left, which it could not clean up itself.
void remove_files_of_dead_writers(const std::string &dir,
                                  const std::string &prefix, char sep);
// `path` with its symlinks followed (up to 40), the last one possibly
// dangling; `path` itself when it is not a symlink.
std::string resolve_symlinks(const std::string &path);
// Test only: SPILLWAY_TEST_ENOSPC=FILE[@N][,FILE[@N]...] makes the N-th
// (default: first) and later writes of FILE (the path as its flag gave it;
// each write_file_atomic, or each --log-json line) fail as if the disk were
// full, so the tests reach the end-of-run and mid-run output failures
// without a full file system.
bool test_write_fault(const std::string &path);
// Creates `path` (refusing an existing file when `exclusive`), writes all of
// `bytes`, fsyncs and closes it; on failure removes it and throws spw::Error
// naming the file (and the offset of a failed write).
void write_file_synced(const std::string &path, const std::string &bytes,
                       bool exclusive);

// ---- files ------------------------------------------------------------------
// Reads a regular file (opened as open_regular does).
std::string read_whole_file(const std::string &path, const char *what);
// "a FIFO (named pipe)", "a character device", ... for a stat st_mode.
const char *file_kind(unsigned mode);
// Opens `path` for reading without ever blocking (O_NONBLOCK: a FIFO would
// wait for a writer) and refuses anything but a regular file; errors name
// `what` and the path. Returns the descriptor (O_CLOEXEC; blocking again)
// and its size.
int open_regular(const std::string &path, const char *what, int64_t *size);

// ---- memory -----------------------------------------------------------------
// The memory a new allocation may take: the least of MemAvailable, the
// cgroup's limit less its use and the address-space limit less the process's
// size; bytes < 0 when none is known.
struct MemoryBudget {
  int64_t bytes = -1;
  std::string source; // which limit it is, for messages
};
MemoryBudget available_memory();
// Fails when `bytes` exceed available_memory(); `what` starts the message
// and ends in its verb ("the inputs need", "a f32 [8,8] tensor needs").
void check_memory(int64_t bytes, const std::string &what);

} // namespace spw

#endif // SPILLWAY_RUNTIME_SRC_RUNTIME_INTERNAL_H
