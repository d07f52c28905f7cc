"""Exports a PyTorch model and its loss as an ONNX training graph for spillwayc.

    spillway.export(model, example_inputs, "model.onnx")
    python -m spillway.export --hf gpt2 --batch 2 --seq 16 -o model.onnx

`spillway.export` is this module, callable as the function `export` below, so
that `python -m spillway.export` and `spillway.export(...)` name one thing.

The export is torch.onnx's dynamo exporter with `optimize=False`: its
optimizer folds constants that are really parameters (the transposed weight
of every nn.Linear, GPT-2's position embedding gathered at arange(S)) and
merges initializers of equal value, so the graph would hold tensors torch
never had. With it off, every initializer is a parameter, a buffer or a
lifted constant under its torch name. What is what is recorded in the file (spillway.metadata)
and onnxruntime's loss is checked against torch's.
"""

import contextlib
import dataclasses
import inspect
import json
import logging
import os
import sys
import types
import warnings

import numpy as np

from . import metadata
from ._optional import require

# Past this many bytes of weights the initializers go to PATH.data (ONNX
# external data): one protobuf cannot exceed 2 GB, and the graph and its
# metadata need room beside the weights.
EXTERNAL_DATA_BYTES = 1 << 30
# How closely onnxruntime's loss must match torch's on the example inputs.
RTOL = 1e-4
# Node metadata torch.onnx writes that names this machine's source paths and
# dominates small files; the scopes and FX node names the compiler reads stay.
_STACK_TRACE_KEY = "pkg.torch.onnx.stack_trace"
# The attribute holding the user's model in the wrapper export(loss=...) builds.
_OWN_PREFIX = "model."


@dataclasses.dataclass
class ExportResult:
    """What export() wrote and checked."""
    path: str
    files: dict            # path -> bytes, the .onnx and its external data if any
    mapping: dict          # the `spillway.parameters` metadata (spillway.metadata)
    input_names: list
    torch_loss: float
    onnxruntime_loss: float = None   # None with check=False
    num_parameters: int = 0          # elements, tied ones once
    packed_sequence_check_off: bool = False   # see _PackedSequenceCheck


def _loss_of(torch, model, loss):
    """The module whose forward is `loss(model, *inputs)`, holding `model` as _OWN_PREFIX."""
    class LossOf(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *inputs):
            return loss(self.model, *inputs)

    return LossOf()


class _PackedSequenceCheck:
    """transformers' packed-sequence detection, switched off for the export where the
    example inputs show it is dead code.

    With no attention_mask, create_causal_mask() looks for packed sequences
    in position_ids (torch.diff, cumsum: masking_utils.find_packed_sequence_indices).
    In eager mode it returns None for ordinary rows; traced, it cannot, and
    the graph gets that arithmetic (CumSum, GatherND), which spillwayc does not
    import and the TorchScript exporter cannot export. Where every call on
    the example inputs returned None and position_ids is not a graph input
    (positions are then arange(S) in every row, whatever the tokens), it
    returns None during the export too, which is what eager torch computes."""

    def __init__(self, input_names):
        self.mu = sys.modules.get("transformers.masking_utils")
        if self.mu is not None and not hasattr(self.mu, "find_packed_sequence_indices"):
            self.mu = None
        self.inputs_have_positions = any("position_ids" in n for n in input_names)
        self.found = []     # per call on the example inputs: did it find packing?
        self.off = False

    @contextlib.contextmanager
    def recording(self):
        if self.mu is None:
            yield
            return
        original = self.mu.find_packed_sequence_indices

        def recorded(*args, **kwargs):
            out = original(*args, **kwargs)
            self.found.append(out is not None)
            return out

        self.mu.find_packed_sequence_indices = recorded
        try:
            yield
        finally:
            self.mu.find_packed_sequence_indices = original

    @contextlib.contextmanager
    def exporting(self):
        self.off = bool(self.mu is not None and self.found and not any(self.found)
                        and not self.inputs_have_positions)
        if not self.off:
            yield
            return
        original = self.mu.find_packed_sequence_indices
        self.mu.find_packed_sequence_indices = lambda *args, **kwargs: None
        try:
            yield
        finally:
            self.mu.find_packed_sequence_indices = original


def _input_names(fn, n, what):
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(params) < n:
        raise ValueError(f"{what} takes {len(params)} named positional arguments but "
                         f"example_inputs has {n}: pass input_names=[...]")
    return [p.name for p in params[:n]]


def _hf_prefix(model):
    """The prefix of the one transformers PreTrainedModel inside wrapper `model` that holds
    all of its parameters and buffers, or "" (not a wrapper, or no such model)."""
    tf = sys.modules.get("transformers")
    if tf is None or isinstance(model, tf.PreTrainedModel):
        return ""
    for name, mod in model.named_modules():
        if name and isinstance(mod, tf.PreTrainedModel):
            prefix = name + "."
            names = [n for n, _ in model.named_parameters(remove_duplicate=False)]
            names += [n for n, _ in model.named_buffers(remove_duplicate=False)]
            return prefix if all(n.startswith(prefix) for n in names) else ""
    return ""


