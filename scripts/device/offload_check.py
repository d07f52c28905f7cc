#!/usr/bin/env python3
"""The stages of scripts/device/offload-check.sh (issue 17 on the H200).

Subcommands (offload-check.sh runs them; each appends one JSON row per
result to --rows as it comes, so what ran is in $OUT even if the command is
killed):
  row      a row from the shell (cuda-check's verdict)
  matrix   the offload matrix subset: each executable trained on --device
           (cuda) and on --ref-device (cpu); weights within --tol by max
           relative error (max |dev - ref| over every element, over the
           model's largest |ref|: see weights_error), every step's bytes per
           link the plan's
  bench    the 2.7B benchmark: resident, snake with the optimizer overlap and
           horizontal F = 0 (ZeRO-Infinity's order) at the same batch and
           budgets (--configs whole-f0,split-f0,whole,split: the planner's
           placement in whole classes against split by layer, at snake F=0
           and F=1, issue 23); iteration times, their
           ratio, measured / cost-model
           bound, transfer overlap, offload efficiency; a result JSON
  table    the short table of every row, last

Every stage is given an absolute --deadline (seconds since the epoch): a run
that is not expected to end before it is skipped, and each run's timeout
ends before it, so the table still prints inside the device tool's limit.
--dry-run prints the commands with their expected seconds and runs nothing.
Needs python3 with numpy (the GPU machine's image has it).
"""

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LINKS = ("ssd_read", "ssd_write", "h2d", "d2h")

# The matrix subset: (name, --place, links the placement must use).
MATRIX = [
    ("ssd", "params=ssd,optimizer=ssd,gradients=ssd", "ssd"),
    ("acthost", "params=host,optimizer=host,gradients=host,activations=host", "pcie"),
    # The optimizer on the GPU: its updates are queued on the device and the
    # updated parameters go back over D2H (the copy must follow the update).
    ("gpuopt", "params=host,optimizer=gpu,gradients=gpu", "pcie"),
]
MATRIX_SCHEDULE, MATRIX_F, MATRIX_M = "snake", "0.5", (1, 4)


def matrix_configs():
    """Names of the matrix executables prepare-offload.sh compiles."""
    return [(f"{name}-{MATRIX_SCHEDULE}-{m}-F{MATRIX_F}", place, expect, m)
            for name, place, expect in MATRIX for m in MATRIX_M]


