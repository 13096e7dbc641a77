"""Two applications on one session (two connections): the same durable
events in the same order, and each one's turns seen by the other."""

import tether_client

from conftest import read_until


def durable(items):
    return [(e["seq"], e["type"], e.get("turn_id")) for e in items if "seq" in e]


async def test_two_clients_on_one_session_see_the_same_events(start_gateway):
    g = start_gateway()
    async with tether_client.connect(g.url) as a, tether_client.connect(g.url) as b:
        sa = await a.create_session(title="shared")
        sb = b.session(sa.id)
        stream_a, stream_b = sa.events(), sb.events()
        from_a = await sa.submit("from a")
        await from_a.result()
        from_b = await sb.submit('/tool grep {"q":1}\nfrom b')
        assert (await from_b.result())["text"] == "from b"

        def last(e):
            return e["type"] == "message.complete" and e["turn_id"] == from_b.id

        seen_a = await read_until(stream_a, last)
        seen_b = await read_until(stream_b, last)
        assert durable(seen_a) == durable(seen_b)
        assert [d[0] for d in durable(seen_a)] == list(range(1, len(durable(seen_a)) + 1))
        for seen in (seen_a, seen_b):
            for turn in (from_a, from_b):
                text = "".join(e["payload"]["text"] for e in seen if e["type"] == "message.delta" and e["turn_id"] == turn.id)
                complete = next(e for e in seen if e["type"] == "message.complete" and e["turn_id"] == turn.id)
                assert text == complete["payload"]["text"]
        assert sb.info["peers"] == 2
