#!/usr/bin/env python3
"""Sweeps the host budget of an offload plan and checks the placement.

For each --host-mem from --host-from to --host-to (MiB, step --host-step),
compiles MODEL's offload plan (spillwayc --emit mlir, so nothing is linked)
twice: placement by layer (--split-placement on, the default) and whole
classes (off). From the plan (sched.buffers: the exact arenas, each block's
home, the bytes per link per iteration) and the cost model's prediction
(sched.prediction), it requires of the split plans:

- the host arena within the budget;
- SSD bytes written per iteration never more than at a smaller budget
  (the planner's tie rule: among plans as fast, the fewest SSD bytes
  written, then the fewest bytes moved);
- never more SSD bytes written than the whole-class plan at that budget
  (where one fits: a split plan may fit where no whole-class one does);
- filled: when blocks stay on SSD, the host arena is at least --min-use of
  the budget (the planner cuts a params, master or optimizer block between
  host and SSD for the rest of the budget), unless only gradient and
  activation blocks, which are not cut, stay there and the smallest of
  them is larger than what is left. A layer's activations have no home
  block in sched.buffers: the report's placement and summary (the same
  compile's --report-json) say which layers' are on SSD and their bytes.

Prints one row per budget (TSV with --tsv FILE, JSON with --json FILE) and
exits 1 at the first failure, naming the budget and the plan.
"""

import argparse
import json
import os
import re
import subprocess
import sys

MIB = 1 << 20
PLAN = re.compile(r"offload plan: gpu (\d+) bytes, host (\d+) bytes, ssd (\d+) "
                  r"bytes; per iteration ssd_read (\d+), ssd_write (\d+), "
                  r"h2d (\d+), d2h (\d+)")
PLACED = re.compile(r"offload plan: ((?:params|master|optimizer|gradients|"
                    r"activations)\S*)")
BLOCK = re.compile(r'\{bytes = (\d+) : i64, class = "(\w+)", home = "(\w+)", '
                   r'(?:home0 = "\w+", )?layer = (\d+) : i64')
PREDICTION = re.compile(r"sched\.prediction = \{bound = \"(\w+)\", "
                        r"iteration_s = ([0-9.eE+-]+)")


