// 100 sessions on one connection: turns in all of them at once, each
// session's events kept apart, and the list paged to its end.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { connect } from "../src/index.js";
import { Gateway, readUntil } from "./harness.js";

let gateway;

before(async () => {
  gateway = await Gateway.start({ args: ["--hosts", "2", "--synchronous", "normal"] });
});

after(async () => {
  await gateway.stop();
});

test("100 sessions on one connection", async () => {
  const gw = connect(gateway.url);
  try {
    const sessions = await Promise.all(Array.from({ length: 100 }, (_, i) => gw.createSession({ title: "s" + i })));
    assert.equal(new Set(sessions.map((s) => s.id)).size, 100);
    const streams = sessions.map((s) => s.events());
    const turns = await Promise.all(sessions.map((s, i) => s.submit("reply " + i + " from its own session")));
    const results = await Promise.all(turns.map((t) => t.result()));
    results.forEach((r, i) => assert.equal(r.text, "reply " + i + " from its own session"));
    await Promise.all(streams.map(async (stream, i) => {
      const items = await readUntil(stream, (e) => e.type === "message.complete");
      assert.ok(items.every((e) => e.session_id === sessions[i].id), "only its own events");
      assert.deepEqual(items.filter((e) => e.seq !== undefined).map((e) => e.seq), [1, 2, 3, 4]);
      const text = items.filter((e) => e.type === "message.delta").map((e) => e.payload.text).join("");
      assert.equal(text, results[i].text);
    }));
    const listed = await gw.sessions({ pageSize: 7 });
    assert.equal(listed.length, 100);
    assert.deepEqual(new Set(listed.map((i) => i.session_id)), new Set(sessions.map((s) => s.id)));
  } finally {
    gw.close();
  }
});
