"""A stand-in for the gateway, for what the real one never sends (JSON
nested 200,000 levels deep, a frame that is not JSON): a WebSocket server
that says `gateway.ready` and answers each request with what the test's
`answer(method, params, conn, id)` returns (a `Raw` is sent verbatim)."""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

from websockets.asyncio.server import Server, ServerConnection, serve


class Raw(str):
    """An answer sent as this text, verbatim."""


class FakeGateway:
    def __init__(self, answer: Callable[[str, dict[str, Any], ServerConnection, Any], Any]) -> None:
        self.answer = answer
        self.conns: set[ServerConnection] = set()
        self.connections = 0
        self.server: Server | None = None
        self.port = 0
        #: Upgrade, then say nothing (not a tether gateway).
        self.silent = False

    @classmethod
    async def start(cls, answer: Callable[..., Any], port: int = 0) -> FakeGateway:
        fake = cls(answer)
        fake.server = await serve(fake._handle, "127.0.0.1", port, max_size=None, compression=None)
        fake.port = fake.server.sockets[0].getsockname()[1]
        return fake

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    async def _handle(self, conn: ServerConnection) -> None:
        if self.silent:
            await conn.wait_closed()
            return
        self.connections += 1
        self.conns.add(conn)
        ready = {
            "server": "fake", "version": "0", "protocol": 1, "epoch": "e_fake", "peer_id": f"p_{self.connections}",
            "profile": "default", "heartbeat_s": 15, "limits": {"max_frame_bytes": 1048576},
        }
        try:
            await conn.send(json.dumps({"jsonrpc": "2.0", "method": "event", "params": {"type": "gateway.ready", "payload": ready}}))
            async for data in conn:
                req = json.loads(data)
                try:
                    result = self.answer(req["method"], req.get("params") or {}, conn, req["id"])
                    if isinstance(result, Awaitable):
                        result = await result
                    if isinstance(result, Raw):
                        await conn.send(str(result))
                        continue
                    reply: dict[str, Any] = {"jsonrpc": "2.0", "id": req["id"], "result": result}
                except LookupError as err:
                    reply = {"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32601, "message": str(err)}}
                await conn.send(json.dumps(reply))
        except Exception:  # noqa: BLE001 - a cut connection ends the handler
            pass
        finally:
            self.conns.discard(conn)

    def cut(self) -> None:
        """Drops every connection, as a crash would."""
        for c in list(self.conns):
            c.transport.abort()

    async def close(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


def deep_json(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth
