#!/usr/bin/env python3
"""Checks FOAM's optimizer-state saving in an SSD offload plan.

Given spillwayc's --report-json and the executable's --stats-json for the
same model, plan and budgets compiled once with AdamW and once with FOAM:

  * the report's folded parameters keep at least --min-ratio times fewer
    optimizer-state bytes than AdamW would (foam_as_adamw / foam), and its
    predicted state bytes per iteration (SSD read and write) are the state's
    size, once each;
  * the runtime's optimizer-class counters (bytes_per_iteration_by_class)
    agree with the report: at least the predicted bytes, and at most one
    4 KiB O_DIRECT extent rounding per optimizer block above them;
  * the measured saving (AdamW's optimizer bytes minus FOAM's) is the
    predicted saving (what AdamW keeps for the folded parameters minus
    FOAM's folded state) within that rounding, so the folded parameters'
    measured state traffic shrinks by at least --min-ratio as well.

Prints one line per check; exits 1 on the first failure.
"""

import argparse
import json
import sys

EXTENT = 4096


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adamw-report", required=True)
    ap.add_argument("--foam-report", required=True)
    ap.add_argument("--adamw-stats", required=True)
    ap.add_argument("--foam-stats", required=True)
    ap.add_argument("--blocks", type=int, required=True,
                    help="optimizer blocks of the plan (layers with updated parameters)")
    ap.add_argument("--min-ratio", type=float, default=3.5)
    a = ap.parse_args()

    ok = True

    def check(cond, msg):
        nonlocal ok
        print(("ok   " if cond else "FAIL ") + msg)
        ok &= bool(cond)

    ra, rf = load(a.adamw_report), load(a.foam_report)
    sa, sf = load(a.adamw_stats), load(a.foam_stats)
    state_a, state_f = ra["optimizer_state_bytes"], rf["optimizer_state_bytes"]
    check(state_a["foam"] == 0 and state_a["foam_params"] == 0,
          f"AdamW report folds nothing (state {state_a['total']} bytes)")
    check(state_f["foam_params"] > 0, f"FOAM report folds {state_f['foam_params']} parameters "
          f"in {len(state_f['foam_folded'])} matrices")
    ratio = state_f["foam_as_adamw"] / state_f["foam"]
    check(ratio >= a.min_ratio,
          f"report: folded state {state_f['foam']} bytes against AdamW's {state_f['foam_as_adamw']}: "
          f"{ratio:.2f}x less (need >= {a.min_ratio})")
    check(state_a["total"] - state_f["total"] == state_f["foam_as_adamw"] - state_f["foam"],
          "report: the whole model's state shrinks by exactly the folded parameters' saving")

    for name, r, s in (("adamw", ra, sa), ("foam", rf, sf)):
        pred = r["chosen"]["optimizer_state_bytes_per_iteration"]
        total = r["optimizer_state_bytes"]["total"]
        check(pred["ssd_read"] == total and pred["ssd_write"] == total,
              f"{name}: predicted optimizer state per iteration: ssd_read {pred['ssd_read']}, "
              f"ssd_write {pred['ssd_write']} (the state's {total} bytes, read and written once)")
        meas = s["bytes_per_iteration_by_class"]["optimizer"]
        for link in ("ssd_read", "ssd_write"):
            lo, hi = pred[link], pred[link] + a.blocks * EXTENT
            check(lo <= meas[link] < hi,
                  f"{name}: measured optimizer {link} {meas[link]} in [{lo}, {hi}) "
                  f"(4 KiB extents of {a.blocks} blocks)")
        check(meas["h2d"] == 0 and meas["d2h"] == 0,
              f"{name}: the optimizer state never crosses PCIe (CPU optimizer next to it)")

    predicted_saving = state_f["foam_as_adamw"] - state_f["foam"]
    for link in ("ssd_read", "ssd_write"):
        saved = (sa["bytes_per_iteration_by_class"]["optimizer"][link]
                 - sf["bytes_per_iteration_by_class"]["optimizer"][link])
        check(abs(saved - predicted_saving) < a.blocks * EXTENT,
              f"measured {link} saving {saved} = predicted {predicted_saving} "
              f"(within {a.blocks} extents)")
        folded_measured = state_f["foam_as_adamw"] - saved
        mratio = state_f["foam_as_adamw"] / folded_measured if folded_measured > 0 else float("inf")
        check(mratio >= a.min_ratio,
              f"measured {link} of the folded parameters' state: {mratio:.2f}x less than AdamW's")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
