"""Turns as an application sees them through the library: deltas that add
up to the reply, every way a turn can end, queued turns, the stream."""

import json

import pytest

import tether_client
from tether_client import GatewayClosed, RpcError, codes

from conftest import TETHER_BIN, read_until, seqs_of


@pytest.fixture
def gateway(start_gateway):
    # One word every 5 ms: turns stream in several frames.
    return start_gateway("--host-command", f"{TETHER_BIN} host --engine echo --delay-ms 5")


async def reassembled(turn):
    text, offset = "", 0
    async for d in turn.deltas():
        assert d.offset == offset, "each delta starts where the last ended"
        text += d.text
        offset += len(d.text.encode())
    return text


async def test_deltas_reassemble_to_the_complete_text(gateway):
    async with tether_client.connect(gateway.url) as gw:
        s = await gw.create_session(title="deltas")
        for prompt in ["the quick  brown fox jumps over the lazy dog ", "naïve café — 日本語 テキスト 🎉 done", "/big 5000"]:
            turn = await s.submit(prompt)
            assert turn.status == "started"
            assert turn.id.startswith("t_")
            text = await reassembled(turn)
            result = await turn.result()
            assert result["status"] == "complete"
            assert text == result["text"]
            assert result["text"] == ("x" * 5000 if prompt.startswith("/big") else prompt)


async def test_a_turns_events_include_its_tools_and_todos(gateway):
    async with tether_client.connect(gateway.url) as gw:
        s = await gw.create_session(title="tools")
        turn = await s.submit('/tool ls {"path":"/tmp"}\ndone')
        types = [ev["type"] async for ev in turn.events() if ev["type"] != "message.delta"]
        assert types == ["message.user", "message.start", "tool.start", "tool.complete", "message.complete"]
        await (await s.submit("/todo write tests; fix bugs\nok")).result()
        assert [i["text"] for i in s.todos["items"]] == ["write tests", "fix bugs"]


async def test_result_is_the_complete_payload_whatever_ended_the_turn(gateway):
    async with tether_client.connect(gateway.url) as gw:
        s = await gw.create_session(title="endings")
        failed = await (await s.submit("/error the model refused")).result()
        assert (failed["status"], failed["failure_reason"], failed["recoverable"]) == ("error", "engine_error", False)

        hang = await s.submit("/hang")
        queued = await s.submit("never runs")
        assert queued.status == "queued"
        async for d in hang.deltas():
            assert d.text == "…"
            break
        assert await hang.interrupt() == {"status": "interrupted"}
        stopped = await hang.result()
        assert (stopped["status"], stopped["text"]) == ("interrupted", "…")
        dropped = await queued.result()
        assert (dropped["status"], dropped["failure_reason"]) == ("interrupted", "dequeued")
        assert (await (await s.submit("still works")).result())["text"] == "still works"


async def test_queued_prompts_run_in_order(gateway):
    async with tether_client.connect(gateway.url) as gw:
        s = await gw.create_session(title="queue")
        turns = [await s.submit(t) for t in ["/sleep 200\none", "two", "three"]]
        assert [t.status for t in turns] == ["started", "queued", "queued"]
        assert [(await t.result())["text"] for t in turns] == ["one", "two", "three"]


async def test_the_stream_yields_every_durable_event_once_then_deltas_live(gateway):
    async with tether_client.connect(gateway.url) as gw:
        s = await gw.create_session(title="stream")
        stream = s.events()
        turn = await s.submit("alpha beta gamma")
        items = await read_until(stream, lambda e: e["type"] == "message.complete")
        assert seqs_of(items) == [1, 2, 3, 4]
        assert [e["type"] for e in items if "seq" in e] == ["session.created", "message.user", "message.start", "message.complete"]
        deltas = "".join(e["payload"]["text"] for e in items if e["type"] == "message.delta")
        assert deltas == (await turn.result())["text"]
        late = await read_until(s.events(), lambda e: e.get("seq") == 4)
        assert seqs_of(late) == [1, 2, 3, 4]
        nxt = await s.submit("more")
        tail = await read_until(s.events(since=4), lambda e: e["type"] == "message.complete")
        assert seqs_of(tail) == [5, 6, 7]
        await nxt.result()


async def test_refusals_carry_the_protocols_codes(gateway):
    async with tether_client.connect(gateway.url) as gw:
        with pytest.raises(RpcError) as err:
            await gw.session("s_01J00000000000000000000000").submit("x")
        assert err.value.code == codes.SESSION_NOT_FOUND
        s = await gw.create_session(title="closing")
        stream = s.events()
        await s.close()
        items = await read_until(stream, lambda e: e["type"] == "session.closed")
        assert items[-1]["payload"]["reason"] == "client"
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
        with pytest.raises(RpcError) as err:
            await s.submit("x")
        assert err.value.code == codes.SESSION_CLOSED
        with pytest.raises(RpcError) as err:
            await gw.call("no.such.method")
        assert err.value.code == codes.METHOD_NOT_FOUND


async def test_a_closed_gateway_object_ends_its_streams_and_refuses_its_calls(gateway):
    gw = await tether_client.connect(gateway.url)
    s = await gw.create_session(title="closing the object")
    stream = s.events()
    await read_until(stream, lambda e: e.get("seq") == 1)
    hang = await s.submit("/hang")
    await gw.close()
    assert gw.state == "closed"
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()
    for pending in (hang.result(), s.submit("x"), gw.sessions()):
        with pytest.raises(GatewayClosed):
            await pending
    async with tether_client.connect(gateway.url) as other:
        await other.session(s.id).interrupt()


async def test_submit_options_reject_interrupt_rollback_and_a_dedupe_key(gateway):
    async with tether_client.connect(gateway.url) as gw:
        s = await gw.create_session(title="multitask")
        hang = await s.submit("/hang")
        queued = await s.submit("queued one")
        with pytest.raises(RpcError) as err:
            await s.submit("not now", multitask="reject")
        assert err.value.code == codes.TURN_IN_PROGRESS
        instead = await s.submit("instead", multitask="interrupt", drop_queued=True, dedupe_key="k1")
        assert instead.status == "started"
        assert not instead.duplicate
        assert (await hang.result())["failure_reason"] == "superseded"
        assert (await queued.result())["failure_reason"] == "dequeued"
        twice = await s.submit("instead", dedupe_key="k1")
        assert twice.duplicate
        assert twice.id == instead.id
        assert (await instead.result())["text"] == "instead"

        long = await s.submit("/hang")
        async for d in long.deltas():
            assert d.text == "…"
            break
        rolled = await s.submit("/history", multitask="rollback")
        assert (await long.result())["failure_reason"] == "superseded"
        history = json.loads((await rolled.result())["text"])
        # The first `/hang` was interrupted, not rolled back: it stays.
        assert history[-1] == ["assistant", "instead"], history
        assert sum(text == "/hang" for _, text in history) == 1, history
