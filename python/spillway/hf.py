"""Hugging Face causal LMs as training graphs: `python -m spillway.export --hf ...`.

    python -m spillway.export --hf gpt2 --batch 2 --seq 16 -o gpt2.onnx
    python -m spillway.export --hf ./my-llama --batch 8 --seq 512 -o llama.onnx

CONFIG_OR_DIR is a directory with config.json (its weights, when it has them,
are loaded with from_pretrained; else the model is HF's random init), a
config.json file, or a model type (gpt2, llama, qwen2, ...) with tiny
dimensions for testing (TINY, --set overrides). The model is wrapped as
forward(input_ids, labels) -> loss and exported by spillway.export().
"""

import argparse
import json
import os
import sys

from ._optional import require

# A model type alone gets these (where its config has the attribute): a model
# of some 20k parameters that exports and compiles in seconds.
TINY = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2}
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
LOSSES = {
    "explicit": "F.cross_entropy(logits[:, :-1], labels[:, 1:]) (mean; -100 labels ignored)",
    "hf": "model(input_ids=input_ids, labels=labels).loss (HF's own shifted loss)",
}


def loss_module(model, kind):
    """`model` wrapped as forward(input_ids, labels) -> the scalar loss of `kind` (LOSSES)."""
    torch = require("torch", "spillway.hf")
    F = torch.nn.functional

    class CausalLMLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, labels):
            if kind == "hf":
                return self.model(input_ids=input_ids, labels=labels).loss
            logits = self.model(input_ids=input_ids).logits
            v = logits.shape[-1]
            return F.cross_entropy(logits[:, :-1].reshape(-1, v), labels[:, 1:].reshape(-1))

    if kind not in LOSSES:
        raise ValueError(f"loss '{kind}': expected one of {', '.join(LOSSES)}")
    return CausalLMLoss()


def _parse_set(items):
    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set '{item}': expected KEY=VALUE (VALUE as JSON, e.g. "
                             "num_hidden_layers=4)")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def checkpoint_dtype(spec):
    """The dtype a model directory's config.json says its weights are stored in
    ("bfloat16", "float16", ...), or None (no directory, no such field)."""
    try:
        with open(os.path.join(spec, "config.json")) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return None
    dtype = d.get("dtype", d.get("torch_dtype")) if isinstance(d, dict) else None
    return dtype if isinstance(dtype, str) else None


def load_config(spec, overrides=None):
    """(config, weights directory or None, description, tiny) for CONFIG_OR_DIR `spec`;
    tiny: `spec` was a model type, given TINY dimensions."""
    tf = require("transformers", "spillway.hf")
    overrides = dict(overrides or {})
    if os.path.isdir(spec):
        cfg_path = os.path.join(spec, "config.json")
        if not os.path.isfile(cfg_path):
            raise ValueError(f"--hf {spec}: a directory without config.json (expected a Hugging "
                             "Face model directory, a config.json file or a model type)")
        cfg = tf.AutoConfig.from_pretrained(spec)
        weights = spec if any(os.path.exists(os.path.join(spec, f)) for f in WEIGHT_FILES) else None
        what = f"{spec} ({'its weights' if weights else 'no weights: random init'})"
        tiny = False
    elif spec in tf.CONFIG_MAPPING:
        # A model type, even where a file of that name exists (an executable
        # compiled from an earlier export, say).
        cfg = tf.AutoConfig.for_model(spec)
        dims = {**{k: v for k, v in TINY.items() if hasattr(cfg, k)}, **overrides}
        if hasattr(cfg, "head_dim") and "head_dim" not in overrides:
            # Families with an explicit head_dim (Gemma's is 256) get hidden / heads.
            dims["head_dim"] = dims["hidden_size"] // dims["num_attention_heads"]
        what = (f"{spec} with tiny test dimensions{' and --set' if overrides else ''} "
                "(random init)")
        overrides, weights, tiny = dims, None, True
    elif os.path.isfile(spec):
        try:
            with open(spec) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"--hf {spec}: cannot read it as a config.json: {e}") from e
        if not isinstance(d, dict) or "model_type" not in d:
            raise ValueError(f"--hf {spec}: a config.json needs a \"model_type\"")
        cfg = tf.AutoConfig.for_model(d.pop("model_type"), **d)
        weights, what, tiny = None, f"{spec} (random init)", False
    else:
        known = ", ".join(k for k in ("gpt2", "llama", "qwen2", "mistral", "gpt_neox", "phi3",
                                      "gemma") if k in tf.CONFIG_MAPPING)
        raise ValueError(f"--hf {spec}: not a directory, a config.json file or a transformers "
                         f"model type (e.g. {known})")
    for key, value in overrides.items():
        if not hasattr(cfg, key):  # a typo would otherwise change nothing, silently
            raise ValueError(f"--set {key}: {type(cfg).__name__} has no attribute '{key}'")
        setattr(cfg, key, value)
    return cfg, weights, what, tiny


