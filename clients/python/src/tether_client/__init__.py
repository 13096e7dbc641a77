"""tether-client: the client side of tether's protocol (docs/PROTOCOL.md
Part 1) on asyncio, and `tether_client.host` for compute hosts (Part 2).
See docs/CLIENTS.md."""

from ._backoff import Backoff
from ._connection import TokenProvider
from ._decode import MAX_DEPTH, TOO_DEEP
from ._errors import AuthError, Code, ConnectionLost, GatewayClosed, ResetError, RpcError, TetherError, Unreachable
from ._gateway import DEFAULT_CONNECT_TIMEOUT, Gateway, connect
from ._options import ws_url
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
    "DEFAULT_CONNECT_TIMEOUT",
    "Delta",
    "EventStream",
    "Gateway",
    "GatewayClosed",
    "MAX_DEPTH",
    "ResetError",
    "RpcError",
    "Session",
    "TokenProvider",
    "TOO_DEEP",
    "TetherError",
    "Turn",
    "Unreachable",
    "codes",
    "connect",
    "ws_url",
]
