# A two-test suite for test/tools/lit-output-removed.test: runs the project's
# lit format (test/spillway_lit_format.py, its directory given as --param src)
# with its outputs under --param out.
import os
import sys

sys.path.insert(0, lit_config.params["src"])
from spillway_lit_format import ShTestRemovingOutput  # noqa: E402

config.name = "lit-output"
config.suffixes = [".test"]
config.test_format = ShTestRemovingOutput()
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = lit_config.params["out"]
