"""A client cut off through a proxy the test owns. Mid-turn: the deltas
missed while away are made up from the resume's `active_turn` and the turn's
`message.complete`. For long: more events than a resume replays, so the
gateway answers `resync` and the library pages `session.events.since`
(`has_more`); a stream that starts late reads the history the same way."""

import tether_client
from tether_client import Backoff

from conftest import TETHER_BIN, CutProxy, next_state, read_until, seqs_of

FAST = Backoff(0.05, 0.2)


def words(prefix, n):
    return " ".join(f"{prefix}{i}" for i in range(1, n + 1))


def streamed(items, turn_id):
    return "".join(e["payload"]["text"] for e in items if e["type"] == "message.delta" and e["turn_id"] == turn_id)


async def test_deltas_missed_during_a_cut_are_made_up_in_order(start_gateway):
    g = start_gateway("--host-command", f"{TETHER_BIN} host --engine echo --delay-ms 15")
    proxy = await CutProxy.start(g.addr)
    try:
        async with tether_client.connect(proxy.url, backoff=FAST) as gw, tether_client.connect(g.url) as other:
            s = await gw.create_session(title="cut")
            stream = s.events()
            first = await s.submit(words("w", 60))
            seen = await read_until(stream, lambda e: e["type"] == "message.delta" and e["payload"]["offset"] > 10)
            dropped = await next_state(gw, "reconnecting")
            proxy.cut()
            await dropped
            watching = other.session(s.id).events(since=s.latest_seq)
            second = await other.session(s.id).submit(words("z", 80))
            await read_until(watching, lambda e: e["type"] == "message.complete" and e["turn_id"] == first.id)
            await read_until(watching, lambda e: e["type"] == "message.delta" and e["turn_id"] == second.id and e["payload"]["offset"] > 20)
            back = await next_state(gw, "open")
            proxy.restore()
            await back
            rest = await read_until(stream, lambda e: e["type"] == "message.complete" and e["turn_id"] == second.id)
            items = seen + rest
            seqs = seqs_of(items)
            assert seqs == list(range(1, seqs[-1] + 1))
            for turn_id, text in ((first.id, words("w", 60)), (second.id, words("z", 80))):
                assert streamed(items, turn_id) == text
                kinds = [e["type"] for e in items if e.get("turn_id") == turn_id]
                assert kinds[-1] == "message.complete", "no delta after its turn's end"
            assert "".join([d.text async for d in first.deltas()]) == words("w", 60)
    finally:
        await proxy.close()


async def test_a_resync_after_a_long_absence_is_paged_through(start_gateway):
    g = start_gateway("--max-replay-events", "50", "--synchronous", "normal")
    proxy = await CutProxy.start(g.addr)
    try:
        async with tether_client.connect(proxy.url, backoff=FAST) as away, tether_client.connect(g.url) as other:
            s = await away.create_session(title="resync")
            stream = s.events()
            await read_until(stream, lambda e: e.get("seq") == 1)
            dropped = await next_state(away, "reconnecting")
            proxy.cut()
            await dropped
            # 2500 events while away: a resync, and more than one page (1000).
            turn = await other.session(s.id).submit("/flood 2500 1000000 16\nwhile away")
            assert (await turn.result())["text"] == "while away"
            back = await next_state(away, "open")
            proxy.restore()
            await back
            items = await read_until(stream, lambda e: e["type"] == "message.complete")
            assert seqs_of(items) == list(range(2, 2505))
            late = await read_until(s.events(), lambda e: e.get("seq") == 2504)
            assert seqs_of(late) == list(range(1, 2505))
    finally:
        await proxy.close()
