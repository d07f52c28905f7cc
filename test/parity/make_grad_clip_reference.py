#!/usr/bin/env python3
"""PyTorch's loss trajectories of the parity models with gradient clipping.

The same GPT-2 and LLaMA and batches as make_fixtures.py (its build() and
tokens.npy: the models gpt2_*.onnx and llama_*.onnx were exported from),
trained 30 steps by

    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    torch.optim.AdamW(lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                      weight_decay=0.01, foreach=False).step()

(clip_grad_norm_ at its defaults: the foreach path, norm_type 2), for each
max_norm of MAX_NORMS: for GPT-2 0.05 clips every step, 1.7 only some; for
LLaMA 0.05. Writes MODEL.clip<max_norm>.torch_losses.jsonl beside this
script in the executable's --log-json format with "grad_norm" (the pre-clip
total norm, as clip_grad_norm_ returns it), and prints how many steps
clipped. Checks first that each rebuilt model's unclipped trajectory is
MODEL.torch_losses.jsonl's.

  /work/big/torchenv/bin/python test/parity/make_grad_clip_reference.py [--out DIR]
"""

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_fixtures as mf  # noqa: E402
import torch  # noqa: E402

MAX_NORMS = {"gpt2": (0.05, 1.7), "llama": (0.05,)}
STEPS = 30


def train(name, max_norm):
    w, _ = mf.build(name, 0)
    tokens = np.load(os.path.join(HERE, "tokens.npy"))
    opt = torch.optim.AdamW(w.parameters(), lr=mf.LR, betas=mf.BETAS, eps=mf.EPS,
                            weight_decay=mf.WD, foreach=False)
    w.train()
    rows = []
    for s in range(1, STEPS + 1):
        ids = torch.from_numpy(tokens[(s - 1) % tokens.shape[0]])
        opt.zero_grad(set_to_none=True)
        loss = w(ids, ids)
        loss.backward()
        norm = None
        if max_norm:
            norm = float(torch.nn.utils.clip_grad_norm_(w.parameters(), max_norm))
        opt.step()
        rows.append((s, float(np.float32(float(loss))), norm))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=HERE)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for name, max_norms in MAX_NORMS.items():
        # The rebuilt model is the fixture's: its unclipped losses are the
        # committed ones.
        plain = [json.loads(l)["loss"]
                 for l in open(os.path.join(HERE, f"{name}.torch_losses.jsonl"))]
        again = [l for _, l, _ in train(name, 0)]
        if again != plain:
            raise SystemExit(f"the rebuilt {name} does not reproduce {name}.torch_losses.jsonl: "
                             "regenerate the fixtures (make_fixtures.py) first")
        for max_norm in max_norms:
            write(args.out, name, max_norm, train(name, max_norm))


def write(out, name, max_norm, rows):
    path = os.path.join(out, f"{name}.clip{max_norm:g}.torch_losses.jsonl")
    with open(path, "w") as f:
        for s, loss, norm in rows:
            f.write(json.dumps({"step": s, "loss": loss, "lr": mf.LR,
                                "grad_norm": norm}) + "\n")
    clipped = sum(1 for _, _, n in rows if max_norm / (n + 1e-6) < 1)
    print(f"{name} max_norm {max_norm:g}: {clipped} of {STEPS} steps clipped, grad_norm "
          f"{min(n for _, _, n in rows):.4g}..{max(n for _, _, n in rows):.4g}, "
          f"loss {rows[0][1]:.6f} -> {rows[-1][1]:.6f} ({path})")


if __name__ == "__main__":
    main()
