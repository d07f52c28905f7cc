#!/usr/bin/env python3
"""Turns a text file into token files for the training executable's --data.

    scripts/prepare-text.py IN.txt -o OUT.bin [--tokenizer bytes|gpt2]
                            [--val-fraction F] [--val-out VAL.bin]

Writes llm.c's token file format (docs/runtime.md, "Token files"): a header
of 256 little-endian int32 (20240520, version 1, the token count, zeros),
then the tokens as little-endian uint16. The last F of the tokens (default
0.1; 0: none) go to the validation file instead, VAL.bin (default: OUT.bin
with "_val" before its extension), for --val-data.

Tokenizers:
  bytes  each byte of the file is a token, 0..255 (no dependency; a model
         with a vocabulary of at least 256)
  gpt2   GPT-2's BPE (vocabulary 50257), through tiktoken
         (pip install tiktoken)

Needs nothing but the Python standard library (and tiktoken for gpt2).
"""

import argparse
import array
import os
import sys

MAGIC = 20240520
VERSION = 1  # uint16 tokens


def fail(msg):
    print(f"prepare-text.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def tokenize(data, tokenizer, path):
    if tokenizer == "bytes":
        return list(data), 256
    try:
        import tiktoken
    except ImportError:
        fail("--tokenizer gpt2 needs tiktoken: pip install tiktoken "
             "(or use --tokenizer bytes, which needs nothing)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        fail(f"'{path}' is not UTF-8 text (byte {e.start}): --tokenizer gpt2 "
             "reads UTF-8; convert it (iconv -t UTF-8) or use --tokenizer bytes")
    try:
        enc = tiktoken.get_encoding("gpt2")
    except Exception as e:  # tiktoken downloads the BPE ranks once
        fail(f"tiktoken cannot load GPT-2's encoding ({e}); it downloads it on "
             "first use, so this needs the network once (or a TIKTOKEN_CACHE_DIR "
             "holding it)")
    return enc.encode_ordinary(text), enc.n_vocab


def write_tokens(path, tokens):
    header = array.array("i", [0] * 256)
    header[0], header[1], header[2] = MAGIC, VERSION, len(tokens)
    body = array.array("H", tokens)
    if sys.byteorder != "little":
        header.byteswap()
        body.byteswap()
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            header.tofile(f)
            body.tofile(f)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        fail(f"cannot write '{path}': {e.strerror}")


def main():
    ap = argparse.ArgumentParser(
        description="Tokenize a text file into llm.c-format token files for "
                    "the training executable's --data / --val-data.")
    ap.add_argument("input", metavar="IN.txt")
    ap.add_argument("-o", "--out", required=True, metavar="OUT.bin")
    ap.add_argument("--tokenizer", choices=["bytes", "gpt2"], default="bytes")
    ap.add_argument("--val-fraction", type=float, default=0.1, metavar="F",
                    help="the last F of the tokens go to the validation file "
                         "(default 0.1; 0: no validation file)")
    ap.add_argument("--val-out", metavar="VAL.bin",
                    help="the validation file (default: OUT with _val before "
                         "its extension)")
    a = ap.parse_args()
    if not 0.0 <= a.val_fraction < 1.0:
        fail(f"--val-fraction {a.val_fraction}: expected a number in [0, 1)")
    try:
        with open(a.input, "rb") as f:
            data = f.read()
    except OSError as e:
        fail(f"cannot read '{a.input}': {e.strerror}")
    if not data:
        fail(f"'{a.input}' is empty: no text to tokenize")
    tokens, vocab = tokenize(data, a.tokenizer, a.input)
    n_val = int(len(tokens) * a.val_fraction)
    if a.val_fraction > 0 and n_val == 0:
        fail(f"'{a.input}' gives {len(tokens)} tokens: --val-fraction "
             f"{a.val_fraction} of them is none; pass a larger text, a larger "
             "fraction, or --val-fraction 0")
    train, val = tokens[:len(tokens) - n_val], tokens[len(tokens) - n_val:]
    if not train:
        fail("no tokens left for training")
    val_out = a.val_out
    if n_val and not val_out:
        stem, ext = os.path.splitext(a.out)
        val_out = f"{stem}_val{ext or '.bin'}"
    if val_out and os.path.abspath(val_out) == os.path.abspath(a.out):
        fail(f"--val-out '{val_out}' is the same file as -o")
    write_tokens(a.out, train)
    print(f"wrote {len(train)} tokens to {a.out} (llm.c format, uint16; "
          f"{a.tokenizer} tokenizer, vocabulary {vocab})")
    if n_val:
        write_tokens(val_out, val)
        print(f"wrote {len(val)} tokens to {val_out} (validation)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
