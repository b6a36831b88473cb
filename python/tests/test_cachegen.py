"""The Python package against the C++ CLI (byte-identical .cgkv), token ranges, hostile bytes,
stores (a real redis-server), the context store, and threads."""

import json
import os
import struct
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import cachegen

# Every option of `cachegen encode`, as CLI arguments and as encode() keywords.
CLI_OPTION_SETS = [
    ([], {}),
    (["--bits", "2"], dict(bits=2)),
    (["--bits", "3"], dict(bits=3)),
    (["--bits", "4"], dict(bits=4)),
    (["--bits", "5"], dict(bits=5)),
    (["--bits", "6"], dict(bits=6)),
    (["--bits", "8"], dict(bits=8)),
    (["--bits", "1", "--layer-groups", "1"], dict(bits=1, layer_groups=1)),
    (["--bits", "6", "--layer-groups", "5"], dict(bits=6, layer_groups=5)),
    (["--group-size", "16", "--chunk-tokens", "64"], dict(group_size=16, chunk_tokens=64)),
    (["--group-size", "64", "--chunk-tokens", "128"], dict(group_size=64, chunk_tokens=128)),
    (["--params", "reference", "--bits", "8"], dict(params="reference", bits=8)),
    (["--params", "compact", "--bits", "3"], dict(params="compact", bits=3)),
    (["--lossless"], dict(lossless=True)),
    (["--lossless", "--chunk-tokens", "100"], dict(lossless=True, chunk_tokens=100)),
    (["--level", "lossless"], dict(level="lossless")),
    (["--level", "high"], dict(level="high")),
    (["--level", "medium"], dict(level="medium")),
    (["--level", "low"], dict(level="low")),
    (["--level", "high", "--rope-base", "10000"], dict(level="high", rope_base=10000.0)),
    (["--level", "medium", "--rope-base", "500", "--rope-dims", "4", "--rope-neox"],
     dict(level="medium", rope_base=500.0, rope_dims=4, rope_neox=True)),
    (["--level", "low", "--rope-base", "10000", "--rope-scale", "0.5"],
     dict(level="low", rope_base=10000.0, rope_scale=0.5)),
    (["--level", "high", "--params", "reference"], dict(level="high", params="reference")),
]


def run_cli(cli, *args):
    return subprocess.run([str(cli), *map(str, args)], check=True, capture_output=True)


@pytest.mark.parametrize("args,kwargs", CLI_OPTION_SETS, ids=[" ".join(a) or "defaults"
                                                              for a, _ in CLI_OPTION_SETS])
def test_encode_is_byte_identical_to_cli(cli, kv_files, tmp_path, args, kwargs):
    src = kv_files[0]
    out = tmp_path / "cli.cgkv"
    run_cli(cli, "encode", src, "-o", out, *args)
    ours = cachegen.encode(np.load(src), **kwargs)
    assert ours == out.read_bytes()
    # Decoding: the same values as `cachegen decode`, and the same description as inspect.
    run_cli(cli, "decode", out, "-o", tmp_path / "cli.npy", "--tokens", "100:300")
    np.testing.assert_array_equal(cachegen.decode(ours, tokens=(100, 300)),
                                  np.load(tmp_path / "cli.npy"))
    cli_json = json.loads(run_cli(cli, "inspect", out, "--json").stdout)
    assert cachegen.inspect(ours) == cli_json


def test_every_capture_and_float32_match_cli(cli, kv_files, tmp_path):
    for src in kv_files:
        a = np.load(src)
        out = tmp_path / "c.cgkv"
        run_cli(cli, "encode", src, "-o", out, "--level", "medium")
        assert cachegen.encode(a, level="medium") == out.read_bytes()
    f32 = np.load(kv_files[1]).astype(np.float32)
    np.save(tmp_path / "f32.npy", f32)
    run_cli(cli, "encode", tmp_path / "f32.npy", "-o", tmp_path / "f32.cgkv", "--bits", "4")
    assert cachegen.encode(f32, bits=4) == (tmp_path / "f32.cgkv").read_bytes()


def test_cli_errors_match_python_errors(cli, kv_files, tmp_path):
    bad = subprocess.run([str(cli), "encode", str(kv_files[0]), "-o", str(tmp_path / "x"),
                          "--chunk-tokens", "33"], capture_output=True)
    assert bad.returncode == 2 and b"--chunk-tokens" in bad.stderr
    with pytest.raises(cachegen.InvalidArgument, match="block_tokens"):
        cachegen.encode(np.load(kv_files[0]), chunk_tokens=33)


