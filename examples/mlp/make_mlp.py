#!/usr/bin/env python3
"""Builds Spillway's bundled demo: a 2-layer MLP classifier on 2-D spirals.

Writes, into --out:
  mlp.onnx  opset 17 training graph
              inputs  x: float32 [batch, 2], y: int64 [batch]
              Gemm(transB) -> Relu -> Gemm(transB) -> SoftmaxCrossEntropyLoss(mean)
              output  loss: float32 scalar
            Its float initializers (fc1.weight [hidden, 2], fc1.bias [hidden],
            fc2.weight [classes, hidden], fc2.bias [classes]) are the trainable
            parameters, initialized like torch.nn.Linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  x.npy     float32 [batches, batch, 2]  spiral points, shuffled
  y.npy     int64   [batches, batch]     spiral (class) of each point

Everything is drawn from one seeded generator, so a rerun with the same
arguments reproduces the files byte for byte.
"""

import argparse
import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FEATURES = 2


def make_spirals(rng, classes, samples, turns=1.0, noise=0.15):
    """`samples` points on `classes` interleaved noisy spiral arms, shuffled."""
    per_class = samples // classes
    radius = np.linspace(0.05, 1.0, per_class)
    xs, ys = [], []
    for k in range(classes):
        angle = radius * turns * 2 * math.pi + k * 2 * math.pi / classes + noise * rng.standard_normal(per_class)
        xs.append(np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1))
        ys.append(np.full(per_class, k, dtype=np.int64))
    x, y = np.concatenate(xs), np.concatenate(ys)
    order = rng.permutation(len(y))
    return x[order].astype(np.float32), y[order]


def linear_init(rng, fan_out, fan_in):
    """torch.nn.Linear's default initialization (weight stored [out, in])."""
    bound = 1 / math.sqrt(fan_in)
    weight = rng.uniform(-bound, bound, size=(fan_out, fan_in)).astype(np.float32)
    bias = rng.uniform(-bound, bound, size=(fan_out,)).astype(np.float32)
    return weight, bias


def make_model(rng, batch, hidden, classes):
    w1, b1 = linear_init(rng, hidden, FEATURES)
    w2, b2 = linear_init(rng, classes, hidden)
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], name="fc1", transB=1),
        helper.make_node("Relu", ["h"], ["a"], name="relu"),
        helper.make_node("Gemm", ["a", "fc2.weight", "fc2.bias"], ["logits"], name="fc2", transB=1),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "y"], ["loss"], name="xent", reduction="mean"),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        inputs=[
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, FEATURES]),
            helper.make_tensor_value_info("y", TensorProto.INT64, [batch]),
        ],
        outputs=[helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        initializer=[
            numpy_helper.from_array(w1, "fc1.weight"),
            numpy_helper.from_array(b1, "fc1.bias"),
            numpy_helper.from_array(w2, "fc2.weight"),
            numpy_helper.from_array(b2, "fc2.bias"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="spillway-examples", ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="The committed files in examples/mlp/ come from the defaults.")
    parser.add_argument("--out", required=True, metavar="DIR", help="directory to write mlp.onnx, x.npy, y.npy into")
    parser.add_argument("--seed", type=int, default=0, help="seed of data and initial weights (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=64, help="samples per batch (default: %(default)s)")
    parser.add_argument("--batches", type=int, default=48, help="batches in x.npy/y.npy (default: %(default)s)")
    parser.add_argument("--hidden", type=int, default=64, help="hidden layer width (default: %(default)s)")
    parser.add_argument("--classes", type=int, default=3, help="spiral arms = classes (default: %(default)s)")
    args = parser.parse_args()
    for name in ("batch", "batches", "hidden"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.classes < 2:
        parser.error("--classes must be >= 2")
    if (args.batch * args.batches) % args.classes:
        parser.error("--batch * --batches must be a multiple of --classes (equal-sized classes)")

    rng = np.random.default_rng(args.seed)
    x, y = make_spirals(rng, args.classes, args.batch * args.batches)
    model = make_model(rng, args.batch, args.hidden, args.classes)

    os.makedirs(args.out, exist_ok=True)
    onnx.save(model, os.path.join(args.out, "mlp.onnx"))
    np.save(os.path.join(args.out, "x.npy"), x.reshape(args.batches, args.batch, FEATURES))
    np.save(os.path.join(args.out, "y.npy"), y.reshape(args.batches, args.batch))
    print(f"wrote {args.out}/mlp.onnx, x.npy [{args.batches}, {args.batch}, {FEATURES}],"
          f" y.npy [{args.batches}, {args.batch}]")


if __name__ == "__main__":
    main()
