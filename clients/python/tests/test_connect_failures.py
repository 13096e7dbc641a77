"""What a newcomer runs into before anything works, said at once or within
the connect timeout, never a silent wait: a URL that cannot work raises at
`connect`; an unreachable gateway is retried with backoff, every attempt
visible as a "state" change with its reason, and a request that waited
`connect_timeout` for a connection raises Unreachable (while the object
keeps trying, and connects once there is a gateway to connect to)."""

import asyncio
import re

import pytest

import tether_client
from tether_client import Backoff, Unreachable, ws_url

from conftest import free_port
from fake_gateway import FakeGateway

FAST = Backoff(0.02, 0.1)


def test_a_url_that_cannot_work_raises_at_connect_at_once():
    for bad in ["ws://exa mple:1/ws", "ws://h:99999/ws", "ftp://h/ws", "ws://:1/ws", ""]:
        with pytest.raises(ValueError, match="gateway URL"):
            tether_client.connect(bad)
    with pytest.raises(ValueError):
        tether_client.connect("ws://h:1/ws", connect_timeout=-1)
    assert ws_url(":7878") == "ws://127.0.0.1:7878/ws", "as for `tether serve --listen :7878`"


async def test_a_dead_port_is_retried_visibly_and_a_request_fails_after_the_connect_timeout():
    port = free_port()
    fake = None
    async with tether_client.connect(f"ws://127.0.0.1:{port}/ws", connect_timeout=0.5, backoff=FAST) as gw:
        states = []
        gw.on("state", states.append)
        try:
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(Unreachable) as err:
                await gw.create_session(title="x")
            assert re.search(r"could not connect to ws://127\.0\.0\.1:\d+/ws within 0\.\d s", str(err.value))
            assert "Connect call failed" in str(err.value) or "refused" in str(err.value), str(err.value)
            assert err.value.attempts >= 1
            assert loop.time() - started < 5, "within the connect timeout, give or take a loaded machine"
            with pytest.raises(Unreachable):
                await gw.opened()
            assert states[0]["state"] == "connecting"
            retries = [s for s in states if s["state"] == "reconnecting"]
            assert len(retries) >= 2, "retried with backoff"
            assert isinstance(retries[0]["error"], OSError)
            assert all(s["delay"] > 0 and s["attempt"] > 0 for s in retries)

            # Still trying: a gateway that appears is connected to.
            fake = await FakeGateway.start(lambda *a: {"sessions": [], "next_cursor": None}, port=port)
            assert (await asyncio.wait_for(gw.opened(), 10))["server"] == "fake"
            assert await gw.sessions() == []
        finally:
            if fake is not None:
                await fake.close()


async def test_an_attempt_that_is_never_answered_is_given_up_after_the_connect_timeout():
    # A TCP listener that accepts and says nothing; then a WebSocket server
    # that upgrades and says nothing (not a tether gateway).
    async def mute(reader, writer):
        await reader.read()

    silent_tcp = await asyncio.start_server(mute, "127.0.0.1", 0)
    silent_ws = await FakeGateway.start(lambda *a: None)
    silent_ws.silent = True
    try:
        tcp_url = "ws://127.0.0.1:%d/ws" % silent_tcp.sockets[0].getsockname()[1]
        for url, why in [(tcp_url, "no answer within 0.3 s"), (silent_ws.url, "no gateway.ready within 0.3 s")]:
            async with tether_client.connect(url, connect_timeout=0.3, backoff=FAST) as gw:
                retry = asyncio.get_running_loop().create_future()
                gw.on("reconnecting", lambda s: retry.done() or retry.set_result(s))
                r = await asyncio.wait_for(retry, 10)
                assert why in str(r["error"]), (url, r)
                with pytest.raises(Unreachable):
                    await gw.call("session.list")
    finally:
        silent_tcp.close()
        await silent_ws.close()
