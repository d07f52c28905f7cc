#!/usr/bin/env python3
"""Trains the examples' one-block GPT and measures the loss it ends at.

For FOAM's convergence check (test/e2e/foam-convergence.test) and the
learning-rate sweep behind it (bench/foam_lr_sweep.py, which imports this).

  foam_convergence.py run EXE --data examples/gpt --lr LR [--steps 300] [--orders 5]
                          [--foam-alpha A] [--beta2 B2] --work DIR --out RESULT.json
      trains EXE (a spillwayc executable of examples/gpt/gpt_block.onnx) from
      its initial weights on tokens.npy/targets.npy of --data, once per batch
      order (below), evaluates each run's final weights and writes
      RESULT.json with the mean over the orders ("final_loss").
  foam_convergence.py compare CANDIDATE.json BASELINE.json [--max-ratio 1.02]
      passes (exit 0) when CANDIDATE's final loss <= max-ratio x BASELINE's;
      otherwise exits 1; prints both losses and the ratio either way.

A run's final loss is the mean cross-entropy of its final weights over every
sequence the task has.  The task (examples/gpt/README.md) walks a fixed
cycle of the V = 32 tokens from a uniform start with a stride of 1 or 2, so
with S = 8 there are exactly 64 distinct sequences, each equally likely, and
the 256 training sequences already cover all of them: no sequence can be
held out.  The mean over the 64 is the task's expected loss, without the
batch-to-batch noise of the training losses (one batch of 4 sequences per
step).  It is measured with the executable itself: the saved weights,
--lr 0 --weight-decay 0 (the weights stay bit for bit the same) and the 64
sequences as 16 batches of 4; each step logs its batch's loss before the
(null) update.

One run still depends on the order of the data as much as on a few percent
of learning rate (on this model the final loss of one setting moves by 5-10%
from one order to another), so --orders K trains K times on the same 64
batches: in the bundled order, then in K - 1 orders permuted with seeds
1 .. K - 1; final_loss is the mean of the K final losses.  Each record also
has the mean training loss of the last 20 steps ("last20_train_loss",
averaged the same way), for comparison.
"""

import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np

VOCAB, SEQ, BATCH = 32, 8, 4
STRIDES = (1, 2)
LAST = 20  # steps averaged in last20_train_loss


def task_perm(data_dir):
    """The task's successor map, as examples/gpt/make_gpt_block.py draws it
    (its first draw from default_rng(0)), checked against the bundled data."""
    order = np.random.default_rng(0).permutation(VOCAB)
    perm = np.empty(VOCAB, dtype=np.int64)
    perm[order] = np.roll(order, -1)
    tokens = np.load(os.path.join(data_dir, "tokens.npy"))
    targets = np.load(os.path.join(data_dir, "targets.npy"))
    ok = (targets == perm[tokens]) | (targets == perm[perm[tokens]])
    if tokens.shape[1:] != (BATCH, SEQ) or not ok.all():
        sys.exit(f"foam_convergence.py: {data_dir}/tokens.npy, targets.npy are not walks of the "
                 f"examples' task (seed 0, V={VOCAB}, S={SEQ}, B={BATCH})")
    return perm


def all_sequences(perm):
    """tokens, targets [64 / BATCH, BATCH, SEQ]: every (start, stride) walk once."""
    walks = []
    for stride in STRIDES:
        for start in range(VOCAB):
            w = [start]
            for _ in range(SEQ):
                t = w[-1]
                for _ in range(stride):
                    t = int(perm[t])
                w.append(t)
            walks.append(w)
    walks = np.array(walks, dtype=np.int64)
    n = len(walks) // BATCH
    return walks[:, :SEQ].reshape(n, BATCH, SEQ), walks[:, 1:].reshape(n, BATCH, SEQ)


def read_losses(path):
    with open(path) as f:
        losses = [json.loads(line)["loss"] for line in f if line.strip()]
    for i, loss in enumerate(losses, 1):
        if not math.isfinite(loss):
            return losses[:i]
    return losses


def execute(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"foam_convergence.py: {' '.join(cmd)} failed (exit {r.returncode}):\n{r.stdout}")


