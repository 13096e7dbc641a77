"""The gateway object's connection: opening the WebSocket, giving up on
one that does not say `gateway.ready` in time, reading its frames (answers
to the requests, events to their sessions), reconnecting after every drop
(backing off exponentially, with jitter and a cap), noticing a changed
store (`gateway.ready`'s epoch, PROTOCOL 1.3), and the end. Kept apart from
what the application asks of the gateway object (`_gateway`), which this is
the base of."""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable, TypeVar, Union

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from ._backoff import Backoff
from ._decode import MAX_DEPTH, TOO_DEEP, decode_frame
from ._errors import AuthError, Code, RpcError, TetherError, Unreachable
from ._requests import Call, Requests

if TYPE_CHECKING:
    from ._session import Session

log = logging.getLogger("tether_client")

Event = dict[str, Any]

#: Gives a token for a connection (see `connect`'s `token`).
TokenProvider = Callable[[], Union[str, Awaitable[str]]]

#: Close codes of a token that ended on the line: expired, revoked.
CLOSE_TOKEN_EXPIRED = 4401
CLOSE_TOKEN_REVOKED = 4403

# `start()` returns the object it is called on, typed as its own class.
_Self = TypeVar("_Self", bound="Connection")


class Connection:
    """The base of Gateway: its connection, one after another."""

    def __init__(
        self,
        url: str,
        client: dict[str, Any],
        connect_timeout: float | None,
        *,
        token: str | TokenProvider | None,
        profile: str | None,
        backoff: Backoff,
    ) -> None:
        self.url = url
        #: `gateway.hello`'s params, sent first on every connection; the
        #: same `instance` each time, so reconnects are not announced.
        self.client = client
        self._connect_timeout = connect_timeout
        self._token = token
        self._profile = profile
        self._backoff = backoff
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
        self._requests = Requests(self)
        self._sessions: dict[str, Session] = {}
        self._listeners: dict[str, list[Callable[[Any], None]]] = {}
        self._failure: BaseException | None = None
        # session.create attaches the caller, and its first events may come
        # before its answer; they wait here until the answer names the session.
        self._creating = 0
        self._stash: dict[str, list[Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self._open_waiters: list[asyncio.Future[dict[str, Any]]] = []
        # Failed attempts since the last open connection, and why the last
        # one failed: what an Unreachable tells.
        self._failed_attempts = 0
        self._last_problem = ""
        # The connection that said `gateway.ready`, and why the library
        # gave up on one itself (a frame it could not read, no answer).
        self._ready_on: ClientConnection | None = None
        self._abandoned: str | None = None
        self._refreshes: set[asyncio.Task[None]] = set()
        # The token the last connection was opened with, one the provider
        # already gave for the next, and whether a refused token was
        # replaced since the last open connection (then a second refusal
        # stops: the provider is asked once per refusal, never in a loop).
        self._last_token: str | None = None
        self._next_token: str | None = None
        self._retried_token = False

    # --- tokens ---

    async def _ask_provider(self) -> str:
        provider = self._token
        assert callable(provider)
        try:
            got = provider()
            if inspect.isawaitable(got):
                got = await got
        except Exception as err:  # noqa: BLE001 - whatever the app's backend raised
            raise AuthError("provider") from err
        if not isinstance(got, str) or not got:
            raise AuthError("provider")
        return got

    async def _token_for_connect(self) -> str | None:
        """The fixed token, or the provider's (asked for every connect)."""
        if not callable(self._token):
            return self._token
        if self._next_token is not None:
            token, self._next_token = self._next_token, None
            return token
        return await self._ask_provider()

    async def _token_refused(self, why: int, detail: dict[str, Any]) -> bool:
        """A refused or ended token: whether to connect again (with a new
        token from the provider, asked once); else the object is closed."""
        if not callable(self._token) or why == 403 or self._retried_token:
            self._shutdown(AuthError(why), failed=True)
            return False
        self._retried_token = True
        self._set_state("reconnecting", dict(detail, delay=0, attempt=self._attempt, refreshing=True))
        try:
            token = await self._ask_provider()
        except AuthError as err:
            self._shutdown(err, failed=True)
            return False
        if self.state == "closed":
            return False
        if token == self._last_token:
            self._shutdown(AuthError(why, same_token=True), failed=True)
            return False
        self._next_token = token
        return True

    def _on_token_expiring(self, params: dict[str, Any]) -> None:
        """`gateway.token_expiring`: told to the app, and with a provider a
        new token is fetched and sent on this same connection."""
        self._emit("token_expiring", params)
        if not callable(self._token):
            return
        generation = self.generation

        async def refresh() -> None:
            try:
                token = await self._ask_provider()
                if self.generation != generation or self.state != "open":
                    return
                result = await self._call_on(generation, "gateway.refresh_token", {"token": token})
                self._last_token = token
                self._emit("token_refreshed", result)
            except Exception as err:  # noqa: BLE001 - told to the app, the connection goes on
                self._emit("error", err)

        task = asyncio.get_running_loop().create_task(refresh())
        self._refreshes.add(task)
        task.add_done_callback(self._refreshes.discard)

    # --- waiting for a connection ---

    def start(self: _Self) -> _Self:
        """Starts connecting (in the running event loop); idempotent."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def _when_open(self, timeout: float | None, since: float | None = None) -> dict[str, Any]:
        """Returns once a connection is open; raises the object's failure,
        or Unreachable after `timeout` seconds (None: never) of a wait that
        began at `since` (the loop's clock)."""
        self.start()
        if self._failure is not None:
            raise self._failure
        if self.state == "open" and self.ready is not None:
            return self.ready
        loop = asyncio.get_running_loop()
        since = loop.time() if since is None else since
        fut: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._open_waiters.append(fut)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            raise self._unreachable(since) from None
        finally:
            if not fut.done():
                fut.cancel()
            if fut in self._open_waiters:
                self._open_waiters.remove(fut)

    def _unreachable(self, since: float) -> Unreachable:
        waited = asyncio.get_running_loop().time() - since
        return Unreachable(self.url, waited, self._failed_attempts, self._last_problem)

    # --- requests on the connection (`_requests` keeps them across drops) ---

    async def _call(self, method: str, params: dict[str, Any] | None, timeout: float | None) -> Any:
        """Sent on the open connection, or on the next one within `timeout`."""
        self.start()
        if self._failure is not None:
            raise self._failure
        return await self._requests.call(method, self._with_profile(params), timeout)

    async def _call_on(self, generation: int, method: str, params: dict[str, Any]) -> Any:
        """Like `call`, but only on connection `generation` and never sent
        again: for the steps of a re-attach, which the next connection redoes."""
        if self._failure is not None:
            raise self._failure
        return await self._requests.call_on(generation, method, self._with_profile(params))

    def _with_profile(self, params: dict[str, Any] | None) -> dict[str, Any]:
        p = dict(params or {})
        if self._profile and "profile" not in p:
            p["profile"] = self._profile
        return p

    # --- the connection ---

    async def _run(self) -> None:
        self._set_state("connecting")
        while self.state != "closed":
            try:
                token = await self._token_for_connect()
            except AuthError as err:
                self._shutdown(err, failed=True)
                return
            if self.state == "closed":
                return
            self._last_token = token
            headers = {"Authorization": f"Bearer {token}"} if token else None
            try:
                ws = await ws_connect(
                    self.url,
                    additional_headers=headers,
                    # The gateway does not bound what it sends (a resume of a
                    # long transcript, a /big reply).
                    max_size=None,
                    compression=None,
                    proxy=None,
                    open_timeout=self._connect_timeout,
                )
            except InvalidStatus as err:
                status = err.response.status_code
                if status in (401, 403):
                    if await self._token_refused(status, {"status": status}):
                        continue
                    return
                await self._retry({"status": status})
                continue
            except (TimeoutError, asyncio.TimeoutError):
                late = TimeoutError(f"no answer within {self._connect_timeout} s")
                self._emit("error", late)
                await self._retry({"error": late})
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
            if self.state != "closed" and ws.close_code in (CLOSE_TOKEN_EXPIRED, CLOSE_TOKEN_REVOKED):
                # The token ended on the line: a new one, or the end.
                if await self._token_refused(ws.close_code, {"code": ws.close_code, "reason": ws.close_reason or ""}):
                    continue
                return
            if self.state != "closed":
                abandoned, self._abandoned = self._abandoned, None
                detail: dict[str, Any] = {"code": ws.close_code, "reason": ws.close_reason or ""}
                if abandoned is not None:
                    detail = {"code": 1006, "reason": abandoned, "error": TetherError(abandoned)}
                await self._retry(detail)

    def _abandon(self, ws: ClientConnection, why: str) -> None:
        """Gives up on a connection at once, without a close handshake."""
        if self._ws is ws:
            self._abandoned = why
            ws.transport.abort()

    async def _serve(self, ws: ClientConnection) -> None:
        self._ws = ws
        outbox: asyncio.Queue[str] = asyncio.Queue()
        self._outbox = outbox
        loop = asyncio.get_running_loop()
        writer = loop.create_task(self._write(ws, outbox))
        # A connection that never says `gateway.ready` (a server that is not
        # a tether gateway) is given up after the connect timeout.
        no_ready: asyncio.TimerHandle | None = None
        if self._connect_timeout is not None:
            limit = self._connect_timeout

            def not_ready() -> None:
                if self._ready_on is not ws:
                    self._abandon(ws, f"no gateway.ready within {limit} s")

            no_ready = loop.call_later(limit, not_ready)
        try:
            async for message in ws:
                if isinstance(message, str):
                    try:
                        frame, cut = decode_frame(message)
                    except ValueError as err:
                        # A frame we cannot read may be the answer someone
                        # waits for: rather than wait forever, start over on
                        # a new connection (reads are asked again, sessions
                        # resume from their watermarks).
                        self._emit("error", TetherError(f"a frame that is not JSON; reconnecting: {message[:200]}"))
                        log.warning("a frame that is not JSON (%s); reconnecting: %.200s", err, message)
                        self._abandon(ws, "a frame that is not JSON")
                        continue
                    try:
                        self._on_frame(frame, cut, message)
                    except Exception:  # noqa: BLE001 - one bad frame must not end the connection
                        log.exception("could not handle a frame: %.200s", message)
        except ConnectionClosed:
            pass
        finally:
            if no_ready is not None:
                no_ready.cancel()
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
        self._failed_attempts += 1
        self._last_problem = _problem(detail)
        self._set_state("reconnecting", dict(detail, delay=delay, attempt=self._attempt))
        await asyncio.sleep(delay)

    def _on_frame(self, frame: Any, cut: bool, text: str) -> None:
        if cut:
            self._emit(
                "error",
                TetherError(
                    f"a frame from the gateway nested deeper than {MAX_DEPTH} levels; what was deeper "
                    f"was replaced by {TOO_DEEP!r}: {text[:200]}"
                ),
            )
        for f in frame if isinstance(frame, list) else [frame]:
            if not isinstance(f, dict):
                continue
            if f.get("method") == "event" and isinstance(f.get("params"), dict):
                self._on_event(f["params"])
            elif f.get("method") == "gateway.token_expiring":
                params = f.get("params")
                self._on_token_expiring(params if isinstance(params, dict) else {})
            elif self._requests.answered(f):
                pass
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
        if s is not None and str(ev.get("type", "")).startswith("presence."):
            s._on_presence(ev)
        elif s is not None:
            s._on_live(ev)
        elif self._creating > 0:
            self._stash.setdefault(sid, []).append(ev)

    def _on_ready(self, ready: dict[str, Any]) -> None:
        previous = self.epoch
        self.ready = ready
        self._ready_on = self._ws
        self._retried_token = False
        self.generation += 1
        self._attempt = 0
        self._failed_attempts = 0
        epoch = ready.get("epoch")
        reset = previous is not None and isinstance(epoch, str) and epoch != previous
        if isinstance(epoch, str):
            self.epoch = epoch
        if reset and isinstance(epoch, str) and previous is not None:
            # Another store: every watermark means nothing there.
            for s in list(self._sessions.values()):
                s._reset(epoch, previous)
            self._emit("reset", {"reason": "epoch", "epoch": epoch, "previous_epoch": previous})
        self._set_state("open", {"ready": ready})
        self._hello()
        for s in list(self._sessions.values()):
            s._connected(self.generation)
        self._requests.opened()
        waiters, self._open_waiters = self._open_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(ready)

    def _hello(self) -> None:
        """Says who this object is, first thing on the connection (before any
        re-attach: a connection describes itself before it attaches). A
        gateway that does not know the method is left alone."""
        call = Call("gateway.hello", dict(self.client), False, self.generation)
        self._requests.send(call)

        def answered(fut: asyncio.Future[Any]) -> None:
            if fut.cancelled():
                return
            err = fut.exception()
            if isinstance(err, RpcError) and err.code != Code.METHOD_NOT_FOUND:
                self._emit("error", err)

        call.future.add_done_callback(answered)

    def _dropped(self) -> None:
        self._requests.dropped()
        if self.state == "open":
            self.state = "reconnecting"
        for s in list(self._sessions.values()):
            s._disconnected()

    def _shutdown(self, err: BaseException, failed: bool) -> None:
        """The end: by the application (`close()`) or because retrying
        cannot help (`failed`: a refused token)."""
        self._failure = err
        self._set_state("closed", {"error": err} if failed else {})
        self._requests.fail(err)
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


def _problem(detail: dict[str, Any]) -> str:
    """Why an attempt failed, in a few words, from a "reconnecting" change."""
    err = detail.get("error")
    if err is not None:
        return str(err) or type(err).__name__
    if detail.get("status"):
        return f"HTTP {detail['status']}"
    code, reason = detail.get("code"), detail.get("reason")
    return "closed" + (f" {code}" if code else "") + (f" ({reason})" if reason else "")
