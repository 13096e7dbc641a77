// The pure parts: byte offsets, backoff, URLs.

import assert from "node:assert/strict";
import { test } from "node:test";

import { backoffDelay, wsUrl } from "../src/index.js";
import { TurnText } from "../src/text.js";

test("deltas are placed by byte offset: each byte once, whatever the replays", () => {
  const t = new TurnText();
  assert.deepEqual(t.delta(0, "hello "), { offset: 0, text: "hello " });
  assert.equal(t.delta(0, "hello "), null, "a replayed delta adds nothing");
  assert.deepEqual(t.delta(3, "lo wor"), { offset: 6, text: "wor" }, "an overlapping one adds its new part");
  assert.equal(t.delta(20, "zz"), null, "a delta after a gap waits for the whole text");
  assert.deepEqual(t.rest("hello world"), { offset: 9, text: "ld" });
  assert.equal(t.rest("hello world"), null);
  assert.equal(t.rest("something else"), null, "a final text that does not extend what streamed adds nothing");
});

test("offsets count UTF-8 bytes, and never split a character", () => {
  const t = new TurnText();
  assert.deepEqual(t.delta(0, "é"), { offset: 0, text: "é" });
  assert.deepEqual(t.delta(2, "ü!"), { offset: 2, text: "ü!" });
  assert.deepEqual(t.delta(4, "!ä"), { offset: 5, text: "ä" }, "overlap counted in bytes");
  assert.deepEqual(t.delta(7, "🎉"), { offset: 7, text: "🎉" });
  assert.equal(t.bytes, 11);
  assert.deepEqual(t.rest("éü!ä🎉 ok"), { offset: 11, text: " ok" });
});

test("backoff doubles from its first delay to its cap, each delay between half and all of it", () => {
  const opts = { initialMs: 100, maxMs: 1000 };
  assert.equal(backoffDelay(0, opts, () => 0), 50);
  assert.equal(backoffDelay(0, opts, () => 1), 100);
  assert.equal(backoffDelay(2, opts, () => 1), 400);
  assert.equal(backoffDelay(3, opts, () => 0.5), 600);
  assert.equal(backoffDelay(10, opts, () => 1), 1000);
  assert.equal(backoffDelay(1000, opts, () => 0), 500);
  for (let i = 0; i < 100; i++) {
    const d = backoffDelay(i % 8, opts);
    assert.ok(d >= 50 && d <= 1000, String(d));
  }
});

test("gateway URLs: what tether serve prints, or the /ws route", () => {
  assert.equal(wsUrl("ws://127.0.0.1:7878/ws"), "ws://127.0.0.1:7878/ws");
  assert.equal(wsUrl("http://127.0.0.1:9000"), "ws://127.0.0.1:9000/ws");
  assert.equal(wsUrl("https://example.org/"), "wss://example.org/ws");
  assert.equal(wsUrl("localhost:1"), "ws://localhost:1/ws");
  assert.equal(wsUrl("ws://h:1/ws?token=x"), "ws://h:1/ws?token=x");
  assert.throws(() => wsUrl("ftp://h"), TypeError);
});
