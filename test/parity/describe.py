#!/usr/bin/env python3
"""Prints an ONNX graph as one line per node, `name: Op(inputs) -> outputs`.

    python3 test/parity/describe.py MODEL.onnx [--hist] [--all]

Needs only `onnx` and `numpy`. Constant nodes are folded into their users as
`name=<value>` (small ones) or `name=<dtype[shape]>`; initializers appear as
`name<init dtype[shape]>`. `--hist` prints the op-type histogram instead
(domain, opset); `--all` also lists the Constant nodes.
"""
import argparse
import collections

import numpy as np
import onnx
from onnx import numpy_helper


def short(arr):
    if arr.size <= 8:
        return np.array2string(arr.reshape(-1) if arr.ndim > 1 else arr, separator=",",
                               threshold=8).replace("\n", "")
    return f"{arr.dtype}{list(arr.shape)}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--hist", action="store_true")
    ap.add_argument("--all", action="store_true")
    a = ap.parse_args()
    m = onnx.load(a.model)
    g = m.graph
    if a.hist:
        opsets = {d.domain or "ai.onnx": d.version for d in m.opset_import}
        c = collections.Counter((n.domain or "ai.onnx", n.op_type) for n in g.node)
        print(f"{a.model}: {len(g.node)} nodes, opsets {opsets}, "
              f"{len(g.initializer)} initializers, inputs "
              + ", ".join(f"{i.name}:{i.type.tensor_type.elem_type}"
                          f"{[d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim]}"
                          for i in g.input))
        for (dom, op), k in sorted(c.items(), key=lambda t: (-t[1], t[0])):
            print(f"  {op}: {k}" + ("" if dom == "ai.onnx" else f" ({dom})"))
        return
    consts = {}
    for n in g.node:
        if n.op_type == "Constant":
            at = n.attribute[0]
            v = onnx.helper.get_attribute_value(at)
            consts[n.output[0]] = (numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto)
                                   else np.array(v))
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}

    def fmt(x):
        if x in consts and isinstance(consts[x], np.ndarray):
            return f"{x}={short(consts[x])}"
        if x in inits:
            v = inits[x]
            return f"{x}<init {v.dtype}{list(v.shape)}>"
        return x

    for n in g.node:
        if n.op_type == "Constant" and not a.all:
            continue
        attrs = []
        for at in n.attribute:
            v = onnx.helper.get_attribute_value(at)
            if isinstance(v, onnx.TensorProto):
                v = short(numpy_helper.to_array(v))
            elif isinstance(v, bytes):
                v = v.decode()
            attrs.append(f"{at.name}={v}")
        print(f"{n.name}: {n.op_type}({', '.join(fmt(i) for i in n.input)})"
              f"{'[' + ' '.join(attrs) + ']' if attrs else ''} -> {', '.join(n.output)}")


if __name__ == "__main__":
    main()
