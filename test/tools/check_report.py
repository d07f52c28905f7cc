"""Checks a spillwayc --report-json file: the required keys and their
internal consistency (report.test).

  check_report.py REPORT.json [--param-bytes-of MODEL.onnx]
                              [--fewer-h2d-than OTHER.json] [--offload]
"""
import argparse
import json
import sys

LINKS = ("ssd_read", "ssd_write", "h2d", "d2h")
TIERS = ("gpu", "host", "ssd")
RESOURCES = ("compute", "pcie", "ssd", "cpu_optimizer")


def check_plan(name, p, budgets):
    for key in ("order", "microbatches", "overlap_optimizer", "placement",
                "predicted_iteration_s", "bound", "time_s",
                "bytes_per_iteration", "peak_bytes", "needed_bytes", "fits"):
        assert key in p, f"{name}: missing '{key}'"
    assert p["valid"], f"{name}: invalid plan"
    assert sorted(p["bytes_per_iteration"]) == sorted(LINKS), p["bytes_per_iteration"]
    assert all(isinstance(v, int) and v >= 0 for v in p["bytes_per_iteration"].values())
    assert sorted(p["peak_bytes"]) == sorted(TIERS), p["peak_bytes"]
    assert p["needed_bytes"] == p["peak_bytes"]
    # The bound is the slowest resource; the iteration is its time plus the
    # exposed optimizer time.
    t = p["time_s"]
    worst = max(RESOURCES, key=lambda r: t[r])
    assert t[p["bound"]] == t[worst], (p["bound"], t)
    expect = t[p["bound"]] + t["exposed_optimizer"]
    assert abs(p["predicted_iteration_s"] - expect) <= 1e-9 * expect, (p, expect)
    # Nothing crosses a link the placement does not use.
    placement = p["placement"]
    if all(v == "gpu" for v in placement.values()):
        assert all(v == 0 for v in p["bytes_per_iteration"].values()), p
    if "ssd" not in placement.values():
        b = p["bytes_per_iteration"]
        assert b["ssd_read"] == b["ssd_write"] == 0, p
        assert p["peak_bytes"]["ssd"] == 0, p
    fits = all(budgets[t] is None or p["peak_bytes"][t] <= budgets[t] for t in TIERS)
    assert p["fits"] == fits, (name, p["peak_bytes"], budgets)


def check_wear(r):
    """ssd_wear: the chosen plan's SSD writes, per token / sample, and the
    lifetime TBW / (bytes per iteration per SSD / predicted seconds)."""
    w, c = r["ssd_wear"], r["chosen"]
    for key in ("bytes_per_iteration", "tokens_per_iteration", "token_input",
                "bytes_per_token", "samples_per_iteration", "bytes_per_sample",
                "ssds", "tbw", "lifetime_s"):
        assert key in w, f"ssd_wear: missing '{key}'"
    b = w["bytes_per_iteration"]
    assert b == c["bytes_per_iteration"]["ssd_write"], (w, c)
    if w["tokens_per_iteration"] is None:
        assert w["bytes_per_token"] is None, w
    else:
        assert abs(w["bytes_per_token"] - b / w["tokens_per_iteration"]) <= 1e-9 * max(b, 1), w
    if w["samples_per_iteration"] is not None:
        assert w["samples_per_iteration"] == r["summary"]["batch"], w
        assert abs(w["bytes_per_sample"] - b / w["samples_per_iteration"]) <= 1e-9 * max(b, 1), w
    assert w["ssds"] == len(r["budgets"]["ssd_paths"]), w
    if w["tbw"] is None or b == 0:
        assert w["lifetime_s"] is None, w
    else:
        expect = w["tbw"] * 1e12 / (b / w["ssds"] / c["predicted_iteration_s"])
        assert abs(w["lifetime_s"] - expect) <= 1e-9 * expect, (w, expect)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--param-bytes-of")
    ap.add_argument("--fewer-h2d-than")
    ap.add_argument("--offload", action="store_true",
                    help="the report of an offload plan (planning_only false)")
    args = ap.parse_args()
    r = json.load(open(args.report))
    assert r["schema"] == "spillway-report-1"
    assert r["planning_only"] is not args.offload
    s = r["summary"]
    layers = s["layers"]
    assert layers, "no layers"
    for l in layers:
        assert l["grad_bytes"] == l["param_bytes"], l
        assert l["optimizer_bytes"] == 8 * l["num_params"], l
        assert l["master_bytes"] == 0, l  # fp32: parameters are their own master
        assert l["param_bytes"] == 4 * l["num_params"], l
        assert l["recompute_flops"] == l["forward_flops"], l
    owned = sum(l["param_bytes"] for l in layers)
    assert owned + s["unread_param_bytes"] == s["param_bytes"], (owned, s)
    if args.param_bytes_of:
        import numpy as np
        import onnx
        m = onnx.load(args.param_bytes_of)
        total = sum(int(np.prod(i.dims)) * 4 for i in m.graph.initializer
                    if i.data_type == onnx.TensorProto.FLOAT)
        assert owned == total, f"layers own {owned} parameter bytes, the model has {total}"
        assert s["unread_param_bytes"] == 0
    for name in ("chosen", "baseline"):
        check_plan(name, r[name], r["budgets"])
    check_wear(r)
    b = r["baseline"]
    assert b["order"] == "horizontal" and b["overlap_optimizer"] == 0, b
    if args.fewer_h2d_than:
        other = json.load(open(args.fewer_h2d_than))["chosen"]
        mine = r["chosen"]
        assert mine["bytes_per_iteration"]["h2d"] < other["bytes_per_iteration"]["h2d"], \
            (mine["bytes_per_iteration"], other["bytes_per_iteration"])
    print(f"OK: {len(layers)} layers, {owned} parameter bytes, chosen "
          f"{r['chosen']['order']} M={r['chosen']['microbatches']}, baseline "
          f"{b['order']} M={b['microbatches']}")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print("FAIL:", e)
        sys.exit(1)
