"""One session as the application sees it: every durable event once, in seq
order, whatever happens to the connection (PROTOCOL 1.4 session.resume,
1.5), plus its running turns' text.

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
import logging
from typing import TYPE_CHECKING, Any, Callable

from ._errors import Code, ConnectionLost, RpcError
from ._stream import EventStream
from ._turn import Turn, TurnRecord, TurnRecords
from ._wakeup import Wakeup

if TYPE_CHECKING:
    from ._gateway import Gateway

Event = dict[str, Any]

log = logging.getLogger("tether_client")

FILL_PAGE = 1000
# First retry of a resume refused for a passing reason, doubling to the cap.
ATTACH_RETRY_S = 0.5


class Session:
    """A session handle: `events()`, `submit()`, `interrupt()`, ... It
    attaches when first used and re-attaches after every reconnect."""

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
        self._wanted = False
        self._attached_on = 0
        self._attaching: tuple[int, asyncio.Task[None]] | None = None
        self._holding = False
        self._held: list[Event] = []
        self._filling = False
        self._gap_task: asyncio.Task[None] | None = None
        self._closed = False
        self._read_to_end = False
        self._failure: BaseException | None = None
        self._shut_down = False
        self._streams: set[EventStream] = set()
        self._turns = TurnRecords()
        self._submitting = 0
        self._changed = Wakeup()
        self._retry_s = ATTACH_RETRY_S
        self._retry: asyncio.TimerHandle | None = None
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

    # --- for streams and turns ---

    def _add_stream(self, stream: EventStream) -> None:
        self._streams.add(stream)
        # A stream that starts mid-turn gets the text so far first.
        for rec in self._turns.values():
            if rec.complete is None and rec.text.bytes > 0:
                stream._push(rec.synthetic_delta(self.id, 0, rec.text.text), self.watermark)

    def _remove_stream(self, stream: EventStream) -> None:
        self._streams.discard(stream)

    def _want(self) -> None:
        self._wanted = True
        gw = self._gw
        if gw.state == "open" and self._attached_on != gw.generation:
            self._attach(gw.generation)

    async def _attached(self) -> None:
        """Returns once attached on the current connection (or closed,
        where the gateway answers for itself); raises Unreachable when no
        connection opens within the connect timeout."""
        self._want()
        gw = self._gw
        timeout = gw._connect_timeout
        since = asyncio.get_running_loop().time()
        while True:
            if self._failure is not None:
                raise self._failure
            if gw._failure is not None:
                raise gw._failure
            if self._closed or (gw.state == "open" and self._attached_on == gw.generation):
                return
            if gw.state != "open":
                left = None if timeout is None else since + timeout - asyncio.get_running_loop().time()
                if left is not None and left <= 0:
                    raise gw._unreachable(since)
                await gw._when_open(left, since)
                continue
            await self._changed.wait()

    def _wake(self) -> None:
        self._changed.wake()
        for s in self._streams:
            s._wake()

    # --- from the gateway object ---

    def _created(self, r: dict[str, Any], generation: int, early: list[Event]) -> None:
        self.info = r["session"]
        self._known = True
        self.watermark = 0
        if generation:
            self._wanted = True
            self._attached_on = generation
        for ev in early:
            self._accept(ev)
        self._wake()

    def _connected(self, generation: int) -> None:
        self._retry_s = ATTACH_RETRY_S
        if self._wanted and not self._closed and self._failure is None:
            self._attach(generation)

    def _disconnected(self) -> None:
        self._holding = False
        self._held = []
        self._attaching = None
        self._wake()

    def _reset(self, epoch: str, previous: str) -> None:
        self.watermark = 0
        self._known = False
        self._closed = False
        self._read_to_end = False
        self._attached_on = 0
        self._holding = False
        self._held = []
        self.todos = None
        self._turns.reset(epoch)
        marker = {"type": "reset", "session_id": self.id, "reason": "epoch", "epoch": epoch, "previous_epoch": previous}
        for s in self._streams:
            s._reset(marker)
        self._wake()

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

    def _shutdown(self, err: BaseException, failed: bool) -> None:
        self._shut_down = True
        if self._retry is not None:
            self._retry.cancel()
        if failed:
            self._failure = err
        self._turns.fail_all(err)
        for s in list(self._streams):
            if failed:
                s._wake()
            else:
                s._finish()
        self._wake()

    def _fail(self, err: BaseException) -> None:
        self._failure = err
        self._wanted = False
        self._turns.fail_all(err)
        self._wake()

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

    def _on_live(self, ev: Event) -> None:
        if self._wanted:
            self._accept(ev, False)

    # --- attach and replay ---

    def _attach(self, generation: int) -> None:
        if self._attaching is not None and self._attaching[0] == generation:
            return
        task = asyncio.get_running_loop().create_task(self._resume(generation))
        self._attaching = (generation, task)

        def done(t: asyncio.Task[None]) -> None:
            if self._attaching is not None and self._attaching[1] is t:
                self._attaching = None

        task.add_done_callback(done)

    async def _resume(self, generation: int) -> None:
        gw = self._gw
        self._holding = True
        self._held = []
        params: dict[str, Any] = {"session_id": self.id, "omit_messages": True}
        if self._known:
            params["last_seen"] = self.watermark
        try:
            r = await gw._call_on(generation, "session.resume", params)
            if generation != gw.generation:
                return
            self.info = r["session"]
            latest = r.get("latest_seq")
            if not self._known:
                # First attach: the streams read the history from the store.
                self.watermark = r["latest_seq"]
                self._known = True
            elif isinstance(latest, int) and latest < self.watermark:
                self._rolled_back(latest)
            elif r.get("resync"):
                await self._fill(generation, r["latest_seq"])
            else:
                for ev in r.get("events") or []:
                    self._accept(ev, True)
        except Exception as err:  # noqa: BLE001 - sorted out in _refused
            if generation != gw.generation:
                return
            self._holding = False
            self._held = []
            self._refused(err, generation)
            return
        if generation != gw.generation:
            return
        self._active_turn(r.get("active_turn"))
        if r.get("todos"):
            self._set_todos(r["todos"])
        self._attached_on = generation
        self._retry_s = ATTACH_RETRY_S
        self._release()
        self._wake()

    def _refused(self, err: Exception, generation: int) -> None:
        if not isinstance(err, RpcError):
            return  # the connection went: the next one attaches again
        if err.code == Code.SESSION_CLOSED:
            # Closed while we were not attached: streams read the rest of its
            # events from the store, through its `session.closed`.
            self._closed = True
            self._read_to_end = True
            self._wanted = False
            self._wake()
        elif err.code == Code.SESSION_NOT_FOUND:
            self._fail(err)
        else:
            # Refused for now (4009 too many peers, storage trouble): again later.
            self._gw._emit("error", err)
            delay = self._retry_s
            self._retry_s = min(self._retry_s * 2, self._gw._backoff.maximum)

            def again() -> None:
                self._retry = None
                if self._wanted and not self._shut_down and generation == self._gw.generation:
                    self._attach(generation)

            self._retry = asyncio.get_running_loop().call_later(delay, again)

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
