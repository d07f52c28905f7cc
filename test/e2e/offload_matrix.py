#!/usr/bin/env python3
"""Trains the one-block GPT example under every offload configuration.

{horizontal, snake} x optimizer overlap F in {0, 0.5, 1} x {resident, host
offload, SSD offload, two mixed placements, activations on host,
activations on SSD with the rest off the GPU, classes split by layer
between host and SSD by ranges (the activations too) and by fractions,
blocks cut between host and SSD (at F in CUT_OVERLAPS, not under FOAM)} x
M in {1, 4}:
each executable is compiled with an offload plan (spillwayc --place, with
--hw so spillwayc checks the plan's transfers against the cost model), runs
K steps with --stats-json, and must
- save weights bit-identical to the executable without a plan (and without
  overlap) at the same order and M (the plan changes where tensors live,
  never the arithmetic: the gradient additions and the mean are the same
  operations in the same order; the overlap only moves elementwise updates
  in time, with their own step's inputs, see overlap-optimizer.test);
- be within 1e-5 of the plain horizontal M = 1 run (micro-batching sums the
  gradient in another grouping; the tolerance is spillwayc-schedule.test's);
- move, at every step, exactly the bytes per link its plan predicted
  (check_offload_stats.py), over the links the placement implies.
With --optimizer foam every executable (the plain ones too) is compiled
with FOAM and only F = 0 runs (FOAM's updates are never split). With
--grad-clip F every executable (the plain ones too) clips the global
gradient norm at F: the plans take each layer's norms where its gradient is
complete, so the bits and the bytes are still the plain run's.
With --precision bf16-mixed every executable (the plain ones too) stores
its working weights and activations as bf16 (an offload plan's params
blocks hold the bf16 working copies and its master blocks the f32 masters,
BF16_MIXED_MASTER): the plans still give the plain
run's bits at the same order and M, but bf16 roundings of a micro-batch's
gradients depend on M, so the distance to horizontal M = 1 is bounded by
BF16_MIXED_M_TOLERANCE instead.
With --optimizer-state-dtype bf16 every executable (the plain ones too)
stores its AdamW / FOAM moments as bf16 (an offload plan's optimizer
blocks hold 2 bytes per element): the same bits as the plain run again, and
a rounding of a moment may flip with M's other gradient grouping, so the
distance to horizontal M = 1 is bounded by BF16_MIXED_M_TOLERANCE too.
With --device D every offload executable runs on device D (EXE --device D)
while the references stay the plain executables on the CPU backend, so D
must reproduce the CPU's bits and the plan's bytes exactly. With
--delay-seeds S,... (loopback only) the configurations of DELAY_SUBSET run
again once per seed with --loopback-delays S: other copy timings, same
bits and bytes.
Prints one line per configuration (and per delayed run); exits 1 at the
first failure, naming the configuration, the device and the files.
"""

import argparse
import itertools
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare_weights import load  # noqa: E402

PLACEMENTS = {
    "resident": ("params=gpu,optimizer=gpu,gradients=gpu", "none"),
    "host": ("params=host,optimizer=host,gradients=host", "pcie"),
    "ssd": ("params=ssd,optimizer=ssd,gradients=ssd", "ssd"),
    # Mixed: a GPU optimizer with its parameters and gradients away from
    # the GPU, and a CPU optimizer updating GPU-resident parameters.
    "gpuopt": ("params=host,optimizer=gpu,gradients=ssd", "ssd"),
    "cpuopt": ("params=gpu,optimizer=host,gradients=gpu", "pcie"),
    # Activations off the GPU: alone on host, and on SSD with every other
    # class away from the GPU too (a CPU optimizer).
    "acthost": ("activations=host", "pcie"),
    "actssd": ("params=host,optimizer=host,gradients=ssd,activations=ssd",
               "ssd"),
    # Classes split by layer between host and SSD (a CPU optimizer), the
    # parameters and activations with GPU layers too: by ranges of the ten
    # layers, and by fractions of each class's bytes.
    "layers": ("params=ssd,params[1:4]=gpu,params[4:]=host,optimizer=host,"
               "optimizer[2:7]=ssd,gradients=ssd,gradients[0:4]=host,"
               "activations=ssd,activations[0:3]=host,activations[7:]=gpu",
               "ssd"),
    "fractions": ("params=host:0.5,ssd:0.5,optimizer=ssd:0.25,host:0.75,"
                  "gradients=host:0.6,ssd:0.4", "ssd"),
    # Blocks cut between host and SSD: the attention's and the MLP's
    # parameters and AdamW state (and masters) part on host, part on SSD.
    "cuts": ("params=ssd,params[3]=host:0.5,ssd:0.5,optimizer=ssd,"
             "optimizer[3]=host:0.5,ssd:0.5,optimizer[6]=host:0.3,ssd:0.7,"
             "gradients=host", "ssd"),
}

