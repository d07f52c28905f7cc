#!/usr/bin/env python3
"""Fixtures for demo.test's checks of examples/gpt/sample.py.

  weights OUT.safetensors [--drop NAME] [--prefix P]
      writes weights for every parameter of examples/gpt/demo_forward.onnx,
      drawn from a fixed seed (numpy only), named as the model's state_dict
      with the tied head under its other name (transformer.wte.weight), so
      sample.py must follow the tie; --drop leaves one tensor out, --prefix
      puts P before every name (a wrapper's prefix).
  reference OUT.bin            (needs torch and transformers)
      loads those weights into Hugging Face's GPT-2 of the demo's
      configuration and writes its greedy continuation of PROMPT (the
      committed Inputs/demo_greedy.bin).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FORWARD = os.path.join(HERE, "..", "..", "examples", "gpt", "demo_forward.onnx")
PROMPT = b"And God said"
BYTES = 80


def parameters():
    import onnx

    m = onnx.load(FORWARD, load_external_data=False)
    meta = next(json.loads(p.value) for p in m.metadata_props if p.key == "spillway.parameters")
    return {v["state_dict"]: v["shape"] for v in meta["parameters"].values()}


def draw():
    """state_dict name -> float32 array; weights large enough that the greedy
    choice is never a near tie between two bytes."""
    rng = np.random.default_rng(19)
    out = {}
    for name, shape in sorted(parameters().items()):
        scale = 1.0 if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") else 0.3
        out[name] = (rng.standard_normal(shape) * scale).astype(np.float32)
    out["transformer.wte.weight"] = out.pop("lm_head.weight")
    return out


def write_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr, "<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def reference(path):
    import torch
    import transformers

    cfg = transformers.GPT2Config(vocab_size=256, n_positions=64, n_embd=128, n_layer=6,
                                  n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  bos_token_id=0, eos_token_id=0, use_cache=False)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    sd = {k: torch.from_numpy(v) for k, v in draw().items()}
    sd["lm_head.weight"] = sd["transformer.wte.weight"]
    model.load_state_dict(sd, strict=True)
    ids = list(PROMPT)
    with torch.no_grad():
        for _ in range(BYTES):
            ids.append(int(model(torch.tensor([ids[-64:]])).logits[0, -1].argmax()))
    with open(path, "wb") as f:
        f.write(bytes(ids) + b"\n")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("weights")
    w.add_argument("out")
    w.add_argument("--drop")
    w.add_argument("--prefix", default="")
    r = sub.add_parser("reference")
    r.add_argument("out")
    a = ap.parse_args()
    if a.cmd == "reference":
        reference(a.out)
        return 0
    t = draw()
    if a.drop:
        del t[a.drop]
    write_safetensors(a.out, {a.prefix + k: v for k, v in t.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
