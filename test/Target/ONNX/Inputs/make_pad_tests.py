"""Writes ONNX node tests (model.onnx + test_data_set_0) for Pad on float32
data in every mode, with numpy.pad's results as the expected outputs, for
test/conformance/run_node_tests.py --dir. The onnx package's own Pad tests
use int32 data for edge/reflect/wrap, which Spillway gathers as float only."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 3, 5)).astype(np.float32)
cases = {
    # name: (mode, pads over all 3 axes [begins..., ends...], value)
    "reflect": ("reflect", [0, 2, 3, 0, 1, 4], None),
    "edge": ("edge", [1, 0, 2, 0, 3, 1], None),
    "wrap": ("wrap", [0, 4, 1, 0, 2, 6], None),
    "constant_crop": ("constant", [0, -1, 2, 0, 1, -2], 1.5),
    "reflect_crop": ("reflect", [0, 1, -1, 0, -1, 2], None),
}
for name, (mode, pads, value) in cases.items():
    d = os.path.join(out, "test_pad_float_" + name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    inits = [numpy_helper.from_array(np.array(pads, np.int64), "pads")]
    inputs = ["x", "pads"]
    if value is not None:
        inits.append(numpy_helper.from_array(np.array(value, np.float32), "value"))
        inputs.append("value")
    # numpy: crop negative pads first, then pad the positive ones.
    r, k = x, len(pads) // 2
    crop = tuple(slice(max(-pads[a], 0), r.shape[a] - max(-pads[a + k], 0)) for a in range(k))
    r = r[crop]
    width = [(max(pads[a], 0), max(pads[a + k], 0)) for a in range(k)]
    np_mode = {"edge": "edge", "reflect": "reflect", "wrap": "wrap", "constant": "constant"}[mode]
    kw = {"constant_values": value} if mode == "constant" else {}
    y = np.pad(r, width, mode=np_mode, **kw).astype(np.float32)
    node = helper.make_node("Pad", inputs, ["y"], mode=mode)
    g = helper.make_graph([node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y.shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.save(m, os.path.join(d, "model.onnx"))
    with open(os.path.join(d, "test_data_set_0", "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x).SerializeToString())
    with open(os.path.join(d, "test_data_set_0", "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(y).SerializeToString())

# Models the importer must refuse, one per way a Pad can be wrong.
bad = os.path.join(out, "bad")
os.makedirs(bad, exist_ok=True)
xi = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
li = helper.make_tensor_value_info("x", TensorProto.INT64, [2, 3])


def refuse(name, pads, mode="constant", value=None, data=xi, shape=(2, 3)):
    inits = [numpy_helper.from_array(np.array(pads, np.int64), "pads")]
    inputs = ["x", "pads"]
    if value is not None:
        inits.append(numpy_helper.from_array(value, "value"))
        inputs.append("value")
    node = helper.make_node("Pad", inputs, ["y"], name="pad", mode=mode)
    elem = data.type.tensor_type.elem_type
    g = helper.make_graph([node], name, [data], [helper.make_tensor_value_info("y", elem, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.save(m, os.path.join(bad, name + ".onnx"))


refuse("mode", [0, 1, 0, 1], mode="mirror")
refuse("count", [0, 1, 0])
refuse("crop", [0, -2, 0, -2])
refuse("int_reflect", [0, 1, 0, 1], mode="reflect", data=li)
refuse("value_type", [0, 1, 0, 1], value=np.array(3, np.int64))
refuse("value_shape", [0, 1, 0, 1], value=np.array([1.0, 2.0], np.float32))
