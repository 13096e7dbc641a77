"""The gateway comes back with an older copy of its own store (a backup
restored; the same epoch, fewer events): the session's history went back.
The library says so (a `reset` item, reason `rollback`, on every stream
that yielded what is gone, and on the gateway object), fails the turns that
were lost with it, and takes the store's new events in as new, in order,
none dropped as a duplicate of a lost event with the same seq."""

import shutil
import tempfile

import pytest

import tether_client
from tether_client import Backoff, ResetError

from conftest import free_port, next_state, read_until, seqs_of


async def test_a_store_restored_from_an_older_copy_is_surfaced_as_a_rollback(start_gateway):
    g = start_gateway(port=free_port())
    copy = tempfile.mkdtemp(prefix="tether-py-rollback-")
    try:
        async with tether_client.connect(g.url, backoff=Backoff(0.05, 0.5)) as gw:
            resets = []
            gw.on("reset", resets.append)
            s = await gw.create_session(title="rolled back")
            stream = s.events()
            await (await s.submit("one")).result()
            await read_until(stream, lambda e: e["type"] == "message.complete")
            kept = s.latest_seq
            epoch = gw.epoch

            # The backup: the data directory of the stopped gateway.
            reopened = await next_state(gw, "open")
            g.kill9()
            shutil.copytree(g.data_dir, copy, dirs_exist_ok=True)
            g.spawn()
            await reopened
            await (await s.submit("two")).result()
            await (await s.submit("three")).result()
            hang = await s.submit("/hang")
            await read_until(stream, lambda e: e["type"] == "message.delta" and e["turn_id"] == hang.id)
            seen = s.latest_seq
            assert seen > kept + 4, f"more was taken in after the copy ({kept} then {seen})"

            # The backup restored.
            reopened = await next_state(gw, "open")
            g.restart(data_dir=copy)
            await reopened
            with pytest.raises(ResetError) as err:
                await hang.result()
            assert err.value.reason == "rollback"
            assert resets == [{"reason": "rollback", "session_id": s.id, "epoch": epoch, "after": kept, "upto": seen}]
            assert gw.epoch == epoch, "the same store, older: not a new epoch"
            assert s.latest_seq == kept

            item = await stream.__anext__()
            while item["type"] == "message.delta":
                item = await stream.__anext__()  # the hanging turn's text, still on its way
            assert item == {"type": "reset", "session_id": s.id, "reason": "rollback", "after": kept, "upto": seen}

            # The store's new events reuse the lost seqs: every one is taken in.
            four = await s.submit("four")
            assert (await four.result())["text"] == "four"
            items = await read_until(stream, lambda e: e["type"] == "message.complete" and e["turn_id"] == four.id)
            assert seqs_of(items) == list(range(kept + 1, s.latest_seq + 1))
            assert s.latest_seq <= seen, "the new events are at seqs that were taken in before"

            # A reader from the start sees the store as it now is, once each.
            everything = await read_until(
                s.events(), lambda e: e["type"] == "message.complete" and e["turn_id"] == four.id
            )
            assert seqs_of(everything) == list(range(1, s.latest_seq + 1))
            texts = [e["payload"]["text"] for e in everything if e["type"] == "message.complete"]
            assert texts == ["one", "four"]
    finally:
        shutil.rmtree(copy, ignore_errors=True)
