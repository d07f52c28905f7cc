"""Reads a Spillway weights map (include/spillway/Target/ONNX/WeightsMap.h),
independently of the compiler's code: the test's own reading of the format.

usage: weights_map.py header MAP        prints the header, checking each
                                        source against the file as it is now
       weights_map.py materialize MAP OUT   writes the logical blob it
                                        describes (in 4 MiB chunks)
"""
import ctypes
import json
import os
import re
import struct
import sys

MAGIC = b"SPWWMAP1"
CHUNK = 4 << 20


def xxh3_64(data):
    # libxxhash's XXH3_64bits is the function llvm::xxh3_64bits implements.
    lib = ctypes.CDLL("libxxhash.so.0")
    lib.XXH3_64bits.restype = ctypes.c_uint64
    lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return lib.XXH3_64bits(data, len(data))


def sample(path):
    size = os.stat(path).st_size
    a = min(size, 64 << 10)
    with open(path, "rb") as f:
        head = f.read(a)
        f.seek(size - a)
        tail = f.read(a)
    return "%016x" % xxh3_64(head + tail)


def read_header(path):
    with open(path, "rb") as f:
        magic = f.read(8)
        if magic != MAGIC:
            sys.exit(f"{path}: no {MAGIC.decode()} magic (got {magic!r})")
        (n,) = struct.unpack("<Q", f.read(8))
        text = f.read(n)
    if len(text) != n or b"\0" in text:
        sys.exit(f"{path}: header of {n} bytes is short or holds a NUL")
    return json.loads(text.decode("utf-8")), 16 + n


def check_layout(path, header):
    size, end = header["size"], 0
    for off, length, src, src_off in header["segments"]:
        assert off >= end and length > 0 and off + length <= size, (path, off, length)
        assert -1 <= src < len(header["sources"]) and src_off >= 0, (path, src, src_off)
        end = off + length


def main():
    cmd, path = sys.argv[1], sys.argv[2]
    header, data_start = read_header(path)
    check_layout(path, header)
    if cmd == "header":
        print(f"format {header['format']} version {header['version']} size {header['size']}")
        for i, s in enumerate(header["sources"]):
            st = os.stat(s["path"])
            ok = (os.path.isabs(s["path"]) and os.path.realpath(s["path"]) == s["path"]
                  and s["bytes"] == st.st_size and s["mtime_ns"] == st.st_mtime_ns
                  and re.fullmatch("[0-9a-f]{16}", s["sample"]) and s["sample"] == sample(s["path"]))
            print(f"source {i} {s['path']} bytes {s['bytes']} "
                  f"{'matches the file' if ok else 'DIFFERS from the file'}")
        for off, length, src, src_off in header["segments"]:
            where = f"source {src} at {src_off}" if src >= 0 else \
                f"inline at data+{src_off - data_start}"
            print(f"segment {off} {length} {where}")
    elif cmd == "materialize":
        files = [open(s["path"], "rb") for s in header["sources"]]
        me = open(path, "rb")
        with open(sys.argv[3], "wb") as out:
            at = 0
            for off, length, src, src_off in header["segments"]:
                out.write(b"\0" * (off - at))
                f = files[src] if src >= 0 else me
                f.seek(src_off)
                left = length
                while left:
                    chunk = f.read(min(left, CHUNK))
                    assert chunk, (path, src, src_off)
                    out.write(chunk)
                    left -= len(chunk)
                at = off + length
            out.write(b"\0" * (header["size"] - at))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