def _check_model(torch, model):
    """Refuses what would make the graph train another function than torch does."""
    def where(name, mod):
        return f"'{name}'" if name else f"(the model, {type(mod).__name__})"

    for name, p in model.named_parameters():
        if p.is_floating_point() and p.dtype != torch.float32:
            raise ValueError(f"parameter '{name}' is {p.dtype}: spillwayc trains from fp32 "
                             "master weights: call model.float() before exporting (spillwayc "
                             "--precision bf16-mixed then trains with bf16 working weights and "
                             "activations, as torch's bf16 autocast)")
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Embedding) and mod.padding_idx is not None:
            # torch zeroes the gradient of the padding row; an ONNX Gather
            # cannot say so, and the graph would train that row.
            raise ValueError(f"embedding {where(name, mod)} has padding_idx={mod.padding_idx}, "
                             "whose gradient masking cannot be exported (the graph would train "
                             "that row, torch does not): set its padding_idx = None (for Hugging "
                             "Face models: build them with pad_token_id=None)")
        if isinstance(mod, torch.nn.modules.dropout._DropoutNd) and mod.p > 0:
            warnings.warn(f"{where(name, mod)} is dropout with p={mod.p}: the graph is exported "
                          "in eval mode and trains without dropout", stacklevel=3)


def _mapping(wrapper, inner, prefix, wrapper_prefix, initializers):
    """The `spillway.parameters` metadata; also checks each parameter's exported value."""
    canon = {}
    for name, p in wrapper.named_parameters():
        canon.setdefault(id(p), name)
    table = {n: (canon[id(p)], p) for n, p in wrapper.named_parameters(remove_duplicate=False)}

    def sd(name):  # full name in the wrapper -> name in the user's (or the HF) model
        return name[len(prefix):] if name.startswith(prefix) else name

    params, buffers, held = {}, [], {}
    for init_name, value in initializers.items():
        if init_name not in table:
            buffers.append(init_name)
            continue
        cname, p = table[init_name]
        arr = value.const_value.numpy() if value.const_value is not None else None
        ref = p.detach().cpu().numpy()
        if arr is None or arr.shape != ref.shape or not np.array_equal(arr, ref):
            raise RuntimeError(f"initializer '{init_name}' of the export does not hold parameter "
                               f"'{cname}' (shape {None if arr is None else list(arr.shape)} "
                               f"against {list(ref.shape)}); please report this with your "
                               "torch and onnxscript versions")
        if cname in held:
            raise RuntimeError(f"parameter '{cname}' is exported twice, as '{held[cname]}' and "
                               f"'{init_name}'")
        held[cname] = init_name
        params[init_name] = {"state_dict": sd(init_name), "shape": list(ref.shape)}
    groups = {}
    for name, (cname, _) in table.items():
        groups.setdefault(cname, []).append(name)
    ties, unused = [], []
    for cname, names in groups.items():
        if cname not in held:
            unused.append(sd(cname))
            continue
        if len(names) > 1:
            first = held[cname]
            ties.append([sd(first)] + [sd(n) for n in names if n != first])
    return {"format": metadata.FORMAT, "model_class": type(inner).__name__,
            "wrapper_prefix": wrapper_prefix,
            "parameters": params, "ties": ties, "buffers": buffers, "unused": unused}


