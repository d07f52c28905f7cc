"""The parameter mapping `spillway.export` records in an ONNX file.

The ModelProto's `metadata_props` holds the key `spillway.parameters`
(KEY below) whose value is JSON (format FORMAT):

    {"format": 1,
     "model_class": "GPT2LMHeadModel",
     "wrapper_prefix": "model.",
     "parameters": {INITIALIZER: {"state_dict": NAME, "shape": [d0, ...]}, ...},
     "ties": [[NAME, ALIAS, ...], ...],
     "buffers": [INITIALIZER, ...],
     "unused": [NAME, ...]}

- `parameters`: every initializer that is a trainable torch parameter, by
  initializer name. NAME is the parameter's key in the user's model's
  `state_dict()`; when that model is a wrapper around one Hugging Face
  `PreTrainedModel` holding every parameter (as `forward(input_ids, labels) ->
  loss` wrappers do), NAME is relative to the HF model instead and
  `wrapper_prefix` is what was taken off (else "").
- `ties`: parameters torch shares between modules (GPT-2's
  `transformer.wte.weight` and `lm_head.weight`), as state-dict names; the
  first of each group is the one `parameters` maps, the others are aliases
  that `state_dict()` also holds.
- `buffers`: initializers that are not parameters (buffers such as a rotary
  `inv_freq`, lifted constants); a trainer keeps them constant.
- `unused`: parameters the exported loss does not read (no initializer).

This module needs only onnx and numpy.
"""

import json

KEY = "spillway.parameters"
FORMAT = 1


def read(path_or_model):
    """The mapping of an ONNX file (or onnx.ModelProto) as a dict; ValueError if it has none."""
    import onnx

    if isinstance(path_or_model, onnx.ModelProto):
        model, where = path_or_model, "the model"
    else:
        # The mapping lives in the ModelProto; the weights need not be read.
        where = str(path_or_model)
        try:
            model = onnx.load(path_or_model, load_external_data=False)
        except OSError:
            raise
        except Exception as e:  # protobuf's DecodeError and friends
            raise ValueError(f"{where}: not an ONNX model: {e}") from e
    for prop in model.metadata_props:
        if prop.key == KEY:
            try:
                data = json.loads(prop.value)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: metadata '{KEY}' is not JSON: {e}") from e
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                raise ValueError(f"{where}: metadata '{KEY}' has format "
                                 f"{data.get('format') if isinstance(data, dict) else None!r}, "
                                 f"this spillway reads format {FORMAT}")
            return data
    raise ValueError(f"{where}: no '{KEY}' metadata; export the model with spillway.export() "
                     "or `python -m spillway.export` to record it")


def state_dict_names(mapping):
    """initializer name -> state-dict name, for every parameter in `mapping`."""
    return {init: p["state_dict"] for init, p in mapping["parameters"].items()}


def main(argv=None):
    """`python -m spillway.metadata MODEL.onnx`: prints the mapping as JSON."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m spillway.metadata",
                                 description="Prints the parameter mapping spillway.export "
                                             f"recorded in an ONNX file (metadata '{KEY}').")
    ap.add_argument("model", help="an ONNX file written by spillway.export")
    args = ap.parse_args(argv)
    try:
        data = read(args.model)
    except (ValueError, OSError) as e:
        ap.exit(1, f"error: {e}\n")
    print(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
