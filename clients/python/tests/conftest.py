"""Test harness: starts the real `tether` binary (TETHER_BIN, else the
workspace's target/debug/tether), cuts connections through a proxy, and runs
`async def` tests in a fresh event loop each (no plugin needed)."""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest

HERE = Path(__file__).resolve().parent
TETHER_BIN = os.environ.get("TETHER_BIN") or str(HERE.parents[2] / "target" / "debug" / "tether")
PYTHON = os.environ.get("TETHER_PYTHON") or str(Path(os.sys.executable))
EXAMPLES = HERE.parent / "examples"
# Generous: a loaded 2-core machine is slow to start processes.
WAIT_S = 30.0
TEST_TIMEOUT_S = 120.0


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: Any) -> bool | None:
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(asyncio.wait_for(pyfuncitem.obj(**args), TEST_TIMEOUT_S))
        return True
    return None


def free_port() -> int:
    """A port that was free a moment ago, for a gateway that must come back
    on the same address (clients reconnect to the URL they were given)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gateway:
    def __init__(self, args: list[str], port: int = 0, data_dir: str | None = None) -> None:
        self.args = args
        self.port = port
        self.own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="tether-py-test-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.addr = ""

    @property
    def url(self) -> str:
        return f"ws://{self.addr}/ws"

    def spawn(self) -> None:
        env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "warn"))
        self.proc = subprocess.Popen(
            [TETHER_BIN, "serve", "--listen", f"127.0.0.1:{self.port}", "--data-dir", self.data_dir, *self.args],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().strip()
        prefix = "tether listening on http://"
        assert line.startswith(prefix), f"unexpected start-up line {line!r}"
        self.addr = line[len(prefix):]
        self.port = int(self.addr.rsplit(":", 1)[1])

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=WAIT_S)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.signal(signal.SIGTERM)

    def restart(self, data_dir: str | None = None) -> None:
        """kill -9, then a new process on the same port (and data directory,
        unless another is given: a new data directory is a new epoch)."""
        self.kill9()
        if data_dir is not None:
            self.data_dir = data_dir
        self.spawn()

    def stop(self) -> None:
        self.kill9()
        if self.own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


@pytest.fixture
def start_gateway():
    """`start_gateway(*flags, port=0)` → a running Gateway, stopped after the test."""
    started: list[Gateway] = []

    def start(*args: str, port: int = 0, data_dir: str | None = None) -> Gateway:
        gw = Gateway(list(args), port=port, data_dir=data_dir)
        gw.spawn()
        started.append(gw)
        return gw

    yield start
    for gw in started:
        gw.stop()


class CutProxy:
    """A TCP forwarder the test can cut (every connection through it is
    destroyed, new ones refused until `restore()`), as a network does."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.down = False
        self.writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None
        self.addr = ""

    @classmethod
    async def start(cls, target: str) -> CutProxy:
        p = cls(target)
        p.server = await asyncio.start_server(p._client, "127.0.0.1", 0)
        p.addr = "127.0.0.1:%d" % p.server.sockets[0].getsockname()[1]
        return p

    @property
    def url(self) -> str:
        return f"ws://{self.addr}/ws"

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.down:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self.writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, ConnectionError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self.writers -= {writer, up_writer}

    def cut(self) -> None:
        self.down = True
        for w in list(self.writers):
            w.transport.abort()

    def restore(self) -> None:
        self.down = False

    async def close(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()


async def read_until(stream: Any, pred: Callable[[dict[str, Any]], bool], timeout: float = WAIT_S) -> list[dict[str, Any]]:
    """Reads `stream` until `pred(item)`; returns every item read."""
    items: list[dict[str, Any]] = []

    async def read() -> list[dict[str, Any]]:
        async for item in stream:
            items.append(item)
            if pred(item):
                return items
        raise AssertionError(f"the stream ended before the expected event; read {len(items)} items")

    try:
        return await asyncio.wait_for(read(), timeout)
    except asyncio.TimeoutError:
        raise AssertionError(f"timed out after {len(items)} items: {items[-3:]}") from None


async def next_state(gw: Any, state: str, pred: Callable[[dict[str, Any]], bool] = lambda c: True) -> asyncio.Future:
    """A future for the next `state` change of `gw` that `pred` accepts."""
    fut = asyncio.get_running_loop().create_future()

    def listener(change: dict[str, Any]) -> None:
        if not fut.done() and pred(change):
            fut.set_result(change)

    off = gw.on(state, listener)
    fut.add_done_callback(lambda _: off())
    return fut


def seqs_of(items: list[dict[str, Any]]) -> list[int]:
    return [e["seq"] for e in items if isinstance(e.get("seq"), int)]
