#!/usr/bin/env python3
"""Compress a KV cache from numpy, store it in Redis, and load a token range back.

    PYTHONPATH=build/release/python python3 examples/python/kv_to_redis.py \
        ../shared/data/kv/stories260K_dev_ctx00.npy redis://127.0.0.1:6379/0

KV.npy: [n_layers, 2, n_tokens, n_kv_heads, head_dim] (K then V), float16 / float32 - what
llama.cpp, vLLM or HF transformers hold per sequence (stack the per-layer K and V tensors).
"""

import sys

import numpy as np

import cachegen


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    kv = np.load(sys.argv[1])
    store = cachegen.Store(sys.argv[2])          # or "file:///var/cache/kv"

    data = cachegen.encode(kv, level="high")     # .cgkv bytes; the same as `cachegen encode`
    store["demo/seq-0"] = data
    print(f"{kv.nbytes} bytes of KV -> {len(data)} bytes "
          f"({kv.astype(np.float16).nbytes / len(data):.1f}x smaller than fp16)")

    # Later, maybe in another process: only the chunks holding tokens 128..255 are decoded.
    part = cachegen.decode(store["demo/seq-0"], tokens=(128, 256))
    print("tokens 128..255:", part.shape, part.dtype)
    err = np.abs(part.astype(np.float32) - kv[:, :, 128:256].astype(np.float32)).mean()
    print(f"mean absolute error {err:.4f}")

    info = cachegen.inspect(store["demo/seq-0"])
    print(f"{info['bits_per_element']:.2f} bits per element, {info['n_chunks']} chunks")
    del store["demo/seq-0"]
    return 0


if __name__ == "__main__":
    sys.exit(main())
