"""A compute host (docs/PROTOCOL.md Part 2) around one async generator per
turn. The library owns everything around the turn function: `hello`,
heartbeats, `ping`, one task per turn (turns of different sessions run side
by side), interrupts, `control` requests, `shutdown`, the end of stdin, and
the turn's last frame, so a turn function cannot forget to end a turn.

An interrupt cancels the turn's task (asyncio cancellation reaches the
function at its current `await`); the turn then ends `interrupted` with the
text yielded so far. A function that ignores it is dropped after a grace
period, as the Rust host does."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, Awaitable, Callable, Coroutine

from ._io import Lines, Output
from ._items import Final, Reasoning, Status, Todos, ToolComplete, ToolStart, TurnError, Usage

log = logging.getLogger("tether_client.host")

PROTOCOL = 1
# How long an interrupted turn may take to stop before its end is sent anyway.
CANCEL_GRACE_S = 2.0
# How long `shutdown` waits for turns to end before acknowledging regardless
# (the gateway allows 10 s in all).
SHUTDOWN_GRACE_S = 5.0


@dataclass
class TurnRequest:
    """A `turn.start`, as handed to a turn function."""

    turn_id: str
    session_id: str
    trace_id: str
    #: The current segment's transcript, oldest first: `[{"seq","role","text",...}]`.
    history: list[dict[str, Any]]
    prompt: str
    #: The session's engine config (model, ...), passed through untouched.
    config: dict[str, Any]
    #: Set when the turn is interrupted (for work that cancellation cannot reach).
    interrupted: asyncio.Event = field(default_factory=asyncio.Event)
    _output: Output | None = None

    async def flush(self) -> None:
        """Returns once every frame of this host so far is on the pipe."""
        if self._output is not None:
            await self._output.flush()


@dataclass
class ControlRequest:
    """A `control` request (`op` "compress"): summarise `history`."""

    request_id: str
    op: str
    session_id: str
    history: list[dict[str, Any]]
    args: dict[str, Any]


TurnFunction = Callable[[TurnRequest], AsyncGenerator[Any, None]]
CompressFunction = Callable[[ControlRequest], Awaitable[dict[str, Any]]]


class _Turn:
    def __init__(self, request: TurnRequest) -> None:
        self.request = request
        self.parts: list[str] = []
        self.final: str | None = None
        self.usage: dict[str, Any] | None = None
        self.ended = False
        self.task: asyncio.Task[None] | None = None

    @property
    def text(self) -> str:
        return "".join(self.parts)


class Host:
    def __init__(
        self,
        on_turn: TurnFunction,
        *,
        compress: CompressFunction | None = None,
        engine: str = "python",
        version: str = "0.1.0",
    ) -> None:
        self._on_turn = on_turn
        self._compress = compress
        self._engine = engine
        self._version = version
        self._out: Output | None = None
        self._turns: dict[str, _Turn] = {}
        self._controls: set[asyncio.Task[None]] = set()

    async def serve(self) -> None:
        """Runs until `shutdown` or the end of stdin."""
        self._out = await Output.stdout()
        await self._send({"type": "hello", "protocol": PROTOCOL, "pid": os.getpid(),
                          "engine": self._engine, "version": self._version})
        lines = await Lines.stdin()
        heartbeat = asyncio.get_running_loop().create_task(self._heartbeats())
        try:
            while True:
                line = await lines.next()
                if line is None:
                    # The gateway is gone: nobody is left to read the turns.
                    log.info("stdin closed; exiting")
                    return
                if await self._handle(line) == "shutdown":
                    await self._shutdown()
                    return
        finally:
            heartbeat.cancel()
            for t in self._turns.values():
                if t.task is not None:
                    t.task.cancel()
            for c in self._controls:
                c.cancel()

    async def _handle(self, raw: bytes) -> str | None:
        if not raw.strip():
            return None
        try:
            frame = json.loads(raw.decode())
            kind = frame["type"]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
            await self._reject(f"not a frame: {err}")
            return None
        if kind == "turn.start":
            await self._start_turn(frame)
        elif kind == "interrupt":
            self._interrupt(str(frame.get("turn_id")))
        elif kind == "control":
            self._control(frame)
        elif kind == "ping":
            await self._send({"type": "pong", "nonce": frame.get("nonce")})
        elif kind == "shutdown":
            return "shutdown"
        elif kind == "error":
            log.warning("the gateway could not understand a line of ours: %s", frame.get("message"))
        else:
            await self._reject(f"unknown frame type {kind!r}")
        return None

    async def _start_turn(self, frame: dict[str, Any]) -> None:
        try:
            request = TurnRequest(
                turn_id=str(frame["turn_id"]),
                session_id=str(frame["session_id"]),
                trace_id=str(frame.get("trace_id", "")),
                history=list(frame.get("history") or []),
                prompt=str(frame["prompt"]),
                config=dict(frame.get("config") or {}),
                _output=self._out,
            )
        except (KeyError, TypeError, ValueError) as err:
            await self._reject(f"turn.start without {err}")
            return
        if request.turn_id in self._turns:
            await self._reject(f"turn {request.turn_id} is already running")
            return
        turn = _Turn(request)
        self._turns[request.turn_id] = turn
        turn.task = asyncio.get_running_loop().create_task(self._run_turn(turn))
        turn.task.add_done_callback(lambda _: self._turn_done(turn))

    def _turn_done(self, turn: _Turn) -> None:
        # A turn cancelled before its function ever ran (an interrupt right
        # after its start) still owes its end.
        self._turns.pop(turn.request.turn_id, None)
        if not turn.ended and turn.request.interrupted.is_set():
            self._spawn(self._end(turn, {"type": "turn.end", "turn_id": turn.request.turn_id,
                                         "status": "interrupted", "text": turn.text}))

    async def _run_turn(self, turn: _Turn) -> None:
        req = turn.request
        try:
            agen = self._on_turn(req)
            try:
                async for item in agen:
                    if req.interrupted.is_set():
                        break
                    await self._item(turn, item)
            finally:
                await agen.aclose()
            if req.interrupted.is_set():
                await self._end(turn, {"type": "turn.end", "turn_id": req.turn_id,
                                       "status": "interrupted", "text": turn.text})
            else:
                end: dict[str, Any] = {"type": "turn.end", "turn_id": req.turn_id, "status": "complete",
                                       "text": turn.final if turn.final is not None else turn.text}
                if turn.usage is not None:
                    end["usage"] = turn.usage
                await self._end(turn, end)
        except asyncio.CancelledError:
            if req.interrupted.is_set():
                await self._end(turn, {"type": "turn.end", "turn_id": req.turn_id,
                                       "status": "interrupted", "text": turn.text})
            raise
        except TurnError as err:
            await self._end(turn, {"type": "turn.error", "turn_id": req.turn_id,
                                   "reason": err.reason, "message": err.message})
        except Exception as err:  # noqa: BLE001 - any failure of the function fails the turn
            log.exception("turn %s failed", req.turn_id)
            await self._end(turn, {"type": "turn.error", "turn_id": req.turn_id,
                                   "reason": "engine_error", "message": f"{type(err).__name__}: {err}"})

    async def _item(self, turn: _Turn, item: Any) -> None:
        tid = turn.request.turn_id
        if isinstance(item, str):
            if item:
                await self._event(tid, "message.delta", {"text": item})
                turn.parts.append(item)
        elif isinstance(item, Reasoning):
            await self._event(tid, "reasoning.delta", {"text": item.text})
        elif isinstance(item, ToolStart):
            await self._event(tid, "tool.start", {"tool_id": item.tool_id, "name": item.name, "args": item.args})
        elif isinstance(item, ToolComplete):
            await self._event(tid, "tool.complete", {"tool_id": item.tool_id, "name": item.name,
                                                      "result": item.result, "is_error": item.is_error})
        elif isinstance(item, Todos):
            await self._event(tid, "todo.updated", item.payload())
        elif isinstance(item, Status):
            payload: dict[str, Any] = {"kind": item.kind}
            if item.text is not None:
                payload["text"] = item.text
            await self._event(tid, "status.update", payload)
        elif isinstance(item, Usage):
            turn.usage = dict(item.counts)
        elif isinstance(item, Final):
            turn.final = item.text
        else:
            raise TypeError(f"a turn function yielded {type(item).__name__}, not text or a host item")

    async def _event(self, turn_id: str, kind: str, payload: dict[str, Any]) -> None:
        await self._send({"type": "event", "turn_id": turn_id, "event": {"type": kind, "payload": payload}})

    async def _end(self, turn: _Turn, frame: dict[str, Any]) -> None:
        # Exactly one end per turn, whichever of the function and the
        # interrupt grace gets there first.
        if not turn.ended:
            turn.ended = True
            await self._send(frame)

    def _interrupt(self, turn_id: str) -> None:
        turn = self._turns.get(turn_id)
        if turn is None or turn.task is None:
            return  # ended already: its end frame is out or about to be
        turn.request.interrupted.set()
        turn.task.cancel()

        async def grace() -> None:
            await asyncio.sleep(CANCEL_GRACE_S)
            if not turn.ended:
                log.warning("turn %s ignored its interrupt; ending it", turn_id)
                self._turns.pop(turn_id, None)
                await self._end(turn, {"type": "turn.end", "turn_id": turn_id,
                                       "status": "interrupted", "text": turn.text})

        self._spawn(grace())

    def _control(self, frame: dict[str, Any]) -> None:
        request_id = str(frame.get("request_id"))

        async def run() -> None:
            op = frame.get("op")
            if op != "compress" or self._compress is None:
                why = f"unknown control op {op!r}" if op != "compress" else "this host does not compress"
                await self._send({"type": "control.error", "request_id": request_id, "message": why})
                return
            req = ControlRequest(request_id, str(op), str(frame.get("session_id", "")),
                                 list(frame.get("history") or []), dict(frame.get("args") or {}))
            try:
                result = await self._compress(req)
            except asyncio.CancelledError:
                await self._send({"type": "control.error", "request_id": request_id,
                                  "message": "the host is shutting down"})
                raise
            except Exception as err:  # noqa: BLE001 - reported to the gateway
                await self._send({"type": "control.error", "request_id": request_id, "message": str(err)})
                return
            await self._send({"type": "control.ack", "request_id": request_id, "result": result})

        self._spawn(run())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._controls.add(task)
        task.add_done_callback(self._controls.discard)

    async def _shutdown(self) -> None:
        """Interrupts every turn, stops every control, waits (a bounded
        time) for their last frames, then acknowledges."""
        tasks = []
        for turn in list(self._turns.values()):
            turn.request.interrupted.set()
            if turn.task is not None:
                turn.task.cancel()
                tasks.append(turn.task)
        for c in list(self._controls):
            c.cancel()
            tasks.append(c)
        if tasks:
            await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE_S)
        for turn in list(self._turns.values()):
            await self._end(turn, {"type": "turn.end", "turn_id": turn.request.turn_id,
                                   "status": "interrupted", "text": turn.text})
        # Ends sent by the tasks' done callbacks.
        pending = [c for c in self._controls if not c.done()]
        if pending:
            await asyncio.wait(pending, timeout=1)
        await self._send({"type": "shutdown.ack"})

    async def _heartbeats(self) -> None:
        period = max(1.0, float(os.environ.get("TETHER_HEARTBEAT_S", "5")))
        while True:
            await asyncio.sleep(period)
            await self._send({"type": "hb", "active_turns": len(self._turns), "rss_kb": _rss_kb()})

    async def _reject(self, message: str) -> None:
        log.warning("rejected a line: %s", message)
        await self._send({"type": "error", "message": message})

    async def _send(self, frame: dict[str, Any]) -> None:
        assert self._out is not None
        await self._out.send(frame)


def _rss_kb() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


async def serve(on_turn: TurnFunction, *, compress: CompressFunction | None = None,
                engine: str = "python", version: str = "0.1.0") -> None:
    """Serves the gateway on stdin/stdout until `shutdown` or the end of stdin."""
    await Host(on_turn, compress=compress, engine=engine, version=version).serve()


def run(on_turn: TurnFunction, *, compress: CompressFunction | None = None,
        engine: str = "python", version: str = "0.1.0") -> None:
    """`serve` in a new event loop, then exits the process: a host whose
    gateway is gone must not linger on work nobody will read (a thread still
    blocked on a model server, say)."""
    if not logging.getLogger().handlers:
        logging.basicConfig(stream=sys.stderr, level=os.environ.get("TETHER_HOST_LOG", "WARNING").upper(),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    code = 0
    # Not asyncio.run: its clean-up waits for every task to finish, and a
    # turn function that swallows cancellation would keep the host alive.
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(serve(on_turn, compress=compress, engine=engine, version=version))
    except (BrokenPipeError, ConnectionResetError):
        pass  # stdout is gone: so is the gateway
    except KeyboardInterrupt:
        code = 130
    sys.stderr.flush()
    os._exit(code)
