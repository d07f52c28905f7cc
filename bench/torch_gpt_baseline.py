#!/usr/bin/env python3
"""PyTorch eager training of bench/make_gpt_onnx.py's GPT: the baseline.

The same architecture as the ONNX graph Spillway compiles (pre-LN blocks,
separate q/k/v/proj linears with biases, exact GELU MLP of width 4D, learned
positions, untied LM head without bias, mean cross-entropy), trained the
way ../shared/hardware/probe/gpt_torch.py measured PyTorch on the H200:
bf16 autocast, fused AdamW (Spillway's defaults: lr 1e-3, betas 0.9/0.999,
eps 1e-8, weight decay 0.01), scaled_dot_product_attention (causal).
Prints one JSON object: tokens/s and model TFLOP/s (6 * N * tokens/s, N the
parameter count) over the timed steps, after warm-up steps.
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.proj = nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, S, D = x.shape
        y = self.ln1(x)
        split = lambda t: t.view(B, S, self.h, D // self.h).transpose(1, 2)
        a = F.scaled_dot_product_attention(split(self.q(y)), split(self.k(y)), split(self.v(y)),
                                           is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, S, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, seq):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Parameter(torch.zeros(seq, d))
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), tgt.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--name", default="")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_gpt_baseline: no CUDA device visible to PyTorch")
    torch.manual_seed(0)
    dev = "cuda"
    model = GPT(args.vocab, args.d_model, args.layers, args.heads, args.seq).to(dev)
    for p in model.parameters():  # N(0, 0.02) as make_gpt_onnx.py draws
        if p.dim() >= 2:
            nn.init.normal_(p, std=0.02)
    n = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01, fused=True)
    idx = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)
    tgt = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / args.steps
    tokens = args.batch * args.seq / dt
    print(json.dumps({
        "name": args.name, "framework": f"torch {torch.__version__} eager, bf16 autocast, fused AdamW, SDPA",
        "params": n, "batch": args.batch, "seq": args.seq, "s_per_step": dt,
        "tokens_per_s": tokens, "model_tflops": 6 * n * tokens / 1e12,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30, "loss": float(loss)}))


if __name__ == "__main__":
    main()
