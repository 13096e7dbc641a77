"""One connection to a tether gateway, kept open for the application: it
reconnects after every drop (backing off exponentially, with jitter and a
cap), re-attaches every session in use, and notices a changed store
(`gateway.ready`'s epoch, PROTOCOL 1.3).

Requests made while disconnected wait for the next connection. A request in
flight when the connection drops is sent again only if it changes nothing
(a read); any other fails with ConnectionLost, since the gateway may have
executed it (a prompt sent twice would run twice)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Callable, Generator
from urllib.parse import urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from ._backoff import Backoff
from ._errors import AuthError, Code, ConnectionLost, GatewayClosed, RpcError
from ._session import Session

log = logging.getLogger("tether_client")

Event = dict[str, Any]

# Methods that change nothing, so they may be sent again on a new connection
# when the old one dropped before their answer.
READS = frozenset(
    {"gateway.ping", "session.list", "session.events.since", "session.events.stats", "handoff.state"}
)
LIST_PAGE = 100


class _Call:
    __slots__ = ("method", "params", "future", "retry", "generation")

    def __init__(self, method: str, params: dict[str, Any], retry: bool, generation: int) -> None:
        self.method = method
        self.params = params
        self.future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.retry = retry
        self.generation = generation

    def resolve(self, value: Any) -> None:
        if not self.future.done():
            self.future.set_result(value)

    def reject(self, err: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(err)


def connect(
    url: str,
    *,
    token: str | None = None,
    profile: str | None = None,
    backoff: Backoff | None = None,
    max_buffered: int | None = None,
) -> Gateway:
    """A gateway connection: `async with connect(url) as gw:` (or
    `gw = await connect(url)`, then `await gw.close()`)."""
    return Gateway(url, token=token, profile=profile, backoff=backoff, max_buffered=max_buffered)


class Gateway:
    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        profile: str | None = None,
        backoff: Backoff | None = None,
        max_buffered: int | None = None,
    ) -> None:
        self.url = ws_url(url)
        self._token = token
        self._profile = profile
        self._backoff = backoff or Backoff()
        self._max_buffered = max_buffered
        #: "connecting", "open", "reconnecting" or "closed".
        self.state = "connecting"
        #: The current (or last) connection's `gateway.ready` payload.
        self.ready: dict[str, Any] | None = None
        self.epoch: str | None = None
        # Connections that reached `gateway.ready`; everything tied to a
        # connection carries its number.
        self.generation = 0
        self._ws: ClientConnection | None = None
        self._outbox: asyncio.Queue[str] | None = None
        self._attempt = 0
        self._next_id = 1
        self._pending: dict[int, _Call] = {}
        self._waiting: list[_Call] = []
        self._sessions: dict[str, Session] = {}
        self._listeners: dict[str, list[Callable[[Any], None]]] = {}
        self._failure: BaseException | None = None
        # session.create attaches the caller, and its first events may come
        # before its answer; they wait here until the answer names the session.
        self._creating = 0
        self._stash: dict[str, list[Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self._open_waiters: list[asyncio.Future[dict[str, Any]]] = []

    # --- lifecycle ---

    def start(self) -> Gateway:
        """Starts connecting (in the running event loop); idempotent."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self

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
        exception. Returns the function that removes the listener."""
        self._listeners.setdefault(name, []).append(listener)

        def off() -> None:
            if listener in self._listeners.get(name, []):
                self._listeners[name].remove(listener)

        return off

    async def opened(self) -> dict[str, Any]:
        """The `gateway.ready` payload, once a connection is open."""
        self.start()
        if self._failure is not None:
            raise self._failure
        if self.state == "open" and self.ready is not None:
            return self.ready
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._open_waiters.append(fut)
        return await fut

    # --- requests ---

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Any method of PROTOCOL 1.4. Raises RpcError (the gateway's code in
        `.code`), ConnectionLost, AuthError or GatewayClosed. A read refused
        for the rate limit (4029) is asked again after the wait the gateway
        names: a burst of reads (every stream catching up after a reconnect)
        is the library's doing, not the application's."""
        while True:
            try:
                return await self._call(method, params)
            except RpcError as err:
                if err.code != Code.RATE_LIMITED or method not in READS:
                    raise
                data = err.data if isinstance(err.data, dict) else {}
                await asyncio.sleep(float(data.get("retry_after_ms") or 100) / 1000)

    async def _call(self, method: str, params: dict[str, Any] | None) -> Any:
        self.start()
        if self._failure is not None:
            raise self._failure
        call = _Call(method, self._with_profile(params), method in READS, 0)
        if self.state == "open":
            self._send(call)
        else:
            self._waiting.append(call)
        return await call.future

    async def _call_on(self, generation: int, method: str, params: dict[str, Any]) -> Any:
        """Like `call`, but only on connection `generation` and never sent
        again: for the steps of a re-attach, which the next connection redoes."""
        if self._failure is not None:
            raise self._failure
        if self.state != "open" or self.generation != generation:
            raise ConnectionLost(method)
        call = _Call(method, self._with_profile(params), False, generation)
        self._send(call)
        return await call.future

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

    # --- the connection ---

    async def _run(self) -> None:
        self._set_state("connecting")
        while self.state != "closed":
            headers = {"Authorization": f"Bearer {self._token}"} if self._token else None
            try:
                ws = await ws_connect(
                    self.url,
                    additional_headers=headers,
                    # The gateway does not bound what it sends (a resume of a
                    # long transcript, a /big reply).
                    max_size=None,
                    compression=None,
                    proxy=None,
                    open_timeout=10,
                )
            except InvalidStatus as err:
                status = err.response.status_code
                if status in (401, 403):
                    self._shutdown(AuthError(status), failed=True)
                    return
                await self._retry({"status": status})
                continue
            except (OSError, InvalidHandshake, TimeoutError, asyncio.TimeoutError) as err:
                self._emit("error", err)
                await self._retry({"error": err})
                continue
            except Exception as err:  # noqa: BLE001 - whatever it was, try again later
                log.exception("connecting to %s failed", self.url)
                self._emit("error", err)
                await self._retry({"error": err})
                continue
            if self.state == "closed":
                await ws.close()
                return
            await self._serve(ws)
            if self.state != "closed":
                await self._retry({"code": ws.close_code, "reason": ws.close_reason or ""})

    async def _serve(self, ws: ClientConnection) -> None:
        self._ws = ws
        outbox: asyncio.Queue[str] = asyncio.Queue()
        self._outbox = outbox
        writer = asyncio.get_running_loop().create_task(self._write(ws, outbox))
        try:
            async for message in ws:
                if isinstance(message, str):
                    try:
                        self._on_text(message)
                    except Exception:  # noqa: BLE001 - one bad frame must not end the connection
                        log.exception("could not handle a frame: %.200s", message)
        except ConnectionClosed:
            pass
        finally:
            writer.cancel()
            if self._ws is ws:
                self._ws = None
                self._outbox = None
                self._dropped()

    async def _write(self, ws: ClientConnection, outbox: asyncio.Queue[str]) -> None:
        # One writer per connection keeps frames in the order they were sent.
        try:
            while True:
                await ws.send(await outbox.get())
        except ConnectionClosed:
            pass

    async def _retry(self, detail: dict[str, Any]) -> None:
        if self.state == "closed":
            return
        delay = self._backoff.delay(self._attempt)
        self._attempt += 1
        self._set_state("reconnecting", dict(detail, delay=delay, attempt=self._attempt))
        await asyncio.sleep(delay)

    def _on_text(self, text: str) -> None:
        try:
            frame = json.loads(text)
        except ValueError:
            self._emit("error", ValueError("a frame that is not JSON: " + text[:200]))
            return
        for f in frame if isinstance(frame, list) else [frame]:
            if not isinstance(f, dict):
                continue
            if f.get("method") == "event" and isinstance(f.get("params"), dict):
                self._on_event(f["params"])
            elif f.get("id") is not None and f["id"] in self._pending:
                call = self._pending.pop(f["id"])
                if "error" in f:
                    call.reject(RpcError(call.method, f["error"] or {}))
                else:
                    call.resolve(f.get("result"))
            elif "error" in f:
                self._emit("error", RpcError("(a frame)", f["error"] or {}))

    def _on_event(self, ev: Event) -> None:
        if ev.get("type") == "gateway.ready":
            self._on_ready(ev.get("payload") or {})
            return
        sid = ev.get("session_id")
        if not isinstance(sid, str):
            self._emit("event", ev)
            return
        s = self._sessions.get(sid)
        if s is not None:
            s._on_live(ev)
        elif self._creating > 0:
            self._stash.setdefault(sid, []).append(ev)

    def _on_ready(self, ready: dict[str, Any]) -> None:
        previous = self.epoch
        self.ready = ready
        self.generation += 1
        self._attempt = 0
        epoch = ready.get("epoch")
        reset = previous is not None and isinstance(epoch, str) and epoch != previous
        if isinstance(epoch, str):
            self.epoch = epoch
        if reset and isinstance(epoch, str) and previous is not None:
            # Another store: every watermark means nothing there.
            for s in list(self._sessions.values()):
                s._reset(epoch, previous)
            self._emit("reset", {"epoch": epoch, "previous_epoch": previous})
        self._set_state("open", {"ready": ready})
        for s in list(self._sessions.values()):
            s._connected(self.generation)
        waiting, self._waiting = self._waiting, []
        for call in waiting:
            self._send(call)
        waiters, self._open_waiters = self._open_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(ready)

    def _send(self, call: _Call) -> None:
        rid = self._next_id
        self._next_id += 1
        frame = json.dumps({"jsonrpc": "2.0", "id": rid, "method": call.method, "params": call.params})
        limit = (self.ready or {}).get("limits", {}).get("max_frame_bytes")
        if isinstance(limit, int) and len(frame) > limit // 4 and len(frame.encode()) > limit:
            # The gateway would answer 4013 with `id` null: no way to tell
            # which request it was, so refuse it here with the same code.
            call.reject(RpcError(call.method, {
                "code": int(Code.FRAME_TOO_LARGE),
                "message": f"the request is larger than the gateway's max_frame_bytes ({limit})",
            }))
            return
        if self._outbox is None or self.state != "open":
            if call.generation:
                call.reject(ConnectionLost(call.method))
            else:
                self._waiting.append(call)
            return
        self._pending[rid] = call
        self._outbox.put_nowait(frame)

    def _dropped(self) -> None:
        pending = list(self._pending.values())
        self._pending.clear()
        again: list[_Call] = []
        for call in pending:
            if call.retry and not call.generation:
                again.append(call)
            else:
                call.reject(ConnectionLost(call.method))
        self._waiting = again + self._waiting
        if self.state == "open":
            self.state = "reconnecting"
        for s in list(self._sessions.values()):
            s._disconnected()

    def _shutdown(self, err: BaseException, failed: bool) -> None:
        """The end: by the application (`close()`) or because retrying
        cannot help (`failed`: a refused token)."""
        self._failure = err
        self._set_state("closed", {"error": err} if failed else {})
        for call in list(self._pending.values()) + self._waiting:
            call.reject(err)
        self._pending.clear()
        self._waiting = []
        for w in self._open_waiters:
            if not w.done():
                w.set_exception(err)
        self._open_waiters = []
        for s in list(self._sessions.values()):
            s._shutdown(err, failed)
        if failed:
            self._emit("error", err)

    def _set_state(self, state: str, detail: dict[str, Any] | None = None) -> None:
        self.state = state
        change = dict(detail or {}, state=state)
        self._emit("state", change)
        self._emit(state, change)

    def _emit(self, name: str, value: Any) -> None:
        for listener in list(self._listeners.get(name, [])):
            try:
                listener(value)
            except Exception:  # noqa: BLE001 - a listener never breaks the bookkeeping
                log.exception("a %r listener raised", name)

    def _with_profile(self, params: dict[str, Any] | None) -> dict[str, Any]:
        p = dict(params or {})
        if self._profile and "profile" not in p:
            p["profile"] = self._profile
        return p


def ws_url(raw: str) -> str:
    """`ws://HOST:PORT/ws` as given; `http(s)://HOST:PORT` (what `tether
    serve` prints) and a bare `HOST:PORT` mean its `/ws` route."""
    url = raw.strip()
    if "://" not in url:
        url = "ws://" + url
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None or not parts.netloc:
        raise ValueError(f"not a gateway URL: {raw!r} (use ws://HOST:PORT/ws)")
    path = parts.path if parts.path not in ("", "/") else "/ws"
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))
