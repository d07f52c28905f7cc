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
  demo_forward.onnx                model(input_ids).logits for sampling, [1, S]:
                                   exported with optimize=False, so each
                                   state_dict entry is one initializer of its
                                   own name (the optimizer would merge the
                                   equal LayerNorm weights and fold wpe) and
                                   nothing else is an initializer; its weights
                                   are not committed: sample.py substitutes
                                   the trained ones from --save's safetensors.
                                   Its metadata `spillway.parameters` (the
                                   python package's format) names the ties.
Byte-level vocabulary (256: the text's bytes), so no tokenizer is needed.
"""
import argparse
import ast
import json
import os
import warnings

warnings.filterwarnings("ignore")
import logging  # noqa: E402

logging.disable(logging.WARNING)
import numpy as np  # noqa: E402
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


def folds_of(path, model):
    """{parameter: fold} for each initializer of `path` folded from exactly one
    parameter, with that parameter's element count."""
    import onnx

    m = onnx.load(path, load_external_data=False)
    sd = model.state_dict()
    sizes = {i.name: int(np.prod(i.dims)) for i in m.graph.initializer}
    folds = {}
    for vi in m.graph.value_info:
        for prop in vi.metadata_props:
            if prop.key != "pkg.onnxscript.optimizer.folded_from" or vi.name not in sizes:
                continue
            srcs = [n[len("model."):] for n in ast.literal_eval(prop.value)
                    if n.startswith("model.") and n[len("model."):] in sd]
            if len(srcs) == 1 and sd[srcs[0]].numel() == sizes[vi.name]:
                folds[srcs[0]] = vi.name
    return folds


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
    prog = torch.onnx.export(model, (ids[:1],), dynamo=True, optimize=False,
                             input_names=["input_ids"], output_names=["logits"])
    params = {}
    for init in prog.model.graph.initializers:
        if init not in model.state_dict():
            raise SystemExit(f"forward initializer '{init}' is not a state_dict entry")
        params[init] = {"state_dict": init, "shape": list(model.state_dict()[init].shape)}
    groups = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    ties = [sorted(g, key=lambda n: n not in params) for g in groups.values() if len(g) > 1]
    prog.model.metadata_props["spillway.parameters"] = json.dumps(
        {"format": 1, "model_class": type(model).__name__, "wrapper_prefix": "",
         "parameters": params, "ties": ties, "buffers": [], "unused": []})
    # The training export's optimizer folded wpe[arange(S)] into a constant
    # ("embedding_1"), which spillwayc trains as wpe but --save writes under
    # the fold's name: tell sample.py which saved tensor holds which
    # parameter (all of it when S == n_positions).
    prog.model.metadata_props["spillway.demo.folds"] = json.dumps(folds_of(train, model))
    for node in prog.model.graph:  # paths of this machine, and most of the file
        node.metadata_props.pop("pkg.torch.onnx.stack_trace", None)
    # The weights come from training (sample.py): keep only the graph, its
    # external data references intact.
    prog.save(fwd, external_data=True)
    if os.path.exists(fwd + ".data"):
        os.remove(fwd + ".data")
    print(f"GPT-2 {cfg.n_layer} x {cfg.n_embd}, vocab 256, {n / 1e6:.2f}M parameters; "
          f"wrote {train} (+.data), {fwd}")


if __name__ == "__main__":
    main()
