//===- hyperparams.h - the optimizer hyper-parameters' valid ranges -------===//
//
// One definition of what --lr, --beta1, --beta2, --eps, --weight-decay,
// --foam-alpha, --foam-level and --grad-clip accept, shared by the training executable's
// command line (runtime/src/main.cpp), spillwayc's and the verifier of the
// train dialect's update ops, so a value one of them refuses none accepts.
// NaN fails every check (every comparison with it is false, so each check
// is written as "inside", never as "not outside"); infinities fail because
// every range is finite. Header-only and dependency-free: the runtime, the
// compiler libraries and the tools include it alike.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_HYPERPARAMS_H
#define SPILLWAY_RUNTIME_HYPERPARAMS_H

#include <cerrno>
#include <cfloat>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace spillway {
namespace hyperparams {

// A closed or half-open interval of finite numbers.
struct Range {
  const char *attr; // the train dialect's attribute name, e.g. "weight_decay"
  const char *flag; // the command-line flag, e.g. "--weight-decay"
  double lo, hi;
  bool lo_open, hi_open; // true: the end itself is excluded
  // The kernels compute with it as a float32: it must still be in the range
  // after rounding, and a nonzero value must stay a normal float32 (eps
  // 1e-46 is 0 there, and a denormal is flushed to 0 on the GPU).
  bool float32 = true;
};

// docs/runtime.md, "Value ranges". eps > 0: with eps 0 an element whose
// gradient has always been 0 updates by 0 / 0 = NaN.
inline constexpr Range kLr{"lr", "--lr", 0.0, 1e6, false, false};
inline constexpr Range kBeta1{"beta1", "--beta1", 0.0, 1.0, false, true};
inline constexpr Range kBeta2{"beta2", "--beta2", 0.0, 1.0, false, true};
inline constexpr Range kEps{"eps", "--eps", 0.0, 1.0, true, false};
inline constexpr Range kWeightDecay{"weight_decay", "--weight-decay", 0.0,
                                    1e6, false, false};
// A float32 kernel scales by alpha: below 1e-30 it would round towards 0.
inline constexpr Range kFoamAlpha{"alpha", "--foam-alpha", 1e-30, 1e6, false,
                                  false};
// Global gradient-norm clipping's max_norm (spillwayc and the executable's
// --grad-clip): 0 is off; a float32 computes with it.
inline constexpr Range kGradClip{"max_norm", "--grad-clip", 0.0, 1e6, false,
                                 false};
// FOAM folds blocks of 2^level elements (an integer).
inline constexpr Range kFoamLevel{"level", "--foam-level", 0.0, 16.0, false,
                                  false, /*float32=*/false};

inline bool in_range(const Range &r, double v) {
  const bool above = r.lo_open ? v > r.lo : v >= r.lo;
  const bool below = r.hi_open ? v < r.hi : v <= r.hi;
  return above && below; // both false for NaN
}

// "a number in [0, 1)" (for messages).
inline std::string expected(const Range &r) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "a number in %c%g, %g%c",
                r.lo_open ? '(' : '[', r.lo, r.hi, r.hi_open ? ')' : ']');
  return buf;
}

// "" when `v` is valid, else the message for the flag given as `text`:
// "invalid value 'nan' for --lr: expected a number in [0, 1e+06]".
inline std::string check_flag(const Range &r, double v,
                              const std::string &text) {
  if (in_range(r, v))
    return {};
  return "invalid value '" + text + "' for " + r.flag + ": expected " +
         expected(r);
}

// "" when `v` (in range) is also valid as the float32 the kernels use, else
// why not (for a message).
inline std::string float32_problem(const Range &r, double v) {
  if (!r.float32 || v == 0)
    return {};
  if (!(std::fabs(v) <= FLT_MAX))
    return "it overflows float32, the precision the kernels compute in";
  const float f = static_cast<float>(v);
  if (std::fabs(f) < FLT_MIN) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "it is below %g, float32's smallest normal number (the "
                  "kernels compute in float32, where it is 0 or denormal)",
                  double(FLT_MIN));
    return buf;
  }
  if (!in_range(r, double(f))) {
    char buf[128];
    std::snprintf(buf, sizeof buf,
                  "it rounds to %.9g in float32, the precision the kernels "
                  "compute in",
                  double(f));
    return buf;
  }
  return {};
}

// Parses `text` strictly: the whole text one finite number (no spaces, not
// empty; strtod alone would take " 1" and turn "" or junk into 0), neither
// overflowing nor underflowing a double (1e-400 is not 0). True with the
// value in `out`.
inline bool parse_number(const std::string &text, double &out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])))
    return false;
  errno = 0;
  char *end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  if (*end != '\0' || errno == ERANGE || !std::isfinite(x))
    return false;
  out = x;
  return true;
}

// The one check of a flag's text, the executable's and spillwayc's: "" with
// the value in `out`, else the message, which quotes `text` as typed:
// "invalid value '1e-46' for --eps: it is below 1.17549e-38, ...; expected
// a number in (0, 1]".
inline std::string parse_flag(const Range &r, const std::string &text,
                              double &out) {
  double v = 0;
  const std::string head = "invalid value '" + text + "' for " + r.flag + ": ";
  if (!parse_number(text, v) || !in_range(r, v))
    return head + "expected " + expected(r);
  if (std::string why = float32_problem(r, v); !why.empty())
    return head + why + "; expected " + expected(r);
  out = v;
  return {};
}

// The same for a value without its text (the compiler's parsed options).
inline std::string check_flag(const Range &r, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return check_flag(r, v, buf);
}

} // namespace hyperparams
} // namespace spillway

#endif // SPILLWAY_RUNTIME_HYPERPARAMS_H
