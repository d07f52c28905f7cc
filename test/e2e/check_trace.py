#!/usr/bin/env python3
"""Checks the ordering of an offload plan's Chrome trace (EXE --trace FILE).

  check_trace.py TRACE.json [--reads L:K ...]
                               the checks below; exit 1 naming each violation
                               (--reads L:K: layer L's tasks also read layer
                               K's parameters, a tied weight's owner block)
  check_trace.py --self-test   feeds the checks hand-made good and bad traces

The trace (docs/runtime.md, "Trace") has "X" events in microseconds, one tid
per lane with a thread_name: compute (task spans "fwd L3 mb1" with args
phase/layer/microbatch, kernels, "wait <block>"), h2d, d2h, ssd read, ssd
write (copies "<link> <block>" with args bytes/block/from/to). Checked:

  - the lanes are named (compute, h2d, d2h, ssd read, ssd write) and every
    event's lane has a name;
  - on a copy lane no two copies overlap; on the compute and CPU optimizer
    lanes spans nest (a kernel inside its task) but never cross;
  - every fwd/bwd task of layer L runs with its parameters on the GPU: no
    h2d of params/layerL (any part) is in flight while the task runs, and
    one has ended before it starts (when the block comes over h2d at all);
  - every d2h of a gradients or gradstage block of layer L starts after the
    backward task of layer L before it ended: none is running then, and one
    has ended.
"""

import argparse
import json
import sys

COPY_LANES = ("h2d", "d2h", "ssd read", "ssd write")
LANES = ("compute",) + COPY_LANES


def block_base(name):
    """params/layer3#1 -> params/layer3 (a split block's part)."""
    return name.split("#", 1)[0]


