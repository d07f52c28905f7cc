#!/usr/bin/env python3
"""Writes an ONNX model's initializers as a .safetensors file.

A Spillway executable takes its initial parameters from `--weights FILE`,
the raw file spillwayc writes beside it or a .safetensors file whose tensor
names are the ONNX initializer names. Where the executable was compiled on
another machine (the GPU benchmarks: compiled here, run there), this makes
its weights from the same model file, regenerated there by
bench/make_gpt_onnx.py with the same seed. Needs only onnx and numpy;
external data is read through onnx's loader.
"""
import argparse
import json
import struct
import sys

import numpy as np
import onnx
from onnx import numpy_helper

DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64", np.dtype(np.int32): "I32"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="model.onnx (its external data beside it)")
    ap.add_argument("out", help="output .safetensors")
    args = ap.parse_args()
    try:
        model = onnx.load(args.model, load_external_data=True)
    except Exception as e:  # a missing or unreadable file: say which
        sys.exit(f"onnx_to_safetensors: cannot load '{args.model}': {e}")
    arrays = []
    for init in model.graph.initializer:
        a = np.ascontiguousarray(numpy_helper.to_array(init))
        if a.dtype not in DTYPES:
            sys.exit(f"onnx_to_safetensors: initializer '{init.name}' is {a.dtype}; "
                     f"only float32, int64 and int32 are written")
        arrays.append((init.name, a))
    header, offset = {}, 0
    for name, a in arrays:
        header[name] = {"dtype": DTYPES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data section starts 8-aligned
    with open(args.out, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, a in arrays:
            f.write(a.tobytes())
    print(f"wrote {len(arrays)} tensors ({offset / 2**30:.2f} GiB) to {args.out}")


if __name__ == "__main__":
    main()
