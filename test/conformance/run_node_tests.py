#!/usr/bin/env python3
"""Runs the ONNX backend node tests through Spillway and compares outputs.

Every node test (a model, usually of one node, plus input/output tensors)
whose ops are all ones Spillway imports, and whose tensors are all of dtypes Spillway runs
(float32, int64, int32, bool), is compiled with `spillwayc --forward` and run
with `EXE --outputs DIR`; each output is compared with the expected one within
the ONNX backend tolerance (rtol 1e-3, atol 1e-7; exact for integers and
booleans). Inputs the importer reports must be compile-time constants for
Spillway (shapes, axes, starts; constants in exported models) are frozen into
the model, one by one, when a test feeds them as graph inputs. Prints one
line per failure with its reason and finally `N passed, N failed` (and how many
were not applicable). Exit status 1 when any applicable test fails.

Test sources:
  --onnx-package     the node tests of the installed `onnx` package (current
                     opsets), generated in memory by onnx.backend.test.case
  --dir DIR          a directory of node tests on disk (DIR/test_x/model.onnx,
                     DIR/test_x/test_data_set_N/{input,output}_K.pb), e.g.
                     Debian's /usr/share/libonnx-testdata/data/node (ONNX 1.12)
"""
import argparse
import re
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnx.helper
from onnx import numpy_helper

RUNTIME_DTYPES = {np.dtype(np.float32), np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.bool_)}


DEFAULT_DOMAINS = ("", "ai.onnx")


def supported_ops(translate):
    """Ops the importer maps to computation, as (domain, op_type) pairs with
    "" for the default domain. Ops it only evaluates at import time on
    constants do not apply: node tests feed them graph inputs. Lines are
    `OP`, `OP constant-only` or `OP DOMAIN [forward-only]` (this runner
    compiles with --forward, so forward-only ops apply)."""
    out = subprocess.run([translate, "--list-supported-ops"], capture_output=True, text=True, check=True)
    ops = set()
    for line in out.stdout.splitlines():
        words = line.split()
        if not words or words[1:] == ["constant-only"]:
            continue
        domain = words[1] if len(words) > 1 and words[1] != "forward-only" else ""
        ops.add((domain, words[0]))
    return ops


class NodeTest:
    def __init__(self, name, model, data_sets):
        self.name, self.model, self.data_sets = name, model, data_sets  # data_sets: [(inputs, outputs)]


def tests_from_package(pattern):
    import warnings
    from onnx.backend.test.case import node
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)
    for case in cases:
        if case.kind != "node" or (pattern and pattern not in case.name):
            continue
        # Reduced outputs come as NumPy scalars; treat them as 0-d arrays.
        as_arrays = lambda values: [np.asarray(v) if isinstance(v, np.generic) else v for v in values]
        yield NodeTest(case.name, case.model, [(as_arrays(i), as_arrays(o)) for i, o in case.data_sets])


def read_pb(path):
    """A TensorProto file as an array; None for other protos (sequences,
    optionals, maps), which Spillway does not run."""
    t = onnx.TensorProto()
    try:
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        return numpy_helper.to_array(t)
    except Exception:  # a SequenceProto/OptionalProto parses as garbage
        return None


def fix_adam_multiple_epsilon(model):
    """ONNX <= 1.12's test_adam_multiple model omits the node's epsilon
    attribute, but its expected outputs were generated with epsilon=1e-2
    (the default is 1e-6); later onnx releases add the attribute. Restore
    it so the model matches its data."""
    for n in model.graph.node:
        if n.op_type == "Adam" and not any(a.name == "epsilon" for a in n.attribute):
            n.attribute.append(onnx.helper.make_attribute("epsilon", 1e-2))


# Upstream test models whose attributes disagree with their own expected
# outputs, by test name: a function that repairs the model in place.
MODEL_FIXES = {"test_adam_multiple": fix_adam_multiple_epsilon}


