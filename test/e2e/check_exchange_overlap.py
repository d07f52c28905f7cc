#!/usr/bin/env python3
"""Reads an executable's --trace of a ZeRO stage 2 run and prints, per
parameter, how many of its reduce-scatters (the network lane's spans; the
step started each queued_us before its span) had a backward task run
between their start and the step's wait for them (the compute lane's "wait
for the reduce-scatter of 'P'"): the exchange overlapped that backward.
Used by zero2-offload.test.
"""
import json
import sys


def main():
    events = json.load(open(sys.argv[1]))["traceEvents"]
    lanes = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    net = sorted((e for e in spans if lanes.get(e["tid"]) == "network"),
                 key=lambda e: e["ts"])
    compute = [e for e in spans if lanes.get(e["tid"]) == "compute"]
    bwd = [e for e in compute if e["name"].startswith("bwd ")]
    waits = sorted((e for e in compute
                    if e["name"].startswith("wait for the reduce-scatter of ")),
                   key=lambda e: e["ts"])
    counts = {}
    for x in net:
        name = x["name"][len("reduce-scatter "):]
        issued = x["ts"] - x["args"]["queued_us"]
        # The first wait for this parameter after the exchange.
        wait = next((w for w in waits if w["ts"] >= issued and
                     w["name"].endswith(" " + name)), None)
        if wait is None:
            sys.exit(f"no wait for the reduce-scatter of {name}")
        waits.remove(wait)
        between = any(b["ts"] >= issued and b["ts"] + b["dur"] <= wait["ts"]
                      for b in bwd)
        n, o = counts.get(name, (0, 0))
        counts[name] = (n + 1, o + int(between))
    if waits:
        sys.exit(f"{len(waits)} waits without an exchange")
    for name, (n, o) in counts.items():
        print(f"{name}: {n} exchanges, {o} overlap a backward")


if __name__ == "__main__":
    main()
