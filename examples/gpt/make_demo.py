#!/usr/bin/env python3
"""Exports the demo's small GPT as a user would: a fresh Hugging Face GPT-2,
torch.onnx.export at its defaults (dynamo=True: the optimizer on, weights as
external data). Needs torch, transformers, onnxscript; setup.sh only reads the
committed files.

    /work/big/torchenv/bin/python examples/gpt/make_demo.py [--out DIR]

Writes into --out (default: this directory):
  demo_train.onnx (+ .onnx.data)   forward(input_ids, labels) ->
                                   model(input_ids=..., labels=...).loss,
                                   HF's own shifted cross-entropy, B x S tokens
  demo_forward.onnx                model(input_ids).logits for sampling, [1, S];
                                   its weights are not committed (sample.py
                                   reads the trained ones with --weights and
                                   compiles this graph against a zero file)
Byte-level vocabulary (256: the text's bytes), so no tokenizer is needed.
"""
import argparse
import os
import warnings

warnings.filterwarnings("ignore")
import logging  # noqa: E402

logging.disable(logging.WARNING)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import transformers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
B, S = 8, 64


class WithLoss(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, labels):
        return self.model(input_ids=input_ids, labels=labels).loss


class Logits(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids).logits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=HERE)
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=256, n_positions=S, n_embd=128, n_layer=6,
                                  n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  bos_token_id=0, eos_token_id=0, use_cache=False)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    n = sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, 256, (B, S))
    train = os.path.join(args.out, "demo_train.onnx")
    torch.onnx.export(WithLoss(model), (ids, ids.clone()), train, dynamo=True)
    fwd = os.path.join(args.out, "demo_forward.onnx")
    torch.onnx.export(model, (ids[:1],), fwd, dynamo=True, input_names=["input_ids"],
                      output_names=["logits"])
    # The forward graph's weights come from training (--weights); keep only
    # the graph, its external data references intact.
    if os.path.exists(fwd + ".data"):
        os.remove(fwd + ".data")
    print(f"GPT-2 {cfg.n_layer} x {cfg.n_embd}, vocab 256, {n / 1e6:.2f}M parameters; "
          f"wrote {train} (+.data), {fwd}")


if __name__ == "__main__":
    main()
