#!/usr/bin/env python3
"""Writes malformed --exported-state-dict files for gpt2_dynamo.test.

    bad_state_dicts.py GOOD.safetensors DIR

GOOD is a valid state_dict holding transformer.wpe.weight [32, 32]; each
file written to DIR breaks one thing a reader must not trust (see the
test's NAME: lines for the error each one gets).
"""
import json
import os
import struct
import sys

import numpy as np


def header_and_data(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write(path, header, data=b""):
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def main():
    good, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    header, data = header_and_data(good)
    e = header["transformer.wpe.weight"]
    wpe = data[e["data_offsets"][0]:e["data_offsets"][1]]
    table = np.frombuffer(wpe, "<f4").reshape(32, 32)
    one = lambda shape, b: {"transformer.wpe.weight": {
        "dtype": "F32", "shape": shape, "data_offsets": [0, len(b)]}}
    # The table's bytes as [16, 64]: the fold's rows are its first bytes,
    # but a row of it is not a row of the fold.
    write(f"{out}/width.safetensors", one([16, 64], wpe), wpe)
    write(f"{out}/empty.safetensors", one([0, 32], b""))
    write(f"{out}/notobject.safetensors", {"transformer.wpe.weight": 5})
    dup = b'{"transformer.wpe.weight": %s, "transformer.wpe.weight": %s}' % (
        json.dumps(one([32, 32], wpe)["transformer.wpe.weight"]).encode(),
        json.dumps(one([32, 32], wpe)["transformer.wpe.weight"]).encode())
    write(f"{out}/duplicate.safetensors", dup, wpe)
    other = (table + 1).astype("<f4").tobytes()
    both = {"transformer.wpe.weight": one([32, 32], wpe)["transformer.wpe.weight"],
            "model.transformer.wpe.weight": {
                "dtype": "F32", "shape": [32, 32],
                "data_offsets": [len(wpe), 2 * len(wpe)]}}
    write(f"{out}/both.safetensors", both, wpe + other)
    write(f"{out}/deep.safetensors", b"[" * 200_000 + b"]" * 200_000)
    with open(f"{out}/short.safetensors", "wb") as f:
        f.write(b"\x01\x02\x03\x04")
    fifo = f"{out}/fifo.safetensors"
    if not os.path.exists(fifo):
        os.mkfifo(fifo)


if __name__ == "__main__":
    main()
