"""Fixtures: the real KV captures in ../shared, the CLI binary, and a throwaway redis-server."""

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def shared_dir() -> Path:
    return Path(os.environ.get("CACHEGEN_SHARED_DIR", ROOT.parent / "shared"))


@pytest.fixture(scope="session")
def kv_files():
    files = sorted((shared_dir() / "data" / "kv").glob("*_ctx0[0-9].npy"))
    if not files:
        pytest.skip(f"no KV captures in {shared_dir()}/data/kv (the shared test data)")
    return files


@pytest.fixture(scope="session")
def kv(kv_files):
    """A real KV capture [layers, 2, tokens, kv_heads, head_dim], float16."""
    a = np.load(kv_files[0])
    assert a.dtype == np.float16 and a.ndim == 5 and a.shape[1] == 2
    return a


@pytest.fixture(scope="session")
def cli():
    path = Path(os.environ.get("CACHEGEN_CLI", ROOT / "build" / "release" / "tools" / "cli" /
                               "cachegen"))
    if not path.exists():
        pytest.fail(f"the cachegen CLI is not built at {path} (set CACHEGEN_CLI)")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _redis_pid(port: int):
    """The process id of the redis-server answering on port (INFO server), or None."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as c:
            c.sendall(b"INFO server\r\n")
            reply = b""
            while b"process_id:" not in reply or not reply.endswith(b"\r\n"):
                chunk = c.recv(65536)
                if not chunk:
                    break
                reply += chunk
    except OSError:
        return None
    for line in reply.split(b"\r\n"):
        if line.startswith(b"process_id:"):
            return int(line.split(b":")[1])
    return None


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    """A redis-server on a free loopback port with a temp dir, for the session."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (scripts/install-deps.sh installs it)")
    d = tmp_path_factory.mktemp("redis")
    # The port was free a moment ago: another process may take it before our server binds it
    # (then ours exits, or another server answers there), so the server must be ours by its pid.
    for _ in range(8):
        port = _free_port()
        proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", str(d)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        pid = None
        while time.monotonic() < deadline and proc.poll() is None and pid is None:
            pid = _redis_pid(port)
            if pid is None:
                time.sleep(0.05)
        if pid == proc.pid and proc.poll() is None:
            break
        proc.kill()
        proc.wait(timeout=10)
    else:
        pytest.fail("redis-server did not start")
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(timeout=10)
