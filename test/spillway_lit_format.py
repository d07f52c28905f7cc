"""lit's ShTest format, removing a passing test's %t files afterwards.

lit imports this module (test/lit.cfg.py) rather than defining the class in the
config: the worker processes unpickle the format by its module's name."""
import os
import shutil

import lit.formats
import lit.TestRunner


class ShTestRemovingOutput(lit.formats.ShTest):
    """Removes a passing test's %t files: each executable links the runtime
    and BLAS statically (tens of MB) and the e2e matrices build hundreds, so
    kept outputs filled a CI machine's disk. A failing test keeps its files
    to look at, and SPILLWAY_KEEP_TEST_OUTPUT=1 keeps every test's."""

    def execute(self, test, litConfig):
        result = super().execute(test, litConfig)
        # executeShTest answers a Result, a ResultCode or (code, output).
        code = result[0] if isinstance(result, tuple) else getattr(result, "code", result)
        if code.isFailure or os.environ.get("SPILLWAY_KEEP_TEST_OUTPUT"):
            return result
        tmp_dir, tmp_base = lit.TestRunner.getTempPaths(test)
        prefix = os.path.basename(tmp_base) + ".tmp"
        if os.path.isdir(tmp_dir):
            for name in os.listdir(tmp_dir):
                if name.startswith(prefix):
                    path = os.path.join(tmp_dir, name)
                    if os.path.isdir(path) and not os.path.islink(path):
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        os.remove(path)
        return result
