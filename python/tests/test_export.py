"""spillway.export() and `python -m spillway.export` (need torch, transformers,
onnxscript, onnxruntime: skipped without them, as in CI)."""

import contextlib
import importlib.util
import io
import json
import os
import tempfile
import unittest

import numpy as np
import onnx
from onnx import numpy_helper

from spillway import metadata

HAVE_TORCH = all(importlib.util.find_spec(m) for m in
                 ("torch", "transformers", "onnxscript", "onnxruntime"))
if HAVE_TORCH:
    import torch
    import torch.nn.functional as F
    import transformers

    import spillway
    from spillway import hf


def initializers(path):
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}


def tiny(kind, seq=8):
    torch.manual_seed(0)
    model, _, _ = hf.causal_lm(kind, seq)
    return model


@unittest.skipUnless(HAVE_TORCH, "needs torch, transformers, onnxscript, onnxruntime")
class Export(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def check_values(self, path, model, mapping):
        """Each mapped initializer holds the torch value of its state-dict name; the graph
        reads every input."""
        g = onnx.load(path).graph
        read = {x for n in g.node for x in n.input}
        self.assertEqual([i.name for i in g.input if i.name not in read], [])
        sd = model.state_dict()
        inits = initializers(path)
        self.assertEqual(set(mapping["parameters"]) | set(mapping["buffers"]), set(inits))
        for init, p in mapping["parameters"].items():
            ref = sd[p["state_dict"]].detach().numpy()
            self.assertEqual(list(ref.shape), p["shape"], init)
            self.assertTrue(np.array_equal(inits[init], ref), f"{init} != {p['state_dict']}")
        named = {p["state_dict"] for p in mapping["parameters"].values()}
        aliases = {a for t in mapping["ties"] for a in t[1:]}
        params = {n for n, _ in model.named_parameters(remove_duplicate=False)}
        self.assertEqual(named | aliases | set(mapping["unused"]), params)
        return inits

    def test_gpt2_wrapper(self):
        model = tiny("gpt2")
        res = spillway.export(hf.loss_module(model, "explicit"), (self.ids, self.ids),
                              self.path("g.onnx"))
        m = metadata.read(self.path("g.onnx"))
        self.assertEqual(m, res.mapping)
        self.assertEqual((m["model_class"], m["wrapper_prefix"]), ("GPT2LMHeadModel", "model."))
        self.assertEqual(m["ties"], [["lm_head.weight", "transformer.wte.weight"]])
        self.assertEqual(res.input_names, ["input_ids", "labels"])
        inits = self.check_values(self.path("g.onnx"), model, m)
        # HF init: every LayerNorm weight is ones, and each stays its own initializer.
        ln = [n for n in inits if n.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight"))]
        self.assertEqual(len(ln), 5)
        self.assertTrue(all(np.all(inits[n] == 1) for n in ln))
        self.assertAlmostEqual(res.onnxruntime_loss, res.torch_loss, delta=1e-4 * res.torch_loss)

    def test_one_tensor_as_two_inputs(self):
        # (ids, ids): the usual call; each graph input must still be read where it belongs.
        model = tiny("llama")
        w = hf.loss_module(model, "explicit")
        spillway.export(w, (self.ids, self.ids), self.path("a.onnx"))
        self.check_values(self.path("a.onnx"), model, metadata.read(self.path("a.onnx")))
        labels = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(2))
        labels[:, 3] = -100
        with torch.no_grad():
            want = w(self.ids, labels).item()
        got = spillway.export.check_loss(self.path("a.onnx"),
                                         {"input_ids": self.ids, "labels": labels}, want)
        self.assertNotAlmostEqual(got, w(self.ids, self.ids).item(), places=3)

    def test_llama_buffers(self):
        model = tiny("llama")
        res = spillway.export(hf.loss_module(model, "explicit"), (self.ids, self.ids),
                              self.path("l.onnx"))
        m = res.mapping
        self.assertEqual(m["buffers"], ["model.model.rotary_emb.inv_freq"])
        self.assertEqual(m["ties"], [])
        self.check_values(self.path("l.onnx"), model, m)
        self.assertIn("model.layers.1.mlp.down_proj.weight",
                      {p["state_dict"] for p in m["parameters"].values()})

    def test_loss_callable_on_the_hf_model(self):
        model = tiny("gpt2")

        def lm_loss(m, tokens, targets):
            logits = m(input_ids=tokens).logits
            return F.cross_entropy(logits[:, :-1].flatten(0, 1), targets[:, 1:].flatten())

        res = spillway.export(model, (self.ids, self.ids), self.path("c.onnx"), loss=lm_loss)
        self.assertEqual(res.input_names, ["tokens", "targets"])
        self.assertEqual(res.mapping["wrapper_prefix"], "")
        self.check_values(self.path("c.onnx"), model, res.mapping)
        self.assertEqual([i.name for i in onnx.load(self.path("c.onnx")).graph.input],
                         ["tokens", "targets"])

    def test_plain_module_and_unused_parameter(self):
        class Regression(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 1)
                self.unused = torch.nn.Parameter(torch.zeros(3))

            def forward(self, x, y):
                return ((self.lin(x) - y) ** 2).mean()

        torch.manual_seed(0)
        r = Regression()
        x, y = torch.randn(8, 4), torch.randn(8, 1)
        res = spillway.export(r, (x, y), self.path("r.onnx"), input_names=["feat", "target"])
        m = res.mapping
        self.assertEqual(m["parameters"], {"lin.weight": {"state_dict": "lin.weight",
                                                          "shape": [1, 4]},
                                           "lin.bias": {"state_dict": "lin.bias", "shape": [1]}})
        self.assertEqual((m["wrapper_prefix"], m["unused"]), ("", ["unused"]))
        self.assertEqual(res.input_names, ["feat", "target"])
        self.check_values(self.path("r.onnx"), r, m)

    def test_external_data_past_the_threshold(self):
        from unittest import mock
        model = tiny("gpt2")
        path = self.path("x.onnx")
        with mock.patch.object(spillway.export, "EXTERNAL_DATA_BYTES", 1000):
            res = spillway.export(hf.loss_module(model, "explicit"), (self.ids, self.ids), path)
        self.assertEqual(sorted(res.files), [path, path + ".data"])
        external = [i.name for i in onnx.load(path, load_external_data=False).graph.initializer
                    if i.data_location == onnx.TensorProto.EXTERNAL]
        self.assertIn("model.lm_head.weight", external)
        # The mapping is in the .onnx itself, readable without the weights.
        self.assertEqual(metadata.read(path), res.mapping)
        self.check_values(path, model, res.mapping)
        self.assertAlmostEqual(res.onnxruntime_loss, res.torch_loss, delta=1e-4 * res.torch_loss)

    def test_packed_sequence_check(self):
        model = tiny("llama")
        res = spillway.export(hf.loss_module(model, "explicit"), (self.ids, self.ids),
                              self.path("p.onnx"))
        ops = {n.op_type for n in onnx.load(self.path("p.onnx")).graph.node}
        self.assertTrue(res.packed_sequence_check_off)
        self.assertNotIn("CumSum", ops)
        # Positions as a graph input: packing may come with the data, so it stays.
        res = spillway.export(model, (self.ids, torch.arange(8).expand(2, 8), self.ids),
                              self.path("p.onnx"),
                              loss=lambda m, input_ids, position_ids, labels: m(
                                  input_ids=input_ids, position_ids=position_ids,
                                  labels=labels).loss)
        self.assertFalse(res.packed_sequence_check_off)
        self.assertIn("CumSum", {n.op_type for n in onnx.load(self.path("p.onnx")).graph.node})
        # Packed example rows (positions restart at 4): eager torch uses the check.
        packed = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3]] * 2)
        res = spillway.export(model, (self.ids,), self.path("p.onnx"),
                              loss=lambda m, ids: m(input_ids=ids, position_ids=packed,
                                                    labels=ids).loss)
        self.assertFalse(res.packed_sequence_check_off)

    def test_training_flags_restored(self):
        for mode in (True, False):
            model = tiny("gpt2").train(mode)
            model.transformer.h[0].train(not mode)
            before = [m.training for m in model.modules()]
            spillway.export(hf.loss_module(model, "explicit"), (self.ids, self.ids),
                            self.path("t.onnx"), check=False)
            spillway.export(model, (self.ids, self.ids), self.path("t.onnx"), check=False,
                            loss=lambda m, i, t: m(input_ids=i, labels=t).loss)
            self.assertEqual([m.training for m in model.modules()], before)

    def test_errors(self):
        model = tiny("gpt2")
        with self.assertRaisesRegex(ValueError, r"returned CausalLMOutputWithCrossAttentions; "
                                                r"spillwayc trains a graph whose output is the "
                                                r"scalar loss.*loss=lambda"):
            spillway.export(model, (self.ids,), self.path("e.onnx"))
        emb = torch.nn.Embedding(64, 8, padding_idx=0)
        with self.assertRaisesRegex(ValueError, r"embedding \(the model, Embedding\) has "
                                                r"padding_idx=0.*pad_token_id=None"):
            spillway.export(emb, (self.ids,), self.path("e.onnx"),
                            loss=lambda m, i: m(i).sum())
        half = torch.nn.Linear(4, 4).to(torch.bfloat16)
        with self.assertRaisesRegex(ValueError, r"parameter 'weight' is torch.bfloat16.*"
                                                r"model.float\(\).*--precision bf16-mixed"):
            spillway.export(half, (torch.randn(2, 4),), self.path("e.onnx"),
                            loss=lambda m, x: m(x).sum())
        with self.assertRaisesRegex(TypeError, r"example_inputs\[1\] is int"):
            spillway.export(model, (self.ids, 3), self.path("e.onnx"))
        with self.assertRaisesRegex(ValueError, r"input_names \['a'\] must name the 2"):
            spillway.export(hf.loss_module(model, "explicit"), (self.ids, self.ids),
                            self.path("e.onnx"), input_names=["a"])
        with self.assertRaisesRegex(FileNotFoundError, r"directory .*/no/such does not exist"):
            spillway.export(hf.loss_module(model, "explicit"), (self.ids, self.ids),
                            self.path("no/such/e.onnx"))
        self.assertFalse(os.path.exists(self.path("e.onnx")))

    def test_check_raises_with_both_losses(self):
        w = hf.loss_module(tiny("gpt2"), "explicit")
        res = spillway.export(w, (self.ids, self.ids), self.path("k.onnx"))
        wrong = res.torch_loss * 1.001
        with self.assertRaisesRegex(RuntimeError, rf"onnxruntime's loss {res.onnxruntime_loss!r}"
                                                  rf" differs from torch's {wrong!r}"):
            spillway.export.check_loss(self.path("k.onnx"),
                                       {"input_ids": self.ids, "labels": self.ids}, wrong)


