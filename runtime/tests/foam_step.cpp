//===- foam_step.cpp - run the runtime's optimizer kernels on .npy files ---===//
//
// A test driver for the optimizer kernels alone, without a model: reads a
// parameter W [m,n] and gradients G [T,m,n] (f32 .npy), declares one
// parameter, and for t = 1..T sets the step number as spw_main does and
// calls spw_foam (after spw_declare_foam) or spw_adamw with gradient t.
// Writes the final weights and the optimizer's m and v ([m, ceil(n/2^L)]
// for FOAM, [m,n] for AdamW) as f32 .npy files.
//
//   spillway-foam-step --param W.npy --grads G.npy --out-dir DIR
//       [--optimizer foam|adamw] [--level L] [--alpha A] [--lr F]
//       [--beta1 F] [--beta2 F] [--eps F] [--weight-decay F]
//
// writes DIR/w.npy, DIR/m.npy and DIR/v.npy. test/e2e/foam_kernel_check.py
// compares them with a NumPy implementation of docs/FOAM's equations.
// Exit status: 0 success, 1 runtime or file error, 2 usage error.
//
//===----------------------------------------------------------------------===//

#include "context.h"
#include "formats.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace spw;

namespace {

struct Options {
  std::string param, grads, out_dir, optimizer = "foam";
  int64_t level = 2;
  double alpha = 0.25, lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8,
         weight_decay = 0.01;
};

[[noreturn]] void usage(const std::string &msg) {
  std::fprintf(stderr,
               "spillway-foam-step: %s\nusage: spillway-foam-step --param "
               "W.npy --grads G.npy --out-dir DIR [--optimizer foam|adamw] "
               "[--level L] [--alpha A] [--lr F] [--beta1 F] [--beta2 F] "
               "[--eps F] [--weight-decay F]\n",
               msg.c_str());
  std::exit(2);
}

double number(const std::string &flag, const char *text) {
  char *end = nullptr;
  double v = std::strtod(text, &end);
  if (!*text || *end)
    usage("invalid value '" + std::string(text) + "' for " + flag);
  return v;
}

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc)
      usage(flag + " needs a value");
    const char *value = argv[++i];
    if (flag == "--param") o.param = value;
    else if (flag == "--grads") o.grads = value;
    else if (flag == "--out-dir") o.out_dir = value;
    else if (flag == "--optimizer") o.optimizer = value;
    else if (flag == "--level") o.level = int64_t(number(flag, value));
    else if (flag == "--alpha") o.alpha = number(flag, value);
    else if (flag == "--lr") o.lr = number(flag, value);
    else if (flag == "--beta1") o.beta1 = number(flag, value);
    else if (flag == "--beta2") o.beta2 = number(flag, value);
    else if (flag == "--eps") o.eps = number(flag, value);
    else if (flag == "--weight-decay") o.weight_decay = number(flag, value);
    else usage("unknown flag " + flag);
  }
  if (o.param.empty() || o.grads.empty() || o.out_dir.empty())
    usage("--param, --grads and --out-dir are required");
  if (o.optimizer != "foam" && o.optimizer != "adamw")
    usage("--optimizer must be foam or adamw");
  return o;
}

void check_f32(const NpyArray &a, const std::string &path, size_t rank) {
  if (a.kind != 'f' || a.itemsize != 4 || a.big_endian || a.fortran_order)
    fail("%s: expected little-endian C-order float32, got '%s'", path.c_str(),
         a.descr.c_str());
  if (a.shape.size() != rank)
    fail("%s: expected rank %zu, got %s", path.c_str(), rank,
         shape_str(a.shape.data(), int(a.shape.size())).c_str());
}

void save(const std::string &path, const std::vector<int64_t> &shape,
          const float *data, size_t n) {
  write_file_atomic(path, write_npy("<f4", shape, data, n * sizeof(float)));
}

int run(const Options &o) {
  NpyArray w0 = read_npy(o.param), g = read_npy(o.grads);
  check_f32(w0, o.param, 2);
  check_f32(g, o.grads, 3);
  if (g.shape[1] != w0.shape[0] || g.shape[2] != w0.shape[1])
    fail("%s: gradients %s do not match the parameter %s", o.grads.c_str(),
         shape_str(g.shape.data(), 3).c_str(),
         shape_str(w0.shape.data(), 2).c_str());
  const int64_t steps = g.shape[0];
  const size_t numel = size_t(w0.numel());

  auto ctx = make_context();
  const int32_t p = spw_declare_param(ctx.get(), "w", SPW_F32, 2,
                                      w0.shape.data(), 0);
  const bool foam = o.optimizer == "foam";
  if (foam)
    spw_declare_foam(ctx.get(), p, o.level, o.alpha);
  if (ctx->failed())
    fail("%s", ctx->error.c_str());
  ParamInfo &info = ctx->params[size_t(p)];
  std::memcpy(info.value->data, w0.data.data(), numel * sizeof(float));

  std::unique_ptr<spw_tensor> grad =
      make_tensor(SPW_F32, 2, w0.shape.data(), "gradient");
  for (int64_t t = 1; t <= steps; ++t) {
    // spw_main's loop: the step number first, then the model's step.
    ctx->step = t;
    std::memcpy(grad->data, g.data.data() + size_t(t - 1) * numel * 4,
                numel * sizeof(float));
    if (foam)
      spw_foam(ctx.get(), p, grad.get(), o.lr, o.beta1, o.beta2, o.eps,
               o.weight_decay, o.alpha);
    else
      spw_adamw(ctx.get(), p, grad.get(), o.lr, o.beta1, o.beta2, o.eps,
                o.weight_decay);
    if (ctx->failed())
      fail("step %lld: %s", (long long)t, ctx->error.c_str());
    clear_step(ctx.get());
  }

  const std::vector<int64_t> sdims = info.state_dims();
  size_t sn = size_t(info.state_numel());
  if (info.adam_m.size() != sn || info.adam_v.size() != sn)
    fail("the optimizer state has %zu/%zu elements, expected %zu",
         info.adam_m.size(), info.adam_v.size(), sn);
  save(o.out_dir + "/w.npy", w0.shape, info.value->as<float>(), numel);
  save(o.out_dir + "/m.npy", sdims, info.adam_m.data(), sn);
  save(o.out_dir + "/v.npy", sdims, info.adam_v.data(), sn);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options o = parse(argc, argv);
  try {
    return run(o);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "spillway-foam-step: error: %s\n", e.what());
    return 1;
  }
}
