#!/usr/bin/env python3
"""Regenerates the tiny export in this directory (needs torch; CI only reads it).

    /work/big/torchenv/bin/python python/tests/data/make_data.py

Writes, beside this script:

    gpt2_tiny.onnx             `python -m spillway.export --hf gpt2 --batch 2 --seq 8
                               --set num_hidden_layers=1 -o gpt2_tiny.onnx` (HF's own init)
    gpt2_tiny.state_dict.npz   torch's state_dict() of that model (the HF model, tied
                               lm_head.weight included), rebuilt as the command builds it
    tokens.npy                 int64 [4, 2, 8], seed 0, token ids below 64
    labels.npy                 tokens.npy with every fifth position from the fourth -100
                               (ignored, as padding is): the executable's labels input
    gpt2_tiny.torch_losses.jsonl
                               torch.optim.AdamW(lr=1e-3, weight_decay=0.01, foreach=False)
                               over 30 steps on tokens.npy and labels.npy (step s uses batch
                               (s-1) % 4), in the executable's --log-json format

and exits 1 unless every parameter the export's metadata maps holds exactly
the torch value of its state-dict name.
"""

import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import onnx  # noqa: E402
import torch  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from spillway import hf, metadata  # noqa: E402

B, S, NB, STEPS, LR, WD = 2, 8, 4, 30, 1e-3, 0.01
CLI = ["--hf", "gpt2", "--batch", str(B), "--seq", str(S), "--set", "num_hidden_layers=1"]


def main():
    torch.set_num_threads(1)
    onnx_path = os.path.join(HERE, "gpt2_tiny.onnx")
    subprocess.run([sys.executable, "-m", "spillway.export", *CLI, "-o", onnx_path],
                   check=True, cwd=os.path.dirname(os.path.dirname(HERE)))
    # The command's model, built as it builds it (seed 0, then the model).
    torch.manual_seed(0)
    model, _, _ = hf.causal_lm("gpt2", S, overrides={"num_hidden_layers": 1})
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    np.savez(os.path.join(HERE, "gpt2_tiny.state_dict.npz"), **sd)

    m = onnx.load(onnx_path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    bad = [n for n, p in metadata.read(m)["parameters"].items()
           if not np.array_equal(inits[n], sd[p["state_dict"]])]
    if bad:
        print(f"FAIL: initializers differ from the rebuilt model's state_dict: {bad}")
        return 1

    tokens = np.random.default_rng(0).integers(0, 64, size=(NB, B, S), dtype=np.int64)
    np.save(os.path.join(HERE, "tokens.npy"), tokens)
    labels = tokens.copy()
    labels[:, :, 3::5] = -100
    np.save(os.path.join(HERE, "labels.npy"), labels)
    w = hf.loss_module(model, "explicit")
    opt = torch.optim.AdamW(w.parameters(), lr=LR, weight_decay=WD, foreach=False)
    with open(os.path.join(HERE, "gpt2_tiny.torch_losses.jsonl"), "w") as f:
        for s in range(1, STEPS + 1):
            batch = (s - 1) % NB
            opt.zero_grad(set_to_none=True)
            loss = w(torch.from_numpy(tokens[batch]), torch.from_numpy(labels[batch]))
            loss.backward()
            opt.step()
            record = {"step": s, "loss": float(np.float32(loss.item())), "lr": LR}
            f.write(json.dumps(record) + "\n")
    print(f"ok: {len(inits)} initializers, torch loss {loss.item()!r} at step {STEPS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
