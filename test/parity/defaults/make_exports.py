#!/usr/bin/env python3
"""Exports tiny Hugging Face causal LMs the way users do, at the exporters' defaults.

Needs torch, transformers, onnxscript, onnx, onnxruntime, numpy (CI does not: it
reads the committed outputs). Run from anywhere:

    /work/big/torchenv/bin/python test/parity/defaults/make_exports.py [--out DIR] [--only NAME,...]

For each model family below, a tiny config with HF's own initialization (no
perturbation: LayerNorm / RMSNorm weights are ones, biases zeros, exactly what
the exporters merge and fold) and all dropouts 0, wrapped two ways:

    <m>_ex   forward(input_ids, labels) -> F.cross_entropy(logits[:, :-1], labels[:, 1:])
    <m>_hf   forward(input_ids, labels) -> model(input_ids=input_ids, labels=labels).loss

each exported by both exporters with nothing but their defaults (labels a
copy of the ids: torch.export makes one tensor passed twice a single graph
input, which would leave input_ids unread):

    <m>_<loss>_dynamo.onnx (+ .onnx.data)   torch.onnx.export(w, (ids, ids.clone()), path, dynamo=True)
    <m>_<loss>_ts.onnx                      torch.onnx.export(w, (ids, ids.clone()), path, dynamo=False,
                                                              opset_version=17)

The TorchScript exporter cannot export transformers' packed-sequence check
(aten::diff) at all, so for it alone that check is switched off, as every
TorchScript user of transformers >= 4.53 must (in eager mode it returns None
for unpacked rows anyway); the failure at plain defaults is recorded in
manifest.json as "export_error_at_defaults".

<m>.torch_trained.safetensors: the model's state_dict() after those 30 steps, and
<m>.torch_losses.jsonl: torch.optim.AdamW(lr=1e-3, weight_decay=0.01,
foreach=False) over 30 steps on ../tokens.npy (step s uses batch (s-1) % 4),
in the executable's --log-json format. Both wrappers compute the same loss (no
label is -100), so one trajectory serves both. manifest.json records versions,
configs, each file's inputs and onnxruntime's batch-0 loss against torch's.
"""

import argparse
import json
import os
import sys
import warnings

import numpy as np

warnings.filterwarnings("ignore")
import logging  # noqa: E402

logging.disable(logging.WARNING)

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
import transformers.masking_utils as masking_utils  # noqa: E402

packed_check = masking_utils.find_packed_sequence_indices

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = 64
LR, WD, STEPS = 1e-3, 0.01, 30

SMALL = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
             use_cache=False, pad_token_id=None, bos_token_id=0, eos_token_id=0,
             tie_word_embeddings=False)


def configs():
    t = transformers
    out = {
        "gpt2": lambda: t.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2,
                                     n_head=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     use_cache=False, bos_token_id=0, eos_token_id=0),
        "llama": lambda: t.LlamaConfig(**SMALL),
        "qwen2": lambda: t.Qwen2Config(**SMALL),
        "mistral": lambda: t.MistralConfig(**SMALL, sliding_window=None),
        "gpt_neox": lambda: t.GPTNeoXConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                            num_hidden_layers=2, num_attention_heads=4,
                                            max_position_embeddings=32, use_cache=False,
                                            hidden_dropout=0.0, attention_dropout=0.0,
                                            bos_token_id=0, eos_token_id=0, pad_token_id=None,
                                            tie_word_embeddings=False),
    }
    if hasattr(t, "Phi3Config"):
        out["phi3"] = lambda: t.Phi3Config(**SMALL)
    if hasattr(t, "GemmaConfig"):
        out["gemma"] = lambda: t.GemmaConfig(**{**SMALL, "tie_word_embeddings": True}, head_dim=8)
    return out


class Explicit(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, labels):
        logits = self.model(input_ids=input_ids).logits
        v = logits.shape[-1]
        return F.cross_entropy(logits[:, :-1].reshape(-1, v), labels[:, 1:].reshape(-1))


class HFLoss(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, labels):
        return self.model(input_ids=input_ids, labels=labels).loss


