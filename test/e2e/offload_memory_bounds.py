#!/usr/bin/env python3
"""Checks that an offload plan's executable holds no more memory than its
budgets allow.

Compiles MODEL with an offload plan (--place, --schedule, --microbatches,
--overlap-optimizer)
under the smallest --gpu-mem and --host-mem that fit it (spillwayc names
them when a plan is over budget: the script asks with 4 KiB budgets), trains
--steps steps on --device D under peak_rss (peak_rss.c) with --stats-json,
and requires

- the plan's arenas within the budgets, their peaks within the arenas;
- peak host RSS <= --gpu-mem + --host-mem + --constant-mib: on the CPU and
  loopback devices the "GPU" tier is host memory too, so both budgets count;
  the constant covers what no budget plans: the code, the C library, I/O
  rings, thread stacks and the inputs' batches;
- on a device with its own step arena (loopback), the plan's GPU peak plus
  the device's step arena peak <= --gpu-mem + --constant-mib.

Prints the measured numbers and the bounds; exits 1 naming the bound that
is exceeded and by how much.
"""

import argparse
import json
import os
import re
import subprocess
import sys

MIB = 1 << 20
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def run(cmd, what, ok=(0,)):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode not in ok:
        sys.exit(f"FAILED: {what} (exit {r.returncode}): {' '.join(cmd)}\n"
                 f"{r.stdout}{r.stderr}")
    return r