def test_round_trip_at_every_level(kv):
    n = kv.size
    previous = 0
    for level in ("low", "medium", "high"):
        data = cachegen.encode(kv, level=level)
        assert len(data) > previous  # higher levels keep more
        previous = len(data)
        back = cachegen.decode(data)
        assert back.shape == kv.shape and back.dtype == np.float16
        err = np.abs(back.astype(np.float32) - kv.astype(np.float32))
        rel = np.sqrt(np.mean(err ** 2)) / np.sqrt(np.mean(kv.astype(np.float32) ** 2))
        assert rel < 0.25, (level, rel)
        cachegen.verify(data)
    exact = cachegen.encode(kv, level="lossless")
    np.testing.assert_array_equal(cachegen.decode(exact).view(np.uint16), kv.view(np.uint16))
    assert 8 * len(exact) / n < 16
    info = cachegen.info(exact)
    assert info["n_tokens"] == kv.shape[2] and info["n_attention_layers"] == kv.shape[0]


def test_input_forms_give_the_same_bytes(kv):
    ref = cachegen.encode(kv, bits=4)
    assert cachegen.encode(list(kv), bits=4) == ref            # per layer
    assert cachegen.encode(tuple(kv), bits=4) == ref
    assert cachegen.encode(kv.astype(np.float32), bits=4) != b""

    class ArrayLike:  # only __array__ (torch's CPU tensors have it too)
        def __array__(self, dtype=None):
            return kv

    assert cachegen.encode(ArrayLike(), bits=4) == ref
    # bfloat16 as 16-bit words: the same values as float32 holding them exactly.
    f32 = kv.astype(np.float32)
    words = (f32.view(np.uint32) >> 16).astype(np.uint16)
    exact_f32 = (words.astype(np.uint32) << 16).view(np.float32)
    assert cachegen.encode(words, bits=4, bfloat16=True) == cachegen.encode(exact_f32, bits=4)


def test_token_ranges(kv):
    data = cachegen.encode(kv, bits=4, chunk_tokens=64)
    full = cachegen.decode(data)
    n = kv.shape[2]
    for a, b in [(0, n), (0, 1), (63, 65), (64, 128), (100, 401), (n - 1, n), (7, 7)]:
        np.testing.assert_array_equal(cachegen.decode(data, tokens=(a, b)), full[:, :, a:b])
    np.testing.assert_array_equal(cachegen.decode(data, tokens=(None, 10)), full[:, :, :10])
    np.testing.assert_array_equal(cachegen.decode(data, tokens=(500, None)), full[:, :, 500:])
    as32 = cachegen.decode(data, tokens=(3, 9), dtype=np.float32)
    assert as32.dtype == np.float32
    np.testing.assert_array_equal(as32, full[:, :, 3:9].astype(np.float32))
    for bad in [(5, 4), (0, n + 1), (-1, 3)]:
        with pytest.raises(cachegen.InvalidArgument):
            cachegen.decode(data, tokens=bad)


def test_files_and_buffers(kv, tmp_path):
    data = cachegen.encode(kv, bits=3)
    p = tmp_path / "kv.cgkv"
    p.write_bytes(data)
    np.testing.assert_array_equal(cachegen.decode(p, tokens=(1, 2)),
                                  cachegen.decode(memoryview(data), tokens=(1, 2)))
    assert cachegen.inspect(str(p)) == cachegen.inspect(bytearray(data))
    with pytest.raises(cachegen.NotFound) as e:
        cachegen.decode(tmp_path / "missing.cgkv")
    assert e.value.status == "not_found" and isinstance(e.value, KeyError)


def test_bad_arguments_raise_invalid_argument(kv):
    cases = [
        (dict(bits=9), "base_bits"),
        (dict(bits=0), "base_bits"),
        (dict(level="extreme"), "level"),
        (dict(params="fast"), "params"),
        (dict(group_size=0), "group_size"),
        (dict(level="high", rope_base=10000.0, rope_scale=0.0), "rope"),
    ]
    for kwargs, word in cases:
        with pytest.raises(cachegen.InvalidArgument, match=word) as e:
            cachegen.encode(kv, **kwargs)
        assert e.value.status == "invalid_argument" and isinstance(e.value, ValueError)
    with pytest.raises(cachegen.InvalidArgument, match="float16"):
        cachegen.encode(kv.astype(np.float32), lossless=True)
    with pytest.raises(cachegen.InvalidArgument, match="C-contiguous"):
        cachegen.encode(kv[:, :, ::2])
    with pytest.raises(cachegen.InvalidArgument, match="float16 or float32"):
        cachegen.encode(kv.astype(np.int64))
    with pytest.raises(cachegen.InvalidArgument, match="expected shape"):
        cachegen.encode(kv[0])
    with pytest.raises(cachegen.InvalidArgument, match="n_kv_heads"):
        cachegen.encode(np.zeros((2, 2, 4, 0, 8), np.float16))
    with pytest.raises(cachegen.InvalidArgument, match="per-layer"):
        cachegen.encode([kv[0], np.ascontiguousarray(kv[1, :, :10])])
    with pytest.raises(cachegen.InvalidArgument, match="integers"):
        cachegen.encode(kv, tokens=np.zeros(3, np.float32))
    with pytest.raises(cachegen.InvalidArgument, match="int32"):
        cachegen.encode(kv, tokens=[2**40])


def test_hostile_bytes_raise_the_right_error(kv):
    data = bytearray(cachegen.encode(kv, bits=4, chunk_tokens=128))
    with pytest.raises(cachegen.TruncatedInput) as e:
        cachegen.decode(bytes(data[:-1]))
    assert e.value.status == "truncated_input" and isinstance(e.value, cachegen.CorruptInput)
    bad = bytearray(data)
    bad[0] ^= 0xFF
    with pytest.raises(cachegen.CorruptInput, match="magic"):
        cachegen.inspect(bytes(bad))
    bad = bytearray(data)
    struct.pack_into("<H", bad, 4, 99)
    with pytest.raises(cachegen.UnsupportedVersion) as e:
        cachegen.decode(bytes(bad))
    assert e.value.status == "unsupported_version"
    bad = bytearray(data)
    bad[-3] ^= 0x10  # last chunk: its checksum fails; earlier tokens still decode
    with pytest.raises(cachegen.CorruptInput, match="checksum"):
        cachegen.verify(bytes(bad))
    cachegen.decode(bytes(bad), tokens=(0, 128))
    with pytest.raises(cachegen.TruncatedInput):
        cachegen.decode(b"")
    # Every truncation and many single-bit flips: a cachegen.Error every time, never a crash.
    rng = np.random.default_rng(7)
    lengths = list(range(0, 200)) + list(rng.integers(0, len(data), 200))
    for n in lengths:
        with pytest.raises(cachegen.Error):
            cachegen.verify(bytes(data[:n]))
    for at in rng.integers(0, len(data), 400):
        bad = bytearray(data)
        bad[at] ^= 1 << int(rng.integers(0, 8))
        try:
            cachegen.verify(bytes(bad))
            cachegen.decode(bytes(bad), tokens=(0, 1))
        except cachegen.Error as err:
            assert err.status in ("corrupt_input", "truncated_input", "unsupported_version",
                                  "invalid_argument")


def _store_contract(store):
    for k in store.keys("py/"):
        del store[k]
    value = bytes(range(256)) * 3 + b"\0end"
    store["py/a"] = value
    store.put(b"py/b", b"")
    store["py/c"] = np.arange(10, dtype=np.float16)  # any C-contiguous buffer
    assert store["py/a"] == value and store["py/b"] == b""
    assert store.get("py/c") == np.arange(10, dtype=np.float16).tobytes()
    assert "py/a" in store and "py/zz" not in store and 3 not in store
    assert store.keys("py/") == ["py/a", "py/b", "py/c"]
    assert set(store.keys("py/")) <= set(iter(store)) and len(store) >= 3
    assert store.get("py/zz") is None and store.get("py/zz", 5) == 5
    with pytest.raises(cachegen.NotFound) as e:
        store["py/zz"]
    assert isinstance(e.value, KeyError) and e.value.status == "not_found"
    del store["py/a"]
    assert "py/a" not in store and not store.remove("py/a")
    with pytest.raises(KeyError):
        del store["py/a"]
    with pytest.raises(cachegen.InvalidArgument, match="control"):
        store["bad\nkey"] = b"x"
    with pytest.raises(cachegen.InvalidArgument):
        store[""] = b"x"
    big = np.random.default_rng(1).integers(0, 255, 5 << 20, dtype=np.uint8)
    store["py/big"] = big
    assert store["py/big"] == big.tobytes()
    for k in store.keys("py/"):
        del store[k]
    assert store.keys("py/") == []


