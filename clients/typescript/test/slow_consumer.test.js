// A consumer that stops reading (here: it blocks the event loop, as CPU
// work between two events does) while a turn floods its session with
// durable events: the gateway closes it with 1013 "slow consumer"
// (PROTOCOL 1.8), and the library resumes from its watermark with nothing
// lost and nothing doubled.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { connect } from "../src/index.js";
import { Gateway, nextEmit, range, readUntil, seqsOf } from "./harness.js";

let gateway;

before(async () => {
  // A small outbox, so a few stalled seconds overflow it.
  gateway = await Gateway.start({ args: ["--outbox-frames", "16", "--synchronous", "normal"] });
});

after(async () => {
  await gateway.stop();
});

function blockEventLoop(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

test("a consumer closed 1013 as slow resumes with every event once", async () => {
  const gw = connect(gateway.url, { backoff: { initialMs: 50, maxMs: 500 } });
  try {
    const s = await gw.createSession({ title: "slow" });
    const stream = s.events();
    const slow = nextEmit(gw, "reconnecting", (c) => c.code === 1013);
    // 5000 durable events of 8 KiB each (40 MiB), as fast as the gateway takes them:
    // far more than the socket buffers hold.
    const turn = await s.submit("/flood 5000 1000000 8192\nflooded");
    const first = await readUntil(stream, (e) => e.type === "tool.start");
    blockEventLoop(3500);
    const closed = await slow;
    assert.equal(closed.reason, "slow consumer");
    const rest = await readUntil(stream, (e) => e.type === "message.complete" && e.turn_id === turn.id);
    const seqs = seqsOf(first.concat(rest));
    assert.deepEqual(seqs, range(1, seqs.at(-1)), "every durable event once, in order");
    assert.equal(rest.filter((e) => e.type === "tool.start").length + 1, 5000);
    assert.equal((await turn.result()).text, "flooded");
    const stats = await gw.call("session.events.stats");
    assert.ok(stats.outbox.slow_consumer_closes >= 1, JSON.stringify(stats.outbox));
    assert.equal(gw.state, "open");
  } finally {
    gw.close();
  }
});
