"""The bytes an offload plan moves are the cost model's, byte for byte.

usage: check_plan_bytes.py PLAN.mlir REPORT.json

PLAN.mlir is spillwayc --emit=mlir of an offload plan chosen with --hw,
REPORT.json the same compile's --report-json. sched-assign-buffers records
the bytes its transfers move per iteration before alignment (sched.buffers'
model_bytes); the report's chosen plan has the cost model's prediction
(bytes_per_iteration), and where the planner's exact arenas changed that
plan (a split refilled, or a later ranked plan), its "executable" entry
has the prediction for the plan compiled, which the check uses. Prints
the bytes; exits 1 naming the link that differs.
"""
import json
import re
import sys

LINKS = ("ssd_read", "ssd_write", "h2d", "d2h")


def main():
    mlir_path, json_path = sys.argv[1:3]
    text = open(mlir_path).read()
    m = re.search(r"model_bytes = \{([^}]*)\}", text)
    if not m:
        sys.exit(f"{mlir_path}: no sched.buffers model_bytes (not an offload plan?)")
    plan = {k: int(v) for k, v in re.findall(r"(\w+) = (\d+) : i64", m.group(1))}
    report = json.load(open(json_path))
    chosen = report.get("executable", report["chosen"])
    model = chosen["bytes_per_iteration"]
    for link in LINKS:
        if plan[link] != model[link]:
            sys.exit(f"{link}: the plan moves {plan[link]} bytes per iteration, "
                     f"the cost model predicts {model[link]} for "
                     f"{chosen['order']} M={chosen['microbatches']} "
                     f"{chosen['placement']}")
    print("plan bytes = model bytes: " +
          ", ".join(f"{link} {plan[link]}" for link in LINKS))


main()
