"""How a session takes in its events: every durable event once, in seq
order, whatever happens to the connection (PROTOCOL 1.4 session.resume,
1.5), and how each one reaches the session's streams and turns. Kept apart
from the attaching (`_attach`) and the application's methods (`_session`)
because these are the exactly-once rules, and they read best in one place.

The rules, the protocol's own:
- the watermark is the highest seq taken in; a durable event at or below it
  is a duplicate and dropped, the next one must be watermark + 1;
- every (re)connect resumes with `last_seen` = the watermark, and live
  frames that arrive while that resume is in flight are held and taken in
  after its replay;
- a `resync` (more missed than a resume replays) and a gap are filled by
  paging `session.events.since` through `has_more`;
- a changed epoch (another store) empties the watermark: every stream is
  told (a `reset` item) and starts over from the new store;
- a resume whose `latest_seq` is below the watermark, in the same epoch,
  means the session's history went back (a store restored from an older
  copy; the gateway answers it as a `resync`): the events after
  `latest_seq` that were taken in are gone, and the store's next events
  reuse their seqs. The watermark goes back to `latest_seq`, every stream
  that yielded beyond it is told (a `reset` item, reason `rollback`), and
  the new events are taken in as new, never dropped as duplicates of the
  lost ones."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ._turn import TurnRecord, TurnRecords

if TYPE_CHECKING:
    from ._gateway import Gateway
    from ._stream import EventStream

Event = dict[str, Any]

FILL_PAGE = 1000


class Delivery:
    """The base of Session: its event log's state and rules."""

    def __init__(self, gw: Gateway, session_id: str) -> None:
        self._gw = gw
        self.id = session_id
        #: The latest SessionInfo known (from resumes and `session.info` events).
        self.info: dict[str, Any] | None = None
        #: The latest todo snapshot (`{"items", "revision"}`).
        self.todos: dict[str, Any] | None = None
        #: The highest durable seq taken in.
        self.watermark = 0
        self._known = False
        # Whether to be attached on every connection (set by first use,
        # cleared by the session's end).
        self._wanted = False
        # Live frames wait in `_held` while `_holding` (a resume or a gap
        # fill in flight), to be taken in after what the store fills in.
        self._holding = False
        self._held: list[Event] = []
        self._filling = False
        self._gap_task: asyncio.Task[None] | None = None
        self._closed = False
        # Closed while we were not attached: streams read the rest from the store.
        self._read_to_end = False
        self._streams: set[EventStream] = set()
        self._turns = TurnRecords()
        # `prompt.submit` calls in flight: meanwhile every turn's events are
        # kept, since the turn may be one of theirs, not named yet.
        self._submitting = 0

    # --- for streams ---

    def _add_stream(self, stream: EventStream) -> None:
        self._streams.add(stream)
        # A stream that starts mid-turn gets the text so far first.
        for rec in self._turns.values():
            if rec.complete is None and rec.text.bytes > 0:
                stream._push(rec.synthetic_delta(self.id, 0, rec.text.text), self.watermark)

    def _remove_stream(self, stream: EventStream) -> None:
        self._streams.discard(stream)

    # --- the log ---

    def _rolled_back(self, latest: int) -> None:
        """The session's history went back to `latest` (see the rules above)."""
        seen = self.watermark
        self.watermark = latest
        # Whatever closed it was lost too, or the resume would have said 4002.
        self._closed = False
        self._read_to_end = False
        self._turns.rolled_back(self._gw.epoch or "", latest)
        marker = {"type": "reset", "session_id": self.id, "reason": "rollback", "after": latest, "upto": seen}
        for s in self._streams:
            s._rolled_back(marker, latest)
        self._gw._emit(
            "reset",
            {"reason": "rollback", "session_id": self.id, "epoch": self._gw.epoch, "after": latest, "upto": seen},
        )

    async def _fill(self, generation: int, upto: int) -> None:
        """Takes in events of `session.events.since` until the watermark
        reaches `upto` (or the store has no more)."""
        while self.watermark < upto:
            r = await self._gw._call_on(
                generation,
                "session.events.since",
                {"session_id": self.id, "last_seen": self.watermark, "limit": FILL_PAGE},
            )
            if generation != self._gw.generation:
                return
            before = self.watermark
            # Not beyond `upto`: what follows is held, transient frames among
            # it, and must be taken in in the order it came.
            for ev in r["events"]:
                if ev["seq"] <= upto:
                    self._accept(ev, True)
            if not r.get("has_more") or self.watermark == before:
                return

    def _fill_gap(self) -> None:
        """A durable event beyond watermark + 1 arrived live: hold it (and
        what follows) until the events between are read from the store."""
        if self._filling:
            return
        self._filling = True
        generation = self._gw.generation
        upto = next(ev["seq"] for ev in self._held if isinstance(ev.get("seq"), int)) - 1

        async def fill() -> None:
            try:
                await self._fill(generation, upto)
            except Exception:  # noqa: BLE001 - the connection went; the next resume replays
                return
            finally:
                self._filling = False
            if generation == self._gw.generation:
                self._release()

        # asyncio keeps only weak references to tasks: hold this one.
        self._gap_task = asyncio.get_running_loop().create_task(fill())

    def _release(self) -> None:
        self._holding = False
        held, self._held = self._held, []
        for ev in held:
            self._accept(ev, False)

    def _accept(self, ev: Event, direct: bool = False) -> None:
        """`direct`: from a replay or a fill, in order by construction."""
        if self._holding and not direct:
            self._held.append(ev)
            return
        seq = ev.get("seq")
        if isinstance(seq, int):
            if seq <= self.watermark:
                return
            if seq > self.watermark + 1 and not direct:
                self._holding = True
                self._held.append(ev)
                self._fill_gap()
                return
            self.watermark = seq
        self._deliver(ev)

    # --- what an event taken in does ---

    def _deliver(self, ev: Event) -> None:
        p = ev.get("payload") or {}
        rec: TurnRecord | None = None
        out = ev
        kind = ev.get("type")
        turn_id = ev.get("turn_id")
        if isinstance(turn_id, str):
            rec = self._turns.get(turn_id, ev.get("trace_id"))
            fresh, missing = rec.take(ev, self.id)
            if fresh is None:
                return
            if missing is not None:
                # Before the complete itself, whose seq the watermark already holds.
                self._fanout(missing, rec, ev["seq"] - 1)
            out = fresh
        if kind == "todo.updated":
            self._set_todos(p)
        elif kind == "session.info":
            self.info = dict(self.info or {}, **p)
        elif kind == "session.closed":
            self._closed = True
            self._wanted = False
        self._fanout(out, rec, self.watermark)
        if rec is not None and kind == "message.complete":
            rec.done(p)
            self._turns.forget()

    def _fanout(self, ev: Event, rec: TurnRecord | None, mark: int) -> None:
        """`mark`: the durable seq this event comes after."""
        for s in self._streams:
            s._push(ev, mark)
        if rec is not None:
            rec.push(ev, self._submitting > 0)

    def _active_turn(self, active: Any) -> None:
        """A resume's running turn: its text so far, as the part we lack."""
        if not isinstance(active, dict) or not isinstance(active.get("turn_id"), str):
            return
        rec = self._turns.get(active["turn_id"], active.get("trace_id"))
        missing = rec.rest(self.id, active.get("text"))
        if missing is not None:
            self._fanout(missing, rec, self.watermark)

    def _set_todos(self, todos: dict[str, Any]) -> None:
        revision = todos.get("revision")
        if not isinstance(revision, int):
            return
        # An older snapshot than the one held (PROTOCOL 1.10) is stale.
        if self.todos is None or revision > self.todos["revision"]:
            self.todos = {"items": todos.get("items") or [], "revision": revision}
