// A client cut off (through a proxy the test owns) while more events
// happen than a resume replays: the gateway answers `resync`, and the
// library pages through `session.events.since` (`has_more`) so the
// consumer still gets every durable event once. A stream that starts late
// reads the history the same way.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { connect } from "../src/index.js";
import { CutProxy, Gateway, nextEmit, range, readUntil, seqsOf } from "./harness.js";

let gateway;
let proxy;

before(async () => {
  gateway = await Gateway.start({ args: ["--max-replay-events", "50", "--synchronous", "normal"] });
  proxy = await CutProxy.start(gateway.addr);
});

after(async () => {
  await proxy.close();
  await gateway.stop();
});

test("a resync after a long absence is paged through, nothing lost", async () => {
  const away = connect(proxy.url, { backoff: { initialMs: 50, maxMs: 200 } });
  const other = connect(gateway.url);
  try {
    const s = await away.createSession({ title: "resync" });
    const stream = s.events();
    await readUntil(stream, (e) => e.seq === 1);
    const dropped = nextEmit(away, "reconnecting");
    proxy.cut();
    await dropped;
    // 2500 events while it is away: more than 50 (a resync) and more than
    // one page of events.since (1000).
    const turn = await other.session(s.id).submit("/flood 2500 1000000 16\nwhile away");
    assert.equal((await turn.result()).text, "while away");
    const back = nextEmit(away, "open");
    proxy.restore();
    await back;
    const items = await readUntil(stream, (e) => e.type === "message.complete");
    assert.deepEqual(seqsOf(items), range(2, 2504));
    const late = await readUntil(s.events(), (e) => e.seq === 2504);
    assert.deepEqual(seqsOf(late), range(1, 2504));
  } finally {
    away.close();
    other.close();
  }
});
