#!/usr/bin/env python3
"""Writes the seed corpora of the runtime fuzzers (tools/spillway-runtime-
fuzzers) into test/fuzz/runtime/NAME/seeds/: a few small valid files of each
format, in the shapes the readers take, for libFuzzer to mutate. The outputs
are committed; rerun after changing this script."""
import io
import json
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def out(name, fname, data):
    d = os.path.join(HERE, name, "seeds")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, fname), "wb") as f:
        f.write(data)


def npy(arr, version=None):
    b = io.BytesIO()
    if version is None:
        np.save(b, arr)
    else:
        np.lib.format.write_array(b, arr, version=version)
    return b.getvalue()


def safetensors(tensors, metadata=None):
    header, data = {}, b""
    for name, arr, dtype in tensors:
        raw = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


# .npy: the dtypes and header versions the reader takes, and a few it refuses.
out("npy", "f4-2d.npy", npy(np.arange(12, dtype="<f4").reshape(3, 4)))
out("npy", "i8-1d.npy", npy(np.array([0, 1, 2, 1], dtype="<i8")))
out("npy", "i4-3d.npy", npy(np.ones((2, 1, 3), dtype="<i4")))
out("npy", "bool.npy", npy(np.array([True, False, True])))
out("npy", "scalar.npy", npy(np.float32(1.5)))
out("npy", "empty.npy", npy(np.zeros((0, 3), dtype="<f4")))
out("npy", "fortran.npy", npy(np.asfortranarray(np.ones((2, 3), "<f4"))))
out("npy", "big-endian.npy", npy(np.arange(3, dtype=">f4")))
out("npy", "f8.npy", npy(np.arange(3, dtype="<f8")))
out("npy", "v2.npy", npy(np.arange(4, dtype="<f4"), version=(2, 0)))
out("npy", "v3.npy", npy(np.arange(4, dtype="<f4"), version=(3, 0)))

# .safetensors (header parser and the weights fuzzer's model).
w1 = np.full((5, 3), 0.1, "<f4")
b1 = np.zeros(5, "<f4")
w2 = np.full((5, 3), -0.1, "<f4")
b2 = np.zeros(3, "<f4")
model = [("fc1.weight", w1, "F32"), ("fc1.bias", b1, "F32"),
         ("fc2.weight", w2, "F32"), ("fc2.bias", b2, "F32")]
out("safetensors", "model.safetensors", safetensors(model, {"format": "pt"}))
out("safetensors", "dtypes.safetensors", safetensors(
    [("a", np.arange(2, dtype="<i8"), "I64"),
     ("b", np.arange(3, dtype="<i4"), "I32"),
     ("c", np.zeros((0,), "<f4"), "F32"),
     ("d", np.array([1, 0], "u1"), "BOOL"),
     ("e", np.float32(2.0).reshape(()), "F32")]))
out("weights", "model.safetensors", safetensors(model))
out("weights", "raw.weights",
    np.concatenate([w1.ravel(), b1, w2.ravel(), b2]).astype("<f4").tobytes())


# MANIFEST.json as the writer lays it out, without the manifest_xxh3 line
# (the fuzzer appends the right one).
def manifest(step, tensors, chunks, raw_bytes, data_bytes, zstd=False,
             chunk_bytes=4096, metadata=None):
    t = "{\n"
    t += '  "format": "spillway-checkpoint",\n  "version": 1,\n'
    t += f'  "step": {step},\n  "data_file": "data",\n'
    t += f'  "data_bytes": {data_bytes},\n  "alignment": 4096,\n'
    t += f'  "compression": "{"zstd" if zstd else "none"}",\n'
    t += f'  "chunk_bytes": {chunk_bytes},\n  "raw_bytes": {raw_bytes},\n'
    meta = metadata or {}
    t += "  \"metadata\": {" + ",".join(
        f"\n    {json.dumps(k)}: {json.dumps(v)}" for k, v in meta.items()) + (
        "\n  },\n" if meta else "},\n")
    t += "  \"tensors\": [" + ",".join(
        f"\n    {{\"name\": {json.dumps(n)}, \"dtype\": \"{d}\", \"shape\": "
        f"[{', '.join(map(str, s))}], \"offset\": {o}, \"bytes\": {b}}}"
        for n, d, s, o, b in tensors) + ("\n  ],\n" if tensors else "],\n")
    t += "  \"chunks\": [" + ",".join(
        f"\n    {{\"offset\": {o}, \"stored\": {s}, \"raw\": {r}, "
        f"\"xxh3\": \"{h}\"}}" for o, s, r, h in chunks) + (
        "\n  ],\n" if chunks else "],\n")
    return t.encode()


params = [("param/fc1.weight", "f32", [5, 3], 0, 60),
          ("param/fc1.bias", "f32", [5], 64, 20),
          ("param/fc2.weight", "f32", [5, 3], 128, 60),
          ("param/fc2.bias", "f32", [3], 192, 12)]
meta = {"model_fingerprint": "0123456789abcdef", "parameters": "4",
        "optimizer": "adamw", "steps": "10"}
out("checkpoint-manifest", "one-chunk.json",
    manifest(6, params, [(0, 204, 204, "0123456789abcdef")], 204, 4096,
             metadata=meta))
out("checkpoint-manifest", "two-chunks.json",
    manifest(3, params + [("adam_m/fc1.weight", "f32", [5, 3], 256, 60)],
             [(0, 4096, 4096, "0000000000000000"),
              (4096, 100, 100, "ffffffffffffffff")], 4196, 8192,
             chunk_bytes=4096))
out("checkpoint-manifest", "zstd.json",
    manifest(1, [("t", "i64", [2], 0, 16), ("b", "bool", [0], 64, 0)],
             [(0, 25, 64, "00000000deadbeef")], 64, 4096, zstd=True))
out("checkpoint-manifest", "empty.json", manifest(0, [], [], 0, 0))
