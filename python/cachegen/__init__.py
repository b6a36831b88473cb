"""cachegen: compress LLM KV caches (CacheGen-style) from Python.

    import numpy as np, cachegen
    kv = np.load("kv.npy")                  # [n_layers, 2, n_tokens, n_kv_heads, head_dim]
    data = cachegen.encode(kv, level="high")  # .cgkv bytes
    part = cachegen.decode(data, tokens=(128, 256))  # fp16 [n_layers, 2, 128, heads, dim]
    store = cachegen.Store("redis://127.0.0.1:6379/0")
    store["doc-1"] = data

The same array and options give byte for byte what `cachegen encode` writes (one library
function builds both). Errors are `cachegen.Error` subclasses whose `.status` is the stable
status name ("corrupt_input", ...). Encode, decode and store calls release the GIL.

Built with llama.cpp (`HAS_LLAMA`), llama.cpp state files pack into .cgkv and back:

    model = cachegen.LlamaModel("model.gguf")
    data = cachegen.llama_pack(open("seq.state", "rb").read(), model, level="high")
    state = cachegen.llama_unpack(data, model)   # what `cachegen llama unpack` writes
"""

from __future__ import annotations

import json as _json
import os as _os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as _np

from . import _cachegen

__all__ = [
    "Error", "InvalidArgument", "CorruptInput", "TruncatedInput", "OutputTooSmall",
    "UnsupportedVersion", "IoError", "OutOfMemory", "NotFound", "Unavailable",
    "encode", "decode", "inspect", "verify", "info", "Store", "ContextStore", "LEVELS",
    "HAS_LLAMA",
]

LEVELS = _cachegen.LEVELS  # ("lossless", "high", "medium", "low"): the C++ table's names


class Error(Exception):
    """Any cachegen failure. `status` is the stable status name, `code` its number."""

    status = "error"
    code = -1

    def __str__(self) -> str:
        return f"{self.status}: {super().__str__()}"


class InvalidArgument(Error, ValueError):
    """An argument or option is out of its documented range (names which)."""
    status, code = "invalid_argument", 1


class CorruptInput(Error):
    """Encoded bytes are malformed: bad magic, impossible field, bad checksum."""
    status, code = "corrupt_input", 2


class TruncatedInput(CorruptInput):
    """Encoded bytes end before the structure they describe."""
    status, code = "truncated_input", 3


class OutputTooSmall(Error):
    """An output buffer cannot hold the result."""
    status, code = "output_too_small", 4


class UnsupportedVersion(Error):
    """A well-formed stream of a format version this build does not read."""
    status, code = "unsupported_version", 5


class IoError(Error, OSError):
    """The operating system or a server failed a read or write."""
    status, code = "io_error", 6


class OutOfMemory(Error, MemoryError):
    """An allocation failed."""
    status, code = "out_of_memory", 7


class NotFound(Error, KeyError):
    """A key or file does not exist."""
    status, code = "not_found", 8

    def __str__(self) -> str:  # KeyError would quote the message
        return Error.__str__(self)


class Unavailable(Error, ConnectionError):
    """A service (e.g. Redis) cannot be reached."""
    status, code = "unavailable", 9


for _cls in (InvalidArgument, CorruptInput, TruncatedInput, OutputTooSmall, UnsupportedVersion,
             IoError, OutOfMemory, NotFound, Unavailable):
    _cachegen._errors[_cls.code] = _cls

_Bytes = Union[bytes, bytearray, memoryview]
_PathOrBytes = Union[_Bytes, str, "_os.PathLike[str]"]


