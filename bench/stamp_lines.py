#!/usr/bin/env python3
"""stamp_lines.py OUT.jsonl CMD [ARG...]: runs CMD with its standard output
and error line-buffered (stdbuf -oL -eL) and merged, and writes to OUT.jsonl
one {"t": seconds since the start, "line": text} per line as it arrives,
then {"t": ..., "exit": status}. Exits with CMD's status.

bench/checkpoint.sh times phases of one run by the lines the executable
prints around them (from "step 1/1" to the exit, from "checkpoints:" to
"resume: from"), so the step's compute, which is large and noisy next to a
checkpoint on a shared machine, drops out. Peak memory is measured outside
(GNU time around this script measures this script; wrap CMD instead).
"""

import json
import shutil
import subprocess
import sys
import time


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: stamp_lines.py OUT.jsonl CMD [ARG...]")
    out, cmd = sys.argv[1], sys.argv[2:]
    if shutil.which("stdbuf"):
        cmd = ["stdbuf", "-oL", "-eL", *cmd]
    t0 = time.monotonic()
    with open(out, "w") as f:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             text=True, errors="replace")
        for line in p.stdout:
            f.write(json.dumps({"t": round(time.monotonic() - t0, 6), "line": line.rstrip("\n")}) + "\n")
        rc = p.wait()
        f.write(json.dumps({"t": round(time.monotonic() - t0, 6), "exit": rc}) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
