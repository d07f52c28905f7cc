#!/usr/bin/env python3
"""Writes the initial weights of a bench/make_gpt_onnx.py model as .safetensors.

With --threads 1 (the default) the same values, in the same order, as
`make_gpt_onnx.py` with these arguments followed by `onnx_to_safetensors.py
gpt.onnx` (the file is byte for byte that one), without building the ONNX
model: one tensor at a time is drawn and written, in little memory. With
--threads N > 1 each tensor is drawn from its own generator (the seed's
SeedSequence spawned once per tensor, in order) on N threads: the same
distribution and file layout, deterministic for a seed, but other values
than make_gpt_onnx.py's; a 2.7B-parameter model (11 GB) then takes seconds
instead of a minute. For the GPU machine, where the executable compiled here
(from a --graph-only model) runs: its weights are made there from the seed.

  gpt_weights.py --config DIR/config.json OUT.safetensors [--threads N]
  gpt_weights.py --layers 32 --d-model 2560 ... OUT.safetensors

Needs numpy only.
"""

import argparse
import concurrent.futures
import json
import struct
import sys

import numpy as np


def tensors(layers, dim, vocab, seq):
    """(name, shape, kind) in make_gpt_onnx.py's initializer order; kind is
    'normal' (drawn N(0, std)), 'one' or 'zero'."""
    out = [("wte", (vocab, dim), "normal"), ("wpe", (seq, dim), "normal")]

    def ln(p):
        out.extend([(f"{p}.scale", (dim,), "one"), (f"{p}.bias", (dim,), "zero")])

    def linear(p, fan_in, fan_out):
        out.extend([(f"{p}.weight", (fan_in, fan_out), "normal"), (f"{p}.bias", (fan_out,), "zero")])

    for i in range(layers):
        p = f"h.{i}"
        ln(f"{p}.ln1")
        for w in ("q", "k", "v"):
            linear(f"{p}.attn.{w}", dim, dim)
        linear(f"{p}.attn.proj", dim, dim)
        ln(f"{p}.ln2")
        linear(f"{p}.mlp.fc", dim, 4 * dim)
        linear(f"{p}.mlp.proj", 4 * dim, dim)
    ln("ln_f")
    out.append(("lm_head.weight", (dim, vocab), "normal"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the .safetensors file to write")
    ap.add_argument("--config", help="a config.json make_gpt_onnx.py wrote (its arguments)")
    for name, default in (("layers", 24), ("d-model", 1024), ("heads", 16), ("vocab", 8192),
                          ("seq", 64), ("batch", 4), ("seed", 0)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--threads", type=int, default=1,
                    help="1: make_gpt_onnx.py's values; more: per-tensor generators on that many threads")
    a = ap.parse_args()
    cfg = {"layers": a.layers, "d_model": a.d_model, "heads": a.heads, "vocab": a.vocab,
           "seq": a.seq, "batch": a.batch, "seed": a.seed, "std": a.std}
    if a.config:
        try:
            with open(a.config) as f:
                given = json.load(f)
            cfg = {k: given[k] for k in cfg}
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"gpt_weights: cannot read the model's arguments from '{a.config}': {e!r}")
    if min(cfg[k] for k in ("layers", "d_model", "heads", "seq", "batch")) < 1 or cfg["vocab"] < 2 \
            or cfg["d_model"] % cfg["heads"]:
        sys.exit(f"gpt_weights: not a model make_gpt_onnx.py makes: {cfg}")
    rng = np.random.default_rng(cfg["seed"])
    # make_gpt_onnx.py draws the token walk first, then the weights.
    rng.integers(0, cfg["vocab"], size=(cfg["batch"], cfg["seq"] + 1), dtype=np.int64)
    ts = tensors(cfg["layers"], cfg["d_model"], cfg["vocab"], cfg["seq"])
    header, offset = {}, 0
    for name, shape, _ in ts:
        nbytes = 4 * int(np.prod(shape))
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data section starts 8-aligned
    if a.threads < 1:
        sys.exit("gpt_weights: --threads must be >= 1")
    std = np.float32(cfg["std"])
    if a.threads == 1:
        gens = [rng] * len(ts)
    else:
        gens = [np.random.default_rng(s) for s in np.random.SeedSequence(cfg["seed"]).spawn(len(ts))]

    def make(i):  # numpy's generators release the GIL while they fill
        _, shape, kind = ts[i]
        if kind == "normal":
            t = gens[i].standard_normal(shape, dtype=np.float32)
            t *= std
            return t
        return np.full(shape, 1.0 if kind == "one" else 0.0, dtype=np.float32)

    try:
        with open(a.out, "wb") as f, concurrent.futures.ThreadPoolExecutor(a.threads) as pool:
            f.write(struct.pack("<Q", len(blob)))
            f.write(blob)
            # At most 2 tensors per thread in flight, written in order.
            window = 2 * a.threads if a.threads > 1 else 1
            pending = {}
            for i in range(len(ts)):
                for j in range(i, min(i + window, len(ts))):
                    if j not in pending:
                        pending[j] = pool.submit(make, j) if a.threads > 1 else None
                t = pending.pop(i)
                (t.result() if t is not None else make(i)).tofile(f)
    except OSError as e:
        sys.exit(f"gpt_weights: cannot write '{a.out}': {e}")
    print(f"wrote {len(ts)} tensors ({offset / 2**30:.2f} GiB) to {a.out}")


if __name__ == "__main__":
    main()
