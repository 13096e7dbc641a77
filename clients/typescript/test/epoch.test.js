// The gateway comes back with another store (a new data directory, hence a
// new epoch, PROTOCOL 1.3): the library drops its watermarks and tells the
// application, rather than resuming from seqs that mean nothing there.

import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import { after, before, test } from "node:test";

import { connect, codes, ResetError, RpcError } from "../src/index.js";
import { Gateway, freePort, nextEmit, readUntil, tempDir } from "./harness.js";

let gateway;
const otherDir = tempDir();

before(async () => {
  gateway = await Gateway.start({ port: await freePort() });
});

after(async () => {
  await gateway.stop();
  rmSync(otherDir, { recursive: true, force: true });
});

test("a new epoch is surfaced as a reset, on the gateway object and on each stream", async () => {
  const gw = connect(gateway.url, { backoff: { initialMs: 50, maxMs: 500 } });
  try {
    const s = await gw.createSession({ title: "old store" });
    const stream = s.events();
    await (await s.submit("before")).result();
    await readUntil(stream, (e) => e.type === "message.complete");
    const oldEpoch = gw.epoch;
    const hang = await s.submit("/hang");
    await readUntil(stream, (e) => e.type === "message.delta");

    const reset = nextEmit(gw, "reset");
    await gateway.restart({ dataDir: otherDir });
    const r = await reset;
    assert.equal(r.previousEpoch, oldEpoch);
    assert.notEqual(r.epoch, oldEpoch);
    assert.equal(gw.epoch, r.epoch);

    // The stream says so, then ends: the session does not exist there.
    const next = await stream.next();
    assert.equal(next.value.type, "reset");
    assert.equal(next.value.reason, "epoch");
    assert.equal(next.value.epoch, r.epoch);
    await assert.rejects(stream.next(), (err) => err instanceof RpcError && err.code === codes.SESSION_NOT_FOUND);
    // A turn of the old store has no knowable end.
    await assert.rejects(hang.result(), (err) => err instanceof ResetError);
    assert.equal(s.latestSeq, 0, "the watermark was emptied");

    // The new store works as new.
    const fresh = await gw.createSession({ title: "new store" });
    const items = await readUntil(fresh.events(), (e) => e.seq === 1);
    assert.equal(items[0].type, "session.created");
    assert.equal((await (await fresh.submit("hello")).result()).text, "hello");
  } finally {
    gw.close();
  }
});
