"""100 sessions on one connection: turns in all of them at once, each
session's events kept apart, and the list paged to its end."""

import asyncio

import tether_client

from conftest import read_until, seqs_of


async def test_100_sessions_on_one_connection(start_gateway):
    g = start_gateway("--synchronous", "normal")
    async with tether_client.connect(g.url) as gw:
        sessions = await asyncio.gather(*(gw.create_session(title=f"s{i}") for i in range(100)))
        assert len({s.id for s in sessions}) == 100
        streams = [s.events() for s in sessions]
        turns = await asyncio.gather(*(s.submit(f"reply {i} from its own session") for i, s in enumerate(sessions)))
        results = await asyncio.gather(*(t.result() for t in turns))
        for i, r in enumerate(results):
            assert r["text"] == f"reply {i} from its own session"

        async def check(i):
            items = await read_until(streams[i], lambda e: e["type"] == "message.complete")
            assert all(e["session_id"] == sessions[i].id for e in items), "only its own events"
            assert seqs_of(items) == [1, 2, 3, 4]
            assert "".join(e["payload"]["text"] for e in items if e["type"] == "message.delta") == results[i]["text"]

        await asyncio.gather(*(check(i) for i in range(100)))
        listed = await gw.sessions(page_size=7)
        assert {i["session_id"] for i in listed} == {s.id for s in sessions}
        assert len(listed) == 100
