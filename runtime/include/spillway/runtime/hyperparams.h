//===- hyperparams.h - the optimizer hyper-parameters' valid ranges -------===//
//
// One definition of what --lr, --beta1, --beta2, --eps, --weight-decay,
// --foam-alpha and --foam-level accept, shared by the training executable's
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

#include <cstdio>
#include <string>

namespace spillway {
namespace hyperparams {

// A closed or half-open interval of finite numbers.
struct Range {
  const char *attr; // the train dialect's attribute name, e.g. "weight_decay"
  const char *flag; // the command-line flag, e.g. "--weight-decay"
  double lo, hi;
  bool lo_open, hi_open; // true: the end itself is excluded
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
// FOAM folds blocks of 2^level elements (an integer).
inline constexpr Range kFoamLevel{"level", "--foam-level", 0.0, 16.0, false,
                                  false};

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

// The same for a value without its text (the compiler's parsed options).
inline std::string check_flag(const Range &r, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return check_flag(r, v, buf);
}

} // namespace hyperparams
} // namespace spillway

#endif // SPILLWAY_RUNTIME_HYPERPARAMS_H
