#!/usr/bin/env python3
"""Builds a tiny one-block GPT (decoder-only transformer) as an ONNX training graph.

Writes, into --out:
  gpt_block.onnx  opset 20 training graph
                    inputs  tokens: int64 [batch, seq], targets: int64 [batch, seq]
                    output  loss: float32 scalar (mean next-token cross-entropy)
                  token embedding (Gather) + learned position embedding, one
                  pre-LN block (causal multi-head self-attention, then a Gelu
                  MLP, each with a residual), a final LayerNorm and an untied LM
                  head, then SoftmaxCrossEntropyLoss(mean) over [batch*seq, vocab].
                  Its float initializers are the trainable parameters,
                  initialized like GPT-2: N(0, 0.02) weights, zero biases,
                  LayerNorm scale 1 and bias 0.  Shapes, the attention scale
                  and the causal mask are Constant nodes (compile-time constants).
  tokens.npy      int64 [batches, batch, seq]  input token sequences
  targets.npy     int64 [batches, batch, seq]  the next token of each position

The data is a learnable synthetic task.  A fixed random cyclic permutation
`perm` (one cycle through all the tokens) links every token to a successor;
each sequence starts at a random token and walks the cycle with a stride k in
{1, 2} drawn per sequence (next = perm[t] for k = 1, perm[perm[t]] for k = 2).
The stride is hidden: a bigram model can only guess between two successors
(loss ln 2 at every position), while attention to the previous token reveals
it from position 1 on, so the loss floor is about ln(2) / seq.

Everything is drawn from one seeded generator, so a rerun with the same
arguments reproduces the files byte for byte.
"""

import argparse
import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 20  # Gelu is an ONNX op from opset 20


def make_data(rng, vocab, seq, batch, batches, strides):
    """tokens/targets [batches, batch, seq]: strided walks along one random cycle of the vocabulary."""
    order = rng.permutation(vocab)  # one cycle through the whole vocabulary
    perm = np.empty(vocab, dtype=np.int64)
    perm[order] = np.roll(order, -1)
    count = batches * batch
    stride = rng.choice(strides, size=count)
    walk = np.empty((count, seq + 1), dtype=np.int64)
    walk[:, 0] = rng.integers(0, vocab, size=count)
    for i in range(seq):
        t = walk[:, i]
        for j in range(max(strides)):
            t = np.where(stride > j, perm[t], t)
        walk[:, i + 1] = t
    tokens = walk[:, :seq].reshape(batches, batch, seq)
    targets = walk[:, 1:].reshape(batches, batch, seq)
    return tokens, targets