def tests_from_dir(root, pattern):
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if pattern and pattern not in name or not os.path.isfile(os.path.join(d, "model.onnx")):
            continue
        model = onnx.load(os.path.join(d, "model.onnx"))
        if name in MODEL_FIXES:
            MODEL_FIXES[name](model)
        sets = []
        for ds in sorted(x for x in os.listdir(d) if x.startswith("test_data_set_")):
            files = sorted(os.listdir(os.path.join(d, ds)))
            def load(prefix):
                picked = sorted((f for f in files if f.startswith(prefix)), key=lambda f: int(f[len(prefix):-3]))
                return [read_pb(os.path.join(d, ds, f)) for f in picked]
            sets.append((load("input_"), load("output_")))
        yield NodeTest(name, model, sets)


RUNTIME_TENSOR_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.BOOL}


def not_applicable(test, ops):
    """Why Spillway does not claim this test, or None when it does."""
    graph = test.model.graph
    used = {("" if n.domain in DEFAULT_DOMAINS else n.domain, n.op_type) for n in graph.node}
    if any(d for d, _ in used - ops):
        return "non-default domain"
    missing = sorted(op for _, op in used - ops)
    if missing:
        return "op " + ",".join(missing)
    for n in graph.node:
        attrs = {a.name: a for a in n.attribute}
        # Casts inside the graph to types Spillway does not run (e.g. double).
        if n.op_type == "Cast" and attrs["to"].i not in RUNTIME_TENSOR_TYPES:
            return "cast to " + onnx.TensorProto.DataType.Name(attrs["to"].i)
        # Dropout in training mode draws random numbers: outputs cannot match.
        if n.op_type == "Dropout" and len(n.input) > 2 and n.input[2]:
            return "random (training-mode Dropout)"
        # Edge/reflect/wrap pads gather, and Spillway gathers float32 only
        # (the importer says so).
        mode = attrs["mode"].s.decode() if "mode" in attrs else "constant"
        if n.op_type == "Pad" and mode != "constant":
            for inputs, _ in test.data_sets:
                if inputs and inputs[0].dtype != np.float32:
                    return "Pad mode %s of %s data" % (mode, inputs[0].dtype)
    if any(n.op_type == "Constant" for n in graph.node) and len(graph.node) == 1:
        return "no computation"
    for inputs, outputs in test.data_sets:
        for a in list(inputs) + list(outputs):
            if not isinstance(a, np.ndarray) or a.dtype not in RUNTIME_DTYPES:
                return "dtype " + (str(a.dtype) if isinstance(a, np.ndarray) else type(a).__name__)
    if not test.data_sets:
        return "no data"
    return None


def tolerance(dtype):
    return (0.0, 0.0) if dtype != np.float32 else (1e-3, 1e-7)


def graph_input_names(model):
    initializers = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in initializers]


CONSTANT_OPERAND = re.compile(r"'([^']+)' must be a compile-time constant")


def freeze_input(model, data_sets, name):
    """The model with graph input `name` turned into an initializer holding
    the test data's value, when every data set feeds the same value.

    Spillway compiles shapes statically: operands such as Reshape's shape or
    ReduceSum's axes must be compile-time constants, as they are in exported
    models; node tests feed them as graph inputs. Only the inputs the importer
    names are frozen, so the others still reach the runtime's kernels. Returns
    None when `name` is no graph input or the data sets disagree."""
    names = graph_input_names(model)
    if name not in names:
        return None
    pos = names.index(name)
    values = [ins[pos] for ins, _ in data_sets]
    if any(v.shape != values[0].shape or not np.array_equal(v, values[0]) for v in values[1:]):
        return None
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [i for i in m.graph.input if i.name != name]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    m.graph.initializer.append(numpy_helper.from_array(values[0], name))
    sets = [([v for k, v in enumerate(ins) if k != pos], outs) for ins, outs in data_sets]
    return m, sets


def compile_model(model, path, exe, args):
    onnx.save(model, path)
    r = subprocess.run([args.spillwayc, "--forward", path, "-o", exe], capture_output=True, text=True)
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]


