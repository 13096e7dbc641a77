"""The host's two pipes: stdin read as lines (of any length: a `turn.start`
carries the whole history), stdout written one JSON object per line.

Stdout's buffer limit is zero, so every write is on the pipe before the
writer's `drain()` returns: the gateway then sees frames in order and
promptly, and a turn that ends the process right after a frame (echo's
`/crash`) does not lose it."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any


class Lines:
    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self._buf = bytearray()

    @classmethod
    async def stdin(cls) -> Lines:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 20)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        return cls(reader)

    async def next(self) -> bytes | None:
        """The next line without its newline, or None at the end of input."""
        while True:
            i = self._buf.find(b"\n")
            if i >= 0:
                line = bytes(self._buf[:i])
                del self._buf[: i + 1]
                return line
            chunk = await self._reader.read(1 << 16)
            if not chunk:
                if self._buf:
                    line, self._buf = bytes(self._buf), bytearray()
                    return line
                return None
            self._buf += chunk


class Output:
    def __init__(self, writer: asyncio.StreamWriter | None) -> None:
        self._writer = writer
        self._lock = asyncio.Lock()

    @classmethod
    async def stdout(cls) -> Output:
        loop = asyncio.get_running_loop()
        try:
            transport, protocol = await loop.connect_write_pipe(
                lambda: asyncio.streams.FlowControlMixin(), sys.stdout
            )
        except (ValueError, OSError):
            # Not a pipe (a regular file): plain blocking writes.
            return cls(None)
        transport.set_write_buffer_limits(high=0)
        return cls(asyncio.StreamWriter(transport, protocol, None, loop))

    async def send(self, frame: dict[str, Any]) -> None:
        line = json.dumps(frame, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        async with self._lock:
            if self._writer is None:
                view = memoryview(line)
                while view:
                    view = view[os.write(sys.stdout.fileno(), view) :]
                return
            self._writer.write(line)
            await self._writer.drain()

    async def flush(self) -> None:
        """Returns once everything sent so far is on the pipe."""
        async with self._lock:
            if self._writer is not None:
                await self._writer.drain()
