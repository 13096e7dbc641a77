// The session's and the stream's rules without a gateway: a stub answers
// `session.events.since` from an in-memory store, and the test feeds live
// frames as the connection would, including ones the real gateway never
// sends (a gap), to see the library cope.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Session } from "../src/session.js";

function durable(seq, type = "tool.start", extra = {}) {
  return Object.assign({ type, session_id: "s_1", seq, payload: {} }, extra);
}

function delta(turn, offset, text) {
  return { type: "message.delta", session_id: "s_1", turn_id: turn, payload: { offset, text } };
}

// A gateway object with just what a Session uses, and a store behind it.
function stub(store) {
  const asked = [];
  const since = async (method, params) => {
    asked.push([method, params.last_seen]);
    const events = store.filter((e) => e.seq > params.last_seen).slice(0, params.limit);
    const last = events.at(-1);
    return { events, has_more: !!last && last.seq < store.at(-1).seq, latest_seq: store.at(-1).seq, truncated: false };
  };
  return {
    asked,
    state: "open",
    generation: 1,
    failure: null,
    options: { backoff: { maxMs: 1000 } },
    emitter: { emit() {} },
    _callOn: (gen, method, params) => since(method, params),
    _request: (method, params) => since(method, params),
    call: since,
  };
}

async function take(stream, n) {
  const out = [];
  while (out.length < n) {
    const r = await stream.next();
    assert.equal(r.done, false);
    out.push(r.value);
  }
  return out;
}

test("a live gap is filled from the store before anything after it", async () => {
  const store = [1, 2, 3, 4, 5, 6].map((s) => durable(s));
  const gw = stub(store);
  const s = new Session(gw, "s_1");
  s._created({ session: { session_id: "s_1" } }, 1, []);
  const stream = s.events();
  s._onLive(store[0]);
  s._onLive(store[1]);
  s._onLive(store[4]); // 3 and 4 never came
  s._onLive(delta("t_1", 0, "after five"));
  s._onLive(store[5]);
  const got = await take(stream, 7);
  assert.deepEqual(got.map((e) => e.seq ?? e.payload.text), [1, 2, 3, 4, 5, "after five", 6]);
  assert.equal(s.latestSeq, 6);
  assert.deepEqual(gw.asked[0], ["session.events.since", 2]);
});

test("a stream that falls behind its bound reads the store and loses nothing durable", async () => {
  const store = Array.from({ length: 50 }, (_, i) => durable(i + 1));
  const gw = stub(store);
  const s = new Session(gw, "s_1");
  s._created({ session: { session_id: "s_1" } }, 1, []);
  const stream = s.events({ maxBuffered: 5 });
  for (const ev of store) {
    s._onLive(ev);
  }
  const got = await take(stream, 50);
  assert.deepEqual(got.map((e) => e.seq), store.map((e) => e.seq));
});

test("duplicates are dropped and deltas are trimmed to what is new", async () => {
  const store = [durable(1, "message.start", { turn_id: "t_1" })];
  const gw = stub(store);
  const s = new Session(gw, "s_1");
  s._created({ session: { session_id: "s_1" } }, 1, []);
  const stream = s.events();
  s._onLive(store[0]);
  s._onLive(store[0]);
  s._onLive(delta("t_1", 0, "hello "));
  s._onLive(delta("t_1", 0, "hello wor"));
  s._onLive(delta("t_1", 20, "lost"));
  const complete = durable(2, "message.complete", { turn_id: "t_1", payload: { text: "hello world", status: "complete" } });
  store.push(complete);
  s._onLive(complete);
  const got = await take(stream, 5);
  assert.deepEqual(got.map((e) => [e.seq ?? null, e.payload.offset ?? null, e.payload.text ?? null]), [
    [1, null, null],
    [null, 0, "hello "],
    [null, 6, "wor"],
    [null, 9, "ld"],
    [2, null, "hello world"],
  ]);
});

test("a stream asked for events beyond the store's latest is told the history went back, then gets the new ones", async () => {
  const store = [1, 2, 3].map((s) => durable(s));
  const gw = stub(store);
  const s = new Session(gw, "s_1");
  s._created({ session: { session_id: "s_1" } }, 1, []);
  for (const ev of store) {
    s._onLive(ev);
  }
  // A `since` the application kept from before the store was restored.
  const stream = s.events({ since: 5 });
  const first = await Promise.race([
    take(stream, 1),
    new Promise((_, reject) => setTimeout(() => reject(new Error("the stream waited in silence")), 5000)),
  ]);
  assert.deepEqual(first, [{ type: "reset", session_id: "s_1", reason: "rollback", after: 3, upto: 5 }]);
  store.push(durable(4));
  s._onLive(store[3]);
  assert.deepEqual((await take(stream, 1)).map((e) => e.seq), [4], "seq 4 is new, not a duplicate");
});
