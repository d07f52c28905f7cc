#!/usr/bin/env python3
"""Builds a GPT-2 style decoder (L pre-LN blocks) as an ONNX training graph for benchmarks.

Writes, into --out:
  gpt.onnx        opset 20 training graph, weights as ONNX external data in gpt.onnx.data
                    inputs  tokens: int64 [batch, seq], targets: int64 [batch, seq]
                    output  loss: float32 scalar (mean next-token cross-entropy)
                  token embedding (Gather) + learned position embedding, --layers
                  pre-LN blocks (causal multi-head self-attention, then a Gelu MLP,
                  each with a residual), a final LayerNorm and an untied LM head,
                  then SoftmaxCrossEntropyLoss(mean) over [batch*seq, vocab].
                  Per block the ops are exactly those of examples/gpt/gpt_block.onnx
                  (same op patterns, so the importer, fusion and layer partition
                  treat each block like that example's), with the parameters named
                  h.<i>.ln1.scale, h.<i>.attn.q.weight, ... so that each block is one
                  layer. The batch stays the leading dimension everywhere (rows are
                  independent), so the step can be split into micro-batches.
                  Initialized like GPT-2 from --seed: N(0, --std) weights, zero
                  biases, LayerNorm scale 1 and bias 0.
  tokens.npy      int64 [batch, seq]  random tokens (one batch)
  targets.npy     int64 [batch, seq]  the next token of each position (a random
                  sequence, so the loss starts near ln(vocab) and stays there)
  config.json     the arguments and the parameter count

With --graph-only the weights are not drawn: gpt.onnx.data is a sparse file of
zeros of the right size (no disk space, no memory), for compiling a large
model on a machine that cannot hold its weights; bench/device/gpt_weights.py
writes the weights of the same seed as .safetensors where the executable runs.
With --shapes-only there is no data at all: each initializer declares its name,
data_type and dims and holds no values and no external-data reference, and no
gpt.onnx.data is written, so a GPT-175B graph is made in about a second (17 MB
at S = 2048, nearly all of it the S x S attention mask); it is for planning
(spillwayc --report), not for training. Such a model does not pass
onnx.checker as it is (an initializer must hold one value field), so the
script checks a copy whose initializers are graph inputs of the same types
instead. The tokens and targets are the same in every mode.

Only the onnx and numpy packages are needed. Deterministic: the same arguments
give the same files.
"""

import argparse
import json
import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 20  # Gelu is an ONNX op from opset 20


def param_count(layers, dim, vocab, seq):
    per_block = 4 * dim * dim + 4 * dim + 2 * (4 * dim * dim) + 4 * dim + dim + 2 * 2 * dim
    return vocab * dim + seq * dim + layers * per_block + 2 * dim + dim * vocab


