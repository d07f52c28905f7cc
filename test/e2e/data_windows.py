#!/usr/bin/env python3
"""Token files for the --data tests, and the batches --data should draw.

  data_windows.py write OUT --count N --vocab V [--llmc VERSION] [--seed S]
      writes N random tokens below V: raw little-endian uint16 (nanoGPT's
      train.bin), or llm.c's format (256 x int32 header: 20240520, VERSION,
      N; then uint16 tokens for version 1, uint32 for version 2).
  data_windows.py batches FILE --seed S --steps N --rows B --seq L
      --labels shifted|same|none --tokens-out T.npy [--labels-out Y.npy]
      [--stream train|val]
      writes the [N, B, L] int64 batches that docs/runtime.md says --data
      feeds, computed here from its description (not from the runtime's
      code): row r of step s (from 0) starts at output k = s*B + r of
      SplitMix64 seeded with S (seed + 1 for --stream val, whose batch s is
      validation batch s), modulo count - window + 1.
"""

import argparse
import sys

import numpy as np

MASK = (1 << 64) - 1


def splitmix64(seed, k):
    """The k-th output (from 0) of SplitMix64 seeded with `seed`."""
    z = (seed + (k + 1) * 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def read_tokens(path):
    raw = open(path, "rb").read()
    head = np.frombuffer(raw[:12], "<i4") if len(raw) >= 12 else None
    if head is not None and head[0] == 20240520:
        dtype = "<u2" if head[1] == 1 else "<u4"
        return np.frombuffer(raw[1024:], dtype)[: head[2]]
    return np.frombuffer(raw, "<u2")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("out")
    w.add_argument("--count", type=int, required=True)
    w.add_argument("--vocab", type=int, required=True)
    w.add_argument("--llmc", type=int, default=0)
    w.add_argument("--seed", type=int, default=0)
    b = sub.add_parser("batches")
    b.add_argument("file")
    b.add_argument("--seed", type=int, required=True)
    b.add_argument("--steps", type=int, required=True)
    b.add_argument("--rows", type=int, required=True)
    b.add_argument("--seq", type=int, required=True)
    b.add_argument("--labels", choices=["shifted", "same", "none"], required=True)
    b.add_argument("--tokens-out", required=True)
    b.add_argument("--labels-out")
    b.add_argument("--stream", choices=["train", "val"], default="train")
    a = ap.parse_args()
    if a.cmd == "write":
        t = np.random.default_rng(a.seed).integers(0, a.vocab, size=a.count)
        with open(a.out, "wb") as f:
            if a.llmc:
                h = np.zeros(256, "<i4")
                h[:3] = [20240520, a.llmc, a.count]
                f.write(h.tobytes())
            f.write(t.astype("<u4" if a.llmc == 2 else "<u2").tobytes())
        return 0
    t = read_tokens(a.file)
    window = a.seq + (1 if a.labels == "shifted" else 0)
    starts = len(t) - window + 1
    seed = a.seed + (1 if a.stream == "val" else 0)
    tok = np.zeros((a.steps, a.rows, a.seq), np.int64)
    lab = np.zeros_like(tok)
    for s in range(a.steps):
        for r in range(a.rows):
            st = splitmix64(seed, s * a.rows + r) % starts
            tok[s, r] = t[st : st + a.seq]
            lab[s, r] = t[st + 1 : st + a.seq + 1] if a.labels == "shifted" else t[st : st + a.seq]
    np.save(a.tokens_out, tok)
    if a.labels_out:
        np.save(a.labels_out, lab)
    return 0


if __name__ == "__main__":
    sys.exit(main())
