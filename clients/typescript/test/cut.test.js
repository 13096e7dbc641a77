// A network cut in the middle of a turn (through a proxy the test owns):
// the deltas missed while away are made up from the resume's `active_turn`
// and the turn's `message.complete`, so the stream's deltas and the turn's
// deltas() still add up to the reply, each byte once.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { connect } from "../src/index.js";
import { CutProxy, Gateway, TETHER_BIN, nextEmit, range, readUntil, seqsOf } from "./harness.js";

let gateway;
let proxy;

before(async () => {
  gateway = await Gateway.start({ args: ["--host-command", TETHER_BIN + " host --engine echo --delay-ms 15"] });
  proxy = await CutProxy.start(gateway.addr);
});

after(async () => {
  await proxy.close();
  await gateway.stop();
});

const words = (prefix, n) => range(1, n).map((i) => prefix + i).join(" ");

function streamedText(items, turnId) {
  return items.filter((e) => e.type === "message.delta" && e.turn_id === turnId).map((e) => e.payload.text).join("");
}

test("deltas missed during a cut are made up, in order, before the turn's end", async () => {
  const gw = connect(proxy.url, { backoff: { initialMs: 50, maxMs: 200 } });
  const other = connect(gateway.url);
  try {
    const s = await gw.createSession({ title: "cut" });
    const stream = s.events();
    // One turn ends while we are away, the next is under way when we return.
    const first = await s.submit(words("w", 60));
    const seen = await readUntil(stream, (e) => e.type === "message.delta" && e.payload.offset > 10);
    const dropped = nextEmit(gw, "reconnecting");
    proxy.cut();
    await dropped;
    // `other` watches while we are away: the first turn ends, the second
    // streams a while.
    const watching = other.session(s.id).events({ since: s.latestSeq });
    const second = await other.session(s.id).submit(words("z", 80));
    await readUntil(watching, (e) => e.type === "message.complete" && e.turn_id === first.id);
    await readUntil(watching, (e) => e.type === "message.delta" && e.turn_id === second.id && e.payload.offset > 20);
    const back = nextEmit(gw, "open");
    proxy.restore();
    await back;
    const rest = await readUntil(stream, (e) => e.type === "message.complete" && e.turn_id === second.id);
    const items = seen.concat(rest);
    const seqs = seqsOf(items);
    assert.deepEqual(seqs, range(1, seqs.at(-1)));
    for (const [turnId, text] of [[first.id, words("w", 60)], [second.id, words("z", 80)]]) {
      assert.equal(streamedText(items, turnId), text, "the stream's deltas add up for " + turnId);
      const complete = items.findIndex((e) => e.type === "message.complete" && e.turn_id === turnId);
      const lastDelta = items.findLastIndex((e) => e.type === "message.delta" && e.turn_id === turnId);
      assert.ok(lastDelta < complete, "no delta after its turn's end");
    }
    let text = "";
    for await (const d of first.deltas()) {
      text += d.text;
    }
    assert.equal(text, words("w", 60), "turn.deltas() adds up too");
  } finally {
    gw.close();
    other.close();
  }
});
