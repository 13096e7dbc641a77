"""The gateway comes back with another store (a new data directory, hence a
new epoch, PROTOCOL 1.3): the library drops its watermarks and tells the
application, rather than resuming from seqs that mean nothing there."""

import shutil
import tempfile

import pytest

import tether_client
from tether_client import Backoff, ResetError, RpcError, codes

from conftest import free_port, next_state, read_until


async def test_a_new_epoch_is_surfaced_as_a_reset(start_gateway):
    g = start_gateway(port=free_port())
    other_dir = tempfile.mkdtemp(prefix="tether-py-epoch-")
    try:
        async with tether_client.connect(g.url, backoff=Backoff(0.05, 0.5)) as gw:
            resets = []
            gw.on("reset", resets.append)
            s = await gw.create_session(title="old store")
            stream = s.events()
            await (await s.submit("before")).result()
            await read_until(stream, lambda e: e["type"] == "message.complete")
            old_epoch = gw.epoch
            hang = await s.submit("/hang")
            await read_until(stream, lambda e: e["type"] == "message.delta")

            reopened = await next_state(gw, "open")
            g.restart(data_dir=other_dir)
            await reopened
            assert resets == [{"reason": "epoch", "epoch": gw.epoch, "previous_epoch": old_epoch}]
            assert gw.epoch != old_epoch

            marker = await stream.__anext__()
            assert (marker["type"], marker["reason"], marker["epoch"]) == ("reset", "epoch", gw.epoch)
            with pytest.raises(RpcError) as err:
                await stream.__anext__()
            assert err.value.code == codes.SESSION_NOT_FOUND
            with pytest.raises(ResetError):
                await hang.result()
            assert s.latest_seq == 0, "the watermark was emptied"

            fresh = await gw.create_session(title="new store")
            items = await read_until(fresh.events(), lambda e: e.get("seq") == 1)
            assert items[0]["type"] == "session.created"
            assert (await (await fresh.submit("hello")).result())["text"] == "hello"
    finally:
        shutil.rmtree(other_dir, ignore_errors=True)
