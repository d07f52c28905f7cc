#!/usr/bin/env python3
"""Widens a bench GPT's forward graph (train-dialect MLIR) to another width.

Written when spillwayc's ONNX import held about twice the weights in
memory, so that a 2.7B-parameter model (11 GB of fp32 weights) could be
compiled on a small machine (the import now never reads external weights,
docs/compiler.md, "Weights never go inline"; the script stays for the
device benchmarks that use it). Its graph, though, depends on the width only through the tensor
types, the attention scale and the parameters' offsets in the weights file.
So the model is imported at a narrow twin width (the same layers, heads,
vocabulary, sequence and batch; `spillwayc TWIN.onnx --forward --emit=mlir`:
the imported, fused graph and its loss, before autodiff) and this script
rewrites it to the full width as a training graph (the forward-only marks
dropped): every tensor dimension equal to the twin's D, 4D or head
dimension becomes the full model's, the attention scale becomes
1/sqrt(full head dimension), each parameter's offset is recomputed from the
widened types (packed in declaration order, as the importer lays them out),
and train.weights names WEIGHTS. spillwayc compiles the result like any
.mlir input (schedule, offload plan, code generation) without reading
weights: a .safetensors WEIGHTS of any size is accepted (the executable
reads it by name), and the executable is then run with `--weights` of the
real ones (bench/device/gpt_weights.py).

The twin's D, 4D and head dimension must be distinct from each other and
from every other dimension of the model, so that each dimension is
rewritten by its role (refused otherwise). test/device/widen-gpt-step.test
checks that spillwayc's training step of a widened graph is the one it
writes for the full model imported from ONNX.

  spillwayc twin/gpt.onnx --forward --emit=mlir -o twin.mlir
  widen_gpt_step.py twin.mlir --twin-d 96 --d-model 2560 --heads 32 \\
      --weights none.safetensors -o gpt.mlir
  spillwayc gpt.mlir --microbatches 4 --place ... -o exe
"""

import argparse
import math
import re
import struct
import sys

TENSOR = re.compile(r"tensor<([0-9x]*)(f32|f64|i64|i32|i1|bf16|f16)>")
PARAM = re.compile(r"^(  train\.param @\S+ : )tensor<([0-9x]*)(f32|i64|i32)> at (\d+)$")
SIZES = {"f32": 4, "i64": 8, "i32": 4}


def f32(x):
    """x rounded to float32, as make_gpt_onnx.py stores the attention scale."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def fail(msg):
    sys.exit(f"widen_gpt_step: {msg}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", help="the twin's forward graph (spillwayc --forward --emit=mlir)")
    ap.add_argument("--twin-d", type=int, required=True, help="the twin's width D")
    ap.add_argument("--d-model", type=int, required=True, help="the full model's width")
    ap.add_argument("--heads", type=int, required=True, help="attention heads (both models)")
    ap.add_argument("--weights", required=True, help="train.weights of the result (a .safetensors path)")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    for name, v in (("twin-d", a.twin_d), ("d-model", a.d_model)):
        if v < 1 or v % a.heads:
            fail(f"--{name} {v} is not a positive multiple of --heads {a.heads}")
    th, fh = a.twin_d // a.heads, a.d_model // a.heads
    mapping = {a.twin_d: a.d_model, 4 * a.twin_d: 4 * a.d_model, th: fh}
    if len(mapping) != 3:
        fail(f"the twin's D {a.twin_d}, 4D {4 * a.twin_d} and head dimension {th} must differ")
    try:
        text = open(a.step).read()
    except OSError as e:
        fail(f"cannot read '{a.step}': {e}")
    # Every other dimension of the model (the batch, sequence, heads,
    # vocabulary, their products) must not collide with a rewritten one.
    dims = {int(d) for m in TENSOR.finditer(text) for d in m.group(1).split("x") if d}
    others = dims - set(mapping)
    clash = set(mapping) & {a.heads}
    if clash or not set(mapping) <= dims:
        fail(f"{a.step}: the twin's dimensions {sorted(mapping)} are not all present or clash with "
             f"--heads (dimensions seen: {sorted(dims)}); is it a bench/make_gpt_onnx.py model of "
             f"width {a.twin_d}?")
    if set(mapping.values()) & others:
        fail(f"the full model's dimensions {sorted(mapping.values())} collide with other dimensions "
             f"of the step {sorted(set(mapping.values()) & others)}: pick another twin width")

    def widen(m):
        ds = [d for d in m.group(1).split("x") if d]
        return "tensor<" + "".join(f"{mapping.get(int(d), int(d))}x" for d in ds) + m.group(2) + ">"

    scales = set(re.findall(r"scale = ([0-9.e+-]+) : f64", text))
    for s in scales:
        if float(s) != f32(1 / math.sqrt(th)):
            fail(f"attention scale {s} is not 1/sqrt({th}) (the twin's head dimension) in float32")
    if not scales:
        fail(f"{a.step}: no attention (train.attention ... {{scale = ...}}): not a bench GPT step")
    new_scale = repr(f32(1 / math.sqrt(fh)))
    out, offset, params = [], 0, 0
    for line in text.splitlines():
        pm = PARAM.match(line)
        line = TENSOR.sub(widen, line)
        if pm:
            line = PARAM.match(line)
            shape = [int(d) for d in line.group(2).split("x") if d]
            out.append(f"{line.group(1)}tensor<{line.group(2)}{line.group(3)}> at {offset}")
            offset += SIZES[line.group(3)] * math.prod(shape)
            params += 1
            continue
        line = re.sub(r"scale = [0-9.e+-]+ : f64", f"scale = {new_scale} : f64", line)
        out.append(line)
    text = "\n".join(out) + "\n"
    n = len(re.findall(r'train\.weights = "[^"]*"', text))
    if n != 1:
        fail(f"{a.step}: expected one train.weights module attribute, found {n}")
    text = re.sub(r'train\.weights = "[^"]*"', f'train.weights = "{a.weights}"', text)
    # A training graph: spillwayc differentiates the loss the function returns.
    marks = text.count(" attributes {train.forward_only}")
    text = text.replace(" attributes {train.forward_only}", "")
    text, named = re.subn(r'-> \(tensor<f32> \{train\.name = "[^"]*"\}\)', "-> tensor<f32>", text)
    if marks != 1 or named != 1:
        fail(f"{a.step}: not the forward graph of a model with one scalar loss "
             f"(spillwayc --forward --emit=mlir of a bench/make_gpt_onnx.py model)")
    if not params:
        fail(f"{a.step}: no train.param declarations")
    with open(a.out, "w") as f:
        f.write(text)
    print(f"widened {a.step} from D={a.twin_d} to D={a.d_model}: {params} parameters, "
          f"{offset // 4} elements ({offset / 2**30:.2f} GiB) -> {a.out}")


if __name__ == "__main__":
    main()
