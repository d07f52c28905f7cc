"""The bytes an offload plan moves are the cost model's, byte for byte.

usage: check_plan_bytes.py PLAN.mlir REPORT.json

PLAN.mlir is spillwayc --emit=mlir of an offload plan chosen with --hw,
REPORT.json the same compile's --report-json. sched-assign-buffers records
the bytes its transfers move per iteration before alignment (sched.buffers'
model_bytes); the report's chosen plan has the cost model's prediction
(bytes_per_iteration), and where the planner's exact arenas changed that
plan (a split refilled, or a later ranked plan), its "executable" entry
has the prediction for the plan compiled, which the check uses. The
report's "arenas" must be the plan's exact arenas (sched.buffers' gpu_bytes,
host_bytes, ssd_bytes, step_arena_bytes), each within its budget. Prints
the bytes and the arenas; exits 1 naming the link or arena that differs.
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
    # The report's "arenas" are the compiled plan's exact ones, within the
    # budgets.
    arenas = report["arenas"]
    for tier in ("gpu", "host", "ssd"):
        m = re.search(rf"\b{tier}_bytes = (\d+) : i64", text)
        if not m or int(m.group(1)) != arenas[tier]:
            sys.exit(f"the report's {tier} arena {arenas[tier]} is not the plan's "
                     f"{m.group(1) if m else 'none'}")
        budget = report["budgets"][tier]
        if isinstance(budget, int) and arenas[tier] > budget:
            sys.exit(f"the {tier} arena {arenas[tier]} is over the budget {budget}")
    m = re.search(r"\bstep_arena_bytes = (\d+) : i64", text)
    if (int(m.group(1)) if m else None) != arenas["step"]:
        sys.exit(f"the report's step arena {arenas['step']} is not the plan's")
    print("report arenas = plan arenas: " +
          ", ".join(f"{t} {arenas[t]}" for t in ("gpu", "host", "ssd", "step")))


main()