def _max_positions(cfg):
    for key in ("max_position_embeddings", "n_positions"):
        v = getattr(cfg, key, None)
        if isinstance(v, int):
            return key, v
    return None, None


def causal_lm(spec, seq, *, overrides=None, attn="eager"):
    """(model, config, description): the HF causal LM of `spec` set up for export:
    fp32, eval, every dropout 0, no KV cache, pad_token_id=None."""
    torch = require("torch", "spillway.hf")
    tf = require("transformers", "spillway.hf")
    cfg, weights, what, tiny = load_config(spec, overrides)
    # The embedding of a pad_token_id gets padding_idx, whose gradient masking
    # cannot be exported (an ONNX Gather trains every row): spillway.export
    # refuses such a model, so build the embedding without it.
    cfg.pad_token_id = None
    cfg.use_cache = False
    for key, value in list(vars(cfg).items()):
        if ("dropout" in key or "pdrop" in key) and isinstance(value, float):
            setattr(cfg, key, 0.0)
    key, n = _max_positions(cfg)
    if key and (seq > n or (tiny and key not in (overrides or {}))):
        if weights:
            raise ValueError(f"--seq {seq} exceeds the model's {key} {n}")
        # Random init: a table of exactly the positions the graph uses.
        setattr(cfg, key, seq)
    kw = {"attn_implementation": attn}
    if weights:
        model = tf.AutoModelForCausalLM.from_pretrained(weights, config=cfg, dtype=torch.float32,
                                                        **kw)
    else:
        model = tf.AutoModelForCausalLM.from_config(cfg, **kw)
    model.float().eval()
    return model, cfg, what


