//===- npy-fuzzer.cpp - libFuzzer target for the .npy reader --------------===//
//
// Feeds arbitrary bytes to spw::parse_npy, the parser behind --input
// NAME=FILE.npy (read_npy reads the file whole and calls it). A spw::Error
// is the expected answer to bad input; a crash, a sanitizer report or an
// array whose data does not match its header is a bug. A reproducer is the
// .npy file itself: `MODEL --input x=crash.npy ...` reads it the same way.
//
//===----------------------------------------------------------------------===//

#include "formats.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string bytes(reinterpret_cast<const char *>(data), size);
  try {
    spw::NpyArray a = spw::parse_npy(bytes, "input 'x' (fuzz.npy)");
    // What the driver relies on after a successful parse.
    if (a.itemsize <= 0 || a.shape.size() > size_t(spw::kMaxRank) ||
        a.data.size() != size_t(a.numel()) * size_t(a.itemsize) ||
        a.data.size() > size) {
      std::fprintf(stderr, "npy-fuzzer: parse_npy accepted an array whose "
                           "data does not match its header\n");
      std::abort();
    }
  } catch (const spw::Error &) {
  }
  return 0;
}
