// Two applications on one session (two connections): the same durable
// events in the same order, and each one's turns seen by the other.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { connect } from "../src/index.js";
import { Gateway, readUntil } from "./harness.js";

let gateway;

before(async () => {
  gateway = await Gateway.start();
});

after(async () => {
  await gateway.stop();
});

const durable = (items) => items.filter((e) => typeof e.seq === "number").map((e) => [e.seq, e.type, e.turn_id ?? null]);

test("two clients on one session see the same events", async () => {
  const a = connect(gateway.url);
  const b = connect(gateway.url);
  try {
    const sa = await a.createSession({ title: "shared" });
    const sb = b.session(sa.id);
    const streamA = sa.events();
    const streamB = sb.events();
    const fromA = await sa.submit("from a");
    await fromA.result();
    const fromB = await sb.submit('/tool grep {"q":1}\nfrom b');
    assert.equal((await fromB.result()).text, "from b");
    const last = (e) => e.type === "message.complete" && e.turn_id === fromB.id;
    const seenA = await readUntil(streamA, last);
    const seenB = await readUntil(streamB, last);
    assert.deepEqual(durable(seenA), durable(seenB));
    assert.deepEqual(durable(seenA).map((d) => d[0]), durable(seenA).map((_, i) => i + 1));
    // Each one's deltas add up to the text, on both sides.
    for (const seen of [seenA, seenB]) {
      for (const turn of [fromA, fromB]) {
        const text = seen.filter((e) => e.type === "message.delta" && e.turn_id === turn.id).map((e) => e.payload.text).join("");
        const complete = seen.find((e) => e.type === "message.complete" && e.turn_id === turn.id);
        assert.equal(text, complete.payload.text);
      }
    }
    assert.equal(sb.info.peers, 2);
  } finally {
    a.close();
    b.close();
  }
});
