//===- forward.cpp - forward-only models (--outputs) ----------------------===//

#include "driver/driver.h"

#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>

namespace spw::driver {

namespace {

// The file name of output `name` under --outputs: characters outside
// [A-Za-z0-9._-] (say, the '/' of "model/logits") become '_'.
std::string output_file_name(const std::string &name) {
  std::string f = name;
  for (char &c : f)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' &&
        c != '-')
      c = '_';
  return f + ".npy";
}

const char *npy_descr(int32_t dtype) {
  switch (dtype) {
  case SPW_F32: return "<f4";
  case SPW_I64: return "<i8";
  case SPW_I32: return "<i4";
  case SPW_BOOL: return "|b1";
  default: fail("output of unknown dtype %d", dtype);
  }
}

} // namespace

// Runs `steps` steps of a forward-only model (step s on batch (s-1) % B) and
// writes each output to DIR/<name>.npy, shape [steps, *output_shape], with
// step s's values at index s-1.
int run_forward(spw_ctx *ctx, const Options &o, int64_t steps,
                const std::vector<FileRole> &ins) {
  namespace fs = std::filesystem;
  std::vector<std::string> paths;
  if (!o.outputs.empty()) {
    std::error_code ec;
    fs::create_directories(o.outputs, ec);
    if (ec || !fs::is_directory(o.outputs))
      fail("cannot create --outputs directory '%s': %s", o.outputs.c_str(),
           ec ? ec.message().c_str() : "not a directory");
    for (size_t i = 0; i < ctx->outputs.size(); ++i) {
      paths.push_back(
          (fs::path(o.outputs) / output_file_name(ctx->outputs[i].name))
              .string());
      for (size_t j = 0; j < i; ++j)
        if (paths[j] == paths[i])
          fail("outputs '%s' and '%s' would both be written to '%s'",
               ctx->outputs[j].name.c_str(), ctx->outputs[i].name.c_str(),
               paths[i].c_str());
      // Each file is replaced at the end: a FIFO or device there, or an
      // input of the run, is found now, not after the last step.
      refuse_overwrites({file_role(format("--outputs file '%s'",
                                          paths[i].c_str()),
                                   paths[i])},
                        ins, o);
      check_output_file("--outputs", paths[i]);
    }
  }
  std::vector<std::vector<char>> values(ctx->outputs.size());
  if (!paths.empty())
    for (size_t i = 0; i < ctx->outputs.size(); ++i) {
      int64_t total;
      if (__builtin_mul_overflow(steps, ctx->outputs[i].value->bytes(), &total))
        fail("--outputs: %lld steps of output '%s' (%lld bytes each) do not "
             "fit in memory; lower --steps",
             (long long)steps, ctx->outputs[i].name.c_str(),
             (long long)ctx->outputs[i].value->bytes());
      check_memory(total, format("--outputs: %lld steps of output '%s' need",
                                 (long long)steps,
                                 ctx->outputs[i].name.c_str()));
      values[i].resize(size_t(total));
    }
  const int64_t every =
      o.print_every > 0 ? o.print_every : std::max<int64_t>(1, steps / 20);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t s = 1; s <= steps; ++s) {
    ctx->step = s;
    select_batch(ctx, s - 1);
    clear_step(ctx);
    ctx->error.clear();
    spw_model_step(ctx);
    if (ctx->failed())
      fail("step %lld: %s", (long long)s, ctx->error.c_str());
    for (size_t i = 0; i < ctx->outputs.size(); ++i) {
      const OutputInfo &out = ctx->outputs[i];
      if (!out.set)
        fail("step %lld: the model did not set output '%s' (spw_set_output)",
             (long long)s, out.name.c_str());
      const int64_t b = out.value->bytes();
      if (!values[i].empty() && b > 0)
        std::memcpy(values[i].data() + (s - 1) * b, out.value->data, size_t(b));
    }
    clear_step(ctx);
    if (s % every == 0 || s == steps) {
      std::printf("step %lld/%lld\n", (long long)s, (long long)steps);
      flush_stdout();
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  if (steps > 0)
    std::printf("done: %lld steps in %.3f s (%.1f steps/s)\n",
                (long long)steps, secs,
                secs > 0 ? double(steps) / secs : 0.0);
  for (size_t i = 0; i < paths.size(); ++i) {
    const spw_tensor &v = *ctx->outputs[i].value;
    std::vector<int64_t> shape = {steps};
    shape.insert(shape.end(), v.dims, v.dims + v.rank);
    write_file_atomic(paths[i], write_npy(npy_descr(v.dtype), shape,
                                          values[i].data(), values[i].size()));
    std::printf("wrote output %s %s to %s\n", ctx->outputs[i].name.c_str(),
                shape_str(shape.data(), int(shape.size())).c_str(),
                paths[i].c_str());
  }
  flush_stdout();
  return 0;
}

} // namespace spw::driver