def append_row(rows, row):
    row = dict(row, time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    with open(rows, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(f"row: {row['stage']} {row['name']}: {row['status']} {row.get('detail', '')}", flush=True)


def left(deadline):
    return deadline - time.time()


def run_timed(cmd, log_json, run_log, timeout):
    """Runs cmd; returns (exit status or None on timeout, wall seconds,
    arrival time of each --log-json line since the start)."""
    t0 = time.monotonic()
    arrivals, seen = [], 0
    with open(run_log, "w") as rl:
        p = subprocess.Popen(cmd, stdout=rl, stderr=subprocess.STDOUT)
        while True:
            rc = p.poll()
            if os.path.exists(log_json):
                with open(log_json) as f:
                    f.seek(seen)
                    chunk = f.read()
                whole = chunk[:chunk.rfind("\n") + 1]
                seen += len(whole)
                now = time.monotonic() - t0
                arrivals += [now] * whole.count("\n")
            if rc is not None:
                break
            if time.monotonic() - t0 > timeout:
                p.kill()
                p.wait()
                rc = None
                break
            time.sleep(0.05)
    return rc, time.monotonic() - t0, arrivals


def tail(path, n=6):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def load_safetensors(path):
    import numpy as np
    import struct
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype=np.float32).reshape(info["shape"])
    return out


def weights_error(dev_path, ref_path):
    """(max over tensors of max |dev - ref|, over the model's max |ref|;
    the tensor where it is largest; elements off by more than 1e-5 of that
    scale; tensors not bit-identical).

    Relative to the model's largest weight, not each tensor's own: a tensor
    whose gradient is zero in exact arithmetic (the attention key's bias:
    softmax ignores a constant added to every score of a row) is trained on
    rounding noise (3.6e-7 after 4 steps on the CPU), which the GPU's
    other summation order draws otherwise."""
    import numpy as np
    d, r = load_safetensors(dev_path), load_safetensors(ref_path)
    if sorted(d) != sorted(r):
        raise ValueError(f"different tensors: {sorted(set(d) ^ set(r))}")
    scale = max(float(np.max(np.abs(t))) for t in r.values()) or 1.0
    worst, worst_name, off, differ = 0.0, "", 0, 0
    for k in sorted(r):
        a, b = d[k].astype(np.float64), r[k].astype(np.float64)
        if a.shape != b.shape:
            raise ValueError(f"{k}: shape {a.shape} vs {b.shape}")
        if not np.all(np.isfinite(a)):
            return math.inf, k, a.size, len(r)
        diff = np.abs(a - b) / scale
        e = float(np.max(diff))
        if e > worst or not worst_name:
            worst, worst_name = e, k
        off += int(np.sum(diff > 1e-5))
        differ += int(not np.array_equal(d[k].view(np.uint32), r[k].view(np.uint32)))
    return worst, worst_name, off, differ


def check_stats(stats_path, steps, expect):
    """'' when every step moved exactly the plan's bytes (check_offload_stats.py)."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "test/e2e/check_offload_stats.py"),
                        stats_path, "--steps", str(steps), "--expect", expect],
                       capture_output=True, text=True)
    return "" if r.returncode == 0 else (r.stdout + r.stderr).strip()


def overlap_of(stats):
    """The fraction of transfer time overlapped with compute: the
    telemetry's transfer_overlap where the executable reports it, else the
    storage engine's 1 - I/O wait / I/O busy."""
    tel = stats.get("telemetry")
    if isinstance(tel, dict) and "transfer_overlap" in tel:
        return float(tel["transfer_overlap"]), "telemetry.transfer_overlap"
    return float(stats.get("overlap", float("nan"))), "overlap"


# ---- matrix ------------------------------------------------------------------

def cmd_matrix(a):
    gpt = os.path.join(ROOT, "examples/gpt")
    data = ["--input", f"tokens={gpt}/tokens.npy", "--input", f"targets={gpt}/targets.npy",
            "--steps", str(a.steps)]
    os.makedirs(a.work, exist_ok=True)
    swap = os.path.join(a.work, "swap")
    os.makedirs(swap, exist_ok=True)
    for tag, place, expect, m in matrix_configs():
        exe = os.path.join(a.exe_dir, tag)
        runs = {}
        for role, dev in (("ref", a.ref_device), ("dev", a.device)):
            base = os.path.join(a.work, f"{tag}-{role}")
            runs[role] = base
            cmd = [exe, *data, "--device", dev, "--ssd", swap, "--save", base + ".safetensors",
                   "--stats-json", base + ".stats.json", "--log-json", base + ".jsonl"]
            runs[role + "_cmd"] = cmd
        if a.dry_run:
            for role in ("ref", "dev"):
                print(f"[matrix {tag}, {role}, timeout {a.timeout} s] {' '.join(runs[role + '_cmd'])}")
            continue
        if not os.access(exe, os.X_OK):
            append_row(a.rows, {"stage": "matrix", "name": tag, "status": "FAIL",
                                "detail": f"{exe} missing: run scripts/device/prepare-offload.sh here"})
            continue
        if left(a.deadline) < 2 * a.expect_s:
            append_row(a.rows, {"stage": "matrix", "name": tag, "status": "SKIP",
                                "detail": f"time budget ({left(a.deadline):.0f} s left)"})
            continue
        failed = ""
        for role in ("ref", "dev"):
            base = runs[role]
            for suffix in (".safetensors", ".stats.json", ".jsonl"):
                if os.path.exists(base + suffix):
                    os.remove(base + suffix)
            rc, wall, _ = run_timed(runs[role + "_cmd"], base + ".jsonl", base + ".log",
                                    min(a.timeout, max(1.0, left(a.deadline))))
            print(f"== matrix {tag} on {a.ref_device if role == 'ref' else a.device}: "
                  f"exit {rc} in {wall:.1f} s\n{tail(base + '.log', 3)}", end="", flush=True)
            if rc != 0:
                failed = (f"--device {a.ref_device if role == 'ref' else a.device}: "
                          + ("timed out" if rc is None else f"exit {rc}") + ": "
                          + tail(base + ".log", 2).strip().replace("\n", " | "))
                break
        if failed:
            append_row(a.rows, {"stage": "matrix", "name": tag, "status": "FAIL", "detail": failed})
            continue
        try:
            worst, wname, off, differ = weights_error(runs["dev"] + ".safetensors",
                                                      runs["ref"] + ".safetensors")
        except (OSError, ValueError) as e:
            append_row(a.rows, {"stage": "matrix", "name": tag, "status": "FAIL", "detail": str(e)})
            continue
        bytes_dev = check_stats(runs["dev"] + ".stats.json", a.steps, expect)
        bytes_ref = check_stats(runs["ref"] + ".stats.json", a.steps, expect)
        ok = worst <= a.tol and not bytes_dev and not bytes_ref
        with open(runs["dev"] + ".stats.json") as f:
            ov, _ = overlap_of(json.load(f))
        detail = (f"weights max rel err {worst:.2e} ({wname}; tol {a.tol:g} of the largest weight), "
                  f"{off} elements beyond, {differ} tensors not bit-identical; "
                  + ("bytes as planned" if not (bytes_dev or bytes_ref) else f"bytes: {bytes_dev or bytes_ref}")
                  + f"; overlap {ov:.2f}")
        append_row(a.rows, {"stage": "matrix", "name": tag, "status": "ok" if ok else "FAIL",
                            "detail": detail, "max_rel_err": worst, "worst_tensor": wname,
                            "elements_beyond_tol": off, "tensors_not_bit_identical": differ,
                            "placement": place, "microbatches": m, "schedule": MATRIX_SCHEDULE,
                            "overlap_optimizer": float(MATRIX_F), "device": a.device,
                            "ref_device": a.ref_device, "steps": a.steps})


# ---- bench -------------------------------------------------------------------

BENCH = [  # (config, what it is); run in this order
    ("resident", "the same model resident in GPU memory (snake M=4, no offload plan)"),
    ("snake", "snake with the optimizer overlap (F=1)"),
    ("horizontal", "horizontal F=0, ZeRO-Infinity's order"),
    # Issue 23 (--configs whole-f0,split-f0,whole,split): the planner's
    # placement under the same budgets, every class open, snake F=0 and
    # F=1: whole classes against classes split by layer between host and
    # SSD.
    # F=0 first: an overlap deferring all of every layer (F=1) leaves the
    # planner no block it may cut between host and SSD, so that pair differs
    # only by whole layers.
    ("whole-f0", "snake F=0, the planner's placement, whole classes (--split-placement off)"),
    ("split-f0", "snake F=0, the planner's placement split by layer and cut (--split-placement on)"),
    ("whole", "snake F=1, the planner's placement, whole classes (--split-placement off)"),
    ("split", "snake F=1, the planner's placement split by layer (--split-placement on)"),
]
# (whole-class config, split config, summary key): the pairs part 3 compares.
PLACEMENT_PAIRS = [("whole-f0", "split-f0", "split_over_whole_f0"),
                   ("whole", "split", "split_over_whole")]


def plan_of(report):
    """The plan the executable runs: the report's "executable" where the
    planner's exact arenas took another plan than the cost model's
    choice (docs/cost-model.md), else its "chosen"."""
    return report.get("executable") or report["chosen"]


def size(b):
    """Bytes in GiB, or MiB under one GiB."""
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.1f} MiB"


