"""Without torch the package imports, and the exporting functions say what to install."""

import sys
import unittest
from unittest import mock

import spillway
from spillway import _optional


class MissingTorch(unittest.TestCase):
    def test_package_imports_without_torch(self):
        with mock.patch.dict(sys.modules, {"torch": None}):
            self.assertTrue(callable(spillway.export))
            self.assertEqual(spillway.metadata.KEY, "spillway.parameters")

    def test_export_names_the_install_command(self):
        # sys.modules[name] = None makes `import name` raise ImportError.
        with mock.patch.dict(sys.modules, {"torch": None}):
            with self.assertRaises(ImportError) as cm:
                spillway.export(object(), (), "unused.onnx")
        msg = str(cm.exception)
        self.assertIn("spillway.export needs the Python module 'torch'", msg)
        self.assertIn(_optional.INSTALL_HINT, msg)
        self.assertEqual(_optional.INSTALL_HINT,
                         "pip install torch transformers onnxscript onnxruntime")

    def test_command_reports_it_and_exits_1(self):
        import contextlib
        import io
        err = io.StringIO()
        with mock.patch.dict(sys.modules, {"torch": None, "transformers": None}), \
                contextlib.redirect_stderr(err):
            rc = spillway.export.main(["--hf", "gpt2", "--batch", "1", "--seq", "4",
                                       "-o", "unused.onnx"])
        self.assertEqual(rc, 1)
        self.assertIn("pip install torch transformers onnxscript onnxruntime", err.getvalue())


if __name__ == "__main__":
    unittest.main()
