#!/usr/bin/env python3
"""Checks the runtime's FOAM kernel (spw_foam) against NumPy on random shapes.

The NumPy side is written from the FOAM design note (FOAM.md: arXiv
2512.07112, the authors' foam_torch/foam_adam.py), in float64, materializing
what the fused kernel must not: unfold(ḡ), the residual R, the unfolded m
and v.  For a weight W (m×n), blocks of 2^l along the last
dimension, the last block zero padded and every block mean divided by 2^l:

    ḡ = blockmean(G)              q̄ = blockmean(G ⊙ G)
    m̃ ← β1 m̃ + (1−β1) ḡ           ṽ ← β2 ṽ + (1−β2) q̄
    R = G − unfold(ḡ)
    m = unfold(m̃) + R             v = unfold(ṽ) + R ⊙ R
    W ← W − lr √(1−β2^t)/(1−β1^t) · α · m / (√v + ε)
    W ← W − lr · wd · W

Part 1 draws matrices with a fixed seed (fixed edge cases first: a last
dimension not divisible by 2^l, n < 2^l, one row, one column, levels 0..3;
then random shapes), random non-zero weights and gradients of varied scale,
random α, β, ε, and weight decay 0 or > 0; runs `spillway-foam-step` for T
steps and compares the final weights W, the update W_T − W_0 (allowing
T·2^-23·‖W‖ for storing W in float32) and the folded m̃, ṽ with the reference
by relative Frobenius norm.

Part 2 runs the kernel at l = 0, α = 1 and the runtime's AdamW kernel
(torch.optim.AdamW) on the same gradients: FOAM.md says FOAM is then Adam.
The formulas differ by design in two places only: AdamW decays the weight
before the update, FOAM after (lr·wd·|update| a step), and AdamW adds ε to
√v/√(1−β2^t) rather than to √v.  With no decay and a negligible ε the weights
must agree to float32 rounding; otherwise the kernels' difference must be the
one the two formulas predict in float64.

--variant replaces one rule of the reference by a plausible wrong one, to show
the comparison fails when the kernel and the equations disagree (foam-kernel.test
runs each under `not`).  Exit status: 0 pass, 1 mismatch, 2 usage or tool error.
"""

import argparse
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

VARIANTS = {
    "none": "the equations above",
    "pad-mean-over-valid": "the padded last block's mean divides by its real elements, not by 2^l",
    "no-residual": "m = unfold(m̃), v = unfold(ṽ) (no residual R)",
    "eps-inside-sqrt": "√(v + ε) instead of √v + ε",
    "decay-before": "the weight decay before the update (as torch AdamW)",
    "no-bias-correction2": "step lr/(1−β1^t), without √(1−β2^t)",
}


# ---------------------------------------------------------------------------
# The reference, float64, literally from FOAM.md.
# ---------------------------------------------------------------------------