# A cut layer's overlap defers none of its elements or the cut's (its
# deferred update is part 0's); F = 0.5 and 1 defer others, so cut blocks
# run without the overlap. FOAM's updates are not elementwise: its blocks
# are never cut.
CUT_OVERLAPS = ("0",)


# Under bf16-mixed the f32 master weights are a class of their own (the
# params blocks hold the bf16 working copies): pinned to SSD with the state
# in the SSD plan and to host in the host plan; the planner places them in
# the others (on the GPU exactly when the optimizer state is).
BF16_MIXED_MASTER = {"ssd": "ssd", "host": "host"}


# The configurations that run again under other loopback copy delays:
# every placement and overlap of snake M = 4 (the most moves in flight at
# once) and of horizontal M = 1 at F = 0.
DELAY_SUBSET = (("snake", 4, ("0", "0.5", "1")), ("horizontal", 1, ("0",)))

# How far a bf16-mixed run at M = 4 may end from M = 1 after the default 4
# steps: each rounds its micro-batch's gradients to bf16 (8 significant
# bits) at another scale, so early AdamW steps, about lr = 1e-3 per element
# each, may take other signs where a gradient is near zero; 4 steps * 2 lr
# bounds that. Measured: 4.2e-3 (examples/gpt, every plan).
BF16_MIXED_M_TOLERANCE = 8e-3

# A run that does not finish within this many seconds is a hang (a token
# that never completes); a healthy one takes well under a second.
RUN_TIMEOUT_S = 300


def run(cmd, **kw):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True,
                           timeout=RUN_TIMEOUT_S, **kw)
    except subprocess.TimeoutExpired:
        sys.exit(f"FAILED: {' '.join(cmd)}\nno exit after {RUN_TIMEOUT_S} s")
    if r.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r.stdout


