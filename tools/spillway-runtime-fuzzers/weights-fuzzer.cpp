//===- weights-fuzzer.cpp - libFuzzer target for --weights files ----------===//
//
// Writes the input to a file and runs one training step of the test model
// (runtime/tests/test_model.cpp: 152 bytes of f32 weights, four parameters)
// through spw_main with `--weights` that file, so the executable's whole
// weights path runs as it does for a user: format detection by content, the
// raw layout (the file exactly the model's size), .safetensors (header,
// names, dtypes, shapes, data ranges) and weights maps ("SPWWMAP1": header
// length, JSON header, segments into the map itself or into source files,
// which are then stat'ed and sampled). Exit 1 or 2 with a message is the
// expected answer to bad input; a crash or sanitizer report is a bug. Exit 0
// is fine too (a file that holds valid weights). A reproducer replays with
//   build/runtime/spillway_runtime_test_model --weights crash --input ...
// (x: f32 [1,4,3], y: i64 [1,4]; run-fuzzer.sh's log shows the command).
//
// Run with -close_fd_mask=3: the driver prints a banner or an error for
// every input.
//
//===----------------------------------------------------------------------===//

#include "formats.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

extern "C" int spw_main(int argc, char **argv);

namespace {

struct Scratch {
  std::string dir, weights, x, y;
  Scratch() {
    const char *tmp = std::getenv("TMPDIR");
    std::string base = tmp && *tmp ? tmp : "/tmp";
    std::string tmpl = base + "/spillway-weights-fuzz.XXXXXX";
    if (!::mkdtemp(tmpl.data()))
      std::abort();
    dir = tmpl;
    weights = dir + "/w";
    x = dir + "/x.npy";
    y = dir + "/y.npy";
    const std::vector<float> xs(12, 0.5f);
    const std::vector<int64_t> ys = {0, 1, 2, 1};
    spw::write_file_atomic(x, spw::write_npy("<f4", {1, 4, 3}, xs.data(), 48));
    spw::write_file_atomic(y, spw::write_npy("<i8", {1, 4}, ys.data(), 32));
  }
  ~Scratch() {
    for (const std::string &f : {weights, x, y})
      ::unlink(f.c_str());
    ::rmdir(dir.c_str());
  }
};

Scratch &scratch() {
  static Scratch s;
  return s;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Scratch &s = scratch();
  FILE *f = std::fopen(s.weights.c_str(), "wb");
  if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0)
    std::abort();
  const std::string xarg = "x=" + s.x, yarg = "y=" + s.y;
  std::vector<std::string> args = {"model",   "--weights", s.weights,
                                   "--input", xarg,        "--input",
                                   yarg,      "--steps",   "1"};
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = spw_main(int(args.size()), argv.data());
  if (rc != 0 && rc != 1 && rc != 2)
    std::abort();
  return 0;
}
