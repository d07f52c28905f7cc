"""Writes the fuzzer's binary seeds: each ONNX textual-syntax fixture of the
importer's tests, serialized as a binary ModelProto, so that the protobuf
parser starts from the same op coverage as the text parser (onnx from PyPI).

usage: make-seeds.py OUT_DIR FIXTURE.onnxtext...
"""
import os
import sys

import onnx
import onnx.parser


def main(out_dir, fixtures):
    for path in fixtures:
        try:
            model = onnx.parser.parse_model(open(path).read())
        except Exception as e:  # fixtures that test parse errors
            print(f"make-seeds: skipping {path}: {e}", file=sys.stderr)
            continue
        name = os.path.splitext(os.path.basename(path))[0] + ".onnx"
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(model.SerializeToString())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
