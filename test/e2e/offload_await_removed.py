#!/usr/bin/env python3
"""Removes one await of an offload plan by hand and requires a device run
to notice.

The one-block GPT example is compiled with an offload plan (snake, M = 2,
parameters, AdamW state and gradients on the host) to its scheduled step
(spillwayc --emit=mlir: the flat step with its sched.move / sched.await
ops). A copy of that MLIR has the sched.await of one host -> GPU move
deleted (by default the first: layer 0's parameters, which the step's
first kernel reads right after the move is issued). Both are lowered
(spillway-opt --spillway-lower-to-runtime, mlir-translate, llc) and linked
with the runtime as spillwayc links them. Then, on --device D:

- the intact plan must save the plan-less CPU executable's weights bit for
  bit and move exactly the plan's bytes (its stats line says "as planned");
- the plan without the await must be caught under every --loopback-delays
  seed given: the run fails with a runtime error (a NaN loss, a non-finite
  weight, or the executor refusing the unawaited copy), or it succeeds with
  weights that differ from the intact plan's. A crash, a hang or a usage
  error is not a catch.

The CPU backend's copies are asynchronous but unpoisoned, so there a
missing await is a race the run may or may not lose: --intact-only runs
the intact half only (and still checks that exactly one await is gone,
from the MLIR and from the lowered calls).
Exits 1 naming the step that failed and the files involved.
"""

import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from offload_matrix import first_difference  # noqa: E402

PLACE = "params=host,optimizer=host,gradients=host"
RUN_TIMEOUT_S = 300

MOVE = re.compile(r"^\s*(%\S+) = sched\.move(?:_part)? (\w+) layer\((\d+)\)"
                  r"(?: part\(\d+\))? (\w+) -> (\w+)")
AWAIT = re.compile(r"^\s*sched\.await (%\S+) :")


def run(cmd, what, ok=(0,), **kw):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True,
                           timeout=RUN_TIMEOUT_S, **kw)
    except subprocess.TimeoutExpired:
        sys.exit(f"FAILED: {what}: no exit after {RUN_TIMEOUT_S} s: "
                 f"{' '.join(cmd)}")
    if r.returncode not in ok:
        sys.exit(f"FAILED: {what} (exit {r.returncode}): {' '.join(cmd)}\n"
                 f"{r.stdout}{r.stderr}")
    return r


def remove_await(src, dst, index):
    """Writes src without the index-th await of a host -> GPU move; returns
    a description of the move whose await is gone."""
    lines = open(src).read().splitlines(keepends=True)
    moves = {}
    candidates = []
    for i, line in enumerate(lines):
        m = MOVE.match(line)
        if m:
            moves[m.group(1)] = m
            continue
        a = AWAIT.match(line)
        if a and a.group(1) in moves:
            mv = moves[a.group(1)]
            if mv.group(4) == "host" and mv.group(5) == "gpu":
                candidates.append((i, mv))
    if index >= len(candidates):
        sys.exit(f"FAILED: {src} has {len(candidates)} awaits of host -> gpu "
                 f"moves; --await-index {index} is past them")
    i, mv = candidates[index]
    with open(dst, "w") as f:
        f.writelines(lines[:i] + lines[i + 1:])
    return (f"line {i + 1}: the await of {mv.group(1)} = {mv.group(2)} "
            f"layer({mv.group(3)}) host -> gpu")


