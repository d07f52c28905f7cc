#!/usr/bin/env python3
"""Compares the last logged loss of two training runs.

  final_loss_ratio.py CANDIDATE.jsonl BASELINE.jsonl --max-ratio R

Each file is an executable's --log-json output (one JSON object per step).
Passes (exit 0) when both runs reach the same last step and CANDIDATE's
loss there is at most R times BASELINE's; otherwise exits 1. Prints both
losses and the ratio either way.
"""

import argparse
import json
import sys


def last_step(path):
    last = None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not a JSON line ({e})")
            if "step" in rec and "loss" in rec:
                last = rec
    if last is None:
        sys.exit(f"{path}: no step with a loss (is it --log-json output?)")
    return last


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("candidate")
    ap.add_argument("baseline")
    ap.add_argument("--max-ratio", type=float, required=True)
    a = ap.parse_args()
    c, b = last_step(a.candidate), last_step(a.baseline)
    if c["step"] != b["step"]:
        sys.exit(f"the runs end at different steps: {c['step']} "
                 f"({a.candidate}) and {b['step']} ({a.baseline})")
    ratio = c["loss"] / b["loss"]
    ok = ratio <= a.max_ratio
    print(f"step {c['step']}: {c['loss']:.6f} vs {b['loss']:.6f}, ratio "
          f"{ratio:.4f} {'<=' if ok else '>'} {a.max_ratio:g}: "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