def steady(arrivals):
    """Median step time after the first (None with fewer than 2 steps)."""
    d = [b - a for a, b in zip(arrivals, arrivals[1:])]
    return statistics.median(d) if d else None


def cmd_bench(a):
    with open(os.path.join(a.bench_dir, "bench.json")) as f:
        meta = json.load(f)
    cfg = meta["model"]
    tokens = cfg["batch"] * cfg["seq"]
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.ssd, exist_ok=True)
    weights = os.path.join(a.weights_dir, f"gpt-{meta['name']}.safetensors")
    gen = [sys.executable, os.path.join(ROOT, "bench/device/gpt_weights.py"), "--config",
           os.path.join(a.bench_dir, "config.json"), "--threads", str(a.threads), weights]
    param_bytes = 4 * cfg["params"]
    gen_s = 10 + param_bytes / 1e9  # ~1 GB/s on 16 threads, generous
    configs = [c for c in a.configs.split(",") if c]
    unknown = [c for c in configs if c not in dict(BENCH)]
    if unknown:
        sys.exit(f"offload_check.py bench: unknown config(s) {unknown} (configs: "
                 f"{', '.join(c for c, _ in BENCH)})")
    bench = [(c, what) for c, what in BENCH if c in configs]
    missing = [c for c, _ in bench if not os.path.exists(os.path.join(a.bench_dir, f"plan-{c}.json"))]
    if missing:
        sys.exit(f"offload_check.py bench: {a.bench_dir} has no plan for {', '.join(missing)}: "
                 f"it was prepared by an older scripts/device/prepare-offload.sh; run it again")
    plan, ssd_arena = {}, {}
    for c, _ in bench:
        with open(os.path.join(a.bench_dir, f"plan-{c}.json")) as f:
            report = json.load(f)
        plan[c] = plan_of(report)
        # The plan's exact SSD arena (the report's "arenas", an offload
        # compile's), else the model's peak.
        ssd_arena[c] = (report.get("arenas") or {}).get("ssd", plan[c]["peak_bytes"].get("ssd", 0))

    def expected_s(c, steps):
        # Start-up: the weights read, the plan's SSD state written once.
        ssd_state = ssd_arena[c]
        start = 20 + param_bytes / 4e9 + ssd_state / 1.5e9
        return start + steps * plan[c]["predicted_iteration_s"] * 1.3

    data = ["--input", f"tokens={a.bench_dir}/tokens.npy", "--input", f"targets={a.bench_dir}/targets.npy",
            "--weights", weights, "--print-every", "1"]
    cmds = {}
    for c, _ in bench:
        base = os.path.join(a.work, c)
        # --ssd and --stats-json are for offload plans only.
        extra = ["--ssd", a.ssd, "--stats-json", base + ".stats.json"] if c != "resident" else []
        cmds[c] = lambda steps, c=c, base=base, extra=extra: [
            os.path.join(a.bench_dir, f"bench-{c}"), *data, "--device", a.device, "--steps", str(steps),
            *extra, "--log-json", base + ".jsonl"]
    if a.dry_run:
        print(f"[bench weights, ~{gen_s:.0f} s] {' '.join(gen)}")
        for c, what in bench:
            steps = a.resident_steps if c == "resident" else a.steps
            print(f"[bench {c}: {what}; expected ~{expected_s(c, steps):.0f} s "
                  f"(cost model {plan[c]['predicted_iteration_s']:.1f} s/iter)] {' '.join(cmds[c](steps))}")
        total = gen_s + sum(expected_s(c, a.resident_steps if c == "resident" else a.steps) for c, _ in bench)
        print(f"bench {','.join(configs)}: expected {total:.0f} s of the {left(a.deadline):.0f} s budget")
        return
    results = {}
    if not os.path.exists(weights):
        if left(a.deadline) < gen_s:
            append_row(a.rows, {"stage": "bench", "name": "weights", "status": "SKIP",
                                "detail": f"time budget ({left(a.deadline):.0f} s left)"})
            return
        t0 = time.monotonic()
        r = subprocess.run(gen, capture_output=True, text=True, timeout=max(1.0, left(a.deadline)))
        if r.returncode != 0:
            append_row(a.rows, {"stage": "bench", "name": "weights", "status": "FAIL",
                                "detail": (r.stdout + r.stderr).strip()[-300:]})
            return
        print(f"== bench weights: {r.stdout.strip()} in {time.monotonic() - t0:.1f} s", flush=True)
    for c, what in bench:
        base = os.path.join(a.work, c)
        want = a.resident_steps if c == "resident" else a.steps
        # The most steps (down to 1) whose expected time fits what is left.
        steps = next((s for s in range(want, 0, -1) if expected_s(c, s) < left(a.deadline)), 0)
        if steps == 0:
            append_row(a.rows, {"stage": "bench", "name": c, "status": "SKIP",
                                "detail": f"time budget: expected {expected_s(c, 1):.0f} s, "
                                          f"{left(a.deadline):.0f} s left"})
            continue
        need = int(ssd_arena[c] * 1.1) if c != "resident" else 0
        free = shutil.disk_usage(a.ssd).free
        if need > free:
            append_row(a.rows, {"stage": "bench", "name": c, "status": "FAIL",
                                "detail": f"{a.ssd} has {free / 2**30:.1f} GiB free; the plan's swap "
                                          f"needs {need / 2**30:.1f} GiB (+10%)"})
            continue
        for suffix in (".stats.json", ".jsonl"):
            if os.path.exists(base + suffix):
                os.remove(base + suffix)
        cmd = cmds[c](steps)
        print(f"== bench {c} ({what}), {steps} steps, expected ~{expected_s(c, steps):.0f} s: "
              f"{' '.join(cmd)}", flush=True)
        rc, wall, arrivals = run_timed(cmd, base + ".jsonl", base + ".log", max(1.0, left(a.deadline)))
        print(tail(base + ".log", 8), end="", flush=True)
        if rc != 0:
            append_row(a.rows, {"stage": "bench", "name": c, "status": "FAIL",
                                "detail": ("timed out" if rc is None else f"exit {rc}") + ": "
                                          + tail(base + ".log", 2).strip().replace("\n", " | ")})
            continue
        r = {"config": c, "what": what, "steps": steps, "wall_s": wall, "step_arrivals_s": arrivals,
             "steady_s_per_iter": steady(arrivals), "command": " ".join(cmd),
             "compile_command": meta["compile_commands"][c], "plan": plan[c]}
        if c == "resident":
            # The executable's own "steady state: S s/step", else the wall
            # time after the first step's end over the steps after it.
            m = re.search(r"steady state: ([0-9.eE+-]+) s/step", tail(base + ".log", 40))
            r["mean_s_per_iter"] = float(m.group(1)) if m else (
                (arrivals[-1] - arrivals[0]) / (len(arrivals) - 1) if len(arrivals) > 1 else wall)
            r["predicted_s_per_iter"] = plan[c]["predicted_iteration_s"]
        else:
            try:
                with open(base + ".stats.json") as f:
                    st = json.load(f)
                r["stats"] = st
                r["mean_s_per_iter"] = st["seconds_per_iteration"]
                pred = (st.get("predicted") or {}).get("seconds_per_iteration")
                r["predicted_s_per_iter"] = pred if pred is not None else plan[c]["predicted_iteration_s"]
                r["overlap"], r["overlap_source"] = overlap_of(st)
                # The links the plan uses: the planner's placements (whole,
                # split) may keep everything off the SSD.
                pb = plan[c]["bytes_per_iteration"]
                expect = ("ssd" if pb["ssd_read"] + pb["ssd_write"] else
                          "pcie" if pb["h2d"] + pb["d2h"] else "none")
                r["bytes_check"] = check_stats(base + ".stats.json", steps, expect) or "as planned"
                # The step's own tensors against what the GPU budget leaves
                # them (the runtime does not enforce it: docs/runtime.md).
                sa = st.get("step_arena") or {}
                if sa.get("planned") is not None:
                    r["step_arena"] = sa
                    # None: the budget leaves the step nothing, and it used some.
                    r["step_peak_over_planned"] = (sa["peak"] / sa["planned"] if sa["planned"]
                                                   else None if sa["peak"] else 0.0)
            except (OSError, ValueError, KeyError) as e:
                append_row(a.rows, {"stage": "bench", "name": c, "status": "FAIL",
                                    "detail": f"--stats-json: {e!r}"})
                continue
        r["s_per_iter"] = r["steady_s_per_iter"] or r["mean_s_per_iter"]
        r["tokens_per_s"] = tokens / r["s_per_iter"]
        results[c] = r
        append_row(a.rows, {"stage": "bench", "name": c, "status": "ok",
                            "detail": f"{r['s_per_iter']:.2f} s/iter ({steps} steps; cost model "
                                      f"{r['predicted_s_per_iter']:.2f} s), {r['tokens_per_s']:.0f} tokens/s"
                                      + (f", overlap {r['overlap']:.3f}, bytes {r['bytes_check']}"
                                         if c != "resident" else "")
                                      + (f", step arena peak {size(r['step_arena']['peak'])} of the "
                                         f"{size(r['step_arena']['planned'])} the GPU budget leaves"
                                         if "step_arena" in r else ""),
                            "s_per_iter": r["s_per_iter"], "tokens_per_s": r["tokens_per_s"]})
    summary = {}
    targets = {"snake_over_horizontal": (">=", 2.0), "measured_over_bound": ("<=", 1.10),
               "transfer_overlap": (">=", 0.90), "offload_efficiency": (">=", 0.90),
               "split_over_whole": (">=", 1.0), "split_over_whole_f0": (">=", 1.0),
               "step_arena_within_budget": ("<=", 1.0)}
    s, h, res = results.get("snake"), results.get("horizontal"), results.get("resident")
    if s and h:
        summary["snake_over_horizontal"] = h["s_per_iter"] / s["s_per_iter"]
    if s:
        summary["measured_over_bound"] = s["s_per_iter"] / s["predicted_s_per_iter"]
        summary["transfer_overlap"] = s["overlap"]
    if s and res:
        summary["offload_efficiency"] = s["tokens_per_s"] / res["tokens_per_s"]
    for whole, split, key in PLACEMENT_PAIRS:
        sp, wh = results.get(split), results.get(whole)
        if not (sp and wh):
            continue
        summary[key] = wh["s_per_iter"] / sp["s_per_iter"]
        # SSD bytes per iteration side by side (measured, --stats-json).
        for name, r in ((split, sp), (whole, wh)):
            b = r["stats"]["bytes_per_iteration"]
            append_row(a.rows, {"stage": "bench", "name": f"{name} ssd bytes",
                                "status": "ok",
                                "detail": f"{b['ssd_read'] / 1e9:.2f} GB read, "
                                          f"{b['ssd_write'] / 1e9:.2f} GB written per iteration; "
                                          f"placement {r['plan']['placement']}"})
    # The largest step peak over what the GPU budget leaves the step (the
    # plan's proof of fit covers its GPU arena, not the step's tensors).
    within = [r["step_peak_over_planned"] for r in results.values() if "step_peak_over_planned" in r]
    if within:
        # A step that used memory where the budget left none is over by
        # any ratio: JSON has no infinity, so the ratio is null and MISSED.
        summary["step_arena_within_budget"] = None if None in within else max(within)
    for k, v in summary.items():
        op, t = targets[k]
        ok = v is not None and (v >= t if op == ">=" else v <= t)
        append_row(a.rows, {"stage": "bench", "name": k, "status": "met" if ok else "MISSED",
                            "detail": f"{'none left' if v is None else f'{v:.3f}'} (target {op} {t})",
                            "value": v})
    out = {"schema": "spillway-offload-h200-1", "command": a.command,
           "model": cfg, "name": meta["name"], "budgets": meta["budgets"], "microbatches": meta["microbatches"],
           "placement": meta["placement"], "hw_profile": meta["hw_profile"], "build": meta.get("build_info"),
           "device": a.device, "configs": results, "summary": summary,
           "targets": {k: f"{op} {t}" for k, (op, t) in targets.items()},
           "definitions": {
               "s_per_iter": "median step time after step 1 (--log-json arrivals); with 1 step the "
                             "executable's own seconds per iteration (--stats-json)",
               "snake_over_horizontal": "horizontal F=0 s/iter over snake F=1 s/iter, same batch, M, budgets",
               "measured_over_bound": "snake's measured s/iter over the cost model's predicted s/iter "
                                      "(--stats-json predicted, profiles/h200.json)",
               "transfer_overlap": "snake's --stats-json telemetry.transfer_overlap (1 - compute wait / "
                                   "transfer time), else its overlap (1 - I/O wait / I/O busy)",
               "offload_efficiency": "snake's tokens/s over the resident executable's tokens/s",
               "split_over_whole": "the whole-class plan's s/iter over the plan split by layer, "
                                   "same schedule and budgets, snake F=1 (issue 23)",
               "split_over_whole_f0": "the same at snake F=0, where the planner may cut a block "
                                      "between host and SSD (issue 23)",
               "step_arena_within_budget": "the largest, over the offloaded runs, of the step's peak "
                                           "in the device's step arena over what --gpu-mem leaves "
                                           "it beside the plan's GPU arena (--stats-json step_arena)"}}
    with open(a.result_json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {a.result_json}", flush=True)


# ---- row, table --------------------------------------------------------------

def cmd_row(a):
    append_row(a.rows, {"stage": a.stage, "name": a.name, "status": a.status, "detail": a.detail})


def cmd_table(a):
    rows = []
    if os.path.exists(a.rows):
        with open(a.rows) as f:
            rows = [json.loads(l) for l in f if l.strip()]
    print("\n== offload-check summary")
    print(f"{'stage':10} {'name':28} {'status':7} detail")
    for r in rows:
        print(f"{r['stage']:10} {r['name']:28} {r['status']:7} {r.get('detail', '')}")
    bad = [r for r in rows if r["status"] in ("FAIL", "SKIP")]
    print(f"== {'PASSED' if rows and not bad else 'NOT PASSED'}: {len(rows)} rows, "
          f"{sum(r['status'] == 'FAIL' for r in rows)} failed, {sum(r['status'] == 'SKIP' for r in rows)} skipped, "
          f"{sum(r['status'] == 'MISSED' for r in rows)} targets missed")
    return 1 if bad or not rows else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("row")
    r.add_argument("--rows", required=True)
    for k in ("stage", "name", "status", "detail"):
        r.add_argument(f"--{k}", required=True)
    t = sub.add_parser("table")
    t.add_argument("--rows", required=True)
    m = sub.add_parser("matrix")
    b = sub.add_parser("bench")
    for p in (m, b):
        p.add_argument("--rows", required=True)
        p.add_argument("--work", required=True)
        p.add_argument("--device", default="cuda")
        p.add_argument("--deadline", type=float, required=True, help="seconds since the epoch")
        p.add_argument("--dry-run", action="store_true")
    m.add_argument("--exe-dir", required=True)
    m.add_argument("--ref-device", default="cpu")
    m.add_argument("--steps", type=int, default=4)
    m.add_argument("--tol", type=float, default=1e-5)
    m.add_argument("--timeout", type=float, default=60)
    m.add_argument("--expect-s", type=float, default=5, help="expected seconds of one run")
    b.add_argument("--bench-dir", required=True)
    b.add_argument("--weights-dir", required=True)
    b.add_argument("--ssd", required=True)
    b.add_argument("--steps", type=int, default=2)
    b.add_argument("--resident-steps", type=int, default=4)
    b.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    b.add_argument("--result-json", required=True)
    b.add_argument("--configs", default="resident,snake,horizontal",
                   help="which of the prepared executables to run, in BENCH's order "
                        "(part 3: whole-f0,split-f0,whole,split)")
    b.add_argument("--command", required=True, help="the command line, for the result JSON")
    a = ap.parse_args()
    if a.cmd == "row":
        cmd_row(a)
    elif a.cmd == "table":
        sys.exit(cmd_table(a))
    elif a.cmd == "matrix":
        cmd_matrix(a)
    else:
        cmd_bench(a)


if __name__ == "__main__":
    main()