def plan(args, host, split, out):
    mlir = os.path.join(out, f"host{host}-{split}.mlir")
    report = os.path.join(out, f"host{host}-{split}.json")
    cmd = [args.spillwayc, args.model, "-o", mlir, "--emit", "mlir", "--hw",
           args.hw, "--gpu-mem", str(args.gpu_mem), "--host-mem",
           str(host), "--microbatches", str(args.microbatches),
           "--split-placement", split, "--report-json", report, "-v", *args.extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        return None, f"{' '.join(cmd)}\n{r.stderr[-2000:]}"
    m = PLAN.search(r.stderr)
    placed = PLACED.search(r.stderr)
    if not m or not placed:
        return None, f"no plan line in spillwayc -v's output:\n{r.stderr}"
    gpu, hostb, ssd, rd, wr, h2d, d2h = map(int, m.groups())
    text = open(mlir).read()
    ssd_blocks = [(int(b), cls) for b, cls, home, _ in BLOCK.findall(text)
                  if home == "ssd"]
    # Activations have no home block in sched.buffers: a layer's
    # activations on SSD (the plan's placement, the report's summary) are a
    # block the fill could have moved too.
    with open(report) as f:
        rep = json.load(f)
    pl = (rep.get("executable") or rep["chosen"])["placement"]
    act = pl.get("layers", {}).get("activations") or [pl["activations"]] * len(rep["summary"]["layers"])
    ssd_blocks += [(l["activation_bytes"], "activations")
                   for l, t in zip(rep["summary"]["layers"], act)
                   if t == "ssd" and l["activation_bytes"]]
    pred = PREDICTION.search(text)
    os.remove(mlir)
    os.remove(report)
    return {"host_budget": host, "split": split == "on",
            "placement": placed.group(1), "gpu_bytes": gpu,
            "host_bytes": hostb, "ssd_bytes": ssd, "ssd_read": rd,
            "ssd_write": wr, "h2d": h2d, "d2h": d2h,
            "smallest_ssd_block": min(b for b, _ in ssd_blocks) if ssd_blocks else 0,
            # A params, master or optimizer block on SSD can be cut for
            # what whole blocks leave; gradients and activations cannot.
            "cuttable_on_ssd": any(c in ("params", "master", "optimizer")
                                   for _, c in ssd_blocks),
            "predicted_s": float(pred.group(2)) if pred else None,
            "bound": pred.group(1) if pred else None}, None


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--spillwayc", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--hw", required=True)
    ap.add_argument("--gpu-mem", type=int, required=True, help="bytes")
    ap.add_argument("--host-from", type=float, required=True, help="MiB")
    ap.add_argument("--host-to", type=float, required=True, help="MiB")
    ap.add_argument("--host-step", type=float, default=1, help="MiB")
    ap.add_argument("--microbatches", type=int, default=1)
    ap.add_argument("--min-use", type=float, default=0.95)
    ap.add_argument("--out", required=True, help="a scratch directory")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--no-check", action="store_true",
                    help="print and write the rows only (a benchmark)")
    ap.add_argument("extra", nargs="*", help="more spillwayc flags (after --)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    rows = []
    failures = []
    prev = None
    print("host_MiB\tsplit_host\tsplit_ssd_write\tsplit_ssd_read\t"
          "whole_host\twhole_ssd_write\twhole_ssd_read\tuse\tsplit_placement")
    h = args.host_from
    while h <= args.host_to + 1e-9:
        host = int(h * MIB)
        h += args.host_step
        split, err = plan(args, host, "on", args.out)
        whole, _ = plan(args, host, "off", args.out)
        if split is None:
            if whole is None and prev is None:
                print(f"{host / MIB:g}\tno plan fits")
                continue  # below the smallest budget that fits
            # A budget a whole-class plan fits, or a larger one than a split
            # plan fitted, must fit a split plan.
            failures.append(f"host {host}: no split plan: {err}")
            break
        rows += [split] + ([whole] if whole else [])
        use = split["host_bytes"] / host
        w = (f"{whole['host_bytes']}\t{whole['ssd_write']}\t{whole['ssd_read']}"
             if whole else "no plan\t-\t-")
        print(f"{host / MIB:g}\t{split['host_bytes']}\t{split['ssd_write']}\t"
              f"{split['ssd_read']}\t{w}\t{use:.3f}\t{split['placement']}")
        if args.no_check:
            continue
        why = []
        if split["host_bytes"] > host:
            why.append(f"host arena {split['host_bytes']} over the budget")
        if prev and split["ssd_write"] > prev["ssd_write"]:
            why.append(f"SSD bytes grew from {prev['ssd_read']} read, "
                       f"{prev['ssd_write']} written at host "
                       f"{prev['host_budget']}")
        if whole and split["ssd_write"] > whole["ssd_write"]:
            why.append(f"writes {split['ssd_write']} SSD bytes, the "
                       f"whole-class plan {whole['ssd_write']}")
        left = host - split["host_bytes"]
        if split["smallest_ssd_block"] and use < args.min_use and (
                split["cuttable_on_ssd"] or split["smallest_ssd_block"] <= left):
            why.append(f"uses {use:.1%} of the host budget with "
                       f"{left} bytes left and a block of "
                       f"{split['smallest_ssd_block']} bytes on SSD"
                       + (" (a params, master or optimizer block, which a cut could fill)"
                          if split["cuttable_on_ssd"] else ""))
        if why:
            failures.append(f"host budget {host}: " + "; ".join(why) +
                            f" (plan {split['placement']})")
        prev = split
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if failures:
        sys.exit("FAILED: " + "\nFAILED: ".join(failures))
    if not rows:
        sys.exit("FAILED: no budget in the sweep fits a plan")
    if not args.no_check:
        print(f"placement sweep: {sum(r['split'] for r in rows)} budgets, SSD bytes never "
              f"grow with the budget, every plan filled")


if __name__ == "__main__":
    main()
