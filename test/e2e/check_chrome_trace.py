#!/usr/bin/env python3
"""Checks that a file is a Chrome trace (EXE --trace FILE) with events.

  check_chrome_trace.py FILE [--min-lanes K] [--min-events N]

Passes when FILE is a JSON object whose `traceEvents` is a list of events,
each an object with a string `ph` and `name` and integer `pid` and `tid`;
every complete event (`ph` "X") has a numeric `ts` and a `dur` >= 0; at
least N complete events (default 1) on at least K distinct lanes
((pid, tid) pairs; default 1). Prints the counts per lane, named by the
lane's thread_name metadata where there is one. Fails (exit 1) naming the
first event that is malformed, or the count that falls short.
"""

import argparse
import json
import sys
from collections import Counter


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("trace")
    ap.add_argument("--min-lanes", type=int, default=1)
    ap.add_argument("--min-events", type=int, default=1)
    a = ap.parse_args()
    try:
        with open(a.trace) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"{a.trace}: not a readable JSON file: {e}")
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        sys.exit(f"{a.trace}: no traceEvents list")
    lanes = Counter()
    names = {}
    for i, e in enumerate(events):
        where = f"{a.trace}: traceEvents[{i}]"
        if not isinstance(e, dict):
            sys.exit(f"{where} is not an object")
        for k, t in (("ph", str), ("name", str), ("pid", int), ("tid", int)):
            if not isinstance(e.get(k), t) or isinstance(e.get(k), bool):
                sys.exit(f"{where}: '{k}' missing or not a {t.__name__}: {e}")
        lane = (e["pid"], e["tid"])
        if e["ph"] == "M" and e["name"] == "thread_name":
            names[lane] = str(e.get("args", {}).get("name", ""))
        if e["ph"] != "X":
            continue
        for k in ("ts", "dur"):
            v = e.get(k)
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                sys.exit(f"{where}: complete event without a numeric '{k}': {e}")
        if e["dur"] < 0:
            sys.exit(f"{where}: negative duration {e['dur']}: {e}")
        lanes[lane] += 1
    total = sum(lanes.values())
    if total < a.min_events:
        sys.exit(f"{a.trace}: {total} complete events, expected at least "
                 f"{a.min_events}")
    if len(lanes) < a.min_lanes:
        sys.exit(f"{a.trace}: complete events on {len(lanes)} lanes "
                 f"{sorted(lanes)}, expected at least {a.min_lanes}")
    desc = ", ".join(f"{names.get(k, '%d/%d' % k)}: {n}"
                     for k, n in sorted(lanes.items()))
    print(f"{a.trace}: {total} complete events on {len(lanes)} lanes ({desc})")


if __name__ == "__main__":
    main()
