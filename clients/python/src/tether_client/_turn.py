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

    def reset(self, epoch: str) -> None:
        self.fail(ResetError(epoch, "epoch"))

    async def result(self) -> dict[str, Any]:
        return await asyncio.shield(self._result)

    async def changed(self) -> None:
        await self._changed.wait()

    def _wake(self) -> None:
        self._changed.wake()

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


class Turn:
    """A submitted prompt: `async for d in turn.deltas()`, `await turn.result()`."""

    def __init__(self, session: Session, record: TurnRecord, reply: dict[str, Any]) -> None:
        self.session = session
        self._record = record
        self.id: str = reply["turn_id"]
        self.trace_id: str = reply.get("trace_id", "")
        #: "started", or "queued" behind the running turn.
        self.status: str = reply.get("status", "started")

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