def first_difference(a_path, b_path):
    """Names the first tensor in which two --save files differ."""
    a, b = load(a_path), load(b_path)
    for k in sorted(set(a) | set(b)):
        if k not in a or k not in b:
            return f"tensor {k} is in only one of them"
        if a[k].shape != b[k].shape:
            return f"tensor {k}: shape {a[k].shape} vs {b[k].shape}"
        bad = a[k].view(np.uint32) != b[k].view(np.uint32)
        if bad.any():
            i = np.unravel_index(np.argmax(bad), bad.shape)
            return (f"tensor {k}: {int(bad.sum())} of {bad.size} elements "
                    f"differ, first {[int(x) for x in i]}: "
                    f"{float(a[k][i])!r} vs {float(b[k][i])!r}")
    return "the tensors agree; the files differ in their header"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--spillwayc", required=True)
    ap.add_argument("--src", required=True, help="the source tree")
    ap.add_argument("--out", required=True, help="a scratch directory")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--optimizer", choices=["adamw", "foam"], default="adamw")
    ap.add_argument("--grad-clip", default="0",
                    help="compile every executable with spillwayc "
                         "--grad-clip F (default 0: no clipping)")
    ap.add_argument("--precision", choices=["fp32", "bf16-mixed"],
                    default="fp32",
                    help="compile every executable with spillwayc "
                         "--precision P (default fp32)")
    ap.add_argument("--optimizer-state-dtype", choices=["fp32", "bf16"],
                    default="fp32",
                    help="compile every executable with spillwayc "
                         "--optimizer-state-dtype D (default fp32)")
    ap.add_argument("--device", choices=["cpu", "loopback"],
                    help="run every offload executable with --device D "
                         "(default: no --device flag, the compile target)")
    ap.add_argument("--delay-seeds", default="",
                    help="comma-separated --loopback-delays seeds for the "
                         "DELAY_SUBSET runs (--device loopback only)")
    a = ap.parse_args()
    seeds = [x for x in a.delay_seeds.split(",") if x]
    if seeds and a.device != "loopback":
        ap.error("--delay-seeds needs --device loopback")
    for x in seeds:
        if not x.isdigit():
            ap.error(f"--delay-seeds: {x!r} is not a decimal seed")
    device = ["--device", a.device] if a.device else []
    on = f" on --device {a.device}" if a.device else ""
    opt = ["--optimizer", a.optimizer, "--grad-clip", a.grad_clip,
           "--precision", a.precision,
           "--optimizer-state-dtype", a.optimizer_state_dtype]
    m_tolerance = (1e-5 if a.precision == "fp32"
                   and a.optimizer_state_dtype == "fp32"
                   else BF16_MIXED_M_TOLERANCE)
    overlaps = ("0", "0.5", "1") if a.optimizer == "adamw" else ("0",)
    os.makedirs(a.out, exist_ok=True)
    swap = os.path.join(a.out, "swap")
    os.makedirs(swap, exist_ok=True)
    gpt = os.path.join(a.src, "examples/gpt")
    model = os.path.join(gpt, "gpt_block.onnx")
    data = ["--input", f"tokens={gpt}/tokens.npy",
            "--input", f"targets={gpt}/targets.npy", "--steps", str(a.steps)]
    hw = os.path.join(a.src, "profiles/cpu-ci.json")

    def train(exe, tag, extra=()):
        out = os.path.join(a.out, tag + ".safetensors")
        run([exe, *data, "--save", out, *extra])
        return out

    refs = {}
    for order in ("horizontal", "snake"):
        for m in (1, 4):
            exe = os.path.join(a.out, f"plain-{order}-{m}")
            run([a.spillwayc, model, "-o", exe, "--microbatches", str(m),
                 "--schedule", order, *opt])
            refs[order, m] = train(exe, f"plain-{order}-{m}")
    base = load(refs["horizontal", 1])

    for order, m, overlap, (name, (place, expect)) in itertools.product(
            ("horizontal", "snake"), (1, 4), overlaps, PLACEMENTS.items()):
        if name == "cuts" and (overlap not in CUT_OVERLAPS
                               or a.optimizer == "foam"):
            continue
        tag = f"{name}-{order}-{m}" + ("" if overlap == "0"
                                       else f"-F{overlap}")
        exe = os.path.join(a.out, tag)
        if a.precision == "bf16-mixed" and name in BF16_MIXED_MASTER:
            place += ",master=" + BF16_MIXED_MASTER[name]
        run([a.spillwayc, model, "-o", exe, "--microbatches", str(m),
             "--schedule", order, "--overlap-optimizer", overlap,
             "--place", place, "--hw", hw, *opt])

        def check(run_tag, extra):
            """Trains `exe` once; returns (worst, stats line) or exits."""
            stats = os.path.join(a.out, run_tag + ".json")
            saved = train(exe, run_tag, ["--ssd", swap, "--stats-json",
                                         stats, *device, *extra])
            with open(saved, "rb") as f, open(refs[order, m], "rb") as g:
                if f.read() != g.read():
                    sys.exit(f"FAILED: {run_tag}{on}: weights {saved} differ "
                             f"from the plain {order} M={m} run "
                             f"{refs[order, m]}: "
                             + first_difference(saved, refs[order, m]))
            got = load(saved)
            worst = max(float(np.max(np.abs(got[k] - base[k])))
                        for k in base)
            if worst > m_tolerance:
                sys.exit(f"FAILED: {run_tag}{on}: {worst:.3g} from the plain "
                         f"horizontal M=1 weights (tolerance {m_tolerance})")
            r = subprocess.run([sys.executable,
                                os.path.join(HERE, "check_offload_stats.py"),
                                stats, "--steps", str(a.steps), "--expect",
                                expect], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"FAILED: {run_tag}{on}: {r.stdout}{r.stderr}")
            return worst, r.stdout.split(": ", 1)[1].strip()

        worst, line = check(tag, [])
        clipped = "" if a.grad_clip == "0" else f" clip {a.grad_clip}"
        if a.precision != "fp32":
            clipped += f" {a.precision}"
        if a.optimizer_state_dtype != "fp32":
            clipped += f" state {a.optimizer_state_dtype}"
        print(f"OK {tag}: {a.optimizer}{clipped} F={overlap} bit-identical to plain {order} M={m}"
              f"{on}, {worst:.1e} from horizontal M=1; " + line)
        if any(order == o and m == mm and overlap in fs
               for o, mm, fs in DELAY_SUBSET):
            for seed in seeds:
                worst, line = check(f"{tag}-delays{seed}",
                                    ["--loopback-delays", seed])
                print(f"OK {tag} --loopback-delays {seed}: bit-identical to "
                      f"plain {order} M={m}{on}; " + line)
        # Each executable is tens of MB (the runtime and BLAS are linked
        # statically); a failed configuration exited above and keeps its.
        os.remove(exe)
    print("all offload configurations passed")


if __name__ == "__main__":
    main()
