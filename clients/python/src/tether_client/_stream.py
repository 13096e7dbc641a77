"""`session.events()`: one reader's position in a session's event log.

Each stream has its own cursor (the last durable seq it yielded) and a
bounded queue of what the session took in live. Whatever the stream lacks,
because it started after those events were taken in, fell behind past its
bound, or the store changed, it reads from the store with
`session.events.since`, paging through `has_more`. Each queued item
remembers the seq it came after, so a transient delta is yielded only after
every durable event that preceded it."""

from __future__ import annotations

import asyncio
import math
from collections import deque
from typing import TYPE_CHECKING, Any

from ._errors import GatewayClosed

if TYPE_CHECKING:
    from ._session import Session

Event = dict[str, Any]

DEFAULT_MAX_BUFFERED = 10000
SINCE_PAGE = 1000


class EventStream:
    """Async iterator of a session's events: durable ones exactly once in
    seq order, transient deltas while connected, and `{"type": "reset"}`
    items when what was yielded no longer applies (a new epoch, or events
    removed by retention)."""

    def __init__(self, session: Session, since: int, max_buffered: int | None) -> None:
        self._session = session
        self.cursor = since
        self._max = max_buffered or DEFAULT_MAX_BUFFERED
        # ("ev", event, mark) taken in live, or ("marker", item, 0).
        self._queue: deque[tuple[str, Event, float]] = deque()
        # The same, read from the store: yielded before the queue.
        self._front: deque[tuple[str, Event, float]] = deque()
        self._wakeup: asyncio.Future[None] | None = None
        self._finished = False
        self._ended = False
        # The session's watermark when a cursor beyond it was last checked
        # against the store.
        self._checked_at = -1
        session._add_stream(self)

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Event:
        try:
            return await self._next()
        except StopAsyncIteration:
            self._finish()
            raise
        except GatewayClosed:
            self._finish()
            raise StopAsyncIteration from None
        except Exception:
            self._finish()
            raise

    async def aclose(self) -> None:
        self._finish()

    async def _next(self) -> Event:
        while True:
            if self._finished or self._ended:
                raise StopAsyncIteration
            if self._front:
                kind, item, _ = self._front.popleft()
                if kind == "marker":
                    if item["reason"] == "truncated":
                        self.cursor = max(self.cursor, item["upto"])
                    return item
                if item["seq"] > self.cursor:
                    return self._yield(item)
                continue
            if self._queue:
                kind, item, mark = self._queue[0]
                if kind == "marker":
                    self._queue.popleft()
                    return item
                seq = item.get("seq")
                if isinstance(seq, int) and seq <= self.cursor:
                    self._queue.popleft()
                    continue
                need = seq - 1 if isinstance(seq, int) else mark
                if self.cursor < need:
                    await self._fill(need)
                    continue
                self._queue.popleft()
                return self._yield(item) if isinstance(seq, int) else item
            s = self._session
            if s._failure is not None:
                raise s._failure
            if s._known and self.cursor > s.watermark and self._checked_at != s.watermark:
                # Beyond all the session has: asked for with a `since` kept
                # from before the store went back (a restore). The store says.
                self._checked_at = s.watermark
                await self._fill(math.inf)
                continue
            if self.cursor < s.watermark:
                await self._fill(s.watermark)
                continue
            if s._closed and s._read_to_end:
                # Closed while we were not attached: the rest is in the store.
                if not await self._fill(math.inf):
                    raise StopAsyncIteration
                continue
            if s._shut_down:
                raise StopAsyncIteration
            self._wakeup = asyncio.get_running_loop().create_future()
            await self._wakeup

    def _yield(self, ev: Event) -> Event:
        self.cursor = ev["seq"]
        if ev.get("type") == "session.closed":
            self._ended = True
        return ev

    async def _fill(self, upto: float) -> bool:
        """Reads one page of the store after the cursor, up to `upto`;
        whether it found anything to yield. A range the store no longer has
        becomes a `reset` item, since it can never be yielded."""
        s = self._session
        start = self.cursor
        # No connect timeout: a stream follows its session through any outage.
        r = await s._gw._request(
            "session.events.since", {"session_id": s.id, "last_seen": start, "limit": SINCE_PAGE}, None
        )
        if self._finished or self.cursor != start:
            return False
        latest = r.get("latest_seq")
        if isinstance(latest, int) and latest < start:
            # The session's history went back below this cursor: what was
            # yielded after `latest_seq` is gone, and new events reuse the seqs.
            self.cursor = latest
            marker = {"type": "reset", "session_id": s.id, "reason": "rollback", "after": latest, "upto": start}
            self._front.append(("marker", marker, 0))
            return True
        events = [ev for ev in r["events"] if start < ev["seq"] <= upto]
        first = events[0]["seq"] if events else upto + 1
        if math.isfinite(first) and first > start + 1:
            marker = {"type": "reset", "session_id": s.id, "reason": "truncated", "after": start, "upto": int(first) - 1}
            self._front.append(("marker", marker, 0))
        for ev in events:
            self._front.append(("ev", ev, 0))
        return bool(self._front)

    # --- from the session ---

    def _push(self, ev: Event, mark: int) -> None:
        if self._finished:
            return
        if len(self._queue) >= self._max:
            # The reader is far behind: stop holding what it has not read;
            # it reads the store from its cursor instead.
            self._queue.clear()
        self._queue.append(("ev", ev, mark))
        self._wake()

    def _rolled_back(self, marker: Event, latest: int) -> None:
        """The session's history went back to `latest`: what this stream
        holds may be of the lost part (durable events up to `latest` are
        read from the store again); if it yielded beyond `latest`, it says
        so before the new events that reuse those seqs."""
        self._queue.clear()
        self._front.clear()
        if self.cursor > latest:
            self._queue.append(("marker", dict(marker, upto=self.cursor), 0))
            self.cursor = latest
        self._ended = False
        self._wake()

    def _reset(self, marker: Event) -> None:
        self._queue = deque([("marker", marker, 0)])
        self._front.clear()
        self.cursor = 0
        self._ended = False
        self._wake()

    def _wake(self) -> None:
        w, self._wakeup = self._wakeup, None
        if w is not None and not w.done():
            w.set_result(None)

    def _finish(self) -> None:
        if not self._finished:
            self._finished = True
            self._session._remove_stream(self)
            self._wake()
