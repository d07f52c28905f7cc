#!/usr/bin/env python3
"""onnxruntime's forward loss of each parity fixture equals PyTorch's.

Runs FIXTURE.onnx in onnxruntime on batch 0 of tokens.npy (step 1's batch) and
compares the loss with step 1 of the matching PyTorch trajectory
(FAMILY.torch_losses.jsonl: the loss before the first update). Exit status 1
when the relative error exceeds --rtol. Needs onnxruntime, not torch.
"""
import argparse
import json
import os
import sys

import numpy as np
import onnxruntime


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("fixtures", nargs="+", help="parity .onnx files (gpt2_ts.onnx, llama_dynamo.onnx, ...)")
    p.add_argument("--rtol", type=float, default=1e-5)
    args = p.parse_args()
    onnxruntime.set_default_logger_severity(3)  # its constant-folding notes are noise here
    failed = 0
    for path in args.fixtures:
        here = os.path.dirname(os.path.abspath(path))
        family = os.path.basename(path).split("_")[0]
        tokens = np.load(os.path.join(here, "tokens.npy"))
        with open(os.path.join(here, family + ".torch_losses.jsonl")) as f:
            torch_loss = json.loads(f.readline())["loss"]
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        feeds = {i.name: tokens[0] for i in session.get_inputs()}
        loss = float(session.run(None, feeds)[0])
        rel = abs(loss - torch_loss) / abs(torch_loss)
        ok = rel <= args.rtol
        failed += not ok
        print("%s %s: onnxruntime %.9g, torch %.9g, relative error %.2e" %
              ("ok  " if ok else "FAIL", os.path.basename(path), loss, torch_loss, rel))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