def train(w, tokens):
    opt = torch.optim.AdamW(w.parameters(), lr=LR, weight_decay=WD, foreach=False)
    losses = []
    for s in range(1, STEPS + 1):
        ids = torch.from_numpy(tokens[(s - 1) % tokens.shape[0]])
        opt.zero_grad(set_to_none=True)
        loss = w(ids, ids)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def ort_loss(path, ids):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    (loss,) = sess.run(None, {n: ids for n in names})[:1]
    return float(loss), names


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    tokens = np.load(os.path.join(HERE, "..", "tokens.npy"))
    only = set(filter(None, args.only.split(",")))
    manifest_path = os.path.join(args.out, "manifest.json")
    manifest = json.load(open(manifest_path)) if os.path.exists(manifest_path) else {"models": {}}
    manifest["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                            "onnx": onnx.__version__, "onnxruntime": ort.__version__}
    failed = False
    for name, make_cfg in configs().items():
        if only and name not in only:
            continue
        cfg = make_cfg()
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
        model.float().eval()
        ids = torch.from_numpy(tokens[0])
        files = {}
        for loss_kind, wrap in (("ex", Explicit), ("hf", HFLoss)):
            w = wrap(model)
            for exporter in ("dynamo", "ts"):
                fname = f"{name}_{loss_kind}_{exporter}.onnx"
                at_defaults = None
                path = os.path.join(args.out, fname)
                for stale in (path, path + ".data"):
                    if os.path.exists(stale):
                        os.remove(stale)
                try:
                    if exporter == "dynamo":
                        torch.onnx.export(w, (ids, ids.clone()), path, dynamo=True)
                    else:
                        try:
                            torch.onnx.export(w, (ids, ids.clone()), path, dynamo=False,
                                              opset_version=17)
                        except Exception as e:
                            at_defaults = f"{type(e).__name__}: {str(e)[:200]}"
                            masking_utils.find_packed_sequence_indices = lambda *a, **k: None
                            try:
                                torch.onnx.export(w, (ids, ids.clone()), path, dynamo=False,
                                                  opset_version=17)
                            finally:
                                masking_utils.find_packed_sequence_indices = packed_check
                except Exception as e:  # recorded: what users hit
                    files[fname] = {"export_error": f"{type(e).__name__}: {str(e)[:400]}"}
                    print(f"export failed {fname}: {type(e).__name__}: {str(e)[:200]}")
                    continue
                g = onnx.load(path, load_external_data=False).graph
                read = {i for n in g.node for i in n.input}
                unread = [i.name for i in g.input if i.name not in read]
                if unread:
                    raise SystemExit(f"{fname}: graph inputs {unread} are never read")
                with torch.no_grad():
                    ref = float(w(ids, ids))
                l, names = ort_loss(path, tokens[0])
                rel = abs(l - ref) / abs(ref)
                failed |= rel >= 1e-5
                files[fname] = {**({"export_error_at_defaults": at_defaults}
                                   if exporter == "ts" and at_defaults else {}),
                                "inputs": names, "onnxruntime_loss_batch0": l,
                                "torch_loss_batch0": ref, "rel_err": rel,
                                "external_data": os.path.exists(path + ".data")}
                print(f"{'ok' if rel < 1e-5 else 'FAIL'} {fname}: inputs {names}, ort {l:.7g} "
                      f"vs torch {ref:.7g}")
        losses = train(Explicit(model), tokens)
        # What a user's model holds after those steps, under its own
        # state_dict() names (tied entries included, as state_dict has them).
        save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()},
                  os.path.join(args.out, f"{name}.torch_trained.safetensors"))
        with open(os.path.join(args.out, f"{name}.torch_losses.jsonl"), "w") as f:
            for s, l in enumerate(losses, 1):
                f.write(json.dumps({"step": s, "loss": float(np.float32(l)), "lr": LR}) + "\n")
        print(f"{name}: torch AdamW {losses[0]:.6f} -> {losses[-1]:.6f}")
        manifest["models"][name] = {
            "class": type(model).__name__,
            "config": {k: v for k, v in cfg.to_diff_dict().items()
                       if isinstance(v, (int, float, str, bool, type(None)))},
            "parameters": {n: list(p.shape) for n, p in model.named_parameters()},
            "files": files,
        }
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
