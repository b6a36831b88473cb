#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_gguf_metadata: GGUF headers and metadata only (no tensors),
covering every value type the reader handles (scalars, strings, int arrays, string arrays,
per-layer head_count_kv). Usage: fuzz/make_gguf_seeds.py DIR (run_fuzzers.sh writes them to a scratch directory: no .gguf
file is checked in)."""
import struct
import sys

def s(text):
    b = text.encode()
    return struct.pack("<Q", len(b)) + b

def kv(key, vtype, payload):
    return s(key) + struct.pack("<I", vtype) + payload

def u32(key, v): return kv(key, 4, struct.pack("<I", v))
def f32(key, v): return kv(key, 6, struct.pack("<f", v))
def string(key, v): return kv(key, 8, s(v))
def arr(key, etype, fmt, values):
    return kv(key, 9, struct.pack("<IQ", etype, len(values)) + b"".join(struct.pack(fmt, x) for x in values))
def str_arr(key, values):
    return kv(key, 9, struct.pack("<IQ", 8, len(values)) + b"".join(s(x) for x in values))

def gguf(pairs, version=3, n_tensors=0):
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, len(pairs)) + b"".join(pairs)

base = [string("general.architecture", "llama"), u32("llama.block_count", 5),
        u32("llama.attention.head_count", 8), u32("llama.embedding_length", 64)]
seeds = {
    "minimal": gguf(base),
    "gqa_keylen_v2": gguf(base + [u32("llama.attention.head_count_kv", 4),
                                  u32("llama.attention.key_length", 16)], version=2),
    "per_layer_kv": gguf(base + [arr("llama.attention.head_count_kv", 5, "<i", [0, 4, 4, 0, 4])]),
    "tokenizer": gguf([str_arr("tokenizer.ggml.tokens", ["<s>", "</s>", "a", "b"]),
                       arr("tokenizer.ggml.scores", 6, "<f", [0.0, 0.5, -1.0, 2.0]),
                       f32("llama.rope.freq_base", 10000.0),
                       kv("general.flag", 7, b"\x01"),
                       kv("general.big", 10, struct.pack("<Q", 1 << 40))] + base),
}
for name, data in seeds.items():
    with open(f"{sys.argv[1]}/{name}.gguf", "wb") as f:
        f.write(data)
