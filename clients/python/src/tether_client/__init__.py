"""tether-client: the client side of tether's protocol (docs/PROTOCOL.md
Part 1) on asyncio, and `tether_client.host` for compute hosts (Part 2).
See docs/CLIENTS.md."""

from ._backoff import Backoff
from ._errors import AuthError, Code, ConnectionLost, GatewayClosed, ResetError, RpcError, TetherError
from ._gateway import Gateway, connect, ws_url
from ._session import Session
from ._stream import EventStream
from ._text import Delta
from ._turn import Turn

codes = Code

__all__ = [
    "AuthError",
    "Backoff",
    "Code",
    "ConnectionLost",
    "Delta",
    "EventStream",
    "Gateway",
    "GatewayClosed",
    "ResetError",
    "RpcError",
    "Session",
    "TetherError",
    "Turn",
    "codes",
    "connect",
    "ws_url",
]
