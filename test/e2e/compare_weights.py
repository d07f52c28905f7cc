#!/usr/bin/env python3
"""Compares two .safetensors files of f32 parameters (EXE --save).

Passes (exit 0) when both hold the same tensors with the same shapes and
every element satisfies |actual - expected| <= atol + rtol * |expected|
(--exact: bit for bit); fails (exit 1) naming the first tensor that does
not, with its largest difference.
"""

import argparse
import json
import struct
import sys

import numpy as np


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            sys.exit(f"{path}: {name}: dtype {info['dtype']}, expected F32")
        start, end = info["data_offsets"]
        out[name] = np.frombuffer(body[start:end], dtype=np.float32).reshape(info["shape"])
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("actual")
    p.add_argument("expected")
    p.add_argument("--rtol", type=float, default=0.0)
    p.add_argument("--atol", type=float, default=0.0)
    p.add_argument("--exact", action="store_true")
    args = p.parse_args()
    actual, expected = load(args.actual), load(args.expected)
    if sorted(actual) != sorted(expected):
        sys.exit(f"different tensors: {sorted(set(actual) ^ set(expected))}")
    worst = 0.0
    for name in sorted(expected):
        a, e = actual[name], expected[name]
        if a.shape != e.shape:
            sys.exit(f"{name}: shape {a.shape} vs {e.shape}")
        if args.exact:
            if not np.array_equal(a.view(np.uint32), e.view(np.uint32)):
                sys.exit(f"{name}: not bit-identical (max |diff| {np.abs(a - e).max():.3g})")
            continue
        diff = np.abs(a.astype(np.float64) - e)
        bound = args.atol + args.rtol * np.abs(e.astype(np.float64))
        if not np.all(diff <= bound):
            i = np.unravel_index(np.argmax(diff - bound), diff.shape)
            sys.exit(f"{name}{list(i)}: {a[i]!r} vs {e[i]!r}, |diff| {diff[i]:.3g} > {bound[i]:.3g}")
        worst = max(worst, float(diff.max()))
    print(f"{len(expected)} tensors match" + ("" if args.exact else f" (max |diff| {worst:.3g})"))


if __name__ == "__main__":
    main()
