#!/usr/bin/env python3
"""Python call overhead of cachegen.encode / cachegen.decode on a 1 MiB KV tensor, against the
same library calls timed in a C++ binary (cachegen_bind_overhead_bench), in interleaved rounds
(C++ run, Python run, C++ run, ...) so that load on a shared machine hits both alike.

    PYTHONPATH=build/release/python python3 python/bench/bench_overhead.py \
        build/release/python/cachegen_bind_overhead_bench [ROUNDS] [REPS]

Prints each side's median per call and the ratio Python / C++ (1.00 = no overhead).
"""

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import cachegen


def median_ns(reps, fn):
    ns = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        fn()
        ns.append(time.perf_counter_ns() - t0)
    return statistics.median(ns)


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    bench = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    # 1 MiB of fp16: [4 layers, K/V, 512 tokens, 4 heads, 32 dims], channel-scaled like real KV.
    rng = np.random.default_rng(0)
    scale = rng.uniform(0.1, 4.0, (1, 1, 1, 4, 32))
    kv = (rng.standard_normal((4, 2, 512, 4, 32)) * scale).astype(np.float16)
    assert kv.nbytes == 1 << 20
    with tempfile.TemporaryDirectory() as d:
        npy, cgkv = Path(d) / "kv.npy", Path(d) / "kv.cgkv"
        np.save(npy, kv)
        rows = []
        for _ in range(rounds):
            cpp = json.loads(subprocess.run([bench, str(npy), str(cgkv), str(reps)], check=True,
                                            capture_output=True, text=True).stdout)
            data = cachegen.encode(kv)
            assert data == cgkv.read_bytes(), "Python and C++ encoded different bytes"
            py_enc = median_ns(reps, lambda: cachegen.encode(kv))
            py_dec = median_ns(reps, lambda: cachegen.decode(data))
            rows.append((cpp["encode_ns"], py_enc, cpp["decode_ns"], py_dec))
    enc_cpp = statistics.median(r[0] for r in rows)
    enc_py = statistics.median(r[1] for r in rows)
    dec_cpp = statistics.median(r[2] for r in rows)
    dec_py = statistics.median(r[3] for r in rows)
    print(f"1 MiB fp16 KV, {rounds} interleaved rounds x {reps} calls (medians)")
    print(f"encode: C++ {enc_cpp / 1e6:8.3f} ms  Python {enc_py / 1e6:8.3f} ms  "
          f"ratio {enc_py / enc_cpp:.3f}")
    print(f"decode: C++ {dec_cpp / 1e6:8.3f} ms  Python {dec_py / 1e6:8.3f} ms  "
          f"ratio {dec_py / dec_cpp:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
