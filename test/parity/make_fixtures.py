#!/usr/bin/env python3
"""Regenerates the PyTorch-parity fixtures in this directory.

Needs torch, transformers, onnxscript, onnx, onnxruntime and numpy (CI does not:
it only reads the committed outputs). Run from anywhere:

    /work/torchenv/bin/python test/parity/make_fixtures.py [--out DIR]

For each of two tiny random-init Hugging Face models (GPT2LMHeadModel and
LlamaForCausalLM, eager attention, no dropout, fp32) wrapped as
`forward(input_ids, labels) -> loss`, where

    loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1))

(mean over B*(S-1) tokens; ignore_index -100 is the default but the fixtures
hold no -100 labels, so this equals the model's own shifted loss), it writes

    <model>_ts.onnx       torch.onnx.export(dynamo=False, opset_version=17,
                          do_constant_folding=False)
    <model>_dynamo.onnx   torch.onnx.export(dynamo=True, optimize=False)
    <model>.torch_losses.jsonl
                          torch.optim.AdamW(lr=1e-3, betas=(0.9, 0.999),
                          eps=1e-8, weight_decay=0.01, foreach=False) over
                          --steps steps; logged step s (1-based) runs on batch
                          (s-1) % NB of tokens.npy, exactly like the
                          executable's `--input` (0-based step i uses batch i % NB);
                          the loss logged is the one before the step's update

and once, tokens.npy [NB, B, S] int64 (labels are the same array), plus
manifest.json (versions, configs, the ONNX-initializer <-> torch-parameter
mapping of every file, the onnxruntime check). Why the two non-default
exporter options: see README.md and ops.md (the defaults constant-fold the
tied GPT-2 embedding into a second, transposed initializer, and the dynamo
default also folds the causal mask into a float initializer).

The script fails (exit 1) if an ONNX file's float initializers are not exactly
the trainable parameters (by name and value) or if onnxruntime's forward loss
on batch 0 differs from torch's step-1 loss by more than 1e-5 relative.
"""

import argparse
import json
import os
import sys
import warnings

import numpy as np

warnings.filterwarnings("ignore")

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
import transformers.masking_utils as masking_utils  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB, B, S, NB = 64, 2, 16, 4
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-8, 0.01

# transformers >= 4.5x: with no attention_mask, create_causal_mask() checks
# position_ids for packed sequences (torch.diff + cumsum). In eager mode that
# check returns None for ordinary (unpacked) rows such as ours; under tracing
# it cannot, and the TorchScript exporter then fails on aten::diff (no ONNX
# symbolic). Returning None always is exactly the eager behaviour on these
# inputs and keeps the packed-sequence arithmetic out of both graphs.
masking_utils.find_packed_sequence_indices = lambda position_ids: None


def gpt2_model():
    cfg = GPT2Config(
        vocab_size=VOCAB, n_positions=S, n_embd=32, n_layer=2, n_head=2,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        layer_norm_epsilon=1e-5, activation_function="gelu_new",
        bos_token_id=0, eos_token_id=0, use_cache=False,
        tie_word_embeddings=True, attn_implementation="eager")
    return GPT2LMHeadModel(cfg), cfg


def llama_model():
    cfg = LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=S, rms_norm_eps=1e-6, hidden_act="silu",
        attention_bias=False, attention_dropout=0.0, mlp_bias=False,
        # pad_token_id=None: with a pad id, LlamaModel builds
        # nn.Embedding(..., padding_idx=pad_token_id), whose backward zeroes
        # that row's gradient. Neither exporter can express this (both emit a
        # plain Gather), so torch would train a different function than the
        # ONNX graph: identical forward, but token 0's embedding row frozen
        # except for weight decay in torch and trained in the graph.
        bos_token_id=0, eos_token_id=0, pad_token_id=None, use_cache=False,
        tie_word_embeddings=False, attn_implementation="eager")
    return LlamaForCausalLM(cfg), cfg


MODELS = {"gpt2": gpt2_model, "llama": llama_model}


class LossWrapper(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, labels):
        logits = self.model(input_ids=input_ids, use_cache=False).logits
        v = logits.shape[-1]
        return F.cross_entropy(logits[:, :-1].reshape(-1, v), labels[:, 1:].reshape(-1))


