"""tether_client.host at its pipe (PROTOCOL Part 2), with the example echo
host as the turn function: what the gateway would see. The same host also
passes the gateway's black-box turn suite (tests/turns.rs with
TETHER_TEST_HOST_COMMAND, run by .ci/run)."""

import asyncio
import json
import sys

from conftest import EXAMPLES

FRAME_WAIT_S = 15


class Pipe:
    """A host process and its two pipes."""

    def __init__(self, proc):
        self.proc = proc

    @classmethod
    async def start(cls, *argv, env=None):
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env
        )
        return cls(proc)

    async def send(self, frame):
        line = frame if isinstance(frame, str) else json.dumps(frame)
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()

    async def recv(self):
        line = await asyncio.wait_for(self.proc.stdout.readline(), FRAME_WAIT_S)
        assert line, "the host closed its stdout"
        return json.loads(line)

    async def until(self, pred):
        seen = []
        while True:
            f = await self.recv()
            seen.append(f)
            if pred(f):
                return seen

    async def exit_code(self):
        return await asyncio.wait_for(self.proc.wait(), FRAME_WAIT_S)


async def echo_host(*flags):
    return await Pipe.start(sys.executable, str(EXAMPLES / "echo_host.py"), *flags)


def turn_start(turn_id, prompt, history=()):
    return {"type": "turn.start", "turn_id": turn_id, "session_id": "s_1", "trace_id": "0123456789ab",
            "history": list(history), "prompt": prompt, "config": {"model": "m"}}


async def test_hello_turns_pings_controls_and_bad_lines():
    h = await echo_host()
    hello = await h.recv()
    assert hello["type"] == "hello" and hello["protocol"] == 1 and hello["pid"] == h.proc.pid
    await h.send(turn_start("t_1", "one two  three"))
    frames = await h.until(lambda f: f["type"] in ("turn.end", "turn.error"))
    deltas = [f["event"]["payload"]["text"] for f in frames if f["type"] == "event"]
    assert deltas == ["one ", "two ", " ", "three"]
    assert frames[-1] == {"type": "turn.end", "turn_id": "t_1", "status": "complete", "text": "one two  three"}

    await h.send(turn_start("t_2", '/tool ls {"a":1}\n/todo x; y'))
    frames = await h.until(lambda f: f["type"] == "turn.end")
    kinds = [f["event"]["type"] for f in frames if f["type"] == "event"]
    assert kinds[:2] == ["tool.start", "tool.complete"]
    assert frames[0]["event"]["payload"] == {"tool_id": "tool_1", "name": "ls", "args": {"a": 1}}

    await h.send(turn_start("t_3", "/config"))
    assert (await h.until(lambda f: f["type"] == "turn.end"))[-1]["text"] == '{"model":"m"}'
    await h.send(turn_start("t_4", "/error no thanks"))
    assert (await h.until(lambda f: f["type"] == "turn.error"))[-1] == {
        "type": "turn.error", "turn_id": "t_4", "reason": "engine_error", "message": "no thanks"}

    await h.send({"type": "ping", "nonce": 42})
    assert await h.until(lambda f: f["type"] == "pong") == [{"type": "pong", "nonce": 42}]
    await h.send({"type": "control", "request_id": "r_1", "op": "compress", "session_id": "s_1",
                  "history": [{"role": "user", "text": "a"}] * 3, "args": {}})
    assert (await h.recv()) == {"type": "control.ack", "request_id": "r_1",
                                "result": {"summary": "Summary of 3 messages.", "removed": 3}}
    await h.send({"type": "control", "request_id": "r_2", "op": "defrag", "session_id": "s_1", "history": [], "args": {}})
    f = await h.recv()
    assert (f["type"], f["request_id"]) == ("control.error", "r_2")

    await h.send("this is not json")
    assert (await h.recv())["type"] == "error"
    await h.send({"type": "warp.drive"})
    assert (await h.recv())["type"] == "error"
    h.proc.stdin.close()
    assert await h.exit_code() == 0


async def test_interrupts_end_the_turn_with_its_text_and_shutdown_acknowledges():
    h = await echo_host()
    await h.recv()
    await h.send(turn_start("t_1", "/hang"))
    f = await h.recv()
    assert f["event"]["payload"]["text"] == "…"
    await h.send(turn_start("t_1", "/hang"))
    assert (await h.recv())["type"] == "error", "a turn already running is refused"
    await h.send({"type": "interrupt", "turn_id": "t_1"})
    assert await h.recv() == {"type": "turn.end", "turn_id": "t_1", "status": "interrupted", "text": "…"}
    await h.send({"type": "interrupt", "turn_id": "t_1"})  # ended already: ignored

    await h.send(turn_start("t_2", "/sleep 60000\nlate"))
    await h.send({"type": "shutdown"})
    frames = await h.until(lambda f: f["type"] == "shutdown.ack")
    assert {"type": "turn.end", "turn_id": "t_2", "status": "interrupted", "text": ""} in frames
    assert await h.exit_code() == 0


async def test_the_end_of_stdin_ends_the_host_even_with_a_hanging_turn():
    h = await echo_host()
    await h.recv()
    await h.send(turn_start("t_1", "/hang"))
    await h.recv()
    h.proc.stdin.close()
    assert await h.exit_code() == 0


async def test_crash_flushes_its_delta_then_exits_101():
    h = await echo_host()
    await h.recv()
    await h.send(turn_start("t_1", "/crash\nlast words"))
    assert (await h.recv())["event"]["payload"]["text"] == "last "
    assert await h.exit_code() == 101


HOST = """
import asyncio
from tether_client.host import Final, Status, Usage, run

async def turn(t):
    if t.prompt == "boom":
        yield "partial "
        raise ValueError("kaput")
    if t.prompt == "stubborn":
        yield "a "
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                pass  # ignores interrupts: the host ends the turn anyway
    if t.prompt == "odd":
        yield 42
    yield Status("thinking", "hard")
    yield "streamed"
    yield Usage({"total_tokens": 3})
    yield Final("the final text")

run(turn, engine="inline")
"""


async def test_failures_finals_usage_and_a_turn_that_ignores_its_interrupt():
    h = await Pipe.start(sys.executable, "-c", HOST)
    assert (await h.recv())["engine"] == "inline"
    await h.send(turn_start("t_1", "boom"))
    end = (await h.until(lambda f: f["type"] == "turn.error"))[-1]
    assert (end["reason"], end["message"]) == ("engine_error", "ValueError: kaput")
    await h.send(turn_start("t_2", "odd"))
    end = (await h.until(lambda f: f["type"] == "turn.error"))[-1]
    assert "yielded int" in end["message"]
    await h.send(turn_start("t_3", "fine"))
    frames = await h.until(lambda f: f["type"] == "turn.end")
    assert frames[0]["event"] == {"type": "status.update", "payload": {"kind": "thinking", "text": "hard"}}
    assert frames[-1] == {"type": "turn.end", "turn_id": "t_3", "status": "complete",
                          "text": "the final text", "usage": {"total_tokens": 3}}
    await h.send(turn_start("t_4", "stubborn"))
    await h.recv()
    await h.send({"type": "interrupt", "turn_id": "t_4"})
    end = await h.until(lambda f: f["type"] == "turn.end")
    assert end[-1] == {"type": "turn.end", "turn_id": "t_4", "status": "interrupted", "text": "a "}
    h.proc.stdin.close()
    assert await h.exit_code() == 0
