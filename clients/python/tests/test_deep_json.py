"""Any JSON the gateway may send is survived: an event nested 200,000
levels deep (a compute host's payload, stored before the gateway bounded
them) is delivered in its place, with what is deeper than MAX_DEPTH left
out, whether it comes live, in a page of `session.events.since` or in a
resume's replay, and the session goes on (the next submit answers, its turn
ends). A frame that is not JSON at all resets the connection rather than
leave its request waiting forever. The real gateway sends neither (it
refuses deep host payloads), hence a fake one."""

import asyncio
import json

import pytest

import tether_client
from tether_client import MAX_DEPTH, TOO_DEEP, Backoff, ConnectionLost
from tether_client._decode import cut_text, decode_frame

from conftest import next_state, read_until, seqs_of
from fake_gateway import FakeGateway, Raw, deep_json

DEPTH = 200_000
FAST = Backoff(0.02, 0.1)


def depth_of(value):
    """Depth of a decoded value, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def test_a_value_nested_deeper_than_max_depth_is_cut_and_the_rest_kept():
    text = '{"a":"[[{{\\"]]","deep":' + deep_json(DEPTH) + ',"b":[1,{"c":"}"}]}'
    value, cut = decode_frame(text)
    assert cut
    assert value["a"] == '[[{{"]]'
    assert value["b"] == [1, {"c": "}"}]
    assert depth_of(value) == MAX_DEPTH
    assert json.dumps(TOO_DEEP) in json.dumps(value)
    shallow = '{"x":' + deep_json(MAX_DEPTH - 1) + "}"
    assert decode_frame(shallow) == (json.loads(shallow), False)
    assert cut_text(shallow) == shallow
    # Deeper than MAX_DEPTH but within what `json` decodes: cut all the same.
    middle = '{"x":' + deep_json(MAX_DEPTH + 100) + "}"
    assert depth_of(decode_frame(middle)[0]) == MAX_DEPTH
    with pytest.raises(ValueError):
        decode_frame("{not json")


class Store:
    """One session whose events the test appends to, kept as JSON text
    (json.dumps cannot write them), and the fake gateway's answers."""

    def __init__(self):
        self.events = []
        self.turns = 0
        self.info = {
            "session_id": "s_1", "profile": "default", "title": "deep", "status": "idle", "created_at": "t",
            "updated_at": "t", "parent_session_id": None, "history_version": 1, "message_count": 0,
            "latest_seq": 0, "peers": 1, "close_on_disconnect": False,
        }

    def add(self, kind, extra="", payload="{}"):
        seq = len(self.events) + 1
        self.events.append(f'{{"type":"{kind}","session_id":"s_1","seq":{seq}{extra},"ts":"t","payload":{payload}}}')
        return self.events[-1]

    def deep_tool(self, seq):
        return self.add("tool.complete", "", f'{{"name":"x","result":{deep_json(DEPTH)},"seq_was":{seq}}}')

    async def answer(self, method, params, conn, rid):
        head = f'{{"jsonrpc":"2.0","id":{rid},"result":'
        latest = len(self.events)
        since = ",".join(self.events[params.get("last_seen", 0):])
        if method == "session.resume":
            extra = ""
            if "last_seen" in params:
                extra = f',"events":[{since}],"resync":false,"truncated":false'
            return Raw(head + f'{{"session":{json.dumps(self.info)},"epoch":"e_fake","latest_seq":{latest},'
                       f'"active_turn":null,"todos":null{extra}}}}}')
        if method == "session.events.since":
            return Raw(head + f'{{"events":[{since}],"latest_seq":{latest},"truncated":false,"has_more":false,'
                       '"epoch":"e_fake"}}')
        if method == "prompt.submit":
            self.turns += 1
            turn = f',"turn_id":"t_{self.turns}"'
            user = self.add("message.user", turn, json.dumps({"text": params["text"]}))
            done = self.add("message.complete", turn, json.dumps({"text": params["text"], "status": "complete"}))

            async def later():
                await asyncio.sleep(0.01)
                for ev in (user, done):
                    await conn.send(f'{{"jsonrpc":"2.0","method":"event","params":{ev}}}')

            asyncio.get_running_loop().create_task(later())
            return {"turn_id": f"t_{self.turns}", "trace_id": f"tr_{self.turns}", "status": "started"}
        raise LookupError(f"not in this fake: {method}")


async def test_deep_events_arrive_in_their_place_and_the_session_goes_on():
    store = Store()
    store.add("session.created")
    store.deep_tool(2)
    store.add("status.update", "", '{"kind":"ready"}')
    fake = await FakeGateway.start(store.answer)
    try:
        async with tether_client.connect(fake.url, backoff=FAST) as gw:
            errors = []
            gw.on("error", errors.append)
            s = gw.session("s_1")
            stream = s.events()
            # From a page of session.events.since.
            first = await read_until(stream, lambda e: e.get("seq") == 3)
            assert seqs_of(first) == [1, 2, 3]
            deep = first[1]
            assert (deep["type"], deep["payload"]["name"]) == ("tool.complete", "x")
            assert json.dumps(TOO_DEEP) in json.dumps(deep), "what was too deep is left out, visibly"
            assert any("nested deeper than" in str(e) for e in errors), "and the application is told"

            # Live.
            live = store.deep_tool(4)
            for c in list(fake.conns):
                await c.send(f'{{"jsonrpc":"2.0","method":"event","params":{live}}}')
            (four,) = await read_until(stream, lambda e: e.get("seq") == 4)
            assert four["payload"]["seq_was"] == 4

            # In a resume's replay, after a drop.
            back = await next_state(gw, "open")
            fake.cut()
            store.deep_tool(5)
            await back
            (five,) = await read_until(stream, lambda e: e.get("seq") == 5)
            assert five["payload"]["seq_was"] == 5
            assert s.latest_seq == 5

            turn = await asyncio.wait_for(s.submit("still here"), 10)
            assert (await asyncio.wait_for(turn.result(), 10))["text"] == "still here"
            rest = await read_until(stream, lambda e: e["type"] == "message.complete")
            assert seqs_of(rest) == [6, 7]
    finally:
        await fake.close()


async def test_an_answer_that_is_not_json_resets_the_connection_and_nothing_hangs():
    garbled = set()

    def answer(method, params, conn, rid):
        # The first answer to each method is cut short.
        if method not in garbled:
            garbled.add(method)
            return Raw(f'{{"jsonrpc":"2.0","id":{rid},')
        return {"sessions": [], "next_cursor": None} if method == "session.list" else {"status": "idle"}

    fake = await FakeGateway.start(answer)
    try:
        async with tether_client.connect(fake.url, backoff=FAST) as gw:
            errors = []
            gw.on("error", errors.append)
            assert await asyncio.wait_for(gw.sessions(), 10) == [], "the read was asked again on a new connection"
            with pytest.raises(ConnectionLost):
                await asyncio.wait_for(gw.call("session.interrupt", {"session_id": "s_1"}), 10)
            assert any("not JSON" in str(e) for e in errors)
            assert await asyncio.wait_for(gw.call("session.interrupt", {"session_id": "s_1"}), 10) == {"status": "idle"}
            assert fake.connections == 3, "a new connection after each frame that was not JSON"
    finally:
        await fake.close()
