"""Wake-ups: tasks that wait for "something changed" on an object (a
session's attachment, a turn's events) without polling.

One list of futures per object; `wait()` parks on a fresh one, `wake()`
resolves them all. A waiter always re-checks what it waits for after
waking, so a wake-up that finds nothing new costs one loop.
"""

from __future__ import annotations

import asyncio


class Wakeup:
    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    async def wait(self) -> None:
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        await fut

    def wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)