def _as_array(x: Any) -> Any:
    """A buffer-protocol view of x without a copy where possible (numpy arrays pass as they
    are; other objects through DLPack, then __array__)."""
    if isinstance(x, _np.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        try:
            return _np.from_dlpack(x)
        except (TypeError, RuntimeError, BufferError, AttributeError):
            pass  # e.g. bfloat16 or a device tensor: try __array__
    return _np.asarray(x)


def _int32(tokens: Any) -> _np.ndarray:
    """Token ids as a C-contiguous int32 array (a view when they already are one)."""
    a = _as_array(tokens)
    if a.size and a.dtype.kind not in "iu":
        raise InvalidArgument(f"tokens must be integers (got dtype {a.dtype})")
    if a.size and a.dtype != _np.int32 and (a.min() < -2**31 or a.max() >= 2**31):
        raise InvalidArgument("tokens do not fit in int32")
    return _np.ascontiguousarray(a, dtype=_np.int32)


def encode(kv: Any, *, level: Optional[str] = None, bits: int = 4, layer_groups: int = 3,
           group_size: int = 32, chunk_tokens: int = 0, params: str = "compact",
           lossless: bool = False, rope_base: float = 0.0, rope_dims: int = 0,
           rope_scale: float = 1.0, rope_neox: bool = False, tokens: Any = None,
           bfloat16: bool = False) -> bytes:
    """Compresses a KV cache into .cgkv bytes.

    kv: one C-contiguous array [n_layers, 2, n_tokens, n_kv_heads, head_dim] (K then V), or a
    list of per-layer arrays [2, n_tokens, n_kv_heads, head_dim]; float16 or float32 (or 16-bit
    bfloat16 words with bfloat16=True). numpy arrays, and torch tensors on the CPU (DLPack or
    __array__), are read in place, without a copy.

    The options are `cachegen encode`'s, with its defaults: `level` (lossless | high | medium |
    low) replaces bits / layer_groups / group_size / chunk_tokens; `lossless` stores the exact
    fp16 values. `tokens` (int32 ids), when given, are stored in the file (the context store
    checks them on load). Raises InvalidArgument naming a bad option or shape.
    """
    o = _cachegen.EncodeOptions()
    o.bits, o.layer_groups, o.group_size, o.chunk_tokens = bits, layer_groups, group_size, \
        chunk_tokens
    o.level = level or ""
    o.params, o.lossless = params, lossless
    o.rope_base, o.rope_dims, o.rope_scale, o.rope_neox = rope_base, rope_dims, rope_scale, \
        rope_neox
    if isinstance(kv, (list, tuple)):
        arrays: Any = [_as_array(layer) for layer in kv]
    else:
        arrays = _as_array(kv)
    return _cachegen.encode(arrays, o, bfloat16, None if tokens is None else _int32(tokens))


def _reader(data: _PathOrBytes) -> Any:
    if isinstance(data, (str, _os.PathLike)):
        return _cachegen.Reader.open_file(_os.fspath(data))
    return _cachegen.Reader.from_bytes(data)


def decode(data: _PathOrBytes, tokens: Optional[Tuple[Optional[int], Optional[int]]] = None,
           dtype: Any = _np.float16) -> _np.ndarray:
    """Decompresses .cgkv bytes (or a .cgkv file path) into an array
    [n_attention_layers, 2, n_tokens, n_kv_heads, head_dim].

    tokens=(a, b) decodes tokens a..b-1 only (reading just the chunks they touch; either end may
    be None). The result is float16 (decoded straight into the array), or `dtype` if given.
    Raises CorruptInput / TruncatedInput / UnsupportedVersion for bad bytes.
    """
    r = _reader(data)
    n = r.info()["n_tokens"]
    a, b = (0, n) if tokens is None else tokens
    a = 0 if a is None else a
    b = n if b is None else b
    if not (0 <= a <= b <= n):
        raise InvalidArgument(f"tokens ({a}, {b}) are outside 0:{n}")
    out = r.decode(a, b)
    return out if _np.dtype(dtype) == _np.float16 else out.astype(dtype)


def inspect(data: _PathOrBytes) -> Dict[str, Any]:
    """What `cachegen inspect --json` prints: shape, codec, sizes and per-layer bits and bytes.
    Checks every chunk and blob checksum (verify() also decodes)."""
    return _json.loads(_reader(data).inspect_json())


def info(data: _PathOrBytes) -> Dict[str, int]:
    """The header's shape only (n_layers, n_attention_layers, n_kv_heads, head_dim, n_tokens);
    cheaper than inspect()."""
    return dict(_reader(data).info())


def verify(data: _PathOrBytes) -> None:
    """Checks every checksum and decodes every chunk; raises on the first problem."""
    _reader(data).verify()


class Store:
    """A key -> bytes store: "file://DIR" (or a plain directory) or
    "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]". Safe to share between threads.

        store["k"] = data; store["k"]; "k" in store; del store["k"]; store.keys("prefix/")
    """

    def __init__(self, url: str, create: bool = True) -> None:
        self._s = _cachegen.Store(url, create)

    @property
    def url(self) -> str:
        return self._s.url

    def put(self, key: Union[str, bytes], value: Any) -> None:
        """Stores value (bytes or any C-contiguous buffer) under key, atomically."""
        self._s.put(key, value)

    def get(self, key: Union[str, bytes], default: Any = None) -> Any:
        """The value under key, or default."""
        v = self._s.get(key)
        return default if v is None else v

    def keys(self, prefix: str = "") -> List[str]:
        """Keys starting with prefix, sorted bytewise."""
        return self._s.list(prefix)

    def remove(self, key: Union[str, bytes]) -> bool:
        """Deletes key; False when it did not exist."""
        return self._s.remove(key)

    def __setitem__(self, key: Union[str, bytes], value: Any) -> None:
        self._s.put(key, value)

    def __getitem__(self, key: Union[str, bytes]) -> bytes:
        v = self._s.get(key)
        if v is None:
            raise NotFound(f"no value under key '{key!s}' in {self.url}")
        return v

    def __delitem__(self, key: Union[str, bytes]) -> None:
        if not self._s.remove(key):
            raise NotFound(f"no value under key '{key!s}' in {self.url}")

    def __contains__(self, key: object) -> bool:
        return isinstance(key, (str, bytes)) and self._s.exists(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._s.list(""))

    def __len__(self) -> int:
        return len(self._s.list(""))

    def __repr__(self) -> str:
        return f"cachegen.Store({self.url!r})"


class ContextStore:
    """Prefix-keyed KV chunks in a Store, for context reuse (vLLM/LMCache-style chained chunk
    keys): chunk i of a context is found only after exactly the same tokens, for the same
    model fingerprint. Values are .cgkv bytes of a chunk's tokens, written with
    encode(..., tokens=chunk_ids)."""

    def __init__(self, store: Store, fingerprint: Union[str, bytes],
                 chunk_tokens: int = 256) -> None:
        fp = fingerprint.encode() if isinstance(fingerprint, str) else bytes(fingerprint)
        self.store = store
        self._c = _cachegen.ContextStore(store._s, fp, chunk_tokens)

    @property
    def chunk_tokens(self) -> int:
        return self._c.chunk_tokens

    def lookup(self, tokens: Any) -> List[Dict[str, Any]]:
        """The longest stored prefix of tokens, in whole chunks: one dict per chunk with
        index, first_token, n_tokens and levels (the levels stored)."""
        return [dict(index=i, first_token=f, n_tokens=n, levels=list(lv))
                for i, f, n, lv in self._c.lookup(_int32(tokens))]

    def save(self, tokens: Any, index: int, level: str, value: Any) -> None:
        """Stores chunk `index` of tokens at `level` (1..32 bytes of [a-z0-9_-])."""
        self._c.save(_int32(tokens), index, level, value)

    def load(self, tokens: Any, index: int, level: str) -> Optional[bytes]:
        """Chunk `index` at `level`, verified (size, checksum, token ids), or None."""
        return self._c.load(_int32(tokens), index, level)


HAS_LLAMA: bool = bool(getattr(_cachegen, "HAS_LLAMA", False))
"""True when this build has llama.cpp: LlamaModel, llama_pack and llama_unpack exist."""

if HAS_LLAMA:
    __all__ += ["LlamaModel", "llama_pack", "llama_unpack"]

    class LlamaModel:
        """A GGUF model loaded by cachegen (weights only, CPU): what llama_pack records as the
        state's model and what llama_unpack recomputes layer 0 with. Raises NotFound /
        CorruptInput. Safe to share between threads."""

        def __init__(self, path: Union[str, "_os.PathLike[str]"]) -> None:
            self._m = _cachegen.LlamaModel(_os.fspath(path))

        @property
        def path(self) -> str:
            return str(self._m.path)

        def __repr__(self) -> str:
            return f"cachegen.LlamaModel({self.path!r})"

    def _llama_model(model: Any) -> Any:
        if model is None:
            return None
        if isinstance(model, LlamaModel):
            return model._m
        return LlamaModel(model)._m

    def llama_pack(state: _Bytes, model: Any = None, *, level: str = "high",
                   bits: Optional[int] = None, lossless: bool = False, group_size: int = 32,
                   chunk_tokens: int = 0) -> bytes:
        """Packs a llama.cpp state file (the bytes llama_state_seq_save_file /
        llama_state_save_file write) into .cgkv bytes: byte for byte what `cachegen llama pack`
        writes with the same options (one library function builds both).

        model: the LlamaModel (or GGUF path) that wrote the state, recorded so restores into
        another model are refused; quality levels need it to store keys pre-RoPE and recompute
        layer 0 (without it both are stored: larger). `level` is lossless | high | medium | low;
        `bits` (1..8) a uniform width instead (quantization groups of `group_size` tokens);
        `lossless` the exact f16 K/V. chunk_tokens: tokens per container chunk (0: the level's
        default). Raises CorruptInput / TruncatedInput / UnsupportedVersion for bad state bytes,
        InvalidArgument for a bad option.
        """
        return _cachegen.llama_pack(state, _llama_model(model), level, lossless, bits,
                                    group_size, chunk_tokens)

    def llama_unpack(data: _Bytes, model: Any = None) -> bytes:
        """Rebuilds the state file from .cgkv bytes written by llama_pack (or `cachegen llama
        pack`): byte for byte what `cachegen llama unpack` writes, the exact original at a
        lossless level. model (LlamaModel or GGUF path) is needed when the file recomputes
        layer 0 (quality levels packed with a model): InvalidArgument without it or with
        another model. Raises CorruptInput / TruncatedInput for bad bytes.
        """
        return _cachegen.llama_unpack(data, _llama_model(model))