def _size(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m spillway.export",
        description="Exports a Hugging Face causal LM with its loss, forward(input_ids, labels) "
                    "-> loss, as an ONNX training graph for spillwayc.",
        epilog="The graph fixes the batch and sequence length. The example inputs are random "
               "tokens and labels (--seed); onnxruntime's loss on them must match torch's "
               "within 1e-4.")
    ap.add_argument("--hf", required=True, metavar="CONFIG_OR_DIR",
                    help="a Hugging Face model directory (config.json, and weights if any), a "
                         "config.json file, or a model type (gpt2, llama, ...) with tiny test "
                         "dimensions")
    ap.add_argument("--batch", type=int, required=True, metavar="B", help="batch size")
    ap.add_argument("--seq", type=int, required=True, metavar="S", help="sequence length")
    ap.add_argument("-o", "--output", required=True, metavar="MODEL.onnx",
                    help="the ONNX file to write (its weights in MODEL.onnx.data past 1 GiB)")
    ap.add_argument("--loss", choices=sorted(LOSSES), default="explicit",
                    help="explicit: " + LOSSES["explicit"] + "; hf: " + LOSSES["hf"] +
                         " (default: %(default)s; both are the mean over the B*(S-1) predicted tokens "
                         "whose label is not -100)")
    ap.add_argument("--dtype", choices=["fp32"], default="fp32",
                    help="parameter dtype of the graph: fp32 (spillwayc keeps fp32 master "
                         "weights; its --precision bf16-mixed trains with bf16 working weights "
                         "and activations)")
    ap.add_argument("--attn", choices=["eager", "sdpa"], default="eager",
                    help="transformers attn_implementation (default: %(default)s)")
    ap.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="override a config attribute (VALUE as JSON), e.g. --set "
                         "num_hidden_layers=4; repeatable")
    ap.add_argument("--seed", type=int, default=0,
                    help="seed of the random init (no weights) and the example tokens and "
                         "labels")
    ap.add_argument("--no-check", action="store_true",
                    help="skip the onnxruntime check")
    args = ap.parse_args(argv)
    if args.batch < 1 or args.seq < 2:
        ap.error("--batch must be >= 1 and --seq >= 2 (the loss predicts token t+1 from t)")
    try:
        overrides = _parse_set(args.set)
        torch = require("torch", "python -m spillway.export")
        from .export import export
        torch.manual_seed(args.seed)
        model, cfg, what = causal_lm(args.hf, args.seq, overrides=overrides, attn=args.attn)
        vocab = model.get_output_embeddings().weight.shape[0]
        g = torch.Generator().manual_seed(args.seed)
        ids = torch.randint(0, vocab, (args.batch, args.seq), generator=g)
        # Labels other than the tokens (one ignored) make the check see each
        # input in its place and ignore_index as torch has it.
        labels = torch.randint(0, vocab, (args.batch, args.seq), generator=g)
        labels[0, 1] = -100
        res = export(loss_module(model, args.loss), (ids, labels), args.output,
                     check=not args.no_check)
    except (ValueError, ImportError, RuntimeError, OSError) as e:
        print(f"python -m spillway.export: error: {e}", file=sys.stderr)
        return 1
    m = res.mapping
    ties = "; tied: " + ", ".join(" = ".join(t) for t in m["ties"]) if m["ties"] else ""
    print(f"model: {type(model).__name__} from {what}; {res.num_parameters:,} parameters in "
          f"{len(m['parameters'])} tensors{ties}")
    if m["buffers"]:
        print(f"constants (buffers, not trained): {', '.join(m['buffers'])}")
    if m["unused"]:
        print(f"parameters the loss does not read: {', '.join(m['unused'])}")
    print(f"loss: {LOSSES[args.loss]}, attention {args.attn}, batch {args.batch}, seq {args.seq}, "
          "eval mode (dropout 0), pad_token_id None"
          f"{', packed-sequence check off' if res.packed_sequence_check_off else ''}")
    for path, n in res.files.items():
        print(f"wrote {path} ({_size(n)})")
    if res.onnxruntime_loss is not None:
        rel = abs(res.onnxruntime_loss - res.torch_loss) / abs(res.torch_loss)
        print(f"check: onnxruntime loss {res.onnxruntime_loss:.7g}, torch {res.torch_loss:.7g} "
              f"(relative difference {rel:.1e}) on random tokens and labels")
    exe = os.path.splitext(args.output)[0]
    print("compile and train:")
    print(f"  spillwayc {args.output} -o {exe}")
    print(f"  {exe if os.sep in exe else './' + exe} --input input_ids=TOKENS.npy "
          f"--input labels=TOKENS.npy --steps N --save trained.safetensors")
    print(f"  TOKENS.npy: int64 [NB, {args.batch}, {args.seq}] token ids below {vocab} "
          "(step s trains on batch s mod NB; labels are the same tokens, the loss shifts them)")
    stored = checkpoint_dtype(args.hf) if os.path.isdir(args.hf) else None
    if stored in ("bfloat16", "float16"):
        print(f"  the checkpoint is {stored}: its weights are the graph's fp32 master weights; "
              f"add --precision bf16-mixed to spillwayc to train with bf16 working weights and "
              f"activations (as torch's bf16 autocast)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