@unittest.skipUnless(HAVE_TORCH, "needs torch, transformers, onnxscript, onnxruntime")
class Command(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def run_cli(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = spillway.export.main(list(argv))
        return rc, out.getvalue(), err.getvalue()

    def test_model_type(self):
        path = os.path.join(self.dir.name, "m.onnx")
        rc, out, err = self.run_cli("--hf", "llama", "--batch", "2", "--seq", "8", "-o", path,
                                    "--set", "num_hidden_layers=1")
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"model: LlamaForCausalLM from llama with tiny test dimensions "
                              r"and --set \(random init\); 13,408 parameters in 12 tensors")
        self.assertIn("constants (buffers, not trained): model.model.rotary_emb.inv_freq", out)
        self.assertRegex(out, r"check: onnxruntime loss [\d.]+, torch [\d.]+")
        self.assertIn(f"spillwayc {path} -o {path[:-5]}", out)
        self.assertIn("--input input_ids=TOKENS.npy --input labels=TOKENS.npy", out)
        self.assertIn("int64 [NB, 2, 8] token ids below 64", out)
        self.assertEqual(len(metadata.read(path)["parameters"]), 12)

    def test_tiny_dimensions(self):
        cfg, weights, _, tiny = hf.load_config("llama", {"hidden_size": 64})
        self.assertEqual((cfg.hidden_size, cfg.head_dim, cfg.num_hidden_layers, weights, tiny),
                         (64, 16, 2, None, True))
        if "gemma" in transformers.CONFIG_MAPPING:  # its own default head_dim is 256
            self.assertEqual(hf.load_config("gemma")[0].head_dim, 8)
        model, cfg, _ = hf.causal_lm("gpt2", 12)
        self.assertEqual((cfg.n_positions, cfg.pad_token_id, cfg.use_cache), (12, None, False))
        self.assertEqual(cfg.resid_pdrop, 0.0)
        self.assertFalse(model.training)

    def test_directory_with_weights(self):
        torch.manual_seed(3)
        cfg = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=1,
                                      n_head=2, pad_token_id=0, bos_token_id=1,
                                      eos_token_id=1)
        src = transformers.GPT2LMHeadModel(cfg)
        with torch.no_grad():
            for p in src.parameters():
                p.add_(torch.randn_like(p))
        src.save_pretrained(self.dir.name)
        path = os.path.join(self.dir.name, "d.onnx")
        rc, out, err = self.run_cli("--hf", self.dir.name, "--batch", "1", "--seq", "16",
                                    "-o", path)
        self.assertEqual(rc, 0, err)
        self.assertIn("(its weights)", out)
        sd = src.state_dict()
        inits = initializers(path)
        for init, p in metadata.read(path)["parameters"].items():
            self.assertTrue(np.array_equal(inits[init], sd[p["state_dict"]].numpy()), init)
        # A config.json alone is a random init of the same shapes.
        rc, out, err = self.run_cli("--hf", os.path.join(self.dir.name, "config.json"),
                                    "--batch", "1", "--seq", "4", "-o", path, "--loss", "hf")
        self.assertEqual(rc, 0, err)
        self.assertIn("(random init)", out)
        self.assertIn("HF's own shifted loss", out)
        # Past the pretrained position table.
        rc, out, err = self.run_cli("--hf", self.dir.name, "--batch", "1", "--seq", "17",
                                    "-o", path)
        self.assertEqual(rc, 1)
        self.assertIn("--seq 17 exceeds the model's", err)

    def test_bf16_checkpoint_says_bf16_mixed(self):
        # Most Hugging Face checkpoints store bf16: exported as fp32 masters,
        # with the spillwayc flag that trains them in bf16 mixed precision.
        torch.manual_seed(3)
        cfg = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=1,
                                      n_head=2)
        transformers.GPT2LMHeadModel(cfg).to(torch.bfloat16).save_pretrained(self.dir.name)
        self.assertEqual(hf.checkpoint_dtype(self.dir.name), "bfloat16")
        path = os.path.join(self.dir.name, "b.onnx")
        rc, out, err = self.run_cli("--hf", self.dir.name, "--batch", "1", "--seq", "8",
                                    "-o", path)
        self.assertEqual(rc, 0, err)
        self.assertIn("the checkpoint is bfloat16: its weights are the graph's fp32 master "
                      "weights; add --precision bf16-mixed to spillwayc", out)
        self.assertIsNone(hf.checkpoint_dtype(os.path.join(self.dir.name, "missing")))

    def test_bad_input(self):
        path = os.path.join(self.dir.name, "x.onnx")
        rc, _, err = self.run_cli("--hf", "no_such_family", "--batch", "1", "--seq", "4",
                                  "-o", path)
        self.assertEqual(rc, 1)
        self.assertIn("--hf no_such_family: not a directory, a config.json file or a "
                      "transformers model type (e.g. gpt2, llama", err)
        rc, _, err = self.run_cli("--hf", self.dir.name, "--batch", "1", "--seq", "4", "-o", path)
        self.assertEqual(rc, 1)
        self.assertIn("a directory without config.json", err)
        bad = os.path.join(self.dir.name, "c.json")
        with open(bad, "w") as f:
            json.dump({"vocab_size": 3}, f)
        rc, _, err = self.run_cli("--hf", bad, "--batch", "1", "--seq", "4", "-o", path)
        self.assertEqual(rc, 1)
        self.assertIn('a config.json needs a "model_type"', err)
        rc, _, err = self.run_cli("--hf", "gpt2", "--batch", "1", "--seq", "4", "-o", path,
                                  "--set", "novalue")
        self.assertEqual(rc, 1)
        self.assertIn("--set 'novalue': expected KEY=VALUE", err)
        rc, _, err = self.run_cli("--hf", "llama", "--batch", "1", "--seq", "4", "-o", path,
                                  "--set", "num_layers=3")
        self.assertEqual(rc, 1)
        self.assertIn("--set num_layers: LlamaConfig has no attribute 'num_layers'", err)
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
            spillway.export.main(["--hf", "gpt2", "--batch", "0", "--seq", "4", "-o", path])


if __name__ == "__main__":
    unittest.main()
