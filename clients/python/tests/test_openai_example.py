"""examples/openai_host.py behind the real gateway, against a fake
OpenAI-compatible server in this process: the reply streams through, the
history and the session's engine config reach the server, usage comes back
with the turn's end, and an interrupt closes the model's connection."""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import tether_client

from conftest import EXAMPLES, read_until


class FakeModel(BaseHTTPRequestHandler):
    requests: list = []
    closed = threading.Event()

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeModel.requests.append({"body": body, "auth": self.headers.get("Authorization")})
        prompt = body["messages"][-1]["content"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

        def chunk(obj):
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            self.wfile.flush()

        try:
            if prompt.startswith("Summarize"):
                chunk({"choices": [{"delta": {"content": "They said hello."}, "finish_reason": "stop"}]})
            elif prompt == "slow":
                for _ in range(600):
                    chunk({"choices": [{"delta": {"content": "tick "}}]})
                    time.sleep(0.05)
            else:
                chunk({"choices": [{"delta": {"reasoning_content": "hmm"}}]})
                for word in ("Hello ", "from ", "the ", "model."):
                    chunk({"choices": [{"delta": {"content": word}}]})
                chunk({"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": {"total_tokens": 7}})
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            FakeModel.closed.set()


@pytest.fixture
def model():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeModel)
    FakeModel.requests = []
    FakeModel.closed.clear()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


async def test_the_openai_example_streams_a_turn_end_to_end(start_gateway, model, monkeypatch):
    monkeypatch.setenv("TEST_MODEL_KEY", "sk-test")
    host = f"{sys.executable} {EXAMPLES / 'openai_host.py'} --base-url {model} --model fake --api-key-env TEST_MODEL_KEY"
    g = start_gateway("--hosts", "1", "--host-command", host)
    async with tether_client.connect(g.url) as gw:
        s = await gw.create_session(title="model", engine={"system": "be brief", "temperature": 0.5})
        stream = s.events()
        turn = await s.submit("hi there")
        text = "".join([d.text async for d in turn.deltas()])
        result = await turn.result()
        assert text == result["text"] == "Hello from the model."
        assert result["usage"] == {"total_tokens": 7}
        items = await read_until(stream, lambda e: e["type"] == "message.complete")
        assert [e["payload"]["text"] for e in items if e["type"] == "reasoning.delta"] == ["hmm"]

        sent = FakeModel.requests[-1]
        assert sent["auth"] == "Bearer sk-test"
        assert sent["body"]["model"] == "fake"
        assert sent["body"]["temperature"] == 0.5
        assert sent["body"]["messages"] == [{"role": "system", "content": "be brief"},
                                            {"role": "user", "content": "hi there"}]

        second = await s.submit("again")
        await second.result()
        history = FakeModel.requests[-1]["body"]["messages"]
        assert [m["role"] for m in history] == ["system", "user", "assistant", "user"]

        compressed = await s.compress()
        assert compressed["status"] == "compressed"

        slow = await s.submit("slow")
        async for d in slow.deltas():
            break
        await slow.interrupt()
        assert (await slow.result())["status"] == "interrupted"
        assert FakeModel.closed.wait(10), "the interrupt closed the model's connection"
