"""Exports of tiny GPT-2 and LLaMA models (HF's own init, nothing perturbed;
also Qwen2, Mistral, GPT-NeoX, Phi-3, Gemma where transformers has them)
compiled by spillwayc train 30 steps as torch.optim.AdamW does, within 1e-4
relative (as test/parity does for hand-made exports).

Needs torch, transformers, onnxscript, onnxruntime and a spillwayc: $SPILLWAYC,
else `spillwayc` on PATH, else this checkout's build/bin/spillwayc. Skipped
without them.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import numpy as np

HAVE_TORCH = all(importlib.util.find_spec(m) for m in
                 ("torch", "transformers", "onnxscript", "onnxruntime"))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPILLWAYC = (os.environ.get("SPILLWAYC") or shutil.which("spillwayc")
             or os.path.join(REPO, "build", "bin", "spillwayc"))
B, S, NB, STEPS, LR, WD, RTOL = 2, 16, 4, 30, 1e-3, 0.01, 1e-4


def torch_losses(w, tokens, labels):
    import torch
    opt = torch.optim.AdamW(w.parameters(), lr=LR, weight_decay=WD, foreach=False)
    out = []
    for s in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = w(torch.from_numpy(tokens[s % NB]), torch.from_numpy(labels[s % NB]))
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


@unittest.skipUnless(HAVE_TORCH, "needs torch, transformers, onnxscript, onnxruntime")
@unittest.skipUnless(os.access(SPILLWAYC, os.X_OK), f"needs spillwayc (not at {SPILLWAYC})")
class TrainParity(unittest.TestCase):
    def train(self, kind, loss="explicit", attn="eager"):
        import torch

        import spillway
        from spillway import hf
        torch.set_num_threads(1)
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        tokens = np.random.default_rng(0).integers(0, 64, size=(NB, B, S), dtype=np.int64)
        # The labels are the tokens but for some ignored ones (-100), as padding
        # would have them: a graph that read one input in the other's place
        # would not train as torch does.
        labels = tokens.copy()
        labels[:, :, 3::5] = -100
        np.save(os.path.join(tmp, "tokens.npy"), tokens)
        np.save(os.path.join(tmp, "labels.npy"), labels)
        torch.manual_seed(0)
        model, _, _ = hf.causal_lm(kind, S, attn=attn)
        w = hf.loss_module(model, loss)
        ids = torch.from_numpy(tokens[0])
        onnx_path = os.path.join(tmp, "model.onnx")
        res = spillway.export(w, (ids, ids), onnx_path)
        self.assertTrue(res.packed_sequence_check_off, kind)
        expected = torch_losses(w, tokens, labels)
        exe = os.path.join(tmp, "model")
        r = subprocess.run([SPILLWAYC, onnx_path, "-o", exe], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, f"spillwayc refused the {kind} export:\n{r.stderr}")
        log = os.path.join(tmp, "log.jsonl")
        r = subprocess.run([exe, "--input", f"input_ids={tmp}/tokens.npy",
                            "--input", f"labels={tmp}/labels.npy",
                            "--steps", str(STEPS), "--lr", str(LR), "--weight-decay", str(WD),
                            "--log-json", log], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(log) as f:
            got = [json.loads(line)["loss"] for line in f if line.strip()]
        self.assertEqual(len(got), STEPS)
        for step, (a, e) in enumerate(zip(got, expected), 1):
            self.assertLessEqual(abs(a - e), RTOL * abs(e),
                                 f"{kind} step {step}: spillway {a!r}, torch {e!r}")
        self.assertLess(got[-1], got[0])

    def test_gpt2(self):
        self.train("gpt2")

    def test_llama(self):
        self.train("llama")

    # HF's own loss (it pads the labels with Pad) and sdpa attention (its
    # softmax has an IsNaN guard).
    def test_hf_loss(self):
        self.train("llama", loss="hf")

    def test_sdpa(self):
        self.train("llama", attn="sdpa")

    def test_other_families(self):
        import transformers
        for kind in ("qwen2", "mistral", "gpt_neox", "phi3", "gemma"):
            if kind in transformers.CONFIG_MAPPING:
                with self.subTest(kind):
                    self.train(kind)


if __name__ == "__main__":
    unittest.main()
