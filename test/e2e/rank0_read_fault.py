"""Runs a 2-rank job whose rank 0 fails its SSD reads from the N-th on
(SPILLWAY_IO_FAULTS=eio@N+/read), for N from --from up by --by, until a
run's stderr holds --want (say, the failing stream of --save after the
training's reads all passed); prints that run's lines that name a rank.
Each run is bounded (--timeout): a job that hangs instead of ending is the
failure this checks for; so is one that ends well for every N.

usage: rank0_read_fault.py --mpirun "MPIRUN" --want TEXT [--from N] [--by K]
                           [--tries T] [--timeout S] -- EXE ARGS...
"""
import argparse
import shlex
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--want", required=True)
    ap.add_argument("--from", dest="first", type=int, default=100)
    ap.add_argument("--by", type=int, default=20)
    ap.add_argument("--tries", type=int, default=40)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    mpirun = shlex.split(a.mpirun)
    for i in range(a.tries):
        n = a.first + i * a.by
        argv = (mpirun + ["-np", "1", "-x", f"SPILLWAY_IO_FAULTS=eio@{n}+/read"]
                + cmd + [":", "-np", "1"] + cmd)
        try:
            r = subprocess.run(argv, capture_output=True, text=True,
                               timeout=a.timeout)
        except subprocess.TimeoutExpired:
            print(f"eio@{n}+: the job did not end within {a.timeout} s")
            return 1
        if r.returncode == 0:
            print(f"eio@{n}+: the job ended well: '{a.want}' never came")
            return 1
        lines = [l for l in r.stderr.splitlines() if l.startswith("rank ")]
        if not any(a.want in l for l in lines):
            continue  # failed elsewhere first: a later N
        print(f"eio@{n}+: rc {r.returncode}")
        print("\n".join(lines))
        return 0
    print(f"no N gave '{a.want}'")
    return 1


if __name__ == "__main__":
    sys.exit(main())
