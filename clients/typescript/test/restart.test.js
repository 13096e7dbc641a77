// The gateway dies under the application (kill -9 mid-turn, then SIGTERM's
// drain) and comes back on the same port: the library reconnects by
// itself, every durable event reaches the consumer once, the interrupted
// turn's result is its `gateway_restart` (or `gateway_shutdown`) end, and
// the next submit works.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { connect } from "../src/index.js";
import { Gateway, TETHER_BIN, freePort, nextEmit, range, readUntil, seqsOf } from "./harness.js";

let gateway;

before(async () => {
  gateway = await Gateway.start({
    port: await freePort(),
    args: ["--host-command", TETHER_BIN + " host --engine echo --delay-ms 20"],
  });
});

after(async () => {
  await gateway.stop();
});

// Every event the store holds for `id`, from a connection of its own.
async function stored(url, id) {
  const probe = connect(url);
  try {
    const r = await probe.call("session.events.since", { session_id: id, last_seen: 0, limit: 10000 });
    return r.events;
  } finally {
    probe.close();
  }
}

test("kill -9 mid-turn: every durable event once, the gateway_restart end, the next submit works", async () => {
  const gw = connect(gateway.url, { backoff: { initialMs: 50, maxMs: 500 } });
  const states = [];
  gw.on("state", (s) => states.push(s.state));
  try {
    const s = await gw.createSession({ title: "restart" });
    const stream = s.events();
    const done = await s.submit("a short one");
    await done.result();
    const turn = await s.submit("/hang");
    // Under way: its first delta has reached us.
    const before = await readUntil(stream, (e) => e.type === "message.delta" && e.turn_id === turn.id);

    const reopened = nextEmit(gw, "open");
    await gateway.restart();
    await reopened;

    const result = await turn.result();
    assert.equal(result.status, "error");
    assert.equal(result.failure_reason, "gateway_restart");
    assert.equal(result.recoverable, true);

    const next = await s.submit("after the restart");
    let text = "";
    for await (const d of next.deltas()) {
      text += d.text;
    }
    assert.equal((await next.result()).text, "after the restart");
    assert.equal(text, "after the restart");

    const rest = await readUntil(stream, (e) => e.type === "message.complete" && e.turn_id === next.id);
    const seen = seqsOf(before.concat(rest));
    const all = seqsOf(await stored(gateway.url, s.id));
    assert.deepEqual(seen, range(1, all.at(-1)), "each durable event once, in order");
    assert.deepEqual(seen, all);
    const restartEnd = rest.find((e) => e.type === "message.complete" && e.turn_id === turn.id);
    assert.equal(restartEnd.payload.failure_reason, "gateway_restart");
    assert.ok(states.includes("reconnecting"), "the drop was announced: " + states.join(","));
    assert.equal(gw.state, "open");
  } finally {
    gw.close();
  }
});

test("SIGTERM drains: the running turn ends gateway_shutdown, the library waits out the 1001 and resumes", async () => {
  const gw = connect(gateway.url, { backoff: { initialMs: 50, maxMs: 500 } });
  try {
    const s = await gw.createSession({ title: "drain" });
    const stream = s.events();
    const turn = await s.submit("/hang");
    await readUntil(stream, (e) => e.type === "message.delta");
    const dropped = nextEmit(gw, "reconnecting");
    await gateway.terminate();
    const drop = await dropped;
    assert.equal(drop.code, 1001, "the drain closes clients with 1001");
    const result = await turn.result();
    assert.equal(result.status, "interrupted");
    assert.equal(result.failure_reason, "gateway_shutdown");
    assert.equal(result.recoverable, true);

    const reopened = nextEmit(gw, "open");
    await gateway.spawn();
    await reopened;
    const next = await s.submit("back");
    assert.equal((await next.result()).text, "back");
    const items = await readUntil(stream, (e) => e.type === "message.complete" && e.turn_id === next.id);
    const seqs = seqsOf(items);
    assert.deepEqual(seqs, range(seqs[0], seqs.at(-1)), "no gap and no duplicate across the drain");
  } finally {
    gw.close();
  }
});