def blockmean(x, level, variant):
    """[m, n] -> [m, ceil(n / 2^l)]: zero pad the last block, divide by 2^l."""
    b = 1 << level
    rows, n = x.shape
    nb = -(-n // b)
    padded = np.zeros((rows, nb * b))
    padded[:, :n] = x
    sums = padded.reshape(rows, nb, b).sum(axis=2)
    if variant == "pad-mean-over-valid":
        counts = np.full(nb, float(b))
        counts[-1] = n - (nb - 1) * b
        return sums / counts
    return sums / b


def unfold(y, n, level):
    """[m, nb] -> [m, n]: each block value repeated over its block."""
    return np.repeat(y, 1 << level, axis=1)[:, :n]


def foam_reference(w0, grads, level, alpha, lr, beta1, beta2, eps, wd, variant="none"):
    """The final W and the folded m̃, ṽ after T = len(grads) steps."""
    w = w0.astype(np.float64).copy()
    n = w.shape[1]
    mt = np.zeros((w.shape[0], -(-n // (1 << level))))
    vt = np.zeros_like(mt)
    for t, g32 in enumerate(grads, 1):
        g = g32.astype(np.float64)
        gbar = blockmean(g, level, variant)
        qbar = blockmean(g * g, level, variant)
        mt = beta1 * mt + (1 - beta1) * gbar
        vt = beta2 * vt + (1 - beta2) * qbar
        r = g - unfold(gbar, n, level)
        if variant == "no-residual":
            r = np.zeros_like(r)
        m = unfold(mt, n, level) + r
        v = unfold(vt, n, level) + r * r
        bc2 = 1.0 if variant == "no-bias-correction2" else 1 - beta2**t
        step = lr * math.sqrt(bc2) / (1 - beta1**t)
        denom = np.sqrt(v + eps) if variant == "eps-inside-sqrt" else np.sqrt(v) + eps
        if variant == "decay-before":
            w = w - lr * wd * w
        w = w - step * alpha * m / denom
        if variant != "decay-before":
            w = w - lr * wd * w
    return w, mt, vt


# ---------------------------------------------------------------------------
# Cases and the tool.
# ---------------------------------------------------------------------------


def nonzero(rng, shape, scale):
    """Random signs times log-normal magnitudes around `scale`: never zero."""
    mag = scale * np.exp(rng.normal(0.0, 1.0, size=shape))
    return (np.where(rng.random(shape) < 0.5, -1.0, 1.0) * mag).astype(np.float32)


def make_case(rng, rows, cols, level, steps):
    wscale = 10 ** rng.uniform(-2, 1)
    gscale = 10 ** rng.uniform(-4, 1)
    w0 = nonzero(rng, (rows, cols), wscale)
    # Every step's gradient at its own scale (within 10x of the case's).
    grads = np.stack([nonzero(rng, (rows, cols), gscale * 10 ** rng.uniform(-0.5, 0.5)) for _ in range(steps)])
    alpha = float(10 ** rng.uniform(-1, 0.3))
    # Adam's step moves an element by about alpha * lr: tie lr to the weights'
    # scale so the update is a visible part of W (1e-2 .. 3e-1 of it per
    # step), well above W's float32 resolution.
    lr = float(wscale * 10 ** rng.uniform(-2, -0.5) / alpha)
    wd = 0.0 if rng.random() < 0.5 else float(rng.uniform(0.01, 0.3))
    return {
        "shape": (rows, cols), "level": level, "w0": w0, "grads": grads, "alpha": alpha, "lr": lr,
        "beta1": float(rng.uniform(0.8, 0.95)), "beta2": float(rng.uniform(0.9, 0.999)),
        "eps": float(rng.choice([1e-8, 1e-6])), "wd": wd,
    }


# (rows, cols, level): the edges first.
EDGE_SHAPES = [
    (1, 37, 2),    # one row; 37 = 9 blocks of 4 + 1
    (5, 3, 3),     # n < 2^l: a single, padded block
    (4, 16, 2),    # divisible
    (7, 13, 1),    # odd n at block 2
    (3, 1, 3),     # one column
    (1, 1, 0),
    (6, 10, 0),    # l = 0: plain Adam
    (2, 9, 3),     # 8 + 1
    (9, 7, 2),     # 4 + 3
    (1, 5, 3),     # one row, n < 2^l
]


def cases(seed, steps, random_cases):
    rng = np.random.default_rng(seed)
    shapes = list(EDGE_SHAPES)
    for _ in range(random_cases):
        shapes.append((int(rng.integers(1, 41)), int(rng.integers(1, 71)), int(rng.integers(0, 4))))
    return [make_case(rng, r, c, l, steps) for r, c, l in shapes]


def run_tool(tool, workdir, w0, grads, optimizer, level, alpha, lr, beta1, beta2, eps, wd):
    np.save(os.path.join(workdir, "param.npy"), w0)
    np.save(os.path.join(workdir, "grads.npy"), grads)
    cmd = [tool, "--param", os.path.join(workdir, "param.npy"), "--grads", os.path.join(workdir, "grads.npy"),
           "--out-dir", workdir, "--optimizer", optimizer, "--level", str(level), "--alpha", repr(alpha),
           "--lr", repr(lr), "--beta1", repr(beta1), "--beta2", repr(beta2), "--eps", repr(eps),
           "--weight-decay", repr(wd)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return tuple(np.load(os.path.join(workdir, f + ".npy")) for f in ("w", "m", "v"))


def relnorm(actual, expected):
    den = np.linalg.norm(expected)
    diff = np.linalg.norm(actual.astype(np.float64) - expected)
    return diff / den if den else (0.0 if diff == 0 else math.inf)


def check_kernel(args, workdir):
    worst = {"W": 0.0, "dW": 0.0, "m~": 0.0, "v~": 0.0}
    worst_dw_limit = 0.0
    failures = 0
    all_cases = cases(args.seed, args.steps, args.random_cases)
    for i, c in enumerate(all_cases):
        hp = dict(level=c["level"], alpha=c["alpha"], lr=c["lr"], beta1=c["beta1"], beta2=c["beta2"],
                  eps=c["eps"], wd=c["wd"])
        w, m, v = run_tool(args.tool, workdir, c["w0"], c["grads"], "foam", **hp)
        rw, rm, rv = foam_reference(c["w0"], c["grads"], variant=args.variant, **hp)
        if m.shape != rm.shape or v.shape != rv.shape or w.shape != rw.shape:
            print(f"case {i}: shapes W {w.shape} m {m.shape} v {v.shape}, expected {rw.shape} {rm.shape} {rv.shape}")
            failures += 1
            continue
        # The update W_T - W_0 is judged relative to itself, allowing for what
        # storing W in float32 costs: the kernel rounds W twice a step (the
        # update, the decay), half an ulp each: T * 2^-23 * |W| in all. The
        # cases' lr keeps that a small part of the update (below ~1e-5).
        dw, rdw = w.astype(np.float64) - c["w0"], rw - c["w0"]
        w_rounding = args.steps * 2.0**-23 * max(np.linalg.norm(c["w0"]), np.linalg.norm(rw))
        errs = {"W": relnorm(w, rw), "dW": relnorm(dw, rdw), "m~": relnorm(m, rm), "v~": relnorm(v, rv)}
        limits = {"W": args.rtol, "dW": args.rtol + w_rounding / np.linalg.norm(rdw), "m~": args.rtol,
                  "v~": args.rtol}
        bad = [k for k, e in errs.items() if not e <= limits[k]]
        for k, e in errs.items():
            worst[k] = max(worst[k], e)
        worst_dw_limit = max(worst_dw_limit, limits["dW"])
        if bad or args.verbose:
            print(f"case {i}: W {c['shape']} l={c['level']} alpha={c['alpha']:.3g} lr={c['lr']:.3g} "
                  f"wd={c['wd']:.3g}: " + "  ".join(f"{k} {e:.2e}" for k, e in errs.items())
                  + f"  (dW limit {limits['dW']:.2e})"
                  + (f"  FAIL ({', '.join(bad)})" if bad else ""))
        failures += bool(bad)
    summary = "  ".join(f"{k} {e:.2e}" for k, e in worst.items())
    if failures:
        print(f"FAIL: FOAM kernel vs NumPy ({args.variant}): {failures} of {len(all_cases)} cases "
              f"over rtol {args.rtol:g}; max relative errors {summary}")
        return False
    print(f"PASS: FOAM kernel vs NumPy: {len(all_cases)} cases, {args.steps} steps, max relative errors "
          f"{summary} (rtol {args.rtol:g}; dW up to {worst_dw_limit:.2e} with W's rounding)")
    return True


def adamw_reference(w0, grads, lr, beta1, beta2, eps, wd):
    """torch.optim.AdamW in float64 (reference.py's AdamW, one parameter)."""
    w = w0.astype(np.float64).copy()
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g32 in enumerate(grads, 1):
        g = g32.astype(np.float64)
        w *= 1 - lr * wd
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        w -= lr / (1 - beta1**t) * m / (np.sqrt(v) / math.sqrt(1 - beta2**t) + eps)
    return w


# (weight decay, eps) of the AdamW comparison: first the setting where the
# two formulas coincide (no decay, eps negligible), then the defaults' kind.
ADAMW_SETTINGS = [(0.0, 1e-12), (0.0, 1e-8), (0.01, 1e-8), (0.1, 1e-8)]


def check_adamw(args, workdir):
    """FOAM at l = 0, α = 1 against the runtime's AdamW on the same gradients.

    For every setting: the largest elementwise relative difference of the
    two kernels' weights (relative to max(|W_0|, |W_T|)); and how far that difference is from the one the
    formulas predict (FOAM's float64 reference minus torch AdamW's), which
    must be float32 rounding.  With no decay and a negligible eps the two
    optimizers coincide and the weights must agree to --adamw-rtol.
    """
    rng = np.random.default_rng(args.seed + 1)
    ok = True
    for wd, eps in ADAMW_SETTINGS:
        worst = worst_unexplained = worst_state = 0.0
        for rows, cols in [(8, 8), (1, 33), (17, 5)]:
            w0 = nonzero(rng, (rows, cols), 0.1)
            grads = np.stack([nonzero(rng, (rows, cols), 10 ** rng.uniform(-3, 0)) for _ in range(args.steps)])
            hp = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=eps, wd=wd)
            wf, mf, vf = run_tool(args.tool, workdir, w0, grads, "foam", level=0, alpha=1.0, **hp)
            wa, ma, va = run_tool(args.tool, workdir, w0, grads, "adamw", level=0, alpha=1.0, **hp)
            wf, wa = wf.astype(np.float64), wa.astype(np.float64)
            rf, _, _ = foam_reference(w0, grads, level=0, alpha=1.0, **hp)
            ra = adamw_reference(w0, grads, **hp)
            # Relative to the weight's scale: max(|W_0|, |W_T|) (a weight that
            # ends near zero has rounding errors of its larger past values).
            scale = np.maximum(np.abs(w0), np.abs(wa))
            worst = max(worst, float(np.max(np.abs(wf - wa) / scale)))
            worst_unexplained = max(worst_unexplained, float(np.max(np.abs((wf - wa) - (rf - ra)) / scale)))
            worst_state = max(worst_state, relnorm(mf, ma.astype(np.float64)), relnorm(vf, va.astype(np.float64)))
        coincide = wd == 0.0 and eps < 1e-10
        good = worst_unexplained <= args.adamw_rtol and worst_state <= args.rtol
        if coincide:
            good &= worst <= args.adamw_rtol
        ok &= good
        print(f"{'PASS' if good else 'FAIL'}: FOAM l=0 alpha=1 vs AdamW, wd {wd:g} eps {eps:g}: max elementwise "
              f"relative difference of W {worst:.2e}"
              + (f" (limit {args.adamw_rtol:g}: the same optimizer)" if coincide else " (the formulas' difference)")
              + f", beyond the formulas' difference {worst_unexplained:.2e} (limit {args.adamw_rtol:g});"
              f" m, v {worst_state:.2e}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tool", required=True, help="the spillway-foam-step executable")
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps T (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the cases (default: %(default)s)")
    parser.add_argument("--random-cases", type=int, default=30,
                        help="random shapes after the edge cases (default: %(default)s)")
    parser.add_argument("--rtol", type=float, default=1e-5,
                        help="relative-norm tolerance on W, W_T - W_0 (beyond W's float32 rounding), m~ and v~ "
                        "(default: %(default)g)")
    parser.add_argument("--adamw-rtol", type=float, default=2e-6,
                        help="elementwise relative tolerance on FOAM l=0 alpha=1 vs AdamW weights where the "
                        "two coincide, and on their difference beyond the formulas' elsewhere (default: %(default)g)")
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="none",
                        help="a wrong reference, to see the check fail: "
                        + "; ".join(f"{k}: {v}" for k, v in VARIANTS.items()))
    parser.add_argument("--no-adamw", action="store_true", help="skip the comparison with AdamW")
    parser.add_argument("--verbose", action="store_true", help="print every case")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        try:
            ok = check_kernel(args, workdir)
            if not args.no_adamw:
                ok &= check_adamw(args, workdir)
        except RuntimeError as e:
            print(f"foam_kernel_check.py: error: {e}", file=sys.stderr)
            return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
