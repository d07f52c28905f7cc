//===- vmath.h - float exp and erfc for the fast CPU kernels --------------===//
//
// Branch-free float32 approximations that GCC vectorizes inside the fast
// kernels' loops (no libm calls in hot loops):
//   exp_f   Cephes expf: range reduction by ln 2 (split in two), a degree-6
//           polynomial, 2^n by exponent bits; ~1-2 ulp. exp_f(-inf) = 0,
//           arguments below -87.3 give 0, above 88.7 give +inf, NaN
//           gives NaN.
//   erfc_f  Numerical Recipes' erfcc (Chebyshev fit of erfc(z) e^{z^2});
//           relative error below 1.2e-7 on the whole line (so Phi(x) =
//           erfc(-x/sqrt2)/2 stays accurate in the far negative tail).
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_CPU_VMATH_H
#define SPILLWAY_RUNTIME_SRC_CPU_VMATH_H

#include <cstdint>
#include <cstring>

namespace spw::cpu::vmath {

inline float exp_f(float x) {
  const float hi = 88.7228f, lo = -87.3365f;
  const bool over = x > hi, under = x < lo;
  // NaN passes both clamps: computing on 0 keeps the float -> int
  // conversion below defined (NaN to int is UB); the result is x.
  const bool nan = !(x == x);
  float xc = x > hi ? hi : x;
  xc = xc < lo ? lo : xc;
  xc = nan ? 0.0f : xc;
  // n = round(x / ln2)
  float fn = xc * 1.44269504088896341f;
  fn = fn + (fn >= 0.0f ? 0.5f : -0.5f);
  const int32_t n = int32_t(fn);
  const float nf = float(n);
  float r = xc - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float r2 = r * r;
  float y = p * r2 + r + 1.0f;
  // y * 2^n, in two steps so that n = 128 or n = -126 stays finite/normal.
  const int32_t n1 = n / 2, n2 = n - n1;
  int32_t b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  y = y * s1 * s2;
  y = over ? __builtin_inff() : y;
  y = under ? 0.0f : y;
  return nan ? x : y;
}

// erfc(x), relative error < 1.2e-7 (exp_f's error included: a few ulp).
inline float erfc_f(float x) {
  const float z = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float a = t * exp_f(p - z * z);
  return x < 0.0f ? 2.0f - a : a;
}

} // namespace spw::cpu::vmath

#endif
