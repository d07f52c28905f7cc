"""Imports of the heavy dependencies, which only the exporting functions need.

The package itself depends on numpy and onnx alone (reading an export's
metadata needs nothing more), so CI and users who only compile and train do
not install torch.
"""

import importlib

INSTALL_HINT = "pip install torch transformers onnxscript onnxruntime"


def require(module, what):
    """Imports `module` or raises ImportError saying what needs it and how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{what} needs the Python module '{module}', which is not "
                          f"installed ({e}): {INSTALL_HINT}") from e
