#!/usr/bin/env python3
"""Trains a model whose state is several times --host-mem through every
phase of its life, each phase its own process, and requires each process's
peak RSS to stay within the budgets plus a constant, and the weights to be
the same bit for bit however the run got there.

The model: bench/make_gpt_onnx.py's GPT (random weights as ONNX external
data) of --layers x --d-model, compiled with an offload plan (--place)
under the smallest --gpu-mem and --host-mem that fit it, unless given. Its
parameters and AdamW state (12 bytes per parameter) must be at least
--min-state-ratio x --host-mem and more than the start's bound, or the test
proves nothing. The phases, each
under peak_rss (peak_rss.c: the process's and its children's ru_maxrss):

  1 compile   spillwayc MODEL -o EXE --place ... --gpu-mem G --host-mem H
  2 start     EXE --steps 0
  3 train     EXE --steps N --checkpoint-dir CK --checkpoint-every K,
              kill -9 once a checkpoint line is printed
  4 resume    EXE --steps N --checkpoint-dir CK --resume --save resumed
  5 full      EXE --steps N --save full (uninterrupted)
  6 resident  the same model compiled without an offload plan, --save

Bounds:
- phases 2-5: peak RSS <= G + H + W + C, where W is the step's working
  tensors (the device's step arena peak, "device: step arena peak"; 0 for
  --steps 0; the killed phase 3 prints none and takes the larger of phases
  4's and 5's; --device must print one: loopback or cuda) and C is
  --constant-mib. On the CPU and loopback devices the "GPU" tier is host
  memory, so both budgets count.
- phase 1: peak RSS <= the compiler's peak on a calibration model + C. The
  calibration model is the same GPT (layers, heads, sequence, batch) with
  --calibration-d-model and --calibration-vocab: the same graph with almost
  no weight bytes, so the bound does not depend on the weight bytes.
- phase 6 holds all of its state by design: measured, not bounded.
- the saved weights of phases 4, 5 and 6 are identical bytes.

Prints the commands, then one line per phase, "phase X NAME: peak N MiB;
bound M MiB (...): within" or "EXCEEDS by D MiB", with the RSS sampled from
/proc during the phase's parts (start with the first step, further steps,
checkpoints, the gather and --save) beside it, and exits 1 naming every bound exceeded and every mismatch. All phases run
even when an early one fails, so one run gives every number.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

# The same search as offload-memory-bounds*.test (its script, beside this).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from offload_memory_bounds import smallest_budgets  # noqa: E402

MIB = 1 << 20
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
# A healthy phase takes seconds to a minute; this only stops a hang.
TIMEOUT_S = 900
# What sampling /proc every this many seconds can miss is short-lived: the
# checks use peak_rss's exact high-water mark, the samples only say where
# (roughly: under load the reader lags the executable's lines).
SAMPLE_S = 0.02

log = print


def mib(b):
    return f"{b / MIB:.1f} MiB"


def run(cmd, what, ok=(0,)):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    if r.returncode not in ok:
        sys.exit(f"FAILED: {what} (exit {r.returncode}): {shlex.join(cmd)}\n"
                 f"{r.stdout}{r.stderr}")
    return r


def make_gpt(a, out, d_model, vocab):
    run([sys.executable, a.make_gpt, "--out", out, "--layers", str(a.layers),
         "--d-model", str(d_model), "--heads", str(a.heads), "--vocab",
         str(vocab), "--seq", str(a.seq), "--batch", str(a.batch)],
        "make the model")
    with open(os.path.join(out, "config.json")) as f:
        return json.load(f)


def child_of(pid):
    """The process peak_rss started (its only child), or None."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = f.read().split()
        return int(kids[0]) if kids else None
    except OSError:
        return None


def vm_rss(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) << 10
    except OSError:
        pass
    return None


