"""How long to wait before the next reconnect attempt: exponential, capped,
with "equal jitter" (between half and all of the ceiling), so the clients
dropped by one gateway restart do not all come back in the same instant."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Backoff:
    """Reconnect delays: `initial` seconds doubling per failed attempt up to
    `maximum`; each delay is between half and all of its ceiling."""

    initial: float = 0.25
    maximum: float = 5.0

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """`attempt` counts failed attempts since the last open connection."""
        ceiling = min(self.maximum, self.initial * 2 ** min(attempt, 30))
        return float(ceiling / 2 + rand() * (ceiling / 2))
