"""The gateway dies under the application (kill -9 mid-turn, then SIGTERM's
drain) and comes back on the same port: the library reconnects by itself,
every durable event reaches the consumer once, the interrupted turn's
result is its `gateway_restart` (or `gateway_shutdown`) end, and the next
submit works."""

import tether_client
from tether_client import Backoff

from conftest import TETHER_BIN, free_port, next_state, read_until, seqs_of

FAST = Backoff(initial=0.05, maximum=0.5)


async def stored(url, session_id):
    async with tether_client.connect(url) as probe:
        r = await probe.call("session.events.since", {"session_id": session_id, "last_seen": 0, "limit": 10000})
        return r["events"]


async def test_kill_9_mid_turn_then_restart_loses_and_doubles_nothing(start_gateway):
    g = start_gateway("--host-command", f"{TETHER_BIN} host --engine echo --delay-ms 20", port=free_port())
    states = []
    async with tether_client.connect(g.url, backoff=FAST) as gw:
        gw.on("state", lambda c: states.append(c["state"]))
        s = await gw.create_session(title="restart")
        stream = s.events()
        await (await s.submit("a short one")).result()
        turn = await s.submit("/hang")
        before = await read_until(stream, lambda e: e["type"] == "message.delta" and e["turn_id"] == turn.id)

        reopened = await next_state(gw, "open")
        g.restart()
        await reopened

        result = await turn.result()
        assert (result["status"], result["failure_reason"], result["recoverable"]) == ("error", "gateway_restart", True)
        nxt = await s.submit("after the restart")
        assert "".join([d.text async for d in nxt.deltas()]) == "after the restart"
        assert (await nxt.result())["text"] == "after the restart"

        rest = await read_until(stream, lambda e: e["type"] == "message.complete" and e["turn_id"] == nxt.id)
        seen = seqs_of(before + rest)
        assert seen == seqs_of(await stored(g.url, s.id))
        assert seen == list(range(1, seen[-1] + 1)), "each durable event once, in order"
        end = next(e for e in rest if e["type"] == "message.complete" and e["turn_id"] == turn.id)
        assert end["payload"]["failure_reason"] == "gateway_restart"
        assert "reconnecting" in states
        assert gw.state == "open"


async def test_sigterm_drains_then_the_library_resumes(start_gateway):
    g = start_gateway(port=free_port())
    async with tether_client.connect(g.url, backoff=FAST) as gw:
        s = await gw.create_session(title="drain")
        stream = s.events()
        turn = await s.submit("/hang")
        await read_until(stream, lambda e: e["type"] == "message.delta")
        dropped = await next_state(gw, "reconnecting")
        g.terminate()
        assert (await dropped)["code"] == 1001, "the drain closes clients with 1001"
        result = await turn.result()
        assert (result["status"], result["failure_reason"], result["recoverable"]) == ("interrupted", "gateway_shutdown", True)

        reopened = await next_state(gw, "open")
        g.spawn()
        await reopened
        nxt = await s.submit("back")
        assert (await nxt.result())["text"] == "back"
        items = await read_until(stream, lambda e: e["type"] == "message.complete" and e["turn_id"] == nxt.id)
        seqs = seqs_of(items)
        assert seqs == list(range(seqs[0], seqs[-1] + 1)), "no gap and no duplicate across the drain"
