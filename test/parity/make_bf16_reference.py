#!/usr/bin/env python3
"""PyTorch's bf16 autocast loss trajectories of the parity models.

The same GPT-2 and LLaMA and batches as make_fixtures.py (its build() and
tokens.npy: the models gpt2_*.onnx and llama_*.onnx were exported from),
trained 30 steps as a PyTorch user trains in mixed precision (PyTorch
Lightning's "bf16-mixed"): fp32 parameters and AdamW state, the forward and
the loss under

    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids, labels)
    loss.backward()
    torch.optim.AdamW(lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                      weight_decay=0.01, foreach=False).step()

(autocast runs the linear layers and attention's products on bf16 copies
of their operands, norms, softmax and the loss in fp32). Writes
MODEL.bf16_autocast.torch_losses.jsonl beside this script in the
executable's --log-json format, and prints how far each trajectory lies
from the fp32 one. Checks first that each rebuilt model's fp32 trajectory
is MODEL.torch_losses.jsonl's.

  /work/torchenv/bin/python test/parity/make_bf16_reference.py [--out DIR]
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

MODELS = ("gpt2", "llama")
STEPS = 30


def train(name, autocast):
    w, _ = mf.build(name, 0)
    tokens = np.load(os.path.join(HERE, "tokens.npy"))
    return [float(np.float32(l)) for l in mf.train(w, tokens, STEPS, autocast)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=HERE)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for name in MODELS:
        plain = [json.loads(l)["loss"]
                 for l in open(os.path.join(HERE, f"{name}.torch_losses.jsonl"))]
        if train(name, False) != plain:
            raise SystemExit(f"the rebuilt {name} does not reproduce {name}.torch_losses.jsonl: "
                             "regenerate the fixtures (make_fixtures.py) first")
        mixed = train(name, True)
        path = os.path.join(args.out, f"{name}.bf16_autocast.torch_losses.jsonl")
        with open(path, "w") as f:
            for s, loss in enumerate(mixed, 1):
                f.write(json.dumps({"step": s, "loss": loss, "lr": mf.LR}) + "\n")
        far = max(abs(a - b) for a, b in zip(mixed, plain))
        print(f"{name}: bf16 autocast loss {mixed[0]:.6f} -> {mixed[-1]:.6f}, "
              f"at most {far:.3g} from fp32 ({path})")


if __name__ == "__main__":
    main()
