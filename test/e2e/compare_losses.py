#!/usr/bin/env python3
"""Compares a training executable's loss log with the reference's.

Both files hold one JSON object per line, {"step": s, "loss": L, ...}, with
steps 1, 2, ..., N in order: the format of `EXE --log-json` and of
`reference.py --out`.  Passes (exit 0) when both logs have the same steps and
every loss satisfies |actual - expected| <= atol + rtol * |expected|; fails
(exit 1) naming the first step that does not, or the first problem with the
files (missing, malformed, non-finite loss, different lengths). --key NAME
compares another per-step number instead (e.g. grad_norm).
"""

import argparse
import json
import math
import sys


class LogError(Exception):
    pass


def read_log(path, role, key="loss"):
    """The `key` values (losses) of a log file, index i holding step i + 1."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise LogError(f"{role} log {path}: cannot read: {e.strerror}") from e
    losses = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{role} log {path}:{lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise LogError(f"{where}: not JSON: {e}") from e
        if not isinstance(record, dict) or "step" not in record or key not in record:
            raise LogError(f"{where}: expected an object with \"step\" and \"{key}\", got {line.strip()!r}")
        step, loss = record["step"], record[key]
        if step != len(losses) + 1:
            raise LogError(f"{where}: step {step!r}, expected step {len(losses) + 1}")
        if not isinstance(loss, (int, float)) or isinstance(loss, bool) or not math.isfinite(loss):
            raise LogError(f"{where}: step {step}: {key} {loss!r} is not a finite number")
        losses.append(float(loss))
    if not losses:
        raise LogError(f"{role} log {path}: no steps")
    return losses


def relative_error(actual, expected):
    if expected:
        return abs(actual - expected) / abs(expected)
    return 0.0 if actual == expected else math.inf


def compare(actual, expected, rtol, atol, key="loss"):
    """The first failing step's message, or None when every step matches."""
    if len(actual) != len(expected):
        return f"length mismatch: actual log has {len(actual)} steps, expected log has {len(expected)}"
    for step, (a, e) in enumerate(zip(actual, expected), 1):
        if abs(a - e) > atol + rtol * abs(e):
            return (f"step {step}: actual {key} {a!r}, expected {e!r}, "
                    f"relative error {relative_error(a, e):.3e} (rtol {rtol:g}, atol {atol:g})")
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("actual", help="log written by the executable (--log-json)")
    parser.add_argument("expected", help="log written by reference.py --out")
    parser.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (default: %(default)g)")
    parser.add_argument("--atol", type=float, default=0.0, help="absolute tolerance (default: %(default)g)")
    parser.add_argument("--key", default="loss", help="the per-step field compared (default: %(default)s)")
    args = parser.parse_args()
    if args.rtol < 0 or args.atol < 0:
        parser.error("--rtol and --atol must be >= 0")
    try:
        actual = read_log(args.actual, "actual", args.key)
        expected = read_log(args.expected, "expected", args.key)
    except LogError as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    problem = compare(actual, expected, args.rtol, args.atol, args.key)
    if problem:
        print(f"FAIL: {problem}", file=sys.stderr)
        return 1
    worst = max(relative_error(a, e) for a, e in zip(actual, expected))
    print(f"PASS: {len(actual)} steps match, max relative error {worst:.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