def test_file_store(tmp_path):
    store = cachegen.Store(f"file://{tmp_path}/s")
    assert store.url.startswith("file://") and repr(store).startswith("cachegen.Store(")
    _store_contract(store)
    with pytest.raises(cachegen.NotFound):
        cachegen.Store(f"file://{tmp_path}/absent", create=False)
    with pytest.raises(cachegen.InvalidArgument):
        cachegen.Store("redis://")


def test_redis_store(redis_url):
    store = cachegen.Store(redis_url)
    assert store.url.startswith("redis://")
    _store_contract(store)


def test_unreachable_redis_is_unavailable():
    with pytest.raises(cachegen.Unavailable) as e:
        cachegen.Store("redis://127.0.0.1:1/0")
    assert e.value.status == "unavailable" and isinstance(e.value, ConnectionError)


def test_encode_store_decode_range_through_redis(kv, redis_url):
    """The README example: compress, store in Redis, load a token range back."""
    store = cachegen.Store(redis_url)
    store["doc/1"] = cachegen.encode(kv, level="high")
    part = cachegen.decode(store["doc/1"], tokens=(128, 256))
    assert part.shape == (kv.shape[0], 2, 128, kv.shape[3], kv.shape[4])
    full = cachegen.decode(cachegen.encode(kv, level="high"))
    np.testing.assert_array_equal(part, full[:, :, 128:256])


def test_context_store(kv, tmp_path):
    store = cachegen.Store(f"file://{tmp_path}/ctx")
    ctx = cachegen.ContextStore(store, "stories260K", chunk_tokens=128)
    assert ctx.chunk_tokens == 128
    tokens = np.arange(1000, 1000 + 300, dtype=np.int32)
    assert ctx.lookup(tokens) == []
    for i in range(2):
        chunk = np.ascontiguousarray(kv[:, :, i * 128:(i + 1) * 128])
        ids = tokens[i * 128:(i + 1) * 128]
        ctx.save(tokens, i, "high", cachegen.encode(chunk, level="high", tokens=ids))
        ctx.save(tokens, i, "lossless", cachegen.encode(chunk, level="lossless", tokens=ids))
    found = ctx.lookup(list(tokens))  # any int sequence
    assert [(c["index"], c["first_token"], c["n_tokens"]) for c in found] == [(0, 0, 128),
                                                                             (1, 128, 128)]
    assert found[1]["levels"] == ["high", "lossless"]
    exact = cachegen.decode(ctx.load(tokens, 1, "lossless"))
    np.testing.assert_array_equal(exact, kv[:, :, 128:256])
    assert ctx.load(tokens, 1, "low") is None
    other = tokens.copy()
    other[5] = 7
    assert ctx.lookup(other) == [] and ctx.load(other, 0, "high") is None
    assert cachegen.ContextStore(store, b"another model", 128).lookup(tokens) == []
    # A value whose token ids are not the chunk's is refused on load.
    ctx.save(tokens, 0, "low", cachegen.encode(np.ascontiguousarray(kv[:, :, :128]), level="low",
                                               tokens=tokens[1:129]))
    with pytest.raises(cachegen.CorruptInput, match="token"):
        ctx.load(tokens, 0, "low")
    with pytest.raises(cachegen.InvalidArgument):
        ctx.load(tokens, 2, "high")
    with pytest.raises(cachegen.InvalidArgument, match="level"):
        ctx.save(tokens, 0, "Bad Level", b"x")


def test_threads_call_concurrently(kv_files, redis_url):
    arrays = [np.load(f) for f in kv_files]
    expected = [cachegen.encode(a, level="medium") for a in arrays]
    decoded = [cachegen.decode(e, tokens=(50, 250)) for e in expected]
    store = cachegen.Store(redis_url)
    errors = []

    def work(t):
        try:
            for i in range(6):
                j = (t + i) % len(arrays)
                data = cachegen.encode(arrays[j], level="medium")
                assert data == expected[j]
                np.testing.assert_array_equal(cachegen.decode(data, tokens=(50, 250)), decoded[j])
                store[f"thread/{t}/{i}"] = data
                assert store[f"thread/{t}/{i}"] == data
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert len(store.keys("thread/")) == 48
    for k in store.keys("thread/"):
        del store[k]


def test_example_script_runs(kv_files, redis_url):
    script = Path(__file__).resolve().parents[2] / "examples" / "python" / "kv_to_redis.py"
    out = subprocess.run([sys.executable, str(script), str(kv_files[0]), redis_url], check=True,
                         capture_output=True, text=True, env=dict(os.environ))
    assert "tokens 128..255: (" in out.stdout and "float16" in out.stdout
    assert "demo/seq-0" not in cachegen.Store(redis_url)