class Phase:
    """One process under peak_rss: its stdout line by line (`on_line` may
    name the part of the run that follows the line, or return "kill"),
    VmRSS sampled per part, and the exact peak."""

    def __init__(self, name, cmd, peak_rss, on_line=None):
        self.name, self.cmd = name, cmd
        self.parts = {}  # part -> largest sampled RSS
        # The executable prints nothing between its start and its first
        # step line (the banner is flushed with it), so the first part
        # holds the first step too.
        self.part = "start+first step"
        self.lines = []
        self.killed = False
        log(f"$ {shlex.join(cmd)}")
        t0 = time.monotonic()
        p = subprocess.Popen([peak_rss] + cmd, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, bufsize=1)
        err = []
        te = threading.Thread(target=lambda: err.extend(p.stderr), daemon=True)
        te.start()
        done = threading.Event()
        ts = threading.Thread(target=self._sample, args=(p.pid, done),
                              daemon=True)
        ts.start()
        def hung():
            kid = child_of(p.pid)
            if kid is not None:
                os.kill(kid, signal.SIGKILL)
        timer = threading.Timer(TIMEOUT_S, hung)
        timer.start()
        for line in p.stdout:
            self.lines.append(line)
            what = on_line(line) if on_line else None
            if what == "kill" and not self.killed:
                kid = child_of(p.pid)
                if kid is not None:
                    os.kill(kid, signal.SIGKILL)
                    self.killed = True
            elif what:
                self.part = what
        self.rc = p.wait()
        timer.cancel()
        done.set()
        ts.join()
        te.join()
        self.secs = time.monotonic() - t0
        self.out, self.err = "".join(self.lines), "".join(err)
        m = re.search(r"^peak_rss: (\d+) KiB$", self.err, re.M)
        if not m:
            sys.exit(f"FAILED: {name}: no peak_rss line (exit {self.rc}):\n"
                     f"{self.out}{self.err}")
        self.peak = int(m.group(1)) << 10

    def _sample(self, ppid, done):
        pid = None
        while not done.is_set():
            pid = pid or child_of(ppid)
            rss = vm_rss(pid) if pid else None
            if rss is not None:
                self.parts[self.part] = max(self.parts.get(self.part, 0), rss)
            time.sleep(SAMPLE_S)

    def check_ok(self):
        if self.rc != 0:
            sys.exit(f"FAILED: {self.name} (exit {self.rc}): "
                     f"{shlex.join(self.cmd)}\n{self.out}{self.err}")

    def sampled(self):
        return ", ".join(f"{k} {mib(v)}" for k, v in self.parts.items())

    def step_arena_peak(self):
        m = re.search(r"^device: step arena peak ([0-9.]+) (B|KiB|MiB|GiB) of",
                      self.out, re.M)
        return int(float(m.group(1)) * UNITS[m.group(2)]) if m else None


