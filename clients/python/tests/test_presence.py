"""Presence through the library: each object describes itself on every
connection, a session's `presence()` lists who is attached, and
`on_presence` hears joins and leaves (PROTOCOL Part 4, "Presence")."""

import asyncio
from typing import Any, Callable

import pytest

import tether_client

from conftest import WAIT_S


@pytest.fixture
def gateway(start_gateway):
    return start_gateway()


async def change(session: Any, pick: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The first presence change `pick` accepts."""
    fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    def heard(c: dict[str, Any]) -> None:
        if pick(c) and not fut.done():
            fut.set_result(c)

    off = session.on_presence(heard)
    try:
        return await asyncio.wait_for(fut, WAIT_S)
    finally:
        off()


async def test_two_clients_see_each_other_join_and_leave(gateway):
    async with tether_client.connect(gateway.url, client={"name": "ann", "device": "laptop"}) as ann:
        s = await ann.create_session(title="presence")
        bob = tether_client.connect(gateway.url, client={"name": "bob", "meta": {"seat": 2}})
        bob_ready = await bob.opened()
        bob_joined = asyncio.ensure_future(
            change(s, lambda c: c["type"] == "joined" and any(p["peer_id"] == bob_ready["peer_id"] for p in c["peers"]))
        )
        bobs = bob.session(s.id)
        ann_seen = asyncio.ensure_future(change(bobs, lambda c: c["type"] == "joined"))
        joined = await bob_joined
        entry = next(p for p in joined["peers"] if p["peer_id"] == bob_ready["peer_id"])
        assert entry["client"]["name"] == "bob"
        assert entry["client"]["meta"] == {"seat": 2}
        assert entry["client"]["instance"].startswith("i-"), "the library names its instance"
        await ann_seen

        peers = await bobs.presence()
        assert sorted(p["client"]["name"] for p in peers) == ["ann", "bob"]
        assert all(p["profile"] == bob_ready["profile"] and p["transport"] == "ws" for p in peers)

        left = asyncio.ensure_future(change(s, lambda c: c["type"] == "left"))
        await bob.close()
        gone = await left
        assert [p["peer_id"] for p in gone["peers"]] == [bob_ready["peer_id"]]
        assert len(await s.presence()) == 1
