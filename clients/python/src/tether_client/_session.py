"""One session as the application sees it: every durable event once, in seq
order, whatever happens to the connection, plus its running turns' text.
This module holds what the application calls; how the session stays
attached across connections is `_attach`, and the exactly-once rules it
takes its events in by are `_delivery` (its bases, one concept each)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from ._attach import Attachment
from ._delivery import Event
from ._errors import ConnectionLost
from ._stream import EventStream
from ._turn import Turn

if TYPE_CHECKING:
    from ._gateway import Gateway

log = logging.getLogger("tether_client")


class Session(Attachment):
    """A session handle: `events()`, `submit()`, `interrupt()`, ... It
    attaches when first used and re-attaches after every reconnect."""

    def __init__(self, gw: Gateway, session_id: str) -> None:
        super().__init__(gw, session_id)
        self._presence_listeners: list[Callable[[dict[str, Any]], None]] = []

    @property
    def latest_seq(self) -> int:
        return self.watermark

    def events(self, since: int = 0, max_buffered: int | None = None) -> EventStream:
        """Every durable event with seq > `since`, once each, in order, then
        live ones as they come, with the transient deltas of running turns."""
        stream = EventStream(self, since, max_buffered or self._gw._max_buffered)
        self._want()
        return stream

    async def submit(
        self,
        text: str,
        *,
        multitask: str | None = None,
        drop_queued: bool = False,
        dedupe_key: str | None = None,
    ) -> Turn:
        """Sends a prompt. `multitask` ("enqueue", "reject", "interrupt",
        "rollback"), `drop_queued` (with "interrupt") and `dedupe_key` are
        `prompt.submit`'s (PROTOCOL 1.4)."""
        params: dict[str, Any] = {"session_id": self.id, "text": text}
        if multitask is not None:
            params["multitask"] = multitask
        if drop_queued:
            params["drop_queued"] = True
        if dedupe_key is not None:
            params["dedupe_key"] = dedupe_key
        await self._attached()
        self._submitting += 1
        try:
            r = await self._gw.call("prompt.submit", params)
        finally:
            self._submitting -= 1
        rec = self._turns.get(r["turn_id"], r.get("trace_id"))
        rec.keep = True
        return Turn(self, rec, r)

    async def interrupt(self) -> dict[str, Any]:
        r: dict[str, Any] = await self._gw.call("session.interrupt", {"session_id": self.id})
        return r

    async def compress(self, focus: str | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"session_id": self.id}
        if focus is not None:
            params["focus"] = focus
        r: dict[str, Any] = await self._gw.call("session.compress", params)
        return r

    async def snapshot(self) -> dict[str, Any]:
        """The session as it stands (`messages`, `active_turn`, `todos`),
        without attaching."""
        r: dict[str, Any] = await self._gw.call("session.resume", {"session_id": self.id, "attach": False})
        return r

    async def branch(self, upto_seq: int | None = None, title: str | None = None) -> Session:
        params: dict[str, Any] = {"session_id": self.id}
        if upto_seq is not None:
            params["upto_seq"] = upto_seq
        if title is not None:
            params["title"] = title
        r = await self._gw.call("session.branch", params)
        return self._gw.session(r["session"]["session_id"])

    async def close(self) -> dict[str, Any]:
        r: dict[str, Any] = await self._gw.call("session.close", {"session_id": self.id})
        return r

    async def presence(self) -> list[dict[str, Any]]:
        """Who is attached now, on every node: `[{"peer_id", "profile",
        "client", "transport", "node", "attached_at"}]` (PROTOCOL Part 4,
        "Presence")."""
        r: dict[str, Any] = await self._gw.call("session.presence", {"session_id": self.id})
        peers: list[dict[str, Any]] = r["peers"]
        return peers

    def on_presence(self, listener: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """Calls `listener({"type": "joined"|"left", "peers", "ts"})` for each
        presence event while the session is attached (they are transient:
        after a reconnect, read `presence()` for the snapshot); returns a
        function that stops it. Key entries by profile and
        `client["instance"]` when there is one: a reconnect keeps the
        instance, changes the peer id and is not told."""
        self._presence_listeners.append(listener)
        self._want()

        def off() -> None:
            if listener in self._presence_listeners:
                self._presence_listeners.remove(listener)

        return off

    async def detach(self) -> None:
        """Stops following the session: its streams end, and it is no longer
        re-attached on reconnects."""
        self._wanted = False
        self._attached_on = 0
        for s in list(self._streams):
            s._finish()
        if self._gw.state == "open":
            try:
                await self._gw.call("session.detach", {"session_id": self.id})
            except ConnectionLost:
                pass

    # --- from the gateway object ---

    def _on_presence(self, ev: Event) -> None:
        payload = ev.get("payload") or {}
        change = {
            "type": "joined" if ev.get("type") == "presence.joined" else "left",
            "peers": payload.get("peers") or [],
            "ts": ev.get("ts"),
        }
        for listener in list(self._presence_listeners):
            try:
                listener(change)
            except Exception:  # noqa: BLE001 - a listener never breaks the bookkeeping
                log.exception("a presence listener raised")
