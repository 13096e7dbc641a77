#!/usr/bin/env python3
"""The echo engine (docs/PROTOCOL.md Part 3) as a compute host written with
tether_client.host: the reply is the prompt, one delta per word, and a
first line may be a directive. It passes the gateway's black-box turn suite
(`TETHER_TEST_HOST_COMMAND`, see docs/CLIENTS.md).

    tether serve --host-command "python3 clients/python/examples/echo_host.py [--delay-ms N] [--compress-delay-ms N]"
"""

import argparse
import asyncio
import json
import os
import re

from tether_client.host import ControlRequest, Todos, ToolComplete, ToolStart, TurnError, TurnRequest, run

CRASH_STATUS = 101
BIG_CHUNK = 1024
MAX_BIG = 64 * 1024 * 1024

args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
args.add_argument("--delay-ms", type=int, default=0, help="between two deltas")
args.add_argument("--compress-delay-ms", type=int, default=0, help="before a compress answer")
opts = args.parse_args()


def words(text):
    """Split after each space, spaces kept: "a  b " -> "a ", " ", "b "."""
    return re.findall(r"[^ ]* |[^ ]+$", text)


async def stream(pieces):
    for i, piece in enumerate(pieces):
        if i and opts.delay_ms:
            await asyncio.sleep(opts.delay_ms / 1000)
        yield piece


async def reply(turn: TurnRequest):
    first, _, rest = turn.prompt.partition("\n")
    first = first.removesuffix("\r")
    word, _, arg = first.partition(" ")
    arg = arg.strip()
    if word == "/sleep":
        if not arg.isdigit():
            raise TurnError(f"/sleep needs a number of milliseconds, got `{arg}`")
        await asyncio.sleep(int(arg) / 1000)
    elif word in ("/hang", "/crash", "/config") and arg:
        raise TurnError(f"{word} takes no arguments, got `{arg}`")
    elif word == "/hang":
        yield "…"
        await asyncio.Event().wait()  # until interrupted (the task is cancelled)
    elif word == "/crash":
        yield (words(rest) or ["…"])[0]
        await turn.flush()
        os._exit(CRASH_STATUS)
    elif word == "/error":
        raise TurnError(arg or "engine error")
    elif word == "/config":
        rest = json.dumps(turn.config, separators=(",", ":"))
    elif word == "/tool":
        name, _, raw = arg.partition(" ")
        if not name:
            raise TurnError("/tool needs a NAME and JSON args")
        try:
            tool_args = json.loads(raw) if raw.strip() else {}
        except ValueError as err:
            raise TurnError(f"/tool {name}: the args are not JSON: {err}") from None
        yield ToolStart(name, tool_args)
        yield ToolComplete(name, tool_args)
    elif word == "/todo":
        yield Todos([t.strip() for t in arg.split(";") if t.strip()])
    elif word == "/big":
        if not arg.isdigit() or int(arg) > MAX_BIG:
            raise TurnError(f"/big needs a number of bytes up to {MAX_BIG}, got `{arg}`")
        n = int(arg)
        async for piece in stream("x" * min(BIG_CHUNK, n - i) for i in range(0, n, BIG_CHUNK)):
            yield piece
        return
    else:
        rest = turn.prompt  # not a directive: echo it whole
    async for piece in stream(words(rest)):
        yield piece


async def compress(req: ControlRequest):
    await asyncio.sleep(opts.compress_delay_ms / 1000)
    k = len(req.history)
    return {"summary": f"Summary of {k} messages.", "removed": k}


run(reply, compress=compress, engine="echo-python")