def export(model, example_inputs, path, *, loss=None, input_names=None, check=True):
    """Exports `model` and its loss as an ONNX training graph at `path` for spillwayc.

    model           a torch.nn.Module. Without `loss`, `model(*example_inputs)`
                    must return the scalar loss (wrap HF models as
                    forward(input_ids, labels) -> loss).
    example_inputs  a tensor or a tuple of tensors: the graph's inputs, whose
                    shapes (batch, sequence) the graph fixes.
    loss            optional callable `loss(model, *example_inputs) -> scalar`:
                    the graph is its computation instead of model's forward.
    input_names     the graph's input names (default: the names of forward's,
                    or loss's after the model, positional parameters).
    check           run the export in onnxruntime and raise RuntimeError unless
                    its loss matches torch's within 1e-4 relative.

    The graph is exported in eval mode (no dropout); its output is `loss`.
    Weights over 1 GiB go to PATH.data. The file's metadata `spillway.parameters`
    maps each initializer to its state-dict name (see spillway.metadata).
    Returns an ExportResult.
    """
    torch = require("torch", "spillway.export")
    require("onnxscript", "spillway.export (torch.onnx's dynamo exporter)")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    for i, t in enumerate(example_inputs):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"example_inputs[{i}] is {type(t).__name__}, not a torch.Tensor: "
                            "the graph's inputs are tensors (fix other arguments in a loss= "
                            "callable or the forward)")
    # torch.export gives inputs that are one tensor (export(w, (ids, ids)), the
    # usual call for a causal LM) one placeholder: the graph would read its
    # last input in both places and ignore the others. Copies keep them apart.
    example_inputs = tuple(t.detach().clone() for t in example_inputs)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model is {type(model).__name__}, not a torch.nn.Module")
    out_dir = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(out_dir):  # before the export, which takes a while
        raise FileNotFoundError(f"{path}: directory {out_dir} does not exist")
    hf_prefix = _hf_prefix(model)
    inner = model.get_submodule(hf_prefix[:-1]) if hf_prefix else model
    if loss is not None:
        wrapper = _loss_of(torch, model, loss)
        names = input_names or _input_names(loss, len(example_inputs) + 1, "loss")[1:]
        prefix = _OWN_PREFIX + hf_prefix
    else:
        wrapper = model
        names = input_names or _input_names(model.forward, len(example_inputs), "forward")
        prefix = hf_prefix
    names = list(names)
    if len(names) != len(example_inputs) or len(set(names)) != len(names):
        raise ValueError(f"input_names {names} must name the {len(example_inputs)} example "
                         "inputs once each")
    _check_model(torch, model)

    modes = [(m, m.training) for m in wrapper.modules()]
    wrapper.eval()
    try:
        packed = _PackedSequenceCheck(names)
        with torch.no_grad(), packed.recording():
            out = wrapper(*example_inputs)
        if not (isinstance(out, torch.Tensor) and out.dim() == 0 and out.is_floating_point()):
            got = (f"a tensor of shape {list(out.shape)}" if isinstance(out, torch.Tensor)
                   else type(out).__name__)
            raise ValueError(f"the model returned {got}; spillwayc trains a graph whose output "
                             "is the scalar loss: return it from forward, or pass "
                             "loss=lambda model, *inputs: ...")
        torch_loss = float(out)
        weight_bytes = sum(t.numel() * t.element_size() for t in
                           list(wrapper.parameters()) + list(wrapper.buffers()))
        external = weight_bytes > EXTERNAL_DATA_BYTES
        # The exporter logs and warns about what does not concern the user
        # (torchvision's ops, deprecations); its errors still raise.
        onnx_log = logging.getLogger("torch.onnx")
        level = onnx_log.level
        onnx_log.setLevel(logging.ERROR)
        try:
            with warnings.catch_warnings(), packed.exporting():
                warnings.simplefilter("ignore")
                prog = torch.onnx.export(wrapper, example_inputs, dynamo=True, optimize=False,
                                         external_data=external, input_names=names,
                                         output_names=["loss"], verbose=False)
        finally:
            onnx_log.setLevel(level)
    finally:
        for m, training in modes:
            m.training = training

    mapping = _mapping(wrapper, inner, prefix, hf_prefix, prog.model.graph.initializers)
    prog.model.metadata_props[metadata.KEY] = json.dumps(mapping)
    try:
        from onnx_ir.traversal import RecursiveGraphIterator
        for node in RecursiveGraphIterator(prog.model.graph):
            node.metadata_props.pop(_STACK_TRACE_KEY, None)
    except ImportError:
        pass
    prog.save(path, external_data=external)
    files = {path: os.path.getsize(path)}
    if external and os.path.exists(path + ".data"):
        files[path + ".data"] = os.path.getsize(path + ".data")
    result = ExportResult(path=path, files=files, mapping=mapping, input_names=names,
                          torch_loss=torch_loss, packed_sequence_check_off=packed.off,
                          num_parameters=sum(p.numel() for p in wrapper.parameters()))
    if check:
        result.onnxruntime_loss = check_loss(path, dict(zip(names, example_inputs)), torch_loss)
    return result


def check_loss(path, inputs, expected, rtol=RTOL):
    """onnxruntime's loss of the graph at `path` on `inputs` (name -> tensor or array);
    RuntimeError unless it is within `rtol` of `expected`."""
    ort = require("onnxruntime", "spillway.export's check")
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # errors only: its graph optimizer's notes are not the user's
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    feed = {n: (v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v))
            for n, v in inputs.items()}
    got = float(sess.run(None, feed)[0])
    if not abs(got - expected) <= rtol * abs(expected):
        rel = abs(got - expected) / abs(expected) if expected else float("inf")
        raise RuntimeError(f"{path}: onnxruntime's loss {got!r} differs from torch's "
                           f"{expected!r} on the example inputs (relative error {rel:.3e}, "
                           f"rtol {rtol:g}): the export does not compute the model's loss")
    return got


def main(argv=None):
    from . import hf
    return hf.main(argv)


if __name__ == "__main__":
    sys.exit(main())
else:
    class _CallableModule(types.ModuleType):
        def __call__(self, *args, **kwargs):
            return export(*args, **kwargs)

    sys.modules[__name__].__class__ = _CallableModule
