#!/usr/bin/env python3
"""Hand-made weights maps (docs/runtime.md, "Weights") for the executable's
tests, written independently of spillwayc's writer.

  weights_map.py split RAW MAP [--hole] [--expected FILE] [--corrupt KIND]
      Splits the raw weights file RAW (the logical blob) into a map MAP and
      two source files beside it, MAP.a (absolute path in the map) and MAP.b
      (relative path): the blob's first quarter from MAP.a at offset 100,
      the next quarter inline in the map, the third from MAP.b, the rest from
      MAP.a again at another offset. --hole leaves 16 bytes in the middle of
      the third quarter to no segment (they read as zeros) and --expected
      writes the blob as the map gives it. --corrupt writes a malformed map
      instead (KIND: truncated, badjson, version, outside-size,
      outside-source, overlap, unknown-source, into-header, missing-key).
  weights_map.py expect-error -- CMD...
      Runs CMD; exits 1 unless CMD exited with status 1 without training (no
      "step" line on stdout). Prints CMD's stderr.
"""

import argparse
import json
import os
import struct
import subprocess
import sys

import ctypes
import ctypes.util


def xxh3_64(data):
    """XXH3-64, seed 0, from the system's libxxhash (the runtime links the
    same library; spillwayc uses LLVM's copy of the function)."""
    lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    f = lib.XXH3_64bits
    f.restype = ctypes.c_uint64
    f.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return f(data, len(data))


def sample(path):
    data = open(path, "rb").read()
    a = min(len(data), 65536)
    return "%016x" % xxh3_64(data[:a] + data[len(data) - a:])


def source(path, recorded_path):
    st = os.stat(path)
    return {"path": recorded_path, "bytes": st.st_size,
            "mtime_ns": st.st_mtime_ns, "sample": sample(path)}


def split(args):
    blob = open(args.raw, "rb").read()
    n = len(blob)
    q = [0, n // 4, n // 2, 3 * n // 4, n]
    a_path, b_path = args.map + ".a", args.map + ".b"
    # MAP.a: 100 junk bytes, quarter 0, 50 junk bytes, quarter 3, junk.
    junk = bytes(range(7, 107))
    a = junk + blob[q[0]:q[1]] + junk[:50] + blob[q[3]:q[4]] + junk[:9]
    open(a_path, "wb").write(a)
    open(b_path, "wb").write(blob[q[2]:q[3]])
    off3 = 100 + (q[1] - q[0]) + 50
    segs = [[q[0], q[1] - q[0], 0, 100],
            [q[1], q[2] - q[1], -1, None],  # inline: offset filled below
            [q[2], q[3] - q[2], 1, 0],
            [q[3], q[4] - q[3], 0, off3]]
    logical = blob
    if args.hole:
        h = q[2] + (q[3] - q[2]) // 2
        assert h + 16 <= q[3]
        segs[2:3] = [[q[2], h - q[2], 1, 0],
                     [h + 16, q[3] - h - 16, 1, h + 16 - q[2]]]
        logical = blob[:h] + bytes(16) + blob[h + 16:]
    if args.expected:
        open(args.expected, "wb").write(logical)
    sources = [source(a_path, os.path.abspath(a_path)),
               source(b_path, os.path.basename(b_path))]
    inline = blob[q[1]:q[2]]
    hdr = {"format": "spillway-weights-map", "version": 1, "size": n,
           "sources": sources, "segments": segs}
    k = args.corrupt
    if k == "version":
        hdr["version"] = 2
    elif k == "outside-size":
        segs[-1][1] += 4
    elif k == "outside-source":
        segs[2][3] = 8
    elif k == "overlap":
        segs[1][0] -= 4
    elif k == "unknown-source":
        segs[0][2] = 2
    elif k == "missing-key":
        del hdr["size"]
    elif k == "into-header":
        segs[1][3] = 3
    # The header's length does not depend on the inline offset's digits:
    # fix the offset with a fixed-width placeholder first.
    for s in segs:
        if s[3] is None:
            s[3] = 10 ** 12
    text = json.dumps(hdr)
    start = 16 + len(text.encode())
    for s in segs:
        if s[3] == 10 ** 12:
            s[3] = start
    text = json.dumps(hdr)
    pad = start - 16 - len(text.encode())
    assert pad >= 0
    text += " " * pad
    if k == "badjson":
        text = text.replace('"segments"', '"segments" ]', 1)[:len(text)]
    data = b"SPWWMAP1" + struct.pack("<Q", len(text.encode())) + \
        text.encode() + inline
    if k == "truncated":
        data = data[:16 + len(text.encode()) // 2]
    open(args.map, "wb").write(data)


def expect_error(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    sys.stdout.write(r.stderr)
    trained = [l for l in r.stdout.splitlines() if l.lstrip().startswith("step")]
    if r.returncode != 1 or trained:
        sys.exit(f"FAILED: expected exit status 1 before any step, got "
                 f"{r.returncode} with {len(trained)} step lines:\n{r.stdout}")


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "expect-error":
        cmd = sys.argv[2:]
        if cmd and cmd[0] == "--":
            cmd = cmd[1:]
        return expect_error(cmd)
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("split")
    s.add_argument("raw")
    s.add_argument("map")
    s.add_argument("--hole", action="store_true")
    s.add_argument("--expected")
    s.add_argument("--corrupt", choices=[
        "truncated", "badjson", "version", "outside-size", "outside-source",
        "overlap", "unknown-source", "into-header", "missing-key"])
    args = p.parse_args()
    split(args)


if __name__ == "__main__":
    main()