def parts_by_line(steps, every, checkpoints):
    """Names the part of an executable's run that follows each stdout line:
    a step line starts the checkpoint written after it (when one is due),
    else the next step or, after the last, the gather and --save."""
    def on_line(line):
        m = re.match(r"step (\d+)/\d+ ", line)
        if m:
            s = int(m.group(1))
            if checkpoints and (s == steps or s % every == 0):
                return "checkpoint"
            return "steps" if s < steps else "save"
        m = re.match(r"  checkpoint .*/step-(\d+) \(", line)
        if m:
            return "steps" if int(m.group(1)) < steps else "save"
        if line.startswith("done:"):
            return "save"
        return None
    return on_line


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spillwayc", required=True)
    ap.add_argument("--peak-rss", required=True, help="the peak_rss tool")
    ap.add_argument("--make-gpt", required=True,
                    help="bench/make_gpt_onnx.py")
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--calibration-d-model", type=int, default=None,
                    help="width of the calibration model (default: --heads)")
    ap.add_argument("--calibration-vocab", type=int, default=16)
    ap.add_argument("--place", default="params=ssd,optimizer=ssd,gradients=ssd")
    ap.add_argument("--gpu-mem", default=None,
                    help="bytes (default: the smallest that fits)")
    ap.add_argument("--host-mem", default=None,
                    help="bytes (default: the smallest that fits)")
    ap.add_argument("--min-state-ratio", type=float, default=3.0,
                    help="parameters + AdamW state must be at least this "
                         "many times --host-mem, and more than the start's "
                         "bound (0: neither; to try the script on a small "
                         "model)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--checkpoint-every", type=int, default=1)
    ap.add_argument("--device", default="loopback",
                    help="a device that reports its step arena peak")
    ap.add_argument("--constant-mib", type=float, default=64)
    ap.add_argument("--out", required=True, help="a scratch directory")
    ap.add_argument("--keep", action="store_true",
                    help="keep the big files (model data, checkpoints) of a "
                         "passing run")
    a = ap.parse_args()
    # In order with the FAILED line on stderr when both go to one pipe.
    sys.stdout.reconfigure(line_buffering=True)
    if a.checkpoint_every >= a.steps:
        ap.error("--checkpoint-every must be below --steps: phase 3 is killed "
                 "after a checkpoint, before the last step")
    os.makedirs(a.out, exist_ok=True)
    const = int(a.constant_mib * MIB)
    failed = []
    t_start = time.monotonic()

    # The model and its plan.
    mdir = os.path.join(a.out, "model")
    cfg = make_gpt(a, mdir, a.d_model, a.vocab)
    model = os.path.join(mdir, "gpt.onnx")
    exe = os.path.join(a.out, "exe")
    plan = ["--place", a.place]
    if a.gpu_mem and a.host_mem:
        b = {"gpu": int(a.gpu_mem), "host": int(a.host_mem)}
        how = "given"
    else:
        b = smallest_budgets([a.spillwayc, model, "-o", exe] + plan)
        b.update({k: int(v) for k, v in (("gpu", a.gpu_mem),
                                          ("host", a.host_mem)) if v})
        how = "the smallest that fit"
    state = 12 * cfg["params"]
    ratio = state / b["host"]
    log(f"model: GPT L={a.layers} D={a.d_model} H={a.heads} V={a.vocab} "
        f"S={a.seq} B={a.batch}: {cfg['params']} parameters, "
        f"{mib(cfg['param_bytes'])} of weights; parameters + AdamW state "
        f"{mib(state)} = {ratio:.1f} x --host-mem")
    log(f"budgets: --gpu-mem {b['gpu']} ({mib(b['gpu'])}) --host-mem "
        f"{b['host']} ({mib(b['host'])}) ({how}; {a.place})")
    if ratio < a.min_state_ratio:
        sys.exit(f"FAILED: the model's state is only {ratio:.1f} x --host-mem "
                 f"(need {a.min_state_ratio:g}): add layers")
    # A process holding all of the state at once must exceed the start's
    # bound, or the bound does not show that nothing does.
    if a.min_state_ratio > 0 and state <= b["gpu"] + b["host"] + const:
        sys.exit(f"FAILED: the model's state, {mib(state)}, is within "
                 f"--gpu-mem + --host-mem + C = "
                 f"{mib(b['gpu'] + b['host'] + const)}: add layers")
    budgets = ["--gpu-mem", str(b["gpu"]), "--host-mem", str(b["host"])]

    # Phase 1's bound: the compiler on the same graph with next to no
    # weight bytes.
    cal = os.path.join(a.out, "calibration")
    ccfg = make_gpt(a, os.path.join(cal, "model"),
                    a.calibration_d_model or a.heads, a.calibration_vocab)
    cmodel = os.path.join(cal, "model", "gpt.onnx")
    cexe = os.path.join(cal, "exe")
    cb = smallest_budgets([a.spillwayc, cmodel, "-o", cexe] + plan)
    calib = Phase("calibration compile",
                  [a.spillwayc, cmodel, "-o", cexe] + plan +
                  ["--gpu-mem", str(cb["gpu"]), "--host-mem", str(cb["host"])],
                  a.peak_rss)
    calib.check_ok()
    log(f"calibration: the same graph with {ccfg['params']} parameters "
        f"({mib(ccfg['param_bytes'])}): spillwayc peak {mib(calib.peak)}")

    p1 = Phase("phase 1 compile", [a.spillwayc, model, "-o", exe] + plan +
               budgets, a.peak_rss)
    p1.check_ok()

    swap = os.path.join(a.out, "swap")
    os.makedirs(swap, exist_ok=True)
    ck = os.path.join(a.out, "ck")
    common = ["--input", f"tokens={os.path.join(mdir, 'tokens.npy')}",
              "--input", f"targets={os.path.join(mdir, 'targets.npy')}",
              "--device", a.device, "--print-every", "1"]
    run_args = common + ["--ssd", swap]
    steps = ["--steps", str(a.steps)]
    ckpt = ["--checkpoint-dir", ck, "--checkpoint-every",
            str(a.checkpoint_every)]
    lines = parts_by_line(a.steps, a.checkpoint_every, True)
    plain = parts_by_line(a.steps, a.checkpoint_every, False)

    p2 = Phase("phase 2 start", [exe, "--steps", "0"] + run_args, a.peak_rss)
    p2.check_ok()

    def kill_after_checkpoint(line):
        if re.match(r"  checkpoint .*/step-\d+ \(", line):
            return "kill"
        return lines(line)
    p3 = Phase("phase 3 train", [exe] + steps + run_args + ckpt, a.peak_rss,
               kill_after_checkpoint)
    if not p3.killed or p3.rc != 128 + signal.SIGKILL:
        sys.exit(f"FAILED: phase 3 was not killed after a checkpoint (exit "
                 f"{p3.rc}; give it more --steps after --checkpoint-every):\n"
                 f"{p3.out}{p3.err}")
    log(f"phase 3: killed with SIGKILL after: {p3.lines[-1].strip()}")

    resumed = os.path.join(a.out, "resumed.safetensors")
    p4 = Phase("phase 4 resume", [exe] + steps + run_args + ckpt +
               ["--resume", "--save", resumed], a.peak_rss, lines)
    p4.check_ok()
    m = re.search(r"^  resume: from '[^']*/step-(\d+)' \(step (\d+) of", p4.out,
                  re.M)
    if not m or int(m.group(2)) < 1:
        sys.exit(f"FAILED: phase 4 did not resume from a checkpoint:\n{p4.out}")
    log(f"phase 4: resumed from step {int(m.group(2))} of {a.steps}")

    full = os.path.join(a.out, "full.safetensors")
    p5 = Phase("phase 5 full", [exe] + steps + run_args + ["--save", full],
               a.peak_rss, plain)
    p5.check_ok()

    rexe = os.path.join(a.out, "resident")
    p6c = Phase("phase 6 resident compile", [a.spillwayc, model, "-o", rexe],
                a.peak_rss)
    p6c.check_ok()
    resident = os.path.join(a.out, "resident.safetensors")
    p6 = Phase("phase 6 resident", [rexe] + steps + common +
               ["--save", resident], a.peak_rss, plain)
    p6.check_ok()

    # The verdicts.
    work = {}
    for p in (p4, p5):
        w = p.step_arena_peak()
        if w is None:
            sys.exit(f"FAILED: {p.name} printed no 'device: step arena peak' "
                     f"line (--device {a.device} must report one):\n{p.out}")
        work[p.name] = w
    w_train = max(work.values())

    def verdict(p, bound, how):
        ok = p.peak <= bound
        log(f"{p.name}: peak {mib(p.peak)}; bound {mib(bound)} ({how}): "
            + ("within" if ok else f"EXCEEDS by {mib(p.peak - bound)}")
            + f"; needs C >= {mib(p.peak - bound + const)}; {p.secs:.1f} s; "
            f"sampled {p.sampled()}")
        if not ok:
            failed.append(f"{p.name} RSS")

    verdict(p1, calib.peak + const,
            f"calibration compile {mib(calib.peak)} + C {a.constant_mib:g} MiB")
    arenas = b["gpu"] + b["host"]
    for p, w, whose in ((p2, 0, "no step"), (p3, w_train, "phases 4-5's"),
                        (p4, work[p4.name], "its own"),
                        (p5, work[p5.name], "its own")):
        verdict(p, arenas + w + const,
                f"--gpu-mem {mib(b['gpu'])} + --host-mem {mib(b['host'])} + "
                f"working {mib(w)} ({whose}) + C {a.constant_mib:g} MiB")
    log(f"phase 6 resident: peak {mib(p6.peak)} (no plan: holds all its "
        f"state; not bounded); compile {mib(p6c.peak)}; {p6.secs:.1f} s")

    for name, path in (("resumed (phase 4)", resumed),
                       ("resident (phase 6)", resident)):
        if not same_bytes(path, full):
            log(f"weights: {name} differ from the uninterrupted run's")
            failed.append(f"weights of {name}")
    if not any(f.startswith("weights") for f in failed):
        log("weights: resumed == uninterrupted == resident, bit for bit")
    log(f"total: {time.monotonic() - t_start:.1f} s")
    if failed:
        sys.exit(f"FAILED: {', '.join(failed)}")
    if not a.keep:
        for path in (mdir, ck, swap, exe + ".weights", rexe + ".weights"):
            if os.path.isdir(path):
                shutil.rmtree(path)
            elif os.path.exists(path):
                os.remove(path)
    log("bounded memory: every phase within its bound")


def same_bytes(x, y):
    with open(x, "rb") as f, open(y, "rb") as g:
        while True:
            u, v = f.read(1 << 20), g.read(1 << 20)
            if u != v:
                return False
            if not u:
                return True


if __name__ == "__main__":
    main()
