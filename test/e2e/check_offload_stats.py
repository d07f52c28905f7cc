#!/usr/bin/env python3
"""Checks an offload executable's --stats-json against its plan.

Passes (exit 0) when every step moved exactly the bytes the plan predicted
per link (ssd_read, ssd_write, h2d, d2h), and the links the placement uses
(--expect: none, pcie, ssd) did move bytes while the others moved none;
fails (exit 1) naming the step and link that differ.
"""

import argparse
import json
import sys

LINKS = ("ssd_read", "ssd_write", "h2d", "d2h")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("stats")
    ap.add_argument("--steps", type=int, required=True,
                    help="steps the run trained")
    ap.add_argument("--expect", choices=("none", "pcie", "ssd"),
                    required=True,
                    help="none: nothing moves (all on the GPU); pcie: host "
                         "<-> GPU only; ssd: the SSD links too")
    a = ap.parse_args()
    with open(a.stats) as f:
        s = json.load(f)
    if s.get("schema") != "spillway-stats-1":
        sys.exit(f"{a.stats}: schema {s.get('schema')!r}")
    want = s["predicted_bytes_per_iteration"]
    steps = s["bytes_per_step"]
    if len(steps) != a.steps:
        sys.exit(f"{a.stats}: {len(steps)} steps recorded, expected {a.steps}")
    for i, got in enumerate(steps, 1):
        for k in LINKS:
            if got[k] != want[k]:
                sys.exit(f"{a.stats}: step {i} moved {got[k]} bytes over {k}, "
                         f"the plan predicts {want[k]}")
    if s["bytes_per_iteration"] != want:
        sys.exit(f"{a.stats}: bytes_per_iteration {s['bytes_per_iteration']} "
                 f"!= predicted {want}")
    pcie = want["h2d"] + want["d2h"]
    ssd = want["ssd_read"] + want["ssd_write"]
    if a.expect == "none" and pcie + ssd != 0:
        sys.exit(f"{a.stats}: expected no transfers, the plan moves {want}")
    if a.expect == "pcie" and (pcie == 0 or ssd != 0):
        sys.exit(f"{a.stats}: expected host <-> GPU transfers only: {want}")
    if a.expect == "ssd" and (ssd == 0 or want["ssd_read"] == 0 or
                              want["ssd_write"] == 0):
        sys.exit(f"{a.stats}: expected SSD reads and writes: {want}")
    for t in ("gpu", "host", "ssd"):
        if s["peak_bytes"][t] > s["planned_bytes"][t]:
            sys.exit(f"{a.stats}: {t} peak {s['peak_bytes'][t]} exceeds the "
                     f"plan's {s['planned_bytes'][t]}")
    print(f"{a.stats}: {len(steps)} steps, each moved exactly the plan's "
          f"{want}")


if __name__ == "__main__":
    main()