def smallest_budgets(compile_cmd):
    """The smallest --gpu-mem and --host-mem the plan fits in."""
    budgets = {"gpu": 4096, "host": 4096}
    for _ in range(3):
        r = run(compile_cmd + ["--gpu-mem", str(budgets["gpu"]), "--host-mem",
                               str(budgets["host"])],
                "plan with the budgets so far", ok=(0, 1))
        if r.returncode == 0:
            return budgets
        m = re.search(r"the (gpu|host) tier needs \d+ bytes for this placement "
                      r"but the budget is \d+; the smallest --(?:gpu|host)-mem "
                      r"that fits is (\d+) bytes", r.stderr)
        if not m:
            sys.exit(f"FAILED: spillwayc refused the plan without naming a "
                     f"budget that fits:\n{r.stderr}")
        budgets[m.group(1)] = int(m.group(2))
    sys.exit(f"FAILED: no budgets found that fit the plan: {budgets}")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--spillwayc", required=True)
    ap.add_argument("--peak-rss", required=True, help="the peak_rss tool")
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", action="append", default=[],
                    help="NAME=FILE.npy, passed to the executable")
    ap.add_argument("--place", required=True)
    ap.add_argument("--schedule", default="snake")
    ap.add_argument("--microbatches", type=int, default=2)
    ap.add_argument("--overlap-optimizer", default="0",
                    help="spillwayc --overlap-optimizer F")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--device", choices=["cpu", "loopback"], required=True)
    ap.add_argument("--constant-mib", type=float, required=True)
    ap.add_argument("--out", required=True, help="a scratch directory")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    exe = os.path.join(a.out, "exe")
    compile_cmd = [a.spillwayc, a.model, "-o", exe, "--microbatches",
                   str(a.microbatches), "--schedule", a.schedule,
                   "--overlap-optimizer", a.overlap_optimizer, "--place",
                   a.place]
    b = smallest_budgets(compile_cmd)
    print(f"budgets: --gpu-mem {b['gpu']} --host-mem {b['host']} (the smallest "
          f"that fit {a.place}, {a.schedule} M={a.microbatches} "
          f"F={a.overlap_optimizer})")
    # Exact: one byte less on either tier is refused, naming these budgets.
    for tier in ("gpu", "host"):
        less = dict(b, **{tier: b[tier] - 1})
        r = run(compile_cmd + ["--gpu-mem", str(less["gpu"]), "--host-mem",
                               str(less["host"])],
                f"plan with --{tier}-mem one byte below", ok=(1,))
        m = re.search(r"the smallest --%s-mem that fits is (\d+) bytes" % tier,
                      r.stderr)
        if not m or int(m.group(1)) != b[tier]:
            sys.exit(f"FAILED: --{tier}-mem {less[tier]} was refused without "
                     f"naming {b[tier]} as the smallest that fits:\n{r.stderr}")
    print("one byte below either budget: refused, naming it")

    stats = os.path.join(a.out, "stats.json")
    cmd = [a.peak_rss, exe, "--steps", str(a.steps), "--ssd", a.out,
           "--stats-json", stats, "--device", a.device]
    for i in a.input:
        cmd += ["--input", i]
    r = run(cmd, f"train on --device {a.device}")
    m = re.search(r"^peak_rss: (\d+) KiB$", r.stderr, re.M)
    if not m:
        sys.exit(f"FAILED: no peak_rss line on stderr:\n{r.stderr}")
    rss = int(m.group(1)) << 10
    if "as planned" not in r.stdout or "NOT as planned" in r.stdout:
        sys.exit(f"FAILED: the run did not move the plan's bytes:\n{r.stdout}")
    s = json.load(open(stats))
    for t in ("gpu", "host"):
        if s["planned_bytes"][t] > b[t]:
            sys.exit(f"FAILED: the plan's {t} arena, {s['planned_bytes'][t]} "
                     f"bytes, exceeds --{t}-mem {b[t]}")
        if s["peak_bytes"][t] > s["planned_bytes"][t]:
            sys.exit(f"FAILED: the {t} arena's peak, {s['peak_bytes'][t]} "
                     f"bytes, exceeds its size {s['planned_bytes'][t]}")

    const = int(a.constant_mib * MIB)
    failed = []
    bound = b["gpu"] + b["host"] + const
    verdict = "within" if rss <= bound else "EXCEEDS"
    print(f"host RSS: peak {rss / MIB:.1f} MiB; bound --gpu-mem "
          f"{b['gpu'] / MIB:.1f} + --host-mem {b['host'] / MIB:.1f} + "
          f"{a.constant_mib:g} MiB = {bound / MIB:.1f} MiB: {verdict}"
          + ("" if rss <= bound else f" by {(rss - bound) / MIB:.1f} MiB"))
    if rss > bound:
        failed.append("host RSS")

    dev = re.search(r"device: step arena peak ([0-9.]+) (B|KiB|MiB|GiB) of",
                    r.stdout)
    # What the GPU budget leaves the step's tensors beside the plan's arena
    # (spw_declare_step_arena), as --stats-json reports it.
    step = s["step_arena"]
    if step["planned"] != b["gpu"] - s["planned_bytes"]["gpu"]:
        sys.exit(f"FAILED: step_arena.planned {step['planned']} is not --gpu-mem "
                 f"{b['gpu']} less the plan's GPU arena {s['planned_bytes']['gpu']}")
    if a.device == "cpu":
        print("device memory: the CPU device has no step arena of its own "
              "(its step tensors are in the host RSS above)")
    elif not dev:
        sys.exit(f"FAILED: no 'device: step arena peak' line:\n{r.stdout}")
    else:
        arena = step["peak"]
        # The run's line rounds the same number to one decimal of its unit.
        if abs(arena - float(dev.group(1)) * UNITS[dev.group(2)]) > 0.051 * UNITS[dev.group(2)]:
            sys.exit(f"FAILED: --stats-json's step arena peak {arena} is not the "
                     f"run's line's {dev.group(0)}")
        used = s["peak_bytes"]["gpu"] + arena
        gbound = b["gpu"] + const
        ok = used <= gbound
        print(f"device memory: plan peak {s['peak_bytes']['gpu'] / MIB:.1f} MiB"
              f" + step arena peak {arena / MIB:.1f} MiB = {used / MIB:.1f} "
              f"MiB; bound --gpu-mem + {a.constant_mib:g} MiB = "
              f"{gbound / MIB:.1f} MiB: " + ("within" if ok else
                                             f"EXCEEDS by {(used - gbound) / MIB:.1f} MiB"))
        print(f"step arena: peak {arena / MIB:.1f} MiB, "
              f"{'within' if arena <= step['planned'] else 'over'} the "
              f"{step['planned'] / MIB:.1f} MiB --gpu-mem leaves it")
        if not ok:
            failed.append("device memory")
    if failed:
        sys.exit(f"FAILED: {' and '.join(failed)} over the bound")
    print("memory within the budgets")


if __name__ == "__main__":
    main()
