"""The gateway object's requests across connections: each JSON-RPC call is
sent on the open connection, or waits for the next one (for its timeout at
most, then Unreachable); one in flight when the connection drops is sent
again only if it changes nothing (a read), any other raises ConnectionLost,
since the gateway may have executed it (a prompt sent twice would run
twice)."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from ._errors import Code, ConnectionLost, RpcError

if TYPE_CHECKING:
    from ._connection import Connection

# Methods that change nothing, so they may be sent again on a new connection
# when the old one dropped before their answer.
READS = frozenset(
    {"gateway.ping", "session.list", "session.events.since", "session.events.stats", "handoff.state"}
)


class Call:
    __slots__ = ("method", "params", "future", "retry", "generation", "timeout", "timer")

    def __init__(
        self, method: str, params: dict[str, Any], retry: bool, generation: int, timeout: float | None = None
    ) -> None:
        self.method = method
        self.params = params
        self.future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.retry = retry
        self.generation = generation
        # How long it may wait for a connection (None: as long as it takes).
        self.timeout = timeout
        self.timer: asyncio.TimerHandle | None = None

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def resolve(self, value: Any) -> None:
        if not self.future.done():
            self.future.set_result(value)

    def reject(self, err: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(err)


class Requests:
    """`gw`: the gateway object, for its connection (`state`, `_outbox`,
    `ready`, `generation`) and what an Unreachable says."""

    def __init__(self, gw: Connection) -> None:
        self._gw = gw
        self._next_id = 1
        # Sent on the current connection, by id.
        self.pending: dict[int, Call] = {}
        # Waiting for a connection.
        self.waiting: list[Call] = []

    async def call(self, method: str, params: dict[str, Any], timeout: float | None) -> Any:
        """Sent now if a connection is open, else when one is: waits
        `timeout` seconds for it at most (None: as long as it takes)."""
        call = Call(method, params, method in READS, 0, timeout)
        if self._gw.state == "open":
            self.send(call)
        else:
            self.wait(call)
        try:
            return await call.future
        finally:
            call.disarm()
            if call in self.waiting:
                # Its caller went away (cancelled): nobody wants it sent.
                self.waiting.remove(call)

    async def call_on(self, generation: int, method: str, params: dict[str, Any]) -> Any:
        """Only on connection `generation`, and never sent again."""
        if self._gw.state != "open" or self._gw.generation != generation:
            raise ConnectionLost(method)
        call = Call(method, params, False, generation)
        self.send(call)
        return await call.future

    def wait(self, call: Call) -> None:
        self.waiting.append(call)
        self.arm(call)

    def arm(self, call: Call) -> None:
        if call.timeout is None or call.timer is not None:
            return
        loop = asyncio.get_running_loop()
        since = loop.time()

        def expire() -> None:
            call.timer = None
            if call in self.waiting:
                self.waiting.remove(call)
                call.reject(self._gw._unreachable(since))

        call.timer = loop.call_later(call.timeout, expire)

    def send(self, call: Call) -> None:
        call.disarm()
        rid = self._next_id
        self._next_id += 1
        frame = json.dumps({"jsonrpc": "2.0", "id": rid, "method": call.method, "params": call.params})
        limit = (self._gw.ready or {}).get("limits", {}).get("max_frame_bytes")
        if isinstance(limit, int) and len(frame) > limit // 4 and len(frame.encode()) > limit:
            # The gateway would answer 4013 with `id` null: no way to tell
            # which request it was, so refuse it here with the same code.
            call.reject(RpcError(call.method, {
                "code": int(Code.FRAME_TOO_LARGE),
                "message": f"the request is larger than the gateway's max_frame_bytes ({limit})",
            }))
            return
        outbox = self._gw._outbox
        if outbox is None or self._gw.state != "open":
            if call.generation:
                call.reject(ConnectionLost(call.method))
            else:
                self.wait(call)
            return
        self.pending[rid] = call
        outbox.put_nowait(frame)

    def answered(self, f: dict[str, Any]) -> bool:
        """An answer (`f["id"]` of a pending call); whether it was one."""
        call = self.pending.pop(f["id"], None) if type(f.get("id")) is int else None
        if call is None:
            return False
        if "error" in f:
            call.reject(RpcError(call.method, f["error"] or {}))
        else:
            call.resolve(f.get("result"))
        return True

    def opened(self) -> None:
        """A connection opened: what waited goes out on it."""
        waiting, self.waiting = self.waiting, []
        for call in waiting:
            self.send(call)

    def dropped(self) -> None:
        """The connection dropped: reads in flight wait for the next one,
        the rest fail."""
        again: list[Call] = []
        for call in self.pending.values():
            if call.retry and not call.generation:
                again.append(call)
            else:
                call.reject(ConnectionLost(call.method))
        self.pending.clear()
        self.waiting = again + self.waiting
        for call in again:
            self.arm(call)

    def fail(self, err: BaseException) -> None:
        """The end: everything raises `err`."""
        for call in list(self.pending.values()) + self.waiting:
            call.disarm()
            call.reject(err)
        self.pending.clear()
        self.waiting = []