def run(exe, data_dir, lr, steps, work, alpha=None, order_seed=0, beta2=None, tag=None):
    """Trains exe, evaluates the final weights; returns the result record."""
    os.makedirs(work, exist_ok=True)
    tag = tag or f"{os.path.basename(exe)}-lr{lr:g}" + (f"-a{alpha:g}" if alpha is not None else "") + \
        (f"-o{order_seed}" if order_seed else "") + (f"-b{beta2:g}" if beta2 is not None else "")
    perm = task_perm(data_dir)
    ev_tok, ev_tgt = os.path.join(work, "eval.tokens.npy"), os.path.join(work, "eval.targets.npy")
    if not (os.path.exists(ev_tok) and os.path.exists(ev_tgt)):
        t, g = all_sequences(perm)
        np.save(ev_tok, t)
        np.save(ev_tgt, g)
    tok, tgt = os.path.join(data_dir, "tokens.npy"), os.path.join(data_dir, "targets.npy")
    if order_seed:
        t, g = np.load(tok), np.load(tgt)
        p = np.random.default_rng(order_seed).permutation(len(t))
        tok, tgt = os.path.join(work, f"order{order_seed}.tokens.npy"), os.path.join(work, f"order{order_seed}.targets.npy")
        np.save(tok, t[p])
        np.save(tgt, g[p])
    hp = ["--foam-alpha", repr(alpha)] if alpha is not None else []
    if beta2 is not None:
        hp += ["--beta2", repr(beta2)]
    log, weights, evlog = (os.path.join(work, f"{tag}.{x}") for x in ("train.jsonl", "safetensors", "eval.jsonl"))
    execute([exe, "--input", f"tokens={tok}", "--input", f"targets={tgt}", "--steps", str(steps),
             "--lr", repr(lr), *hp, "--print-every", str(steps), "--log-json", log, "--save", weights])
    losses = read_losses(log)
    rec = {"executable": exe, "lr": lr, "foam_alpha": alpha, "beta2": beta2, "steps": steps, "order_seed": order_seed,
           "final_step_loss": losses[-1] if losses else None}
    if len(losses) < steps:  # diverged: a non-finite loss
        rec.update(diverged=True, population_loss=math.inf, last20_train_loss=math.inf)
        return rec
    n_eval = len(np.load(ev_tok))
    execute([exe, "--weights", weights, "--input", f"tokens={ev_tok}", "--input", f"targets={ev_tgt}",
             "--steps", str(n_eval), "--lr", "0", "--weight-decay", "0", "--print-every", str(n_eval),
             "--log-json", evlog])
    ev = read_losses(evlog)
    rec.update(diverged=False,
               population_loss=float(np.mean(ev)) if len(ev) == n_eval else math.inf,
               last20_train_loss=float(np.mean(losses[-LAST:])))
    return rec


def run_orders(exe, data_dir, lr, steps, work, orders, alpha=None, beta2=None):
    """run() in the bundled order and orders - 1 permuted ones; their means."""
    runs = [run(exe, data_dir, lr, steps, work, alpha, k, beta2) for k in range(orders)]
    pops = [r["population_loss"] for r in runs]
    return {"executable": exe, "lr": lr, "foam_alpha": alpha, "beta2": beta2, "steps": steps, "orders": orders,
            "final_loss": float(np.mean(pops)), "final_loss_std": float(np.std(pops)),
            "last20_train_loss": float(np.mean([r["last20_train_loss"] for r in runs])),
            "runs": runs}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="train and evaluate one executable at one learning rate")
    r.add_argument("exe")
    r.add_argument("--data", required=True, help="directory of tokens.npy, targets.npy (examples/gpt)")
    r.add_argument("--lr", type=float, required=True)
    r.add_argument("--steps", type=int, default=300)
    r.add_argument("--orders", type=int, default=5, help="batch orders to average over (default 5)")
    r.add_argument("--foam-alpha", type=float, default=None, help="default: the compiled one")
    r.add_argument("--beta2", type=float, default=None, help="default: the compiled one")
    r.add_argument("--work", required=True, help="directory for logs, weights and the evaluation set")
    r.add_argument("--out", required=True, help="result JSON")
    c = sub.add_parser("compare", help="candidate's final loss <= max-ratio x baseline's?")
    c.add_argument("candidate")
    c.add_argument("baseline")
    c.add_argument("--max-ratio", type=float, default=1.02)
    c.add_argument("--metric", default="final_loss", choices=("final_loss", "last20_train_loss"))
    a = ap.parse_args()
    if a.cmd == "run":
        if a.orders < 1 or a.steps < LAST:
            ap.error(f"need --orders >= 1 and --steps >= {LAST}")
        rec = run_orders(a.exe, a.data, a.lr, a.steps, a.work, a.orders, a.foam_alpha, a.beta2)
        with open(a.out, "w") as f:
            json.dump(rec, f, indent=1)
            f.write("\n")
        print(f"{os.path.basename(a.exe)} lr {a.lr:g}: final loss {rec['final_loss']:.5f} "
              f"(mean of {a.orders} orders; std {rec['final_loss_std']:.5f}), "
              f"last {LAST} steps {rec['last20_train_loss']:.5f}")
        return
    cand, base = (json.load(open(p)) for p in (a.candidate, a.baseline))
    cv, bv = cand[a.metric], base[a.metric]
    ratio = cv / bv if math.isfinite(cv) and bv > 0 else math.inf
    ok = ratio <= a.max_ratio
    name = lambda rec: f"{os.path.basename(rec['executable'])} lr {rec['lr']:g}"
    print(f"{a.metric}: {name(cand)} {cv:.5f}, {name(base)} {bv:.5f}, ratio {ratio:.4f} "
          f"{'<=' if ok else '>'} {a.max_ratio:g}: {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
