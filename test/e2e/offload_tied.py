#!/usr/bin/env python3
"""Trains GPT-2 with its tied embedding/head weight offloaded.

{gpt2_ts, gpt2_dynamo} x {params, optimizer and gradients on host (with
the activations), on SSD} x {horizontal, snake} x M in {1, 2} x optimizer
overlap F in {0, 0.5}: each executable is compiled with an offload plan
(spillwayc --place, with --hw so spillwayc checks the plan's transfers
against the cost model, which charges a tied weight's owner block to every
load that reads it), runs K steps with --stats-json, and must
- save weights bit-identical (cmp) to the executable without a plan of the
  same model, order and M (one home for the tied weight, the gradients of
  both uses summed where the plan-less step sums them);
- move, at every step, exactly the bytes per link its plan predicted
  (check_offload_stats.py).
Prints one line per configuration; exits 1 at the first failure.
"""

import argparse
import itertools
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

MODELS = ("gpt2_ts", "gpt2_dynamo")
PLACEMENTS = {
    "host": ("params=host,optimizer=host,gradients=host,activations=host",
             "pcie"),
    "ssd": ("params=ssd,optimizer=ssd,gradients=ssd,activations=gpu", "ssd"),
}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--spillwayc", required=True)
    ap.add_argument("--src", required=True, help="the source tree")
    ap.add_argument("--out", required=True, help="a scratch directory")
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    swap = os.path.join(a.out, "swap")
    os.makedirs(swap, exist_ok=True)
    parity = os.path.join(a.src, "test/parity")
    tokens = os.path.join(parity, "tokens.npy")
    data = ["--input", f"input_ids={tokens}", "--input", f"labels={tokens}",
            "--steps", str(a.steps)]
    hw = os.path.join(a.src, "profiles/cpu-ci.json")

    def train(exe, tag, extra=()):
        out = os.path.join(a.out, tag + ".safetensors")
        run([exe, *data, "--save", out, *extra])
        return out

    refs = {}
    for model, order, m in itertools.product(MODELS, ("horizontal", "snake"),
                                             (1, 2)):
        tag = f"plain-{model}-{order}-{m}"
        exe = os.path.join(a.out, tag)
        run([a.spillwayc, os.path.join(parity, model + ".onnx"), "-o", exe,
             "--microbatches", str(m), "--schedule", order])
        refs[model, order, m] = train(exe, tag)

    for model, (name, (place, expect)), order, m, overlap in itertools.product(
            MODELS, PLACEMENTS.items(), ("horizontal", "snake"), (1, 2),
            ("0", "0.5")):
        tag = f"{model}-{name}-{order}-{m}-F{overlap}"
        exe = os.path.join(a.out, tag)
        run([a.spillwayc, os.path.join(parity, model + ".onnx"), "-o", exe,
             "--microbatches", str(m), "--schedule", order,
             "--overlap-optimizer", overlap, "--place", place, "--hw", hw])
        stats = os.path.join(a.out, tag + ".json")
        saved = train(exe, tag, ["--ssd", swap, "--stats-json", stats])
        with open(saved, "rb") as f, open(refs[model, order, m], "rb") as g:
            if f.read() != g.read():
                sys.exit(f"FAILED: {tag}: weights differ from the plain "
                         f"{model} {order} M={m} run")
        line = run([sys.executable,
                    os.path.join(HERE, "check_offload_stats.py"), stats,
                    "--steps", str(a.steps), "--expect", expect])
        print(f"OK {tag}: bit-identical to plain {order} M={m}; "
              + line.split(": ", 1)[1].strip())
        os.remove(exe)  # tens of MB each; a failed one exited above
    print("all tied offload configurations passed")


if __name__ == "__main__":
    main()
