#!/usr/bin/env python3
"""Launches a data-parallel job the way torchrun does, for the tests.

`launch_ranks.py -n N [--port P] [--kill-rank R --kill-on TEXT] -- EXE ARGS`
starts N processes of EXE ARGS, rank r with RANK=r, WORLD_SIZE=N,
LOCAL_RANK=r, LOCAL_WORLD_SIZE=N, MASTER_ADDR=127.0.0.1 and MASTER_PORT (a
free port unless --port): torchrun's environment, without torchrun's
agent, so rank 0 serves the rendezvous store (CI has no PyTorch; a test
with the real torchrun runs where it is installed). Rank 0's stdout is
ours; every rank's stderr is ours. As torchrun, when a rank exits with an
error the others get SIGTERM (after --grace seconds, so that each can say
what it saw first), and the exit status is the first failing rank's.
--kill-rank R --kill-on TEXT sends SIGKILL to rank R when rank 0 prints
TEXT (a line of its stdout), to test a rank that dies.

For the tests of bad ports: `--print-free-port` prints a port nothing
listens at; `--hold-port SECONDS` listens at a free port (printed) for that
long, accepting connections and saying nothing.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, help="ranks")
    ap.add_argument("--print-free-port", action="store_true")
    ap.add_argument("--hold-port", type=float, default=0)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--grace", type=float, default=5.0)
    ap.add_argument("--kill-rank", type=int, default=-1)
    ap.add_argument("--kill-on", default="")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    if a.print_free_port:
        print(free_port())
        return 0
    if a.hold_port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(16)
            print(s.getsockname()[1], flush=True)
            held = []
            s.settimeout(0.1)
            deadline = time.time() + a.hold_port
            while time.time() < deadline:
                try:
                    held.append(s.accept()[0])
                except socket.timeout:
                    pass
        return 0
    if not a.n:
        ap.error("-n N: the number of ranks")
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        ap.error("no command")
    port = a.port or free_port()
    procs = []
    for r in range(a.n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.n),
                   LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(a.n),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            cmd, env=env,
            stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL))

    def relay():
        for line in iter(procs[0].stdout.readline, b""):
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
            if a.kill_on and a.kill_on.encode() in line:
                procs[a.kill_rank].send_signal(signal.SIGKILL)
    t = threading.Thread(target=relay)
    t.start()
    first_bad = None
    while True:
        codes = [p.poll() for p in procs]
        # Of the ranks found failed at once, one a signal killed came first
        # (the others failed because it was gone).
        bad = sorted(((c > 0, r, c) for r, c in enumerate(codes)
                      if c not in (None, 0)))
        if bad and first_bad is None:
            first_bad = bad[0][1:]
        if all(c is not None for c in codes):
            break
        if first_bad is not None:
            deadline = time.time() + a.grace
            while time.time() < deadline and any(p.poll() is None for p in procs):
                time.sleep(0.05)
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait()
            break
        time.sleep(0.05)
    t.join()
    if first_bad is None:
        return 0
    r, c = first_bad
    print(f"launch_ranks: rank {r} exited with {c}", file=sys.stderr)
    return c if c > 0 else 128 - c


if __name__ == "__main__":
    sys.exit(main())
