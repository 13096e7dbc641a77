"""A consumer that stops reading (here: it blocks the event loop, as CPU
work between two events does) while a turn floods its session with durable
events: the gateway closes it with 1013 "slow consumer" (PROTOCOL 1.8), and
the library resumes from its watermark with nothing lost or doubled."""

import time

import tether_client
from tether_client import Backoff

from conftest import next_state, read_until, seqs_of


async def test_a_consumer_closed_1013_as_slow_resumes_with_every_event_once(start_gateway):
    # A small outbox, so a few stalled seconds overflow it.
    g = start_gateway("--outbox-frames", "16", "--synchronous", "normal")
    async with tether_client.connect(g.url, backoff=Backoff(0.05, 0.5)) as gw:
        s = await gw.create_session(title="slow")
        stream = s.events()
        slow = await next_state(gw, "reconnecting", lambda c: c.get("code") == 1013)
        # 5000 durable events of 8 KiB (40 MiB): far more than the socket buffers hold.
        turn = await s.submit("/flood 5000 1000000 8192\nflooded")
        first = await read_until(stream, lambda e: e["type"] == "tool.start")
        time.sleep(3.5)  # the whole event loop stops: nothing is read
        closed = await slow
        assert closed["reason"] == "slow consumer"
        rest = await read_until(stream, lambda e: e["type"] == "message.complete" and e["turn_id"] == turn.id)
        seqs = seqs_of(first + rest)
        assert seqs == list(range(1, seqs[-1] + 1)), "every durable event once, in order"
        assert sum(e["type"] == "tool.start" for e in first + rest) == 5000
        assert (await turn.result())["text"] == "flooded"
        stats = await gw.call("session.events.stats")
        assert stats["outbox"]["slow_consumer_closes"] >= 1
        assert gw.state == "open"