def check(trace, reads=()):
    """The violations of `trace` (a parsed trace), as messages. `reads`:
    (L, K) pairs, layer L's tasks also reading params/layerK."""
    errors = []
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        return ["no traceEvents list"]
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[e.get("tid")] = e.get("args", {}).get("name")
    for lane in LANES:
        if lane not in names.values():
            errors.append("no lane named '%s'" % lane)
    spans = [e for e in events if e.get("ph") == "X"]
    by_lane = {}
    for e in spans:
        lane = names.get(e.get("tid"))
        if lane is None:
            errors.append("event '%s' is on tid %s, which has no thread_name"
                          % (e.get("name"), e.get("tid")))
            continue
        if not isinstance(e.get("ts"), int) or not isinstance(e.get("dur"), int) \
                or e["dur"] < 0:
            errors.append("event '%s' on %s: ts/dur are not whole "
                          "microseconds >= 0" % (e.get("name"), lane))
            continue
        by_lane.setdefault(lane, []).append(e)

    def end(e):
        return e["ts"] + e["dur"]

    def show(e):
        return "'%s' [%d, %d)" % (e["name"], e["ts"], end(e))

    # One lane's spans: copies one after the other, the rest nested.
    for lane, es in sorted(by_lane.items()):
        if lane in COPY_LANES:
            # Sorted by start, then end: an empty copy at another's start
            # comes first and overlaps nothing.
            es = sorted(es, key=lambda e: (e["ts"], e["dur"]))
            for a, b in zip(es, es[1:]):
                if b["ts"] < end(a):
                    errors.append("%s: %s overlaps %s" % (lane, show(a), show(b)))
            continue
        # A parent before the spans it contains.
        es = sorted(es, key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in es:
            while stack and end(stack[-1]) <= e["ts"]:
                stack.pop()
            if stack and end(e) > end(stack[-1]):
                errors.append("%s: %s starts inside %s and ends after it"
                              % (lane, show(e), show(stack[-1])))
            stack.append(e)

    tasks = [e for e in by_lane.get("compute", [])
             if e.get("args", {}).get("phase") in ("fwd", "bwd", "opt")]

    def copies(lane, classes):
        out = {}
        for e in by_lane.get(lane, []):
            block = block_base(str(e.get("args", {}).get("block", "")))
            cls, _, layer = block.partition("/layer")
            if cls in classes and layer.isdigit():
                out.setdefault(int(layer), []).append(e)
        return out

    h2d = copies("h2d", ("params",))
    for t in tasks:
        if t["args"]["phase"] not in ("fwd", "bwd"):
            continue
        layer = t["args"]["layer"]
        for owner in [layer] + [k for l, k in reads if l == layer]:
            ups = h2d.get(owner, [])
            if not ups:
                continue  # these parameters do not come over h2d
            for c in ups:
                if c["ts"] < end(t) and end(c) > t["ts"]:
                    errors.append("task %s runs while %s brings its "
                                  "parameters to the GPU" % (show(t), show(c)))
            if not any(end(c) <= t["ts"] for c in ups):
                errors.append("task %s starts before any h2d of "
                              "params/layer%d ended" % (show(t), owner))

    d2h = copies("d2h", ("gradients", "gradstage"))
    for layer, downs in sorted(d2h.items()):
        bwd = [t for t in tasks
               if t["args"]["phase"] == "bwd" and t["args"]["layer"] == layer]
        for c in downs:
            running = [t for t in bwd if t["ts"] < c["ts"] < end(t) or
                       (t["ts"] == c["ts"] and t["dur"] > 0)]
            for t in running:
                errors.append("%s starts while %s, which produces it, runs"
                              % (show(c), show(t)))
            if not any(end(t) <= c["ts"] for t in bwd):
                errors.append("%s starts before any backward task of layer "
                              "%d ended" % (show(c), layer))
    return errors


def need(trace):
    """What a trace of an SSD offload plan must have for the checks to bite."""
    errors = []
    names = {e.get("tid"): e.get("args", {}).get("name")
             for e in trace["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    count = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X":
            count[names.get(e.get("tid"))] = count.get(names.get(e.get("tid")), 0) + 1
    phases = {e.get("args", {}).get("phase") for e in trace["traceEvents"]
              if e.get("ph") == "X"}
    for lane in LANES:
        if not count.get(lane):
            errors.append("no span on lane '%s'" % lane)
    for p in ("fwd", "bwd"):
        if p not in phases:
            errors.append("no %s task span" % p)
    return errors


# ---- self-test ------------------------------------------------------------

def make(spans):
    """A trace of (lane, name, ts, dur, args) spans with the lanes named."""
    tids = {lane: i + 1 for i, lane in enumerate(LANES)}
    ev = [{"ph": "M", "pid": 1, "tid": t, "name": "thread_name",
           "args": {"name": lane}} for lane, t in tids.items()]
    for lane, name, ts, dur, args in spans:
        ev.append({"ph": "X", "pid": 1, "tid": tids[lane], "name": name,
                   "ts": ts, "dur": dur, "args": args})
    return {"traceEvents": ev}


def task(phase, layer, ts, dur, mb=0):
    return ("compute", "%s L%d mb%d" % (phase, layer, mb), ts, dur,
            {"phase": phase, "layer": layer, "microbatch": mb})


def copy(lane, block, ts, dur):
    link = lane.replace(" ", "_")
    return (lane, "%s %s" % (link, block), ts, dur,
            {"bytes": 4096, "block": block, "from": "host", "to": "gpu"})


GOOD = [
    copy("ssd read", "params/layer0", 0, 5),
    copy("h2d", "params/layer0#0", 5, 5),
    copy("h2d", "params/layer0#1", 10, 2),
    task("fwd", 0, 12, 10),
    ("compute", "matmul", 13, 4, {}),
    ("compute", "wait params/layer0", 22, 3, {}),
    task("bwd", 0, 25, 10),
    copy("d2h", "gradstage/layer0", 35, 4),
    copy("ssd write", "gradients/layer0", 40, 4),
]


def self_test():
    ok = check(make(GOOD)) == [] and need(make(GOOD)) == []
    if not ok:
        print("self-test: the good trace fails:", check(make(GOOD)),
              need(make(GOOD)))
        return 1
    bad = {
        "the h2d ends after the task starts":
            ([s for s in GOOD if s[1] != "h2d params/layer0#1"] +
             [copy("h2d", "params/layer0#1", 10, 3)],
             "runs while 'h2d params/layer0#1'"),
        "the task starts before its parameters came":
            ([s for s in GOOD if not s[1].startswith("h2d")] +
             [copy("h2d", "params/layer0", 40, 2)],
             "starts before any h2d of params/layer0 ended"),
        "the d2h starts inside the backward task":
            ([s for s in GOOD if s[0] != "d2h"] +
             [copy("d2h", "gradstage/layer0", 30, 4)],
             "'d2h gradstage/layer0' [30, 34) starts while 'bwd L0 mb0'"),
        "two copies overlap on one lane":
            (GOOD + [copy("ssd read", "optimizer/layer0", 3, 4)],
             "ssd read: 'ssd_read params/layer0' [0, 5) overlaps"),
        "a kernel crosses its task's end":
            (GOOD + [("compute", "add", 20, 4, {})],
             "'add' [20, 24) starts inside 'fwd L0 mb0' [12, 22)"),
    }
    failed = 0
    for what, (spans, expect) in bad.items():
        errors = check(make(spans))
        if not any(expect in e for e in errors):
            print("self-test: '%s' is not caught (got %s)" % (what, errors))
            failed += 1
    # A tied weight: layer 1's task reads layer 0's block, still coming.
    tied = GOOD + [task("fwd", 1, 11, 1), copy("h2d", "params/layer1", 0, 1)]
    if check(make(tied)) != []:
        print("self-test: the tied trace fails without --reads:",
              check(make(tied)))
        failed += 1
    if not any("'fwd L1 mb0' [11, 12) runs while 'h2d params/layer0#1'" in e
               for e in check(make(tied), reads=[(1, 0)])):
        print("self-test: a tied owner block still coming is not caught")
        failed += 1
    unnamed = make(GOOD)
    unnamed["traceEvents"] = [e for e in unnamed["traceEvents"]
                              if e.get("args", {}).get("name") != "d2h"]
    if not any("no lane named 'd2h'" in e for e in check(unnamed)):
        print("self-test: an unnamed lane is not caught")
        failed += 1
    if failed:
        return 1
    print("self-test: the good trace passes, %d bad ones are caught"
          % (len(bad) + 2))
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--reads", action="append", default=[],
                    metavar="LAYER:OWNER",
                    help="layer LAYER's tasks also read params/layerOWNER")
    a = ap.parse_args(argv[1:])
    reads = []
    for r in a.reads:
        l, _, k = r.partition(":")
        if not (l.isdigit() and k.isdigit()):
            ap.error("--reads %s: expected LAYER:OWNER" % r)
        reads.append((int(l), int(k)))
    path = a.trace
    try:
        with open(path) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        print("%s: not a trace: %s" % (path, e))
        return 1
    errors = check(trace, reads)
    if not errors:
        errors = need(trace)
    for e in errors:
        print("%s: %s" % (path, e))
    if errors:
        return 1
    spans = sum(1 for e in trace["traceEvents"] if e.get("ph") == "X")
    print("%s: %d spans in order" % (path, spans))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
