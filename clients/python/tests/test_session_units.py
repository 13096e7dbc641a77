"""The session's and the stream's rules without a gateway: a stub answers
`session.events.since` from an in-memory store, and the test feeds live
frames as the connection would, including ones the real gateway never sends
(a gap), to see the library cope."""

import asyncio

from tether_client import Backoff
from tether_client._session import Session


def durable(seq, kind="tool.start", **extra):
    return {"type": kind, "session_id": "s_1", "seq": seq, "payload": {}, **extra}


def delta(turn, offset, text):
    return {"type": "message.delta", "session_id": "s_1", "turn_id": turn, "payload": {"offset": offset, "text": text}}


class Stub:
    """What a Session uses of the gateway object, and a store behind it."""

    def __init__(self, store):
        self.store = store
        self.asked = []
        self.state = "open"
        self.generation = 1
        self._failure = None
        self._max_buffered = None
        self._backoff = Backoff()

    async def call(self, method, params):
        self.asked.append((method, params["last_seen"]))
        events = [e for e in self.store if e["seq"] > params["last_seen"]][: params["limit"]]
        return {"events": events, "has_more": bool(events) and events[-1]["seq"] < self.store[-1]["seq"],
                "latest_seq": self.store[-1]["seq"], "truncated": False}

    async def _call_on(self, generation, method, params):
        return await self.call(method, params)

    async def _request(self, method, params, timeout):
        return await self.call(method, params)

    def _emit(self, name, value):
        pass

    def session(self, sid):
        raise AssertionError("not used")


async def take(stream, n):
    return [await stream.__anext__() for _ in range(n)]


def created(gw):
    s = Session(gw, "s_1")
    s._created({"session": {"session_id": "s_1"}}, 1, [])
    return s


async def test_a_live_gap_is_filled_from_the_store_before_anything_after_it():
    store = [durable(i) for i in range(1, 7)]
    gw = Stub(store)
    s = created(gw)
    stream = s.events()
    for ev in (store[0], store[1], store[4], delta("t_1", 0, "after five"), store[5]):
        s._on_live(ev)
    got = await take(stream, 7)
    assert [e.get("seq", e["payload"].get("text")) for e in got] == [1, 2, 3, 4, 5, "after five", 6]
    assert s.latest_seq == 6
    assert gw.asked[0] == ("session.events.since", 2)


async def test_a_stream_that_falls_behind_its_bound_reads_the_store():
    store = [durable(i) for i in range(1, 51)]
    s = created(Stub(store))
    stream = s.events(max_buffered=5)
    for ev in store:
        s._on_live(ev)
    assert [e["seq"] for e in await take(stream, 50)] == list(range(1, 51))


async def test_duplicates_are_dropped_and_deltas_trimmed_to_what_is_new():
    store = [durable(1, "message.start", turn_id="t_1")]
    s = created(Stub(store))
    stream = s.events()
    s._on_live(store[0])
    s._on_live(store[0])
    s._on_live(delta("t_1", 0, "hello "))
    s._on_live(delta("t_1", 0, "hello wor"))
    s._on_live(delta("t_1", 20, "lost"))
    complete = durable(2, "message.complete", turn_id="t_1", payload={"text": "hello world", "status": "complete"})
    store.append(complete)
    s._on_live(complete)
    got = await take(stream, 5)
    assert [(e.get("seq"), e["payload"].get("offset"), e["payload"].get("text")) for e in got] == [
        (1, None, None), (None, 0, "hello "), (None, 6, "wor"), (None, 9, "ld"), (2, None, "hello world")]


async def test_a_stream_asked_for_events_beyond_the_store_is_told_the_history_went_back():
    store = [durable(i) for i in range(1, 4)]
    s = created(Stub(store))
    for ev in store:
        s._on_live(ev)
    # A `since` the application kept from before the store was restored.
    stream = s.events(since=5)
    first = await asyncio.wait_for(take(stream, 1), 5)
    assert first == [{"type": "reset", "session_id": "s_1", "reason": "rollback", "after": 3, "upto": 5}]
    store.append(durable(4))
    s._on_live(store[3])
    assert [e["seq"] for e in await take(stream, 1)] == [4], "seq 4 is new, not a duplicate"
