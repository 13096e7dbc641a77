// The gateway comes back with an older copy of its own store (a backup
// restored; the same epoch, fewer events): the session's history went back.
// The library says so (a `reset` item, reason `rollback`, on every stream
// that yielded what is gone, and on the gateway object), fails the turns
// that were lost with it, and takes the store's new events in as new, in
// order, none dropped as a duplicate of a lost event with the same seq.

import assert from "node:assert/strict";
import { cpSync, rmSync } from "node:fs";
import { after, before, test } from "node:test";

import { connect, ResetError } from "../src/index.js";
import { Gateway, freePort, nextEmit, range, readUntil, seqsOf, tempDir } from "./harness.js";

let gateway;
const copy = tempDir();

before(async () => {
  gateway = await Gateway.start({ port: await freePort() });
});

after(async () => {
  await gateway.stop();
  rmSync(copy, { recursive: true, force: true });
});

test("a store restored from an older copy is surfaced as a rollback, and nothing new is lost", async () => {
  const gw = connect(gateway.url, { backoff: { initialMs: 50, maxMs: 500 } });
  const resets = [];
  gw.on("reset", (r) => resets.push(r));
  try {
    const s = await gw.createSession({ title: "rolled back" });
    const stream = s.events();
    await (await s.submit("one")).result();
    await readUntil(stream, (e) => e.type === "message.complete");
    const kept = s.latestSeq;
    const epoch = gw.epoch;

    // The backup: the data directory of the stopped gateway.
    let reopened = nextEmit(gw, "open");
    await gateway.kill9();
    cpSync(gateway.dataDir, copy, { recursive: true });
    await gateway.spawn();
    await reopened;
    await (await s.submit("two")).result();
    await (await s.submit("three")).result();
    const hang = await s.submit("/hang");
    await readUntil(stream, (e) => e.type === "message.delta" && e.turn_id === hang.id);
    const seen = s.latestSeq;
    assert.ok(seen > kept + 4, `more was taken in after the copy (${kept} then ${seen})`);

    // The backup restored.
    const rolledBack = nextEmit(gw, "reset");
    await gateway.restart({ dataDir: copy });
    const r = await rolledBack;
    assert.deepEqual(r, { reason: "rollback", sessionId: s.id, epoch, after: kept, upto: seen });
    assert.equal(gw.epoch, epoch, "the same store, older: not a new epoch");
    assert.equal(s.latestSeq, kept);
    await assert.rejects(hang.result(), (err) => err instanceof ResetError && err.reason === "rollback");

    let next = await stream.next();
    while (next.value.type === "message.delta") {
      next = await stream.next(); // the hanging turn's text, still on its way
    }
    assert.deepEqual(next.value, { type: "reset", session_id: s.id, reason: "rollback", after: kept, upto: seen });

    // The store's new events reuse the lost seqs: every one is taken in.
    const four = await s.submit("four");
    assert.equal((await four.result()).text, "four");
    const items = await readUntil(stream, (e) => e.type === "message.complete" && e.turn_id === four.id);
    assert.deepEqual(seqsOf(items), range(kept + 1, s.latestSeq));
    assert.ok(s.latestSeq <= seen, "the new events are at seqs that were taken in before");

    // A reader from the start sees the store as it now is, once each.
    const all = await readUntil(s.events(), (e) => e.type === "message.complete" && e.turn_id === four.id);
    assert.deepEqual(seqsOf(all), range(1, s.latestSeq));
    const texts = all.filter((e) => e.type === "message.complete").map((e) => e.payload.text);
    assert.deepEqual(texts, ["one", "four"]);
    assert.equal(resets.length, 1);
  } finally {
    gw.close();
  }
});
