"""Write a tether compute host (docs/PROTOCOL.md Part 2) in Python: one async
generator per turn, yielding text (`str`) and host items; the library
speaks the rest of the protocol.

    from tether_client.host import run

    async def reply(turn):
        for word in turn.prompt.split():
            yield word + " "

    run(reply)
"""

from ._host import ControlRequest, Host, TurnRequest, run, serve
from ._items import Final, Reasoning, Status, Todos, ToolComplete, ToolStart, TurnError, Usage

__all__ = [
    "ControlRequest",
    "Final",
    "Host",
    "Reasoning",
    "Status",
    "Todos",
    "ToolComplete",
    "ToolStart",
    "TurnError",
    "TurnRequest",
    "Usage",
    "run",
    "serve",
]
