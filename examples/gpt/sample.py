#!/usr/bin/env python3
"""Samples text from the demo GPT with the weights a training run saved.

    examples/gpt/sample.py WEIGHTS.safetensors [--model demo_forward.onnx]
        [--prompt TEXT] [--bytes N] [--temperature T] [--top-k K] [--seed S]

Loads the forward graph (model(input_ids).logits, committed without its
weights), puts in each of its parameters the tensor of the same state_dict
name from WEIGHTS (what `EXE --save` writes: the model's own names, both
names of a tie), runs it in onnxruntime one byte at a time and writes the
prompt and N sampled bytes to stdout. The graph's sequence length is fixed
(64 for the demo), so the context is the last 64 bytes; causal attention
makes the padding after them irrelevant. Needs numpy, onnx, onnxruntime.
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def fail(msg):
    print(f"sample.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def read_safetensors(path):
    """name -> float32 array; the format is an 8-byte header length, JSON, data."""
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        fail(f"cannot read '{path}': {e.strerror}")
    if len(blob) < 8:
        fail(f"'{path}' is not a safetensors file ({len(blob)} bytes)")
    (n,) = struct.unpack("<Q", blob[:8])
    try:
        header = json.loads(blob[8:8 + n])
    except (ValueError, UnicodeDecodeError):
        fail(f"'{path}' is not a safetensors file (no JSON header)")
    if not isinstance(header, dict):
        fail(f"'{path}' is not a safetensors file (its header is not a JSON object)")
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = (int(x) for x in info["data_offsets"])
            shape = [int(d) for d in info["shape"]]
            dtype = info["dtype"]
        except (KeyError, TypeError, ValueError):
            fail(f"'{path}': tensor '{name}' has no valid dtype, shape and data_offsets")
        count = int(np.prod(shape, dtype=np.int64))
        size = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8}.get(dtype)
        if size is None:
            continue  # not a float tensor: no parameter of this graph
        if not 0 <= begin <= end <= len(blob) - base or end - begin != count * size:
            fail(f"'{path}': tensor '{name}' ({dtype} {shape}) does not fit the file "
                 "(truncated?)")
        if dtype == "BF16":  # the upper half of a float32
            raw = np.frombuffer(blob, "<u2", count, base + begin)
            arr = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(blob, np.dtype(DTYPES[dtype]).newbyteorder("<"), count, base + begin)
        out[name] = arr.reshape(shape).astype(np.float32)
    return out


def parameters_of(model):
    """initializer -> (the names a weights file may hold it under: its
    state_dict name and its ties; the training export's fold of it, or None)."""
    meta, folds = {}, {}
    for prop in model.metadata_props:
        if prop.key == "spillway.parameters":
            meta = json.loads(prop.value)
        elif prop.key == "spillway.demo.folds":  # make_demo.py
            folds = json.loads(prop.value)
    ties = {}
    for group in meta.get("ties", []):
        for name in group:
            ties[name] = group
    names = {}
    for init in model.graph.initializer:
        if not init.external_data:
            continue  # a constant the graph holds itself
        sd = meta.get("parameters", {}).get(init.name, {}).get("state_dict", init.name)
        names[init.name] = (ties.get(sd, [sd]), folds.get(sd))
    return names


def load_model(path, weights_path):
    import onnx
    from onnx import numpy_helper

    try:
        model = onnx.load(path, load_external_data=False)
    except OSError as e:
        fail(f"cannot read '{path}': {e.strerror}")
    weights = read_safetensors(weights_path)
    inits = {i.name: i for i in model.graph.initializer}
    for init_name, (candidates, fold) in parameters_of(model).items():
        # A run of a wrapped export may have kept the wrapper's prefix.
        tries = candidates + ["model." + c for c in candidates]
        found = next((t for t in tries if t in weights), None)
        init = inits[init_name]
        if found is None and fold in weights and weights[fold].size == np.prod(init.dims):
            found = fold  # all of the parameter, under the fold's name
            weights[fold] = weights[fold].reshape(init.dims)
        if found is None:
            fail(f"'{weights_path}' has no tensor '{candidates[0]}', a parameter of "
                 f"'{path}' ({len(weights)} tensors there, e.g. "
                 f"{', '.join(sorted(weights)[:3]) or 'none'}): pass the --save output "
                 "of a run of this model (examples/gpt/demo_train.onnx)")
        arr = weights[found]
        if list(arr.shape) != list(init.dims):
            fail(f"'{weights_path}': tensor '{found}' has shape {list(arr.shape)}, "
                 f"'{path}' needs {list(init.dims)} for '{init_name}': weights of "
                 "another model")
        init.CopyFrom(numpy_helper.from_array(arr, init_name))
    return model


def main():
    ap = argparse.ArgumentParser(description="Sample bytes of text from the demo GPT "
                                 "with trained weights (EXE --save's safetensors).")
    ap.add_argument("weights", metavar="WEIGHTS.safetensors")
    ap.add_argument("--model", default=f"{HERE}/demo_forward.onnx",
                    help="the forward graph (default: demo_forward.onnx beside this script)")
    ap.add_argument("--prompt", default="And God said",
                    help="the text to continue (default: %(default)r)")
    ap.add_argument("--bytes", type=int, default=300, metavar="N",
                    help="how many bytes to sample (default 300)")
    ap.add_argument("--temperature", type=float, default=0.8, metavar="T",
                    help="softmax temperature (default 0.8; 0: always the likeliest byte)")
    ap.add_argument("--top-k", type=int, default=40, metavar="K",
                    help="sample among the K likeliest bytes (default 40; 0: all)")
    ap.add_argument("--seed", type=int, default=0, metavar="S")
    a = ap.parse_args()
    if a.bytes < 0:
        fail(f"--bytes {a.bytes}: expected a count >= 0")
    if a.temperature < 0:
        fail(f"--temperature {a.temperature}: expected a number >= 0")
    if a.top_k < 0:
        fail(f"--top-k {a.top_k}: expected a count >= 0")
    prompt = a.prompt.encode("utf-8")
    if not prompt:
        fail("--prompt is empty: give the model some text to continue")

    import onnxruntime as ort

    model = load_model(a.model, a.weights)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1  # one byte at a time: a thread pool only adds overhead
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    seq = inp.shape[-1]
    if not isinstance(seq, int):
        fail(f"'{a.model}': input '{inp.name}' has no fixed sequence length")
    rng = np.random.default_rng(a.seed)
    tokens = list(prompt)
    for _ in range(a.bytes):
        ctx = tokens[-seq:]
        ids = np.zeros((1, seq), np.int64)
        ids[0, :len(ctx)] = ctx
        logits = sess.run(None, {inp.name: ids})[0][0, len(ctx) - 1].astype(np.float64)
        if a.temperature == 0:
            tokens.append(int(np.argmax(logits)))
            continue
        logits = logits / a.temperature
        if 0 < a.top_k < logits.size:
            logits[logits < np.partition(logits, -a.top_k)[-a.top_k]] = -np.inf
        p = np.exp(logits - logits.max())
        tokens.append(int(rng.choice(logits.size, p=p / p.sum())))
    sys.stdout.buffer.write(bytes(tokens) + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