def run_one(test, args, workdir):
    """Compiles and runs one node test in its own directory, then removes it:
    each executable links the runtime and BLAS statically (tens of MB), and
    the hundreds of tests must not fill the disk (a CI run's did)."""
    d = os.path.join(workdir, test.name)
    os.makedirs(d)
    try:
        return check_one(test, args, d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def check_one(test, args, d):
    model_path = os.path.join(d, "model.onnx")
    exe = os.path.join(d, "exe")
    model, data_sets = test.model, test.data_sets
    error = compile_model(model, model_path, exe, args)
    for _ in range(len(graph_input_names(model))):
        match = error and CONSTANT_OPERAND.search(error)
        frozen = match and freeze_input(model, data_sets, match.group(1))
        if not frozen:
            break
        model, data_sets = frozen
        error = compile_model(model, model_path, exe, args)
    if error:
        return "compile: " + error
    graph_inputs = graph_input_names(model)
    graph_outputs = [o.name for o in model.graph.output]
    for k, (inputs, outputs) in enumerate(data_sets):
        if len(inputs) != len(graph_inputs) or len(outputs) != len(graph_outputs):
            return "data set %d: %d inputs / %d outputs for a graph with %d / %d" % (
                k, len(inputs), len(outputs), len(graph_inputs), len(graph_outputs))
        run_cmd = [exe, "--outputs", os.path.join(d, "out%d" % k)]
        for name, value in zip(graph_inputs, inputs):
            path = os.path.join(d, "in%d_%s.npy" % (k, len(run_cmd)))
            np.save(path, value[None, ...])  # one batch
            run_cmd += ["--input", "%s=%s" % (name, path)]
        r = subprocess.run(run_cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return "run: " + (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
        for name, expected in zip(graph_outputs, outputs):
            safe = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in name)
            path = os.path.join(d, "out%d" % k, safe + ".npy")
            if not os.path.exists(path):
                return "output %s: the executable wrote no %s" % (name, path)
            got = np.load(path)[0]
            if got.shape != expected.shape:
                return "output %s: shape %s, expected %s" % (name, got.shape, expected.shape)
            if got.dtype != expected.dtype:
                return "output %s: dtype %s, expected %s" % (name, got.dtype, expected.dtype)
            rtol, atol = tolerance(expected.dtype)
            if not np.allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True):
                err = np.max(np.abs(got.astype(np.float64) - expected.astype(np.float64)))
                return "output %s: max abs error %.3g (rtol %g, atol %g)" % (name, err, rtol, atol)
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--onnx-package", action="store_true", help="run the installed onnx package's node tests")
    p.add_argument("--dir", action="append", default=[], help="run the node tests under DIR (repeatable)")
    p.add_argument("--spillwayc", required=True)
    p.add_argument("--spillway-translate", required=True)
    p.add_argument("--filter", default="", help="only tests whose name contains this")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--list-skipped", action="store_true", help="print each test that does not apply, and why")
    args = p.parse_args()
    if not args.onnx_package and not args.dir:
        p.error("give --onnx-package and/or --dir DIR")

    ops = supported_ops(args.spillway_translate)
    sources = []
    if args.onnx_package:
        sources.append(("onnx %s" % onnx.__version__, tests_from_package(args.filter)))
    for d in args.dir:
        if not os.path.isdir(d):
            p.error("--dir %s: no such directory" % d)
        sources.append((d, tests_from_dir(d, args.filter)))

    total_failed = 0
    with tempfile.TemporaryDirectory(prefix="spillway-conformance-") as work:
        for label, tests in sources:
            applicable, skipped = [], []
            for t in tests:
                why = not_applicable(t, ops)
                (skipped if why else applicable).append((t, why))
            work_dir = os.path.join(work, str(abs(hash(label))))
            os.makedirs(work_dir)
            def guarded(test):
                try:
                    return test.name, run_one(test, args, work_dir)
                except Exception as e:  # one broken test must not end the run
                    return test.name, "runner: %s: %s" % (type(e).__name__, e)
            with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                results = list(pool.map(lambda tw: guarded(tw[0]), applicable))
            failed = [(n, why) for n, why in results if why]
            for n, why in failed:
                print("FAIL %s: %s" % (n, why))
            if args.list_skipped:
                for t, why in skipped:
                    print("skip %s: %s" % (t.name, why))
            print("%s: %d applicable, %d not applicable" % (label, len(applicable), len(skipped)))
            print("%d passed, %d failed" % (len(applicable) - len(failed), len(failed)))
            total_failed += len(failed)
    return 1 if total_failed else 0


if __name__ == "__main__":
    sys.exit(main())
