"""How a session stays attached: on every connection the gateway object
opens it resumes from its watermark (`session.resume` with `last_seen`),
holding live frames until the replay is in; a resume refused for a passing
reason is tried again with backoff, and the gateway object's news (created,
a new connection, a drop, another store, the end) lands here. Kept apart
from the exactly-once rules it relies on (`_delivery`) and from the methods
the application calls (`_session`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ._delivery import Delivery, Event
from ._errors import Code, RpcError
from ._wakeup import Wakeup

if TYPE_CHECKING:
    from ._gateway import Gateway

# First retry of a resume refused for a passing reason, doubling to the cap.
ATTACH_RETRY_S = 0.5


class Attachment(Delivery):
    """The base of Session: its attachment, connection after connection."""

    def __init__(self, gw: Gateway, session_id: str) -> None:
        super().__init__(gw, session_id)
        # The connection (generation) this session is attached on, 0 if
        # none, and the resume in flight.
        self._attached_on = 0
        self._attaching: tuple[int, asyncio.Task[None]] | None = None
        self._failure: BaseException | None = None
        self._shut_down = False
        # Who waits for the attachment (`_attached`).
        self._changed = Wakeup()
        self._retry_s = ATTACH_RETRY_S
        self._retry: asyncio.TimerHandle | None = None

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
        """Another store (see `_delivery`'s rules): the watermark means
        nothing there."""
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

