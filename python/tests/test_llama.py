"""llama.cpp state files (cachegen.HAS_LLAMA builds): llama_pack / llama_unpack byte-identical to
`cachegen llama pack` / `unpack` for every level option, the exact state back from a lossless
pack, and hostile bytes raising the right cachegen.Error subclass."""

import subprocess

import pytest

import cachegen
from conftest import shared_dir

pytestmark = pytest.mark.skipif(not cachegen.HAS_LLAMA, reason="built without llama.cpp")

# `cachegen llama pack` options and the same as llama_pack keywords.
PACK_OPTION_SETS = [
    ([], {}),
    (["--level", "lossless"], dict(level="lossless")),
    (["--lossless"], dict(lossless=True)),
    (["--lossless", "--chunk-tokens", "8"], dict(lossless=True, chunk_tokens=8)),
    (["--level", "high"], dict(level="high")),
    (["--level", "medium"], dict(level="medium")),
    (["--level", "low"], dict(level="low")),
    (["--bits", "4"], dict(bits=4)),
    (["--bits", "2", "--group-size", "16", "--chunk-tokens", "32"],
     dict(bits=2, group_size=16, chunk_tokens=32)),
]


@pytest.fixture(scope="session")
def gguf():
    path = shared_dir() / "models" / "stories260K.gguf"
    if not path.exists():
        pytest.skip(f"no model at {path} (the shared test models)")
    return path


@pytest.fixture(scope="session")
def other_gguf(gguf):
    path = gguf.parent / "tinystories-hd64.gguf"
    if not path.exists():
        pytest.skip(f"no second model at {path}")
    return path


@pytest.fixture(scope="session")
def state_file(cli, gguf, tmp_path_factory):
    """A sequence state file written by `cachegen llama demo --save-state`."""
    d = tmp_path_factory.mktemp("llama")
    path = d / "seq.state"
    subprocess.run([str(cli), "llama", "demo", "--model", str(gguf), "--prompt",
                    "Once upon a time there was a little cat who liked to play in the sun.",
                    "--generate", "2", "--threads", "1", "--level", "lossless",
                    "--save-state", str(path), "-o", str(d / "demo.cgkv")],
                   check=True, capture_output=True)
    return path


@pytest.fixture(scope="session")
def model(gguf):
    return cachegen.LlamaModel(gguf)


def run_cli(cli, *args):
    subprocess.run([str(cli), "llama", *map(str, args)], check=True, capture_output=True)


@pytest.mark.parametrize("with_model", [False, True])
@pytest.mark.parametrize("cli_args,kwargs", PACK_OPTION_SETS)
def test_pack_unpack_match_cli(cli, gguf, model, state_file, tmp_path, cli_args, kwargs,
                               with_model):
    state = state_file.read_bytes()
    model_args = ["--model", gguf] if with_model else []
    run_cli(cli, "pack", state_file, "-o", tmp_path / "a.cgkv", *model_args, *cli_args)
    packed = cachegen.llama_pack(state, model if with_model else None, **kwargs)
    assert packed == (tmp_path / "a.cgkv").read_bytes()
    run_cli(cli, "unpack", tmp_path / "a.cgkv", "-o", tmp_path / "a.state", *model_args)
    unpacked = cachegen.llama_unpack(packed, model if with_model else None)
    assert unpacked == (tmp_path / "a.state").read_bytes()
    assert len(unpacked) == len(state)
    if kwargs.get("lossless") or kwargs.get("level") == "lossless":
        assert unpacked == state


def test_lossless_round_trip_is_exact(model, state_file):
    state = state_file.read_bytes()
    data = cachegen.llama_pack(bytearray(state), str(model.path), lossless=True)
    assert cachegen.llama_unpack(memoryview(data)) == state
    assert cachegen.llama_unpack(data, model) == state
    assert cachegen.inspect(data)["codec"] == "lossless_fp16"
    assert repr(model).startswith("cachegen.LlamaModel(")


def test_quality_levels_need_the_right_model(model, other_gguf, state_file):
    data = cachegen.llama_pack(state_file.read_bytes(), model, level="medium")
    with pytest.raises(cachegen.InvalidArgument, match="restoring needs the model") as e:
        cachegen.llama_unpack(data)
    assert e.value.status == "invalid_argument"
    with pytest.raises(cachegen.InvalidArgument, match="the file was written for model"):
        cachegen.llama_unpack(data, other_gguf)


def test_hostile_bytes(model, state_file, tmp_path):
    state = state_file.read_bytes()
    with pytest.raises(cachegen.CorruptInput, match="magic") as e:
        cachegen.llama_pack(b"\x5a" * 64, model)
    assert e.value.status == "corrupt_input"
    with pytest.raises(cachegen.TruncatedInput):
        cachegen.llama_pack(state[: len(state) // 2], model)
    with pytest.raises(cachegen.TruncatedInput):
        cachegen.llama_pack(b"")
    data = cachegen.llama_pack(state, lossless=True)
    with pytest.raises(cachegen.CorruptInput, match="magic"):
        cachegen.llama_unpack(b"\x5a" * 64)
    with pytest.raises(cachegen.TruncatedInput):
        cachegen.llama_unpack(data[:16])
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 0xFF
    with pytest.raises(cachegen.CorruptInput):
        cachegen.llama_unpack(bytes(flipped))
    with pytest.raises(cachegen.InvalidArgument, match="level must be"):
        cachegen.llama_pack(state, level="ultra")
    with pytest.raises(cachegen.InvalidArgument, match="bits"):
        cachegen.llama_pack(state, bits=9)
    with pytest.raises(cachegen.NotFound):
        cachegen.LlamaModel(tmp_path / "missing.gguf")
    (tmp_path / "not.gguf").write_bytes(b"this is not a GGUF file")
    with pytest.raises(cachegen.CorruptInput):
        cachegen.LlamaModel(tmp_path / "not.gguf")
