#!/usr/bin/env python3
"""Writes an ONNX model's float initializers as a .safetensors state_dict.

    export_initializers.py MODEL.onnx OUT.safetensors [--strip PREFIX] [--only NAME,...]

Each float32 initializer (external data read from beside the model) becomes
the tensor of its name without PREFIX; --only keeps just those names (after
stripping). The tests use it to stand in for a user's model.safetensors:
make_exports.py exports one model object with both exporters before it
trains it, and the TorchScript export keeps GPT-2's position table whole
(the dynamo export folds it), so its initializers are that model's
state_dict as it was exported. Needs onnx and numpy, as CI has them.
"""
import argparse
import json
import struct

import numpy as np
import onnx
from onnx import numpy_helper


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--strip", default="")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    model = onnx.load(a.model)
    tensors = {}
    for t in model.graph.initializer:
        if t.data_type != onnx.TensorProto.FLOAT:
            continue
        name = t.name[len(a.strip):] if t.name.startswith(a.strip) else t.name
        if only and name not in only:
            continue
        tensors[name] = np.ascontiguousarray(numpy_helper.to_array(t), dtype="<f4")
    missing = only - set(tensors)
    if missing:
        raise SystemExit(f"{a.model}: no float initializer {sorted(missing)}")
    header, offset = {}, 0
    for name, v in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(v.shape),
                        "data_offsets": [offset, offset + v.nbytes]}
        offset += v.nbytes
    text = json.dumps(header).encode()
    with open(a.out, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for v in tensors.values():
            f.write(v.tobytes())
    print(f"wrote {len(tensors)} tensors to {a.out}")


if __name__ == "__main__":
    main()
