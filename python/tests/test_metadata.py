"""The committed tiny export's `spillway.parameters` metadata (needs onnx and numpy only).

data/gpt2_tiny.onnx was written by `python -m spillway.export --hf gpt2 ...`
(data/make_data.py, which also saved torch's state_dict() of the model as
data/gpt2_tiny.state_dict.npz).
"""

import contextlib
import io
import json
import os
import tempfile
import unittest

import numpy as np
import onnx
from onnx import helper, numpy_helper

from spillway import metadata

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
TINY = os.path.join(DATA, "gpt2_tiny.onnx")


class CommittedExport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = onnx.load(TINY)
        cls.mapping = metadata.read(TINY)
        cls.inits = {i.name: numpy_helper.to_array(i) for i in cls.model.graph.initializer}
        cls.state_dict = dict(np.load(os.path.join(DATA, "gpt2_tiny.state_dict.npz")))

    def test_format_and_model(self):
        self.assertEqual(self.mapping["format"], metadata.FORMAT)
        self.assertEqual(self.mapping["model_class"], "GPT2LMHeadModel")
        # The command wraps the HF model as forward(input_ids, labels) -> loss in
        # attribute `model`; state-dict names are the HF model's own.
        self.assertEqual(self.mapping["wrapper_prefix"], "model.")
        self.assertEqual([i.name for i in self.model.graph.input], ["input_ids", "labels"])
        self.assertEqual([o.name for o in self.model.graph.output], ["loss"])

    def test_each_input_is_read_in_its_place(self):
        # input_ids reshaped for the embedding; labels sliced by the loss's
        # shift (an export of (ids, ids) as one tensor read labels for both).
        readers = {i.name: [n.op_type for n in self.model.graph.node if i.name in n.input]
                   for i in self.model.graph.input}
        self.assertEqual(readers, {"input_ids": ["Reshape"], "labels": ["Slice"]})

    def test_every_initializer_is_a_parameter_or_a_buffer(self):
        params, buffers = set(self.mapping["parameters"]), set(self.mapping["buffers"])
        self.assertFalse(params & buffers)
        self.assertEqual(params | buffers, set(self.inits))
        self.assertEqual(self.mapping["unused"], [])

    def test_values_and_shapes_are_the_state_dicts(self):
        for init, p in self.mapping["parameters"].items():
            ref = self.state_dict[p["state_dict"]]
            self.assertEqual(list(self.inits[init].shape), p["shape"], init)
            self.assertTrue(np.array_equal(self.inits[init], ref), init)
        # Every state-dict entry is a mapped parameter or one's tied alias.
        named = {p["state_dict"] for p in self.mapping["parameters"].values()}
        aliases = {a for group in self.mapping["ties"] for a in group[1:]}
        self.assertEqual(named | aliases, set(self.state_dict))

    def test_equal_valued_parameters_stay_apart(self):
        # HF init makes every LayerNorm weight ones: the export keeps one per module.
        ones = [p["state_dict"] for init, p in self.mapping["parameters"].items()
                if init.endswith("ln_1.weight") or init.endswith("ln_f.weight")]
        self.assertEqual(sorted(ones), ["transformer.h.0.ln_1.weight", "transformer.ln_f.weight"])
        self.assertTrue(all(np.all(self.state_dict[n] == 1) for n in ones))

    def test_gpt2_tie(self):
        self.assertEqual(self.mapping["ties"], [["lm_head.weight", "transformer.wte.weight"]])
        held = {p["state_dict"] for p in self.mapping["parameters"].values()}
        self.assertIn("lm_head.weight", held)
        self.assertNotIn("transformer.wte.weight", held)

    def test_state_dict_names(self):
        names = metadata.state_dict_names(self.mapping)
        self.assertEqual(names["model.transformer.h.0.attn.c_attn.weight"],
                         "transformer.h.0.attn.c_attn.weight")

    def test_command_prints_the_mapping(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(metadata.main([TINY]), 0)
        self.assertEqual(json.loads(out.getvalue()), self.mapping)


def _tiny_graph(props=()):
    w = numpy_helper.from_array(np.ones(2, np.float32), "w")
    g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])], [w])
    m = helper.make_model(g)
    for k, v in props:
        m.metadata_props.add(key=k, value=v)
    return m


class Errors(unittest.TestCase):
    def test_no_metadata_names_the_fix(self):
        with self.assertRaisesRegex(ValueError, r"no 'spillway.parameters' metadata; export the "
                                                r"model with spillway.export\(\)"):
            metadata.read(_tiny_graph())

    def test_not_json(self):
        with self.assertRaisesRegex(ValueError, "is not JSON"):
            metadata.read(_tiny_graph([(metadata.KEY, "{")]))

    def test_other_format(self):
        with self.assertRaisesRegex(ValueError, "has format 2, this spillway reads format 1"):
            metadata.read(_tiny_graph([(metadata.KEY, '{"format": 2}')]))

    def test_not_onnx(self):
        with tempfile.NamedTemporaryFile(suffix=".onnx") as f:
            f.write(b"\xff\xff\xff not a protobuf")
            f.flush()
            with self.assertRaisesRegex(ValueError, "not an ONNX model"):
                metadata.read(f.name)

    def test_command_exits_1(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as cm:
            metadata.main(["/nonexistent/model.onnx"])
        self.assertEqual(cm.exception.code, 1)
        self.assertIn("/nonexistent/model.onnx", err.getvalue())


if __name__ == "__main__":
    unittest.main()
