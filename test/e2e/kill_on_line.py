#!/usr/bin/env python3
"""Runs a command and kill -9s it when its standard output prints a line
matching a pattern.

  kill_on_line.py PATTERN -- CMD [ARG...]

Exits 0 when the command was killed by that SIGKILL; exits 1 when it
ended by itself first (naming its exit status) or never printed such a
line, so a test knows the kill landed in the middle of the run. Where in
the run it lands is up to the scheduler: a test using this must hold
whatever the moment (e.g. a resume ends with the uninterrupted run's
weights).
"""

import re
import signal
import subprocess
import sys

# A healthy run of the tests' models takes seconds; this only stops a hang.
TIMEOUT_S = 300


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: kill_on_line.py PATTERN -- CMD [ARG...]")
    pattern = re.compile(sys.argv[1])
    cmd = sys.argv[3:]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, bufsize=1)
    killed = False
    for line in p.stdout:
        sys.stdout.write(line)
        if not killed and pattern.search(line):
            p.send_signal(signal.SIGKILL)
            killed = True
    try:
        rc = p.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        p.kill()
        sys.exit(f"kill_on_line.py: {cmd[0]} did not exit in {TIMEOUT_S} s")
    if not killed:
        sys.exit(f"kill_on_line.py: {cmd[0]} exited {rc} without printing a "
                 f"line matching {sys.argv[1]!r}")
    if rc != -signal.SIGKILL:
        sys.exit(f"kill_on_line.py: {cmd[0]} exited {rc} before the SIGKILL "
                 f"landed (after a line matching {sys.argv[1]!r}): give it "
                 f"more steps after that line")
    print(f"kill_on_line.py: killed {cmd[0]} with SIGKILL after a line "
          f"matching {sys.argv[1]!r}")


if __name__ == "__main__":
    main()
