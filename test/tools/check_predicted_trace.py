#!/usr/bin/env python3
"""Checks spillwayc --report-trace's predicted iteration against its plan.

TRACE is the predicted trace, PLAN the same plan's step (--emit mlir, whose
sched.buffers holds the plan's model_bytes per link). Requires the lanes of
the executable's --trace (names and thread ids), one fwd and one bwd span
per layer and micro-batch on the compute lane, no two spans overlapping on
one lane, every link's moved bytes summing to the plan's, and the
iteration's end no earlier than its compute. Prints a summary line.
"""

import json
import re
import sys

LANES = {1: "compute", 2: "h2d", 3: "d2h", 4: "ssd read", 5: "ssd write",
         10: "cpu optimizer 0"}
LINKS = {2: "h2d", 3: "d2h", 4: "ssd_read", 5: "ssd_write"}


def main():
    trace_path, plan_path, layers, mb = sys.argv[1], sys.argv[2], int(
        sys.argv[3]), int(sys.argv[4])
    events = json.load(open(trace_path))["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    if names != LANES:
        sys.exit(f"FAILED: lanes {names}, expected {LANES}")
    spans = [e for e in events if e["ph"] == "X"]
    tasks = [e for e in spans if e["tid"] == 1 and
             re.match(r"(fwd|bwd) L\d+ mb\d+$", e["name"])]
    if len(tasks) != 2 * layers * mb:
        sys.exit(f"FAILED: {len(tasks)} fwd/bwd spans, expected "
                 f"{2 * layers * mb}")
    for tid in LANES:
        lane = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in spans
                      if e["tid"] == tid)
        for a, b in zip(lane, lane[1:]):
            if b[0] < a[1] - 1e-6:
                sys.exit(f"FAILED: on {LANES[tid]}, {b[2]} starts at {b[0]} "
                         f"before {a[2]} ends at {a[1]}")
    text = open(plan_path).read()
    m = re.search(r"model_bytes = \{d2h = (\d+) : i64, h2d = (\d+) : i64, "
                  r"ssd_read = (\d+) : i64, ssd_write = (\d+) : i64\}", text)
    if not m:
        sys.exit(f"FAILED: no model_bytes in {plan_path}")
    planned = dict(zip(("d2h", "h2d", "ssd_read", "ssd_write"),
                       map(int, m.groups())))
    moved = {link: sum(e["args"]["bytes"] for e in spans if e["tid"] == tid)
             for tid, link in LINKS.items()}
    if moved != planned:
        sys.exit(f"FAILED: the trace moves {moved}, the plan {planned}")
    compute = sum(e["dur"] for e in tasks)
    end = max(e["ts"] + e["dur"] for e in spans)
    if end < compute - 1e-6:
        sys.exit(f"FAILED: the iteration ends at {end} us, before its "
                 f"{compute} us of compute")
    print(f"predicted trace: {len(spans)} spans, {len(tasks)} tasks, bytes "
          f"per link as planned {planned}, iteration {end / 1e6:.3g} s "
          f"({compute / end:.0%} compute)")


if __name__ == "__main__":
    main()
