//===- bf16.h - bfloat16 storage: float32 rounded to nearest even --------===//
//
// bf16 is float32's upper half: same sign and exponent, 7 mantissa bits.
// Spillway stores values as bf16 and computes in float32; every device
// rounds with this one function (host and CUDA), so a value stored on the
// CPU, the loopback device or a GPU has the same bits. Round to nearest,
// ties to even (IEEE's default, torch's `.to(torch.bfloat16)`); a finite
// value past bf16's largest rounds to infinity; every NaN becomes the quiet
// NaN 0x7FC0, sign dropped, as torch's c10::BFloat16 gives (CUDA's
// __float2bfloat16_rn gives another NaN: not used, for equal bits).
//
//===----------------------------------------------------------------------===//

#ifndef SPILLWAY_RUNTIME_BF16_H
#define SPILLWAY_RUNTIME_BF16_H

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define SPW_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define SPW_HOST_DEVICE inline
#endif

namespace spw {

/// One bf16 value: the upper 16 bits of a float32.
struct bf16 {
  uint16_t bits;
};

SPW_HOST_DEVICE uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

SPW_HOST_DEVICE float bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

/// float32 -> bf16, round to nearest even.
SPW_HOST_DEVICE bf16 to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN
    return bf16{uint16_t(0x7fc0u)};
  // Adding 0x7fff plus the kept part's lowest bit carries into the kept
  // part exactly when the dropped half is above 0x8000, or equal to it with
  // an odd kept part; a carry out of the mantissa steps the exponent (the
  // largest finite values round to infinity).
  return bf16{uint16_t((u + 0x7fffu + (u >> 16 & 1u)) >> 16)};
}

/// bf16 -> float32: exact.
SPW_HOST_DEVICE float to_float(bf16 b) { return bits_float(uint32_t(b.bits) << 16); }

} // namespace spw

#endif // SPILLWAY_RUNTIME_BF16_H