def make_model(rng, vocab, seq, dim, heads, batch):
    if dim % heads:
        raise ValueError("--dim must be a multiple of --heads")
    head_dim = dim // heads
    hidden = 4 * dim
    inits = []

    def weight(name, *shape):
        inits.append(numpy_helper.from_array((0.02 * rng.standard_normal(shape)).astype(np.float32), name))
        return name

    def const(name, shape):
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

    # Compile-time constants.
    heads_shape = constant("shape.heads", np.array([batch, seq, heads, head_dim], dtype=np.int64))
    model_shape = constant("shape.model", np.array([batch, seq, dim], dtype=np.int64))
    logits_shape = constant("shape.logits", np.array([batch * seq, vocab], dtype=np.int64))
    labels_shape = constant("shape.labels", np.array([batch * seq], dtype=np.int64))
    scale = constant("attn.scale", np.array(1 / math.sqrt(head_dim), dtype=np.float32))
    mask = constant("attn.mask", np.triu(np.full((seq, seq), -1e9, dtype=np.float32), k=1))

    # Embeddings: tokens [B, S] -> [B, S, D], plus positions [S, D] broadcast over B.
    tok = node("Gather", [weight("wte", vocab, dim), "tokens"], "embed.tok", axis=0)
    x = node("Add", [tok, weight("wpe", seq, dim)], "embed.out")

    # Causal multi-head self-attention.
    h = layernorm(x, "ln1")

    def split_heads(t, perm, name):  # [B, S, D] -> [B, S, H, Dh] -> transposed by perm
        r = node("Reshape", [t, heads_shape], f"{name}.heads")
        return node("Transpose", [r], f"{name}.t", perm=perm)

    q = split_heads(linear(h, "attn.q", dim, dim), [0, 2, 1, 3], "attn.q")  # [B, H, S, Dh]
    k = split_heads(linear(h, "attn.k", dim, dim), [0, 2, 3, 1], "attn.k")  # [B, H, Dh, S]
    v = split_heads(linear(h, "attn.v", dim, dim), [0, 2, 1, 3], "attn.v")  # [B, H, S, Dh]
    scores = node("MatMul", [q, k], "attn.scores")                         # [B, H, S, S]
    scores = node("Mul", [scores, scale], "attn.scaled")
    scores = node("Add", [scores, mask], "attn.masked")
    probs = node("Softmax", [scores], "attn.probs", axis=-1)
    ctx = node("MatMul", [probs, v], "attn.ctx")                            # [B, H, S, Dh]
    ctx = node("Transpose", [ctx], "attn.ctx.t", perm=[0, 2, 1, 3])         # [B, S, H, Dh]
    ctx = node("Reshape", [ctx, model_shape], "attn.ctx.merged")            # [B, S, D]
    x = node("Add", [x, linear(ctx, "attn.proj", dim, dim)], "resid1")

    # MLP.
    h = layernorm(x, "ln2")
    h = node("Gelu", [linear(h, "mlp.fc", dim, hidden)], "mlp.gelu")
    x = node("Add", [x, linear(h, "mlp.proj", hidden, dim)], "resid2")

    # LM head and loss.
    h = layernorm(x, "ln_f")
    logits = node("MatMul", [h, weight("lm_head.weight", dim, vocab)], "logits")
    logits = node("Reshape", [logits, logits_shape], "logits.flat")
    labels = node("Reshape", ["targets", labels_shape], "labels.flat")
    nodes.append(helper.make_node("SoftmaxCrossEntropyLoss", [logits, labels], ["loss"], name="loss",
                                  reduction="mean"))

    graph = helper.make_graph(
        nodes,
        "gpt_block",
        inputs=[
            helper.make_tensor_value_info("tokens", TensorProto.INT64, [batch, seq]),
            helper.make_tensor_value_info("targets", TensorProto.INT64, [batch, seq]),
        ],
        outputs=[helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="spillway-examples", ir_version=9)
    onnx.checker.check_model(model, full_check=True)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="The committed files in examples/gpt/ come from the defaults.")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="directory to write gpt_block.onnx, tokens.npy, targets.npy into")
    parser.add_argument("--seed", type=int, default=0, help="seed of data and initial weights (default: %(default)s)")
    parser.add_argument("--vocab", type=int, default=32, help="vocabulary size V (default: %(default)s)")
    parser.add_argument("--seq", type=int, default=8, help="sequence length S (default: %(default)s)")
    parser.add_argument("--dim", type=int, default=16, help="model width D (default: %(default)s)")
    parser.add_argument("--heads", type=int, default=2, help="attention heads H; D %% H == 0 (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=4, help="sequences per batch B (default: %(default)s)")
    parser.add_argument("--batches", type=int, default=64, help="batches in tokens.npy/targets.npy (default: %(default)s)")
    args = parser.parse_args()
    for name in ("vocab", "seq", "dim", "heads", "batch", "batches"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.vocab < 2:
        parser.error("--vocab must be >= 2")
    if args.dim % args.heads:
        parser.error("--dim must be a multiple of --heads")

    rng = np.random.default_rng(args.seed)
    tokens, targets = make_data(rng, args.vocab, args.seq, args.batch, args.batches, strides=(1, 2))
    model = make_model(rng, args.vocab, args.seq, args.dim, args.heads, args.batch)

    os.makedirs(args.out, exist_ok=True)
    onnx.save(model, os.path.join(args.out, "gpt_block.onnx"))
    np.save(os.path.join(args.out, "tokens.npy"), tokens)
    np.save(os.path.join(args.out, "targets.npy"), targets)
    print(f"wrote {args.out}/gpt_block.onnx, tokens.npy and targets.npy"
          f" [{args.batches}, {args.batch}, {args.seq}]")


if __name__ == "__main__":
    main()
