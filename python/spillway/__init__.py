"""Spillway's Python front door: export PyTorch / Hugging Face models as ONNX
training graphs that `spillwayc` compiles into training executables.

    import spillway
    spillway.export(model, (input_ids, labels), "model.onnx")   # needs torch
    spillway.metadata.read("model.onnx")                         # needs only onnx

    python -m spillway.export --hf gpt2 --batch 8 --seq 128 -o model.onnx
"""

__version__ = "0.1.0"

from . import metadata  # noqa: E402,F401


def __getattr__(name):
    # Imported on first use, not here: `python -m spillway.export` must find
    # the module not yet imported (runpy warns otherwise), and importing the
    # package must not pull in torch.
    if name in ("export", "hf"):
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'spillway' has no attribute '{name}'")
