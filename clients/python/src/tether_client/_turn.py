"""A turn (one prompt and its reply). The session keeps a record per turn it
sees, built from the same events its streams get; a Turn is the
application's handle on one record: its deltas, its events, its end.

`result()` is the turn's `message.complete` payload whatever ended it, since
the protocol promises exactly one per accepted turn and the library replays
it after any reconnect or gateway restart."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from ._errors import ResetError
from ._text import Delta, TurnText
from ._wakeup import Wakeup

if TYPE_CHECKING:
    from ._session import Session

Event = dict[str, Any]

# Completed turns remembered, so that a submit whose answer comes after its
# turn's events still finds them.
DONE_TURNS = 64


class TurnRecord:
    def __init__(self, turn_id: str) -> None:
        self.turn_id = turn_id
        self.trace_id: str | None = None
        self.text = TurnText()
        self.reasoning = TurnText()
        # The turn's events as taken in, kept while someone may want them:
        # a Turn object, or a submit whose answer has not come yet.
        self.events: list[Event] = []
        self.keep = False
        #: The seq of its first durable event taken in.
        self.first_seq: int | None = None
        self.complete: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self._changed = Wakeup()
        self._result: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    def push(self, ev: Event, keep_anyway: bool) -> None:
        seq = ev.get("seq")
        if self.first_seq is None and isinstance(seq, int):
            self.first_seq = seq
        if self.keep or keep_anyway:
            self.events.append(ev)
        self._wake()

    def done(self, payload: dict[str, Any]) -> None:
        self.complete = payload
        if not self._result.done():
            self._result.set_result(payload)
        self._wake()

    def fail(self, err: BaseException) -> None:
        if self.complete is None and self.error is None:
            self.error = err
            if not self._result.done():
                self._result.set_exception(err)
                # Nobody may ever ask; that is not an unhandled error.
                self._result.exception()
            self._wake()

    async def result(self) -> dict[str, Any]:
        return await asyncio.shield(self._result)

    async def changed(self) -> None:
        await self._changed.wait()

    def _wake(self) -> None:
        self._changed.wake()

    def take(self, ev: Event, session_id: str) -> tuple[Event | None, Event | None]:
        """What of `ev` (an event of this turn) is new: the event to pass
        on (a delta trimmed to the bytes not held yet; None: nothing new),
        and for a message.complete its text that never came as deltas
        (dropped, or sent while we were away), as one last delta, so that
        the deltas add up to the text."""
        p = ev.get("payload") or {}
        kind = ev.get("type")
        if kind in ("message.delta", "reasoning.delta"):
            text = self.text if kind == "message.delta" else self.reasoning
            piece = None if self.complete is not None else text.delta(p.get("offset"), p.get("text"))
            if piece is None:
                return None, None
            return dict(ev, payload=dict(p, text=piece.text, offset=piece.offset)), None
        if kind == "message.complete":
            return ev, self.rest(session_id, p.get("text"))
        return ev, None

    def rest(self, session_id: str, text: Any) -> Event | None:
        """The part of the turn's whole `text` not held yet, as a delta."""
        piece = None if self.complete is not None else self.text.rest(text)
        return None if piece is None else self.synthetic_delta(session_id, piece.offset, piece.text)

    def synthetic_delta(self, session_id: str, offset: int, text: str) -> Event:
        ev: Event = {
            "type": "message.delta",
            "session_id": session_id,
            "turn_id": self.turn_id,
            "ts": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
            "payload": {"text": text, "offset": offset},
        }
        if self.trace_id:
            ev["trace_id"] = self.trace_id
        return ev


class TurnRecords:
    """A session's turn records, by turn id."""

    def __init__(self) -> None:
        self._by_id: dict[str, TurnRecord] = {}

    def values(self) -> list[TurnRecord]:
        return list(self._by_id.values())

    def get(self, turn_id: str, trace_id: Any) -> TurnRecord:
        """The record of `turn_id`, made when first seen."""
        rec = self._by_id.get(turn_id)
        if rec is None:
            rec = TurnRecord(turn_id)
            self._by_id[turn_id] = rec
        if rec.trace_id is None and isinstance(trace_id, str):
            rec.trace_id = trace_id
        return rec

    def forget(self) -> None:
        """Drops the oldest completed turns beyond DONE_TURNS (a Turn keeps
        its own record alive)."""
        done = [tid for tid, rec in self._by_id.items() if rec.complete is not None]
        for tid in done[: max(0, len(done) - DONE_TURNS)]:
            del self._by_id[tid]

    def fail_all(self, err: BaseException) -> None:
        """Every turn not ended fails with `err`."""
        for rec in self._by_id.values():
            rec.fail(err)

    def reset(self, epoch: str) -> None:
        """Another store: no turn of this one can be reported on."""
        self.fail_all(ResetError(epoch, "epoch"))
        self._by_id.clear()

    def rolled_back(self, epoch: str, latest: int) -> None:
        """The session's history went back to `latest`: a turn not ended
        whose events were all lost will never be heard of again; one with an
        event still in the store is ended by the gateway (its restart ends
        every turn it finds running)."""
        err = ResetError(epoch, "rollback")
        for tid, rec in list(self._by_id.items()):
            if rec.complete is None and (rec.first_seq is None or rec.first_seq > latest):
                rec.fail(err)
                del self._by_id[tid]


class Turn:
    """A submitted prompt: `async for d in turn.deltas()`, `await turn.result()`."""

    def __init__(self, session: Session, record: TurnRecord, reply: dict[str, Any]) -> None:
        self.session = session
        self._record = record
        self.id: str = reply["turn_id"]
        self.trace_id: str = reply.get("trace_id", "")
        #: "started", or "queued" behind the running turn.
        self.status: str = reply.get("status", "started")
        # The `dedupe_key` matched an earlier prompt's: this is that turn.
        self.duplicate: bool = reply.get("duplicate") is True

    async def result(self) -> dict[str, Any]:
        """The `message.complete` payload: `{"text", "status", "failure_reason"?, ...}`."""
        return await self._record.result()

    def events(self) -> AsyncIterator[Event]:
        """Every event of this turn, from its first through its message.complete."""
        return self._iterate(lambda ev: True, lambda ev: ev)

    def deltas(self) -> AsyncIterator[Delta]:
        """The assistant text as pieces: each byte once, in order, adding up
        to the message.complete text."""
        return self._iterate(
            lambda ev: ev.get("type") == "message.delta",
            lambda ev: Delta(ev["payload"]["text"], ev["payload"]["offset"]),
        )

    async def interrupt(self) -> dict[str, Any]:
        return await self.session.interrupt()

    async def _iterate(self, wanted: Callable[[Event], bool], make: Callable[[Event], Any]) -> AsyncIterator[Any]:
        rec = self._record
        index = 0
        while True:
            while index < len(rec.events):
                ev = rec.events[index]
                index += 1
                if wanted(ev):
                    yield make(ev)
            if rec.complete is not None:
                return
            if rec.error is not None:
                raise rec.error
            await rec.changed()