def build(name, seed):
    torch.manual_seed(seed)
    model, cfg = MODELS[name]()
    # HF init makes every LayerNorm/RMSNorm weight 1 and every bias 0. Both
    # exporters deduplicate initializers with equal values (TorchScript:
    # _jit_pass_onnx_deduplicate_initializers; dynamo: onnxscript's
    # deduplicate_initializers), which would merge distinct parameters into
    # one. A small random perturbation makes every parameter unique.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    model.float()
    # An exported graph has no notion of a gradient-masked embedding row.
    for mname, mod in model.named_modules():
        if isinstance(mod, nn.Embedding) and mod.padding_idx is not None:
            raise SystemExit(f"{name}: {mname} has padding_idx={mod.padding_idx}; its gradient "
                             "masking cannot be exported, so torch and the ONNX graph would "
                             "train differently")
    return LossWrapper(model), cfg


def param_table(w):
    """name -> (canonical name, tensor) for every parameter, tied aliases included."""
    canon = {id(p): n for n, p in w.named_parameters()}
    return {n: (canon[id(p)], p) for n, p in w.named_parameters(remove_duplicate=False)}


def export_ts(w, args, path):
    torch.onnx.export(
        w, args, path, dynamo=False, opset_version=17,
        input_names=["input_ids", "labels"], output_names=["loss"],
        do_constant_folding=False, export_params=True,
        keep_initializers_as_inputs=False,
        training=torch.onnx.TrainingMode.EVAL)