def count(path, pattern):
    with open(path) as f:
        return len(re.findall(pattern, f.read()))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--spillwayc", required=True)
    ap.add_argument("--spillway-opt", required=True)
    ap.add_argument("--mlir-translate", required=True)
    ap.add_argument("--llc", required=True)
    ap.add_argument("--link", required=True,
                    help="the runtime archive and its libraries (lit's "
                         "%%runtime_libs), one string")
    ap.add_argument("--src", required=True, help="the source tree")
    ap.add_argument("--out", required=True, help="a scratch directory")
    ap.add_argument("--device", choices=["cpu", "loopback"], required=True)
    ap.add_argument("--delay-seeds", default="",
                    help="comma-separated --loopback-delays seeds; each "
                         "runs both plans (--device loopback only)")
    ap.add_argument("--await-index", type=int, default=0,
                    help="which await of a host -> gpu move to remove "
                         "(0: the first in the step)")
    ap.add_argument("--intact-only", action="store_true",
                    help="do not run the plan without the await")
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    seeds = [x for x in a.delay_seeds.split(",") if x]
    if seeds and a.device != "loopback":
        ap.error("--delay-seeds needs --device loopback")
    if not a.intact_only and a.device != "loopback":
        ap.error("only the loopback device poisons a copy in flight; on "
                 f"--device {a.device} a missing await is a race: pass "
                 "--intact-only")
    for x in seeds:
        if not x.isdigit():
            ap.error(f"--delay-seeds: {x!r} is not a decimal seed")
    os.makedirs(a.out, exist_ok=True)
    gpt = os.path.join(a.src, "examples/gpt")
    model = os.path.join(gpt, "gpt_block.onnx")
    sched = ["--microbatches", "2", "--schedule", "snake"]
    data = ["--input", f"tokens={gpt}/tokens.npy",
            "--input", f"targets={gpt}/targets.npy", "--steps", str(a.steps)]
    out = lambda name: os.path.join(a.out, name)  # noqa: E731

    # The reference: the plan-less executable of the same order and M on
    # the CPU backend.
    run([a.spillwayc, model, "-o", out("plain"), *sched], "compile plain")
    run([out("plain"), *data, "--save", out("plain.safetensors")],
        "train plain")

    plan = out("plan.mlir")
    run([a.spillwayc, model, "--emit=mlir", "-o", plan, *sched,
         "--place", PLACE], "emit the plan's scheduled step")
    cut = out("cut.mlir")
    removed = remove_await(plan, cut, a.await_index)
    awaits = count(plan, r"(?m)^\s*sched\.await ")
    if count(cut, r"(?m)^\s*sched\.await ") != awaits - 1:
        sys.exit(f"FAILED: {cut} does not have exactly one sched.await "
                 f"fewer than {plan}")
    print(f"removed from {os.path.basename(cut)}: {removed} "
          f"({awaits} awaits in the plan)")

    exes = {}
    for name, mlir in (("intact", plan), ("cut", cut)):
        llvm = out(name + ".llvm.mlir")
        run([a.spillway_opt, mlir, "--spillway-lower-to-runtime", "-o", llvm],
            f"lower {mlir}")
        run([a.mlir_translate, "--mlir-to-llvmir", llvm, "-o",
             out(name + ".ll")], f"translate {llvm}")
        run([a.llc, "-O2", "-relocation-model=pic", "-filetype=obj",
             out(name + ".ll"), "-o", out(name + ".o")], f"llc {name}.ll")
        run(["c++", out(name + ".o"), *a.link.split(), "-o", out(name)],
            f"link {name}")
        exes[name] = out(name)
    calls = {n: count(out(n + ".llvm.mlir"), r"llvm\.call @spw_await\(")
             for n in exes}
    if calls["intact"] != awaits or calls["cut"] != awaits - 1:
        sys.exit(f"FAILED: the lowered plans call spw_await {calls['intact']} "
                 f"(intact) and {calls['cut']} (cut) times; expected {awaits} "
                 f"and {awaits - 1}")
    print(f"lowered: {calls['intact']} spw_await calls intact, "
          f"{calls['cut']} without the await")

    weights = ["--weights", plan + ".weights", "--ssd", a.out,
               "--device", a.device]
    runs = [(f"seed{s}", ["--loopback-delays", s]) for s in seeds] or \
        [("default", [])]
    for tag, extra in runs:
        saved = out(f"intact-{tag}.safetensors")
        r = run([exes["intact"], *data, *weights, *extra, "--save", saved],
                f"intact plan on --device {a.device} ({tag})")
        if "as planned" not in r.stdout or "NOT as planned" in r.stdout:
            sys.exit(f"FAILED: intact plan on --device {a.device} ({tag}) "
                     f"did not move the plan's bytes:\n{r.stdout}")
        with open(saved, "rb") as f, open(out("plain.safetensors"),
                                          "rb") as g:
            if f.read() != g.read():
                sys.exit(f"FAILED: intact plan on --device {a.device} "
                         f"({tag}): {saved} differs from the plain CPU run "
                         f"{out('plain.safetensors')}: "
                         + first_difference(saved, out("plain.safetensors")))
        print(f"OK intact plan on --device {a.device} ({tag}): the plain "
              f"CPU run's weights, bytes as planned")
        if a.intact_only:
            continue
        cut_saved = out(f"cut-{tag}.safetensors")
        r = run([exes["cut"], *data, *weights, *extra, "--save", cut_saved],
                f"plan without the await on --device {a.device} ({tag})",
                ok=(0, 1))
        if r.returncode == 1:
            errors = [x for x in r.stderr.splitlines()
                      if x.startswith("error: ")]
            if not errors:
                sys.exit(f"FAILED: the plan without the await exited 1 "
                         f"({tag}) without an error line:\n{r.stderr}")
            print(f"CAUGHT ({tag}): the run failed: {errors[0]}")
            continue
        with open(cut_saved, "rb") as f, open(saved, "rb") as g:
            if f.read() == g.read():
                sys.exit(f"FAILED: the plan without the await ({removed}) "
                         f"ran on --device {a.device} ({tag}) and saved the "
                         f"intact plan's weights: the missing wait went "
                         f"unnoticed")
        print(f"CAUGHT ({tag}): the weights differ from the intact plan's: "
              + first_difference(cut_saved, saved))
    print("await-removed check passed")


if __name__ == "__main__":
    main()
