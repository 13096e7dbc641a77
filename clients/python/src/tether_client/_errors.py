"""The errors an application gets, each with what it needs to decide: the
protocol's code for a refusal (PROTOCOL 1.6), whether a request may or may
not have reached the gateway, or that retrying is pointless."""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class Code(IntEnum):
    """The gateway's error codes (PROTOCOL 1.6)."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    SESSION_NOT_FOUND = 4001
    SESSION_CLOSED = 4002
    SESSION_BUSY = 4009
    FRAME_TOO_LARGE = 4013
    RATE_LIMITED = 4029
    HANDOFF_CONFLICT = 4090
    TURN_IN_PROGRESS = 4091
    RESUME_TOO_LARGE = 4130
    HOST_UNAVAILABLE = 5019
    STORAGE_FULL = 5070
    STORAGE_WRITE_FAILED = 5071
    STORAGE_UNAVAILABLE = 5072


class TetherError(Exception):
    """Base class of everything this library raises on its own account."""


class RpcError(TetherError):
    """The gateway answered with an error; the request changed nothing."""

    def __init__(self, method: str, error: dict[str, Any]) -> None:
        code = error.get("code")
        self.method = method
        self.code: int = code if isinstance(code, int) else int(Code.INTERNAL_ERROR)
        self.message: str = str(error.get("message") or f"error {self.code}")
        self.data: Any = error.get("data")
        super().__init__(f"{method} failed: {self.message} ({self.code})")


class ConnectionLost(TetherError):
    """The connection dropped before the answer: the request may or may
    not have been executed. Not retried for the application, because a
    prompt sent twice runs twice; the session's events show what happened."""

    def __init__(self, method: str) -> None:
        self.method = method
        super().__init__(
            f"{method}: the connection dropped before the answer; "
            "it may or may not have been executed"
        )


class AuthError(TetherError):
    """The gateway refused the connection itself (401: token, 403: origin
    or address), or closed it because its token ended (4401) or was revoked
    (4403), and no new token could be had: a fixed token, a token provider
    that failed (`status` "provider") or gave the same token again.
    Retrying cannot help, so the gateway object closes."""

    def __init__(self, status: int | str, *, same_token: bool = False) -> None:
        self.status = status
        again = " (the token provider gave the same token again)" if same_token else ""
        if status == 401:
            text = f"the gateway refused the token (HTTP 401){again}: pass a valid token or a token provider"
        elif status == 4401:
            text = (
                f"the connection's token expired (close 4401){again}: "
                "pass a token provider (`token=async_function`) to stay connected"
            )
        elif status == 4403:
            text = f"the connection's token was revoked (close 4403){again}: sign in again"
        elif status == "provider":
            text = "the token provider failed to give a token (it raised, or returned no string)"
        else:
            text = f"the gateway refused the connection (HTTP {status})"
        super().__init__(text)


class GatewayClosed(TetherError):
    """The application closed the gateway object; what waited on it ends."""

    def __init__(self) -> None:
        super().__init__("the tether connection was closed by the application")


class Unreachable(TetherError):
    """The gateway could not be reached within the connect timeout
    (`connect_timeout`) while a request waited for a connection. The
    gateway object keeps trying (its "state" events say how); the request
    was never sent, so it changed nothing."""

    def __init__(self, url: str, waited: float, attempts: int, last: str) -> None:
        self.url = url
        self.attempts = attempts
        self.last = last
        tried = f"{attempts} attempt" + ("" if attempts == 1 else "s")
        super().__init__(
            f"could not connect to {url} within {waited:.1f} s ({tried}"
            + (f"; last: {last}" if last else "")
            + "); still trying: is the gateway running there?"
        )


class ResetError(TetherError):
    """What the library knew of a session no longer holds, so a turn of it
    can never be reported on: `reason` "epoch" when the gateway's store was
    replaced (a new epoch, PROTOCOL 1.3), "rollback" when the session's
    history went back (a store restored from an older copy: the events
    this turn had are gone)."""

    def __init__(self, epoch: str, reason: str = "epoch") -> None:
        self.epoch = epoch
        self.reason = reason
        if reason == "rollback":
            text = (
                "the session's history went back (the gateway's store is older than what "
                "this client saw); this turn was in the lost part and its end is unknowable"
            )
        else:
            text = f"the gateway's event store changed (new epoch {epoch}); this turn's end is unknowable"
        super().__init__(text)
