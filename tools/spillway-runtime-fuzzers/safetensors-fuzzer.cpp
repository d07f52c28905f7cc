//===- safetensors-fuzzer.cpp - libFuzzer target for .safetensors headers ===//
//
// Splits the input as the weights loader does (a u64 little-endian header
// length N, N bytes of JSON header, then the data section) and feeds it to
// spw::parse_safetensors_header. A spw::Error is the expected answer; a
// crash, a sanitizer report or an accepted header whose byte ranges fall
// outside the data section or disagree with dtype and shape is a bug. The
// weights fuzzer runs whole files through the executable; this one reaches
// the header parser directly, faster.
//
//===----------------------------------------------------------------------===//

#include "formats.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 8)
    return 0;
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= uint64_t(data[i]) << (8 * i);
  if (n > size - 8) // the loader refuses a truncated header before parsing
    return 0;
  const std::string header(reinterpret_cast<const char *>(data) + 8,
                           size_t(n));
  const int64_t data_size = int64_t(size - 8 - n);
  try {
    spw::SafetensorsHeader h =
        spw::parse_safetensors_header(header, data_size, "weights file 'f'");
    for (const spw::SafetensorsEntry &t : h.tensors) {
      int64_t numel = 1;
      for (int64_t d : t.shape)
        if (d < 0 || __builtin_mul_overflow(numel, d, &numel))
          std::abort();
      const int64_t esize = spw::safetensors_dtype_size(t.dtype);
      int64_t want = 0;
      if (esize <= 0 || __builtin_mul_overflow(numel, esize, &want) ||
          t.begin < 0 || t.begin > t.end || t.end > data_size ||
          t.end - t.begin != want) {
        std::fprintf(stderr, "safetensors-fuzzer: accepted tensor '%s' with "
                             "a bad byte range\n",
                     t.name.c_str());
        std::abort();
      }
    }
  } catch (const spw::Error &) {
  }
  return 0;
}
