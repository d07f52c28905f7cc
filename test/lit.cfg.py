# -*- Python -*-
import os
import shutil
import sys
import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "Spillway"


# A passing test's %t files are removed (test/spillway_lit_format.py says why).
sys.path.insert(0, os.path.dirname(__file__))
from spillway_lit_format import ShTestRemovingOutput  # noqa: E402

config.test_format = ShTestRemovingOutput(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".onnxtext", ".test"]
config.excludes = ["Inputs", "fuzz", "CMakeLists.txt", "README.md", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.spillway_obj_root, "test")

config.environment["FILECHECK_OPTS"] = "--enable-var-scope"
llvm_config.with_system_environment(["HOME", "TMPDIR", "PYTHONPATH"])
llvm_config.use_default_substitutions()

# The tests' Python needs numpy and onnx: use the interpreter CMake found,
# not the one lit runs under (use_default_substitutions adds that as %python).
python = config.python_executable or shutil.which("python3")
config.substitutions = [s for s in config.substitutions if s[0] != "%python"]
config.substitutions.append(("%python", python))
config.substitutions.append(("%spillway_src", config.spillway_src_root))
# lit itself, for the test of the project's lit format.
config.substitutions.append(("%lit", f"{sys.executable} {os.path.abspath(sys.argv[0])}"))
# The runtime archive and what it links against: `c++ OBJ %runtime_libs -o EXE`
# links an executable from spillway-opt's output by hand, as spillwayc does.
config.substitutions.append(("%runtime_libs", config.spillway_runtime_link))
# NCCL's C API on host memory (runtime/tests/nccl_standin.c): the loopback
# device's --collectives nccl loads it (SPILLWAY_NCCL_LIBRARY).
config.substitutions.append(("%nccl_standin", config.spillway_nccl_standin))

tool_dirs = [config.spillway_tools_dir, config.llvm_tools_dir]
tools = ["spillway-opt", "spillway-translate", "spillwayc", "spillway-foam-step", "FileCheck",
         "not", "count", "mlir-translate", "llc"]
llvm_config.add_tool_substitutions(tools, tool_dirs)

# The CUDA backend's check tool is built where nvcc is (runtime/CMakeLists.txt,
# SPILLWAY_CUDA); a GPU to run it on is another matter.
if os.path.exists(os.path.join(config.spillway_tools_dir, "spillway-cuda-check")):
    config.available_features.add("cuda-build")
    llvm_config.add_tool_substitutions(["spillway-cuda-check"], tool_dirs)
if shutil.which("nvidia-smi"):
    config.available_features.add("gpu")

# Data-parallel tests launch with Open MPI's mpirun (scripts/install-deps.sh
# installs it): as root (CI) it must be told that is meant, and more ranks
# than cores share them (--oversubscribe).
# torchrun-style launching (RANK, WORLD_SIZE, MASTER_ADDR...) runs its
# collectives on Gloo, when the runtime was built with it (libgloo-dev);
# %launch is the tests' stand-in for torchrun (e2e/launch_ranks.py), and
# the real torchrun, where PyTorch is installed, is %torchrun.
if getattr(config, "spillway_have_gloo", False):
    config.available_features.add("gloo")
    config.substitutions.append(
        ("%launch", f"{config.python_executable} "
         f"{os.path.join(config.spillway_src_root, 'test', 'e2e', 'launch_ranks.py')}"))
    torchrun = shutil.which("torchrun")
    if torchrun:
        config.available_features.add("torchrun")
        config.substitutions.append(
            ("%torchrun", f"{torchrun} --no-python"))
mpirun = shutil.which("mpirun")
if mpirun:
    config.available_features.add("mpi")
    config.substitutions.append(
        ("%mpirun", f"{mpirun} --allow-run-as-root --oversubscribe"))