def make_model(rng, layers, vocab, seq, dim, heads, batch, std, graph_only=None, shapes_only=False):
    """graph_only: the external data file's name; every initializer then
    refers to its next bytes there instead of holding values. shapes_only:
    every initializer is declared (name, type, dims) and holds nothing."""
    head_dim = dim // heads
    hidden = 4 * dim
    inits = []
    data_end = [0]

    def external(name, shape):
        t = onnx.TensorProto(name=name, data_type=TensorProto.FLOAT, dims=shape,
                             data_location=TensorProto.EXTERNAL)
        nbytes = 4 * int(np.prod(shape))
        for k, v in (("location", graph_only), ("offset", data_end[0]), ("length", nbytes)):
            t.external_data.add(key=k, value=str(v))
        data_end[0] += nbytes
        inits.append(t)

    def declared(name, shape):
        inits.append(onnx.TensorProto(name=name, data_type=TensorProto.FLOAT, dims=shape))

    def weight(name, *shape):
        if shapes_only:
            declared(name, list(shape))
            return name
        if graph_only:
            external(name, list(shape))
            return name
        # float32 draws (half the memory of float64 ones for a large model)
        a = rng.standard_normal(shape, dtype=np.float32)
        a *= np.float32(std)
        inits.append(numpy_helper.from_array(a, name))
        return name

    def const(name, shape):
        if shapes_only:
            declared(name, list(shape))
            return name
        if graph_only:
            external(name, list(shape))
            return name
        inits.append(numpy_helper.from_array(np.full(shape, 1.0 if name.endswith(".scale") else 0.0,
                                                     dtype=np.float32), name))
        return name

    nodes = []

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def constant(name, array):
        nodes.append(helper.make_node("Constant", [], [name], name=name,
                                      value=numpy_helper.from_array(array, name)))
        return name

    def layernorm(x, prefix):
        return node("LayerNormalization", [x, const(f"{prefix}.scale", [dim]), const(f"{prefix}.bias", [dim])],
                    f"{prefix}.out", axis=-1, epsilon=1e-5)

    def linear(x, prefix, fan_in, fan_out):
        y = node("MatMul", [x, weight(f"{prefix}.weight", fan_in, fan_out)], f"{prefix}.matmul")
        return node("Add", [y, const(f"{prefix}.bias", [fan_out])], f"{prefix}.out")

    # Compile-time constants, shared by the blocks (as in the one-block example).
    heads_shape = constant("shape.heads", np.array([batch, seq, heads, head_dim], dtype=np.int64))
    model_shape = constant("shape.model", np.array([batch, seq, dim], dtype=np.int64))
    logits_shape = constant("shape.logits", np.array([batch * seq, vocab], dtype=np.int64))
    labels_shape = constant("shape.labels", np.array([batch * seq], dtype=np.int64))
    scale = constant("attn.scale", np.array(1 / math.sqrt(head_dim), dtype=np.float32))
    mask = constant("attn.mask", np.triu(np.full((seq, seq), -1e9, dtype=np.float32), k=1))

    # Embeddings: tokens [B, S] -> [B, S, D], plus positions [S, D] broadcast over B.
    tok = node("Gather", [weight("wte", vocab, dim), "tokens"], "embed.tok", axis=0)
    x = node("Add", [tok, weight("wpe", seq, dim)], "embed.out")

    for i in range(layers):
        p = f"h.{i}"
        # Causal multi-head self-attention.
        h = layernorm(x, f"{p}.ln1")

        def split_heads(t, perm, name):  # [B, S, D] -> [B, S, H, Dh] -> transposed by perm
            r = node("Reshape", [t, heads_shape], f"{name}.heads")
            return node("Transpose", [r], f"{name}.t", perm=perm)

        q = split_heads(linear(h, f"{p}.attn.q", dim, dim), [0, 2, 1, 3], f"{p}.attn.q")  # [B, H, S, Dh]
        k = split_heads(linear(h, f"{p}.attn.k", dim, dim), [0, 2, 3, 1], f"{p}.attn.k")  # [B, H, Dh, S]
        v = split_heads(linear(h, f"{p}.attn.v", dim, dim), [0, 2, 1, 3], f"{p}.attn.v")  # [B, H, S, Dh]
        scores = node("MatMul", [q, k], f"{p}.attn.scores")                               # [B, H, S, S]
        scores = node("Mul", [scores, scale], f"{p}.attn.scaled")
        scores = node("Add", [scores, mask], f"{p}.attn.masked")
        probs = node("Softmax", [scores], f"{p}.attn.probs", axis=-1)
        ctx = node("MatMul", [probs, v], f"{p}.attn.ctx")                                  # [B, H, S, Dh]
        ctx = node("Transpose", [ctx], f"{p}.attn.ctx.t", perm=[0, 2, 1, 3])               # [B, S, H, Dh]
        ctx = node("Reshape", [ctx, model_shape], f"{p}.attn.ctx.merged")                  # [B, S, D]
        x = node("Add", [x, linear(ctx, f"{p}.attn.proj", dim, dim)], f"{p}.resid1")

        # MLP.
        h = layernorm(x, f"{p}.ln2")
        h = node("Gelu", [linear(h, f"{p}.mlp.fc", dim, hidden)], f"{p}.mlp.gelu")
        x = node("Add", [x, linear(h, f"{p}.mlp.proj", hidden, dim)], f"{p}.resid2")

    # LM head and loss.
    h = layernorm(x, "ln_f")
    logits = node("MatMul", [h, weight("lm_head.weight", dim, vocab)], "logits")
    logits = node("Reshape", [logits, logits_shape], "logits.flat")
    labels = node("Reshape", ["targets", labels_shape], "labels.flat")
    nodes.append(helper.make_node("SoftmaxCrossEntropyLoss", [logits, labels], ["loss"], name="loss",
                                  reduction="mean"))

    graph = helper.make_graph(
        nodes,
        "gpt",
        inputs=[
            helper.make_tensor_value_info("tokens", TensorProto.INT64, [batch, seq]),
            helper.make_tensor_value_info("targets", TensorProto.INT64, [batch, seq]),
        ],
        outputs=[helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             producer_name="spillway-bench", ir_version=9)


def check_declared(model):
    """onnx.checker on a copy whose declared initializers are graph inputs of
    the same type and shape: the graph, its ops and its types are checked;
    only the rule that an initializer holds values is not (such a model has
    none by design)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    for t in graph.initializer:
        assert not (t.raw_data or t.float_data or t.external_data), t.name
        graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    del graph.initializer[:]
    onnx.checker.check_model(copy, full_check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="directory to write gpt.onnx, gpt.onnx.data, tokens.npy, targets.npy, config.json into")
    parser.add_argument("--layers", type=int, default=24, help="transformer blocks L (default: %(default)s)")
    parser.add_argument("--d-model", type=int, default=1024, help="model width D (default: %(default)s)")
    parser.add_argument("--heads", type=int, default=16, help="attention heads H; D %% H == 0 (default: %(default)s)")
    parser.add_argument("--vocab", type=int, default=8192, help="vocabulary size V (default: %(default)s)")
    parser.add_argument("--seq", type=int, default=64, help="sequence length S (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=4, help="sequences per batch B (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data and weights (default: %(default)s)")
    parser.add_argument("--std", type=float, default=0.02, help="std of the weights (default: %(default)s)")
    parser.add_argument("--graph-only", action="store_true",
                        help="write no weight values: gpt.onnx.data is a sparse file of zeros")
    parser.add_argument("--shapes-only", action="store_true",
                        help="initializers declare dtype and dims and hold no data; no gpt.onnx.data (for planning)")
    args = parser.parse_args()
    if args.graph_only and args.shapes_only:
        parser.error("--graph-only and --shapes-only exclude each other (sparse data file, or none)")
    for name in ("layers", "d_model", "heads", "seq", "batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.vocab < 2:
        parser.error("--vocab must be >= 2")
    if args.d_model % args.heads:
        parser.error("--d-model must be a multiple of --heads")

    n = param_count(args.layers, args.d_model, args.vocab, args.seq)
    rng = np.random.default_rng(args.seed)
    walk = rng.integers(0, args.vocab, size=(args.batch, args.seq + 1), dtype=np.int64)
    tokens, targets = np.ascontiguousarray(walk[:, :-1]), np.ascontiguousarray(walk[:, 1:])
    data = "gpt.onnx.data"
    model = make_model(rng, args.layers, args.vocab, args.seq, args.d_model, args.heads, args.batch, args.std,
                       graph_only=data if args.graph_only else None, shapes_only=args.shapes_only)
    got = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    assert got == n, (got, n)
    if args.shapes_only:
        check_declared(model)
    elif 4 * n < (1 << 31) - (64 << 20) and not args.graph_only:
        onnx.checker.check_model(model)  # in memory: only below protobuf's 2 GiB limit

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "gpt.onnx")
    if os.path.exists(os.path.join(args.out, data)):
        os.remove(os.path.join(args.out, data))  # onnx appends to an existing data file
    if args.shapes_only:
        onnx.save_model(model, path)  # the graph, the declarations and the constants
    elif args.graph_only:
        with open(os.path.join(args.out, data), "wb") as f:
            f.truncate(4 * n)  # a hole: reads as zeros
        onnx.save_model(model, path)
    else:
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=data, size_threshold=0)
    if not args.shapes_only:
        onnx.checker.check_model(path)  # by path: checks the external data's references
    np.save(os.path.join(args.out, "tokens.npy"), tokens)
    np.save(os.path.join(args.out, "targets.npy"), targets)
    config = {k: v for k, v in vars(args).items() if k != "out"}
    config.update(params=n, param_bytes=4 * n, ln_vocab=math.log(args.vocab))
    for mode in ("graph_only", "shapes_only"):
        if not config[mode]:
            del config[mode]  # the config of a full model stays as it was
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
        f.write("\n")
    what = "no weights data" if args.shapes_only else f"+ {data}, {4 * n / 2**20:.1f} MiB"
    print(f"wrote {path} ({what}), tokens.npy, targets.npy [{args.batch}, {args.seq}]:"
          f" {n} parameters, L={args.layers} D={args.d_model} H={args.heads} V={args.vocab}")


if __name__ == "__main__":
    main()
