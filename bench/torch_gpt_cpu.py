#!/usr/bin/env python3
"""PyTorch eager CPU training of bench/make_gpt_onnx.py's GPT: the CPU baseline.

The model of bench/torch_gpt_baseline.py (the same architecture as the ONNX
graph Spillway compiles: pre-LN blocks, q/k/v/proj linears with biases,
exact GELU MLP of width 4D, learned positions, untied LM head without bias,
mean cross-entropy; causal scaled_dot_product_attention), here in fp32 on
the CPU with torch.optim.AdamW at its defaults (lr 1e-3, betas 0.9/0.999,
eps 1e-8, weight decay 0.01: Spillway's defaults too; foreach, torch's
default on CPU tensors), torch.set_num_threads(--threads). Initialized like
make_gpt_onnx.py: N(0, 0.02) matrices and embeddings, zero biases,
LayerNorm 1 and 0; the batch is make_gpt_onnx.py's tokens.npy / targets.npy
when given. Times --warmup steps untimed, then --steps timed ones (each a
forward, backward, optimizer step and zero_grad); with --autocast bf16 the
forward and loss run under torch.autocast("cpu", dtype=torch.bfloat16)
(PyTorch Lightning's "bf16-mixed": fp32 parameters and AdamW state, the
linears and attention on bf16 copies); prints one JSON object:
seconds per step (mean of the timed steps, and each), tokens/s and model
GFLOP/s (6 * N * tokens/s).
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt_baseline import GPT  # noqa: E402  (the GPU baseline's model, unchanged)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", help="tokens.npy of make_gpt_onnx.py (default: random tokens)")
    ap.add_argument("--targets", help="targets.npy of make_gpt_onnx.py (with --tokens)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (default: %(default)s)")
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none",
                    help="bf16: the forward and loss under torch.autocast(bfloat16)")
    ap.add_argument("--name", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT(args.vocab, args.d_model, args.layers, args.heads, args.seq)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)  # as make_gpt_onnx.py draws
            elif "ln" in name and name.endswith("weight"):
                p.fill_(1.0)
            else:
                p.zero_()  # biases (nn.Linear draws them uniform otherwise)
    n = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters())
    if args.tokens:
        idx = torch.from_numpy(np.load(args.tokens)).long()
        tgt = torch.from_numpy(np.load(args.targets or args.tokens.replace("tokens", "targets"))).long()
        if tuple(idx.shape) != (args.batch, args.seq):
            raise SystemExit(f"torch_gpt_cpu: {args.tokens} is {tuple(idx.shape)}, not [{args.batch}, {args.seq}]")
    else:
        idx = torch.randint(0, args.vocab, (args.batch, args.seq))
        tgt = torch.randint(0, args.vocab, (args.batch, args.seq))

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
            loss = model(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    losses, times = [], []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        losses.append(step())
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    dt = sum(times) / len(times) if times else float("nan")
    tokens = args.batch * args.seq / dt
    print(json.dumps({
        "name": args.name, "autocast": args.autocast,
        "framework": f"torch {torch.__version__} eager CPU, "
                     f"{'bf16 autocast' if args.autocast == 'bf16' else 'fp32'}, torch.optim.AdamW "
                                       f"(defaults), SDPA", "threads": torch.get_num_threads(),
        "params": n, "batch": args.batch, "seq": args.seq, "warmup": args.warmup, "steps": args.steps,
        "s_per_step": dt, "step_s": times, "tokens_per_s": tokens, "model_gflops": 6 * n * tokens / 1e9,
        "losses": losses}))


if __name__ == "__main__":
    main()
