#!/usr/bin/env python3
"""A compute host that streams each turn from any OpenAI-compatible chat
completions server (OpenAI, Ollama, vLLM, llama.cpp's server), written with
tether_client.host and the standard library only.

    tether serve --host-command "python3 clients/python/examples/openai_host.py \\
        --base-url http://127.0.0.1:11434/v1 --model llama3.1:8b"

The session's history and the prompt become `messages`; the session's
engine config may set `model`, `temperature`, `top_p`, `max_tokens` and a
`system` message. `delta.content` streams as text, `reasoning_content` (or
`reasoning`) as reasoning, the last chunk's `usage` goes out with the turn's
end. An interrupt closes the connection, which stops the generation.
"""

import argparse
import asyncio
import json
import os
import socket
import threading
from http.client import HTTPConnection, HTTPSConnection
from urllib.parse import urlsplit

from tether_client.host import ControlRequest, Reasoning, TurnError, TurnRequest, Usage, run

args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
args.add_argument("--base-url", required=True, help="the API root, e.g. http://127.0.0.1:11434/v1")
args.add_argument("--model", required=True, help="unless the session's engine config names another")
args.add_argument("--api-key-env", default="OPENAI_API_KEY", help="the variable holding the API key (unset: none sent)")
args.add_argument("--timeout-s", type=float, default=60, help="seconds without a byte before a turn fails")
opts = args.parse_args()
API_KEY = os.environ.get(opts.api_key_env) or None

SUMMARY_REQUEST = ("Summarize the conversation so far, for yourself: it will replace the conversation "
                   "in your context. Keep the facts, decisions, open questions and anything the user "
                   "asked you to remember. Answer with the summary only.")


def messages(history, prompt, system=None):
    out = [{"role": "system", "content": system}] if system else []
    for m in history:
        role, text = m.get("role"), m.get("text", "")
        if role == "assistant" and not text:
            continue
        if role == "tool":
            role, text = "user", f"Tool result: {text}"
        out.append({"role": role if role in ("user", "assistant", "system") else "user", "content": text})
    out.append({"role": "user", "content": prompt})
    return out


def body_for(turn: TurnRequest):
    config = turn.config
    body = {
        "model": config.get("model") or opts.model,
        "messages": messages(turn.history, turn.prompt, config.get("system")),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    for key in ("temperature", "top_p", "max_tokens"):
        if config.get(key) is not None:
            body[key] = config[key]
    return body


async def chunks(body):
    """The server's streamed chunks, read on a thread (http.client blocks);
    leaving early shuts the socket down, which ends the thread's read."""
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()
    holder = []

    def put(item):
        loop.call_soon_threadsafe(queue.put_nowait, item)

    def work():
        try:
            url = urlsplit(opts.base_url.rstrip("/") + "/chat/completions")
            kind = HTTPSConnection if url.scheme == "https" else HTTPConnection
            conn = kind(url.hostname, url.port, timeout=opts.timeout_s)
            conn.connect()
            # The socket itself: http.client hands it to the response and
            # forgets it when the server streams until it closes.
            holder.append(conn.sock)
            headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
            if API_KEY:
                headers["Authorization"] = f"Bearer {API_KEY}"
            conn.request("POST", url.path, body=json.dumps(body), headers=headers)
            resp = conn.getresponse()
            if resp.status != 200:
                put(("error", f"the model server answered HTTP {resp.status}: {resp.read(2000).decode(errors='replace')}"))
                return
            for raw in resp:
                line = raw.decode("utf-8", errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                put(("chunk", json.loads(data)))
            put(("end", None))
        except Exception as err:  # noqa: BLE001 - reported as the turn's failure
            put(("error", f"the model request failed: {err}"))

    threading.Thread(target=work, daemon=True).start()
    try:
        while True:
            kind, value = await queue.get()
            if kind == "end":
                return
            if kind == "error":
                raise TurnError(value)
            if "error" in value:
                raise TurnError(f"the model server failed: {value['error']}")
            yield value
    finally:
        if holder:
            try:
                holder[0].shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


async def reply(turn: TurnRequest):
    async for chunk in chunks(body_for(turn)):
        if chunk.get("usage"):
            yield Usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning:
                yield Reasoning(reasoning)
            if delta.get("content"):
                yield delta["content"]


async def compress(req: ControlRequest):
    ask = SUMMARY_REQUEST + (f" Focus on: {req.args['focus']}" if req.args.get("focus") else "")
    body = {"model": opts.model, "messages": messages(req.history, ask), "stream": True}
    parts = []
    async for chunk in chunks(body):
        for choice in chunk.get("choices") or []:
            parts.append((choice.get("delta") or {}).get("content") or "")
    summary = "".join(parts).strip()
    if not summary:
        raise RuntimeError("the model answered the compress with an empty summary")
    return {"summary": summary, "removed": len(req.history)}


run(reply, compress=compress, engine="openai-python")
