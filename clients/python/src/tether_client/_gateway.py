"""The gateway object the application holds: one connection to a tether
gateway, kept open for it (`_connection`: it reconnects after every drop,
re-attaches every session in use and notices a changed store), and what the
application asks of it: calls, sessions, the list of them, the end.

Requests made while disconnected wait for the next connection, for the
connect timeout at most (then Unreachable, while the object keeps trying).
A request in flight when the connection drops is sent again only if it
changes nothing (a read); any other fails with ConnectionLost, since the
gateway may have executed it (a prompt sent twice would run twice). A
refused token closes the object at once with AuthError."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any, Callable, Generator

from ._backoff import Backoff
from ._connection import Connection, TokenProvider
from ._errors import Code, GatewayClosed, RpcError
from ._options import timeout_of, ws_url
from ._requests import READS
from ._session import Session

LIST_PAGE = 100

#: How long one connection attempt may take (TCP, the WebSocket upgrade and
#: the gateway's first frame), and how long a request waits for a
#: connection before it raises Unreachable, in seconds.
DEFAULT_CONNECT_TIMEOUT = 10.0


def connect(
    url: str,
    *,
    token: str | TokenProvider | None = None,
    profile: str | None = None,
    backoff: Backoff | None = None,
    max_buffered: int | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
    client: dict[str, Any] | None = None,
) -> Gateway:
    """A gateway connection: `async with connect(url) as gw:` (or
    `gw = await connect(url)`, then `await gw.close()`). A URL that cannot
    work raises ValueError here, at once. `client` ({"name", "device",
    "app", "meta", "instance"}) is who this object says it is to the other
    peers of its sessions (`gateway.hello`, on every connection).

    `token` is a fixed token, or a token provider: an async function (or a
    plain one) returning a token, called for every connect (reconnects and
    gateway restarts included), on `gateway.token_expiring` (the new token
    is sent with `gateway.refresh_token`, the connection lives on) and once
    after a refusal (close 4401 or 4403, HTTP 401): only a new token is
    tried, else the object closes with AuthError."""
    return Gateway(
        url,
        token=token,
        profile=profile,
        backoff=backoff,
        max_buffered=max_buffered,
        connect_timeout=connect_timeout,
        client=client,
    )


class Gateway(Connection):
    def __init__(
        self,
        url: str,
        *,
        token: str | TokenProvider | None = None,
        profile: str | None = None,
        backoff: Backoff | None = None,
        max_buffered: int | None = None,
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
        client: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            ws_url(url),
            _describe(client),
            timeout_of(connect_timeout),
            token=token,
            profile=profile,
            backoff=backoff or Backoff(),
        )
        self._max_buffered = max_buffered

    # --- lifecycle ---

    async def __aenter__(self) -> Gateway:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __await__(self) -> Generator[Any, None, Gateway]:
        async def started() -> Gateway:
            return self.start()

        return started().__await__()

    async def close(self) -> None:
        """Closes for good: streams finish, calls and turns raise GatewayClosed."""
        if self.state == "closed":
            return
        self._shutdown(GatewayClosed(), failed=False)
        ws, self._ws = self._ws, None
        if ws is not None:
            await ws.close()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - ending anyway
                pass

    def on(self, name: str, listener: Callable[[Any], None]) -> Callable[[], None]:
        """Calls `listener` for each `name` event: "state" (and each state by
        its name: "connecting", "open", "reconnecting", "closed") with a
        dict, "reset" with {"epoch", "previous_epoch"}, "error" with an
        exception, "token_expiring" with `gateway.token_expiring`'s params
        ({"expires_at", "expires_in_s"}), "token_refreshed" with
        `gateway.refresh_token`'s answer once a provider's token replaced
        the connection's. Returns the function that removes the listener."""
        self._listeners.setdefault(name, []).append(listener)

        def off() -> None:
            if listener in self._listeners.get(name, []):
                self._listeners[name].remove(listener)

        return off

    async def opened(self) -> dict[str, Any]:
        """The `gateway.ready` payload, once a connection is open; raises
        Unreachable after the connect timeout."""
        return await self._when_open(self._connect_timeout)

    # --- requests ---

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Any method of PROTOCOL 1.4. Raises RpcError (the gateway's code in
        `.code`), ConnectionLost, AuthError, GatewayClosed, or Unreachable
        when no connection opened within the connect timeout. A read refused
        for the rate limit (4029) is asked again after the wait the gateway
        names: a burst of reads (every stream catching up after a reconnect)
        is the library's doing, not the application's."""
        return await self._request(method, params, self._connect_timeout)

    async def _request(self, method: str, params: dict[str, Any] | None, timeout: float | None) -> Any:
        """A call that waits for a connection for `timeout` seconds at most
        (None for the library's own reads, which follow a session through
        any outage)."""
        while True:
            try:
                return await self._call(method, params, timeout)
            except RpcError as err:
                if err.code != Code.RATE_LIMITED or method not in READS:
                    raise
                data = err.data if isinstance(err.data, dict) else {}
                await asyncio.sleep(float(data.get("retry_after_ms") or 100) / 1000)

    async def create_session(self, **params: Any) -> Session:
        """`session.create` (title=..., attach=True, ...); the new session's
        events stream to this connection unless attach=False."""
        attach = params.get("attach", True) is not False
        self._creating += 1
        try:
            r = await self.call("session.create", params)
        finally:
            self._creating -= 1
        sid = r["session"]["session_id"]
        s = self.session(sid)
        early = self._stash.pop(sid, [])
        if self._creating == 0:
            self._stash.clear()
        s._created(r, self.generation if attach else 0, early)
        return s

    def session(self, session_id: str) -> Session:
        """The handle of a session (the same object for the same id)."""
        s = self._sessions.get(session_id)
        if s is None:
            s = Session(self, session_id)
            self._sessions[session_id] = s
        return s

    async def sessions(self, *, include_closed: bool = False, page_size: int = LIST_PAGE) -> list[dict[str, Any]]:
        """Every session of the profile, newest first, following `next_cursor`."""
        out: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": page_size, "include_closed": include_closed}
            if cursor:
                params["cursor"] = cursor
            r = await self.call("session.list", params)
            out.extend(r["sessions"])
            nxt = r.get("next_cursor")
            if not nxt or nxt == cursor:
                return out
            cursor = nxt


def _describe(client: dict[str, Any] | None) -> dict[str, Any]:
    """`gateway.hello`'s params: what the application gave, and an
    `instance` of this object's own unless it gave one."""
    d = {k: v for k, v in (client or {}).items() if k in ("name", "device", "app", "instance", "meta") and v is not None}
    d.setdefault("instance", "i-" + secrets.token_hex(12))
    return d