def export_dynamo(w, args, path):
    prog = torch.onnx.export(
        w, args, dynamo=True, optimize=False, external_data=False,
        input_names=["input_ids", "labels"], output_names=["loss"])
    proto = prog.model_proto
    # The stack traces name this machine's paths and dominate the file size;
    # the other metadata (module namespace, FX node) stays.
    for node in proto.graph.node:
        keep = [p for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
    onnx.save_model(proto, path, save_as_external_data=False)


def check_initializers(path, w):
    """Maps the file's float initializers to torch parameters; returns (report, ok)."""
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    table = param_table(w)
    canon_params = {n: p for n, p in w.named_parameters()}
    seen, extra, rows, frozen = set(), [], [], []
    for init in m.graph.initializer:
        arr = numpy_helper.to_array(init)
        if not np.issubdtype(arr.dtype, np.floating):
            continue
        if init.name in table:
            cname, p = table[init.name]
            ref = p.detach().numpy()
            same = arr.shape == ref.shape and np.array_equal(arr, ref)
            rows.append({"initializer": init.name, "param": cname, "shape": list(arr.shape),
                         "equal": bool(same)})
            if cname in seen:
                extra.append(f"{init.name}: second initializer for parameter {cname}")
            seen.add(cname)
            if not same:
                extra.append(f"{init.name}: value differs from parameter {cname}")
            continue
        buffers = dict(w.named_buffers())
        if init.name in buffers:
            ref = buffers[init.name].detach().numpy()
            same = arr.shape == ref.shape and np.array_equal(arr, ref)
            frozen.append(init.name)
            extra.append(f"{init.name} {list(arr.shape)}: a buffer (not trainable in torch), "
                         f"{'equal to' if same else 'DIFFERENT from'} its torch value; "
                         "gradients reach it, so a trainer must keep it frozen")
            continue
        what = "no parameter of that name"
        for cname, p in canon_params.items():
            ref = p.detach().numpy()
            if arr.shape == ref.shape and np.array_equal(arr, ref):
                what = f"equal to parameter {cname}"
            elif arr.ndim == 2 and arr.shape == ref.T.shape and np.array_equal(arr, ref.T):
                what = f"equal to parameter {cname} transposed"
        extra.append(f"{init.name} {list(arr.shape)} {arr.dtype}: {what}")
    missing = [n for n in canon_params if n not in seen]
    ok = not missing and len(extra) == len(frozen)
    return {"float_initializers": rows, "problems": extra, "frozen_buffers": frozen,
            "params_without_initializer": missing,
            "one_to_one": not missing and not extra}, ok


def ort_loss(path, ids):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (loss,) = sess.run(["loss"], {"input_ids": ids, "labels": ids})
    return float(loss)


def train(w, tokens, steps, autocast=False):
    """The losses of `steps` AdamW steps; with `autocast` the forward and loss
    run under torch.autocast("cpu", bfloat16) (make_bf16_reference.py)."""
    opt = torch.optim.AdamW(w.parameters(), lr=LR, betas=BETAS, eps=EPS,
                            weight_decay=WD, foreach=False)
    w.train()
    losses = []
    for s in range(1, steps + 1):
        ids = torch.from_numpy(tokens[(s - 1) % tokens.shape[0]])
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = w(ids, ids)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    w.eval()
    return losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=HERE, help="output directory (default: this script's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    rng = np.random.default_rng(args.seed)
    tokens = rng.integers(0, VOCAB, size=(NB, B, S), dtype=np.int64)
    np.save(os.path.join(args.out, "tokens.npy"), tokens)

    manifest = {
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "onnx": onnx.__version__, "onnxruntime": ort.__version__,
                     "numpy": np.__version__},
        "tokens": {"file": "tokens.npy", "shape": list(tokens.shape), "dtype": "int64",
                   "seed": args.seed, "labels": "same array"},
        "optimizer": {"name": "torch.optim.AdamW", "lr": LR, "betas": list(BETAS), "eps": EPS,
                      "weight_decay": WD, "foreach": False, "steps": args.steps,
                      "batch_of_step": "logged step s (1-based) uses tokens[(s-1) % NB]"},
        "loss": "F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1)), mean",
        "models": {},
    }
    failed = False
    for name in MODELS:
        w, cfg = build(name, args.seed)
        w.eval()
        ex = (torch.from_numpy(tokens[0]), torch.from_numpy(tokens[0]))
        files = {}
        for kind, fn in (("ts", export_ts), ("dynamo", export_dynamo)):
            path = os.path.join(args.out, f"{name}_{kind}.onnx")
            fn(w, ex, path)
            rep, ok = check_initializers(path, w)
            m = onnx.load(path)
            rep["opset"] = {d.domain or "ai.onnx": d.version for d in m.opset_import}
            rep["bytes"] = os.path.getsize(path)
            files[os.path.basename(path)] = rep
            for p in rep["problems"]:
                print(f"note {os.path.basename(path)}: {p}")
            if not ok:
                failed = True
                print(f"FAIL {path}: initializers are not 1:1 with parameters: "
                      f"{rep['problems']} missing {rep['params_without_initializer']}")
        # Training mutates the parameters: snapshot-free because export came first.
        with torch.no_grad():
            ref0 = float(w(*ex))
        losses = train(w, tokens, args.steps)
        assert abs(losses[0] - ref0) <= 1e-6 * abs(ref0), (losses[0], ref0)
        for fname, rep in files.items():
            l = ort_loss(os.path.join(args.out, fname), tokens[0])
            rel = abs(l - losses[0]) / abs(losses[0])
            rep["onnxruntime_loss_batch0"] = l
            rep["onnxruntime_rel_err"] = rel
            status = "ok" if rel < 1e-5 else "FAIL"
            failed |= rel >= 1e-5
            print(f"{status} {fname}: onnxruntime loss {l:.9g} vs torch step-1 loss "
                  f"{losses[0]:.9g} (rel err {rel:.2e}); {len(rep['float_initializers'])} float "
                  f"initializers, 1:1 with parameters: {rep['one_to_one']}"
                  f"{' (plus frozen buffers ' + str(rep['frozen_buffers']) + ')' if rep['frozen_buffers'] else ''}")
        with open(os.path.join(args.out, f"{name}.torch_losses.jsonl"), "w") as f:
            for s, l in enumerate(losses, 1):
                f.write(json.dumps({"step": s, "loss": float(np.float32(l)), "lr": LR}) + "\n")
        print(f"{name}: torch AdamW loss {losses[0]:.6f} -> {losses[-1]:.6f} over {args.steps} steps")
        manifest["models"][name] = {
            "class": type(w.model).__name__,
            "config": {k: v for k, v in cfg.to_diff_dict().items()
                       if isinstance(v, (int, float, str, bool, type(None)))},
            "parameters": {n: list(p.shape) for n, p in w.named_parameters()},
            "tied": sorted(n for n, (c, _) in param_table(w).items() if n != c),
            "files": files,
            "torch_losses": f"{name}.torch_losses.jsonl",
        }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
