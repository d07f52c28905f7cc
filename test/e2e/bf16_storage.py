#!/usr/bin/env python3
"""bf16 storage against its definition, for test/e2e/bf16-storage.test.

    bf16_storage.py inputs X.npy          writes [1, 4096] f32 inputs
    bf16_storage.py check X.npy Y.npy     Y must be X stored as bf16

The inputs hold what rounding must get right: exact ties above even and odd
kept halves, their neighbours, values that round to the largest bf16 or to
infinity, subnormals, both zeros, infinities, NaNs of both signs, random
values. The check is the definition, not the runtime's bit trick: the
nearer of the two bf16 values around x (distances in float64, exact), the
even one on a tie, infinity past the largest bf16 (as if the next value
were 2^128), and any NaN as the quiet NaN 0x7FC0 (torch's c10::BFloat16).
"""
import sys

import numpy as np

N = 4096


def inputs(path):
    g = np.random.default_rng(20)
    hi = g.integers(0, 1 << 16, N, dtype=np.uint32) << 16
    low = g.choice(np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32), N)
    u = hi | low
    u[:64] = g.integers(0, 1 << 32, 64, dtype=np.uint64).astype(np.uint32)
    u[64:80] = np.uint32(0x7F7F7FFF) + np.arange(16, dtype=np.uint32) * 0x800
    u[80:96] = g.integers(1, 1 << 23, 16, dtype=np.uint32)  # subnormals
    u[96:104] = [0, 0x80000000, 0x7F800000, 0xFF800000,
                 0x7FC00000, 0xFFC00001, 0x7F800001, 0x7FBFFFFF]
    u[104:112] |= np.uint32(0x80000000)
    np.save(path, u.view(np.float32).reshape(1, N))


def expected(x):
    u = x.view(np.uint32).astype(np.uint64)
    lo = u & 0xFFFF0000
    hi = lo + 0x10000

    def value(bits):
        b = bits.astype(np.uint32)
        v = b.view(np.float32).astype(np.float64)
        inf = (b & 0x7FFFFFFF) == 0x7F800000
        return np.where(inf, np.copysign(2.0**128, v), v)

    xf = x.astype(np.float64)
    dlo = np.abs(xf - value(lo))
    dhi = np.abs(value(hi) - xf)
    odd = (lo >> 16) & 1 == 1
    pick = np.where(dlo < dhi, lo, np.where(dlo > dhi, hi, np.where(odd, hi, lo)))
    inf = np.isinf(x)
    pick = np.where(inf, u, pick)
    nan = np.isnan(x)
    pick = np.where(nan, 0x7FC00000, pick)
    return (pick & 0xFFFF0000).astype(np.uint32)


def check(xpath, ypath):
    x = np.load(xpath).reshape(-1)
    y = np.load(ypath).reshape(-1)
    with np.errstate(invalid="ignore"):  # NaN payloads widened to float64
        want = expected(x)
    got = y.view(np.uint32)
    bad = np.nonzero(got != want)[0]
    if bad.size:
        for i in bad[:5]:
            print(f"x 0x{x.view(np.uint32)[i]:08x}: got 0x{got[i]:08x}, "
                  f"expected 0x{want[i]:08x}")
        print(f"FAIL: {bad.size} of {x.size} values")
        return 1
    ties = int(np.sum((x.view(np.uint32) & 0xFFFF) == 0x8000))
    print(f"PASS: {x.size} values stored as bf16 as defined ({ties} ties)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "inputs":
        inputs(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
