#!/usr/bin/env python3
"""Compares an executable's --save file with torch's trained state_dict.

    compare_state_dict.py OURS.safetensors TORCH.safetensors [--atol A] [--rtol R]
        [--allow-missing NAME,...] [--allow-extra NAME,...]

Every tensor of TORCH (the model's own state_dict() names, as
make_exports.py saved them) must be in OURS under the same name, with the same
shape, and values within atol + rtol * |torch|. The default atol, 1e-3, is
one step of lr 1e-3: the losses agree to ~1e-7, but AdamW normalizes
gradients that are all rounding noise (a key bias's, for one) to full-size
steps of either sign, so single elements may drift apart by a few steps.
What this checks is names, shapes and layout: a transposed or misnamed
tensor is off by the weights' own size, ~1e-1. Names in --allow-missing (a tied alias, a
buffer) may be absent. Extra tensors in OURS are listed and fail, but for
those --allow-extra names (a fold that trains as part of a parameter). Needs only
numpy, as CI has it.
"""
import argparse
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "I64": np.int64, "I32": np.int32, "BF16": None, "F16": np.float16}


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(data[base + b:base + e], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ours")
    ap.add_argument("torch")
    ap.add_argument("--atol", type=float, default=1e-3)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--allow-missing", default="")
    ap.add_argument("--allow-extra", default="")
    a = ap.parse_args()
    ours, ref = load(a.ours), load(a.torch)
    allowed = set(filter(None, a.allow_missing.split(",")))
    bad = []
    worst = 0.0
    for name, r in ref.items():
        if name not in ours:
            if name not in allowed:
                bad.append(f"missing {name} {list(r.shape)}")
            continue
        o = ours[name]
        if o.shape != r.shape:
            bad.append(f"{name}: shape {list(o.shape)}, torch {list(r.shape)}")
            continue
        err = np.abs(o.astype(np.float64) - r) - a.rtol * np.abs(r)
        worst = max(worst, float(np.max(np.abs(o.astype(np.float64) - r))) if r.size else 0.0)
        if r.size and float(np.max(err)) > a.atol:
            bad.append(f"{name}: max |diff| {float(np.max(np.abs(o - r))):.3g}")
    extra_ok = set(filter(None, a.allow_extra.split(",")))
    for name in ours:
        if name not in ref and name not in extra_ok:
            bad.append(f"extra {name} {list(ours[name].shape)} (not in torch's state_dict)")
    if bad:
        print(f"FAIL: {len(bad)} problems:")
        for b in bad:
            print("  " + b)
        return 1
    print(f"PASS: {len(ref) - len(allowed & set(ref))} tensors match torch's state_dict "
          f"(max |diff| {worst:.3g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
