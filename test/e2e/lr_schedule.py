#!/usr/bin/env python3
"""Checks --lr-schedule / --warmup / --min-lr against their description.

  lr_schedule.py check LOG.jsonl --lr F --steps N [--warmup W] [--cosine]
                 [--min-lr F]
      every "lr" of the --log-json file is the rate docs/runtime.md gives
      for its step, computed here (nanoGPT's get_lr, written out).
  lr_schedule.py chain EXE DIR --lr F --steps N [--warmup W] [--cosine]
                 [--min-lr F] -- ARGS...
      runs EXE ARGS one step at a time, step s with the constant --lr of
      the schedule's step s, continuing each time from the checkpoint of
      the step before (--checkpoint-dir DIR --resume; resuming with another
      --lr is allowed, with a warning). The result is what the scheduled
      run must equal, bit for bit, if each update uses its own step's rate.
"""

import argparse
import json
import math
import subprocess
import sys


def rate(a, step):
    """The learning rate of step `step` (from 1)."""
    it = step - 1
    if it < a.warmup:
        return a.lr * (it + 1) / (a.warmup + 1)
    if not a.cosine:
        return a.lr
    ratio = (it - a.warmup) / (a.steps - a.warmup)
    return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["check", "chain"])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--cosine", action="store_true")
    ap.add_argument("--min-lr", type=float, default=0.0)
    argv = sys.argv[1:]
    rest = []
    if "--" in argv:
        rest = argv[argv.index("--") + 1:]
        argv = argv[: argv.index("--")]
    a = ap.parse_args(argv)
    if a.cmd == "check":
        seen = 0
        for line in open(a.paths[0]):
            r = json.loads(line)
            want = rate(a, r["step"])
            if abs(r["lr"] - want) > 1e-8 * abs(want):
                print(f"step {r['step']}: lr {r['lr']!r}, expected {want!r}")
                return 1
            seen += 1
        if seen != a.steps:
            print(f"{seen} steps in the log, expected {a.steps}")
            return 1
        return 0
    exe, ckdir = a.paths
    for s in range(1, a.steps + 1):
        cmd = [exe, *rest, "--steps", str(s), "--lr", repr(rate(a, s)),
               "--checkpoint-dir", ckdir, "--resume"]
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            print(f"step {s}: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
