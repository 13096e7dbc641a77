"""What a turn function yields, besides plain `str` text (a `message.delta`).

Each item becomes one host `event` frame (PROTOCOL Part 2) for the turn,
except `Usage` and `Final`, which shape the turn's `turn.end`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Reasoning:
    """`reasoning.delta`: reasoning text, not part of the reply."""

    text: str


@dataclass(frozen=True)
class ToolStart:
    """`tool.start`: a tool call begins (durable; clients see its args)."""

    name: str
    args: Any = field(default_factory=dict)
    tool_id: str = "tool_1"


@dataclass(frozen=True)
class ToolComplete:
    """`tool.complete`: a tool call's result (any JSON)."""

    name: str
    result: Any = None
    is_error: bool = False
    tool_id: str = "tool_1"


@dataclass(frozen=True)
class Todos:
    """`todo.updated`: the full list, as `{"id", "text", "status"}` dicts or
    plain strings (numbered from "1", status "pending"). The gateway numbers
    the revisions."""

    items: list[Any]

    def payload(self) -> dict[str, Any]:
        items = []
        for i, item in enumerate(self.items, start=1):
            if isinstance(item, str):
                items.append({"id": str(i), "text": item, "status": "pending"})
            else:
                items.append(dict(item))
        return {"items": items, "revision": 1}


@dataclass(frozen=True)
class Status:
    """`status.update` `{"kind", "text"?}`."""

    kind: str
    text: str | None = None


@dataclass(frozen=True)
class Usage:
    """Token counts for the turn's `turn.end` (passed on in message.complete)."""

    counts: dict[str, Any]


@dataclass(frozen=True)
class Final:
    """The reply's whole text, when it is not simply the text yielded so
    far (the host's text wins, docs/PROTOCOL.md Part 4)."""

    text: str


class TurnError(Exception):
    """Raise it from a turn function to fail the turn with `turn.error`
    (`reason` defaults to `engine_error`, not recoverable)."""

    def __init__(self, message: str, reason: str = "engine_error") -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
