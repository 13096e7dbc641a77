// Turns as an application sees them through the library: deltas that add
// up to the reply, every way a turn can end, queued turns.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { ClosedError, connect, codes, RpcError } from "../src/index.js";
import { Gateway, TETHER_BIN, readUntil } from "./harness.js";

let gateway;
let gw;

before(async () => {
  // One word every 5 ms: turns stream in several frames.
  gateway = await Gateway.start({ args: ["--host-command", TETHER_BIN + " host --engine echo --delay-ms 5"] });
  gw = connect(gateway.url);
});

after(async () => {
  gw.close();
  await gateway.stop();
});

async function reassembled(turn) {
  let text = "";
  let offset = 0;
  for await (const d of turn.deltas()) {
    assert.equal(d.offset, offset, "each delta starts where the last ended");
    text += d.text;
    offset += Buffer.byteLength(d.text);
  }
  return text;
}

test("a turn's deltas reassemble to its message.complete text", async () => {
  const s = await gw.createSession({ title: "deltas" });
  for (const prompt of ["the quick  brown fox jumps over the lazy dog ", "naïve café — 日本語 テキスト 🎉 done", "/big 5000"]) {
    const turn = await s.submit(prompt);
    assert.equal(turn.status, "started");
    assert.match(turn.id, /^t_/);
    const text = await reassembled(turn);
    const result = await turn.result();
    assert.equal(result.status, "complete");
    assert.equal(text, result.text);
    assert.equal(result.text, prompt.startsWith("/big") ? "x".repeat(5000) : prompt);
  }
});

test("a turn's events include its tools and todos, and end with its message.complete", async () => {
  const s = await gw.createSession({ title: "tools" });
  const turn = await s.submit('/tool ls {"path":"/tmp"}\n/todo not a directive here');
  const types = [];
  for await (const ev of turn.events()) {
    types.push(ev.type);
  }
  assert.deepEqual(types.filter((t) => t !== "message.delta"), ["message.user", "message.start", "tool.start", "tool.complete", "message.complete"]);
  const todo = await s.submit("/todo write tests; fix bugs\nok");
  await todo.result();
  assert.deepEqual(s.todos.items.map((i) => i.text), ["write tests", "fix bugs"]);
});

test("result() is the message.complete payload whatever ended the turn", async () => {
  const s = await gw.createSession({ title: "endings" });
  const failed = await (await s.submit("/error the model refused")).result();
  assert.equal(failed.status, "error");
  assert.equal(failed.failure_reason, "engine_error");
  assert.equal(failed.recoverable, false);

  const hang = await s.submit("/hang");
  const queued = await s.submit("never runs");
  assert.equal(queued.status, "queued");
  for await (const d of hang.deltas()) {
    assert.equal(d.text, "…");
    break;
  }
  assert.deepEqual(await hang.interrupt(), { status: "interrupted" });
  const stopped = await hang.result();
  assert.equal(stopped.status, "interrupted");
  assert.equal(stopped.text, "…");
  const dropped = await queued.result();
  assert.equal(dropped.status, "interrupted");
  assert.equal(dropped.failure_reason, "dequeued");

  const again = await s.submit("still works");
  assert.equal((await again.result()).text, "still works");
});

test("queued prompts run in order and each gets its own result", async () => {
  const s = await gw.createSession({ title: "queue" });
  const turns = [];
  for (const text of ["/sleep 200\none", "two", "three"]) {
    turns.push(await s.submit(text));
  }
  assert.deepEqual(turns.map((t) => t.status), ["started", "queued", "queued"]);
  const texts = [];
  for (const t of turns) {
    texts.push((await t.result()).text);
  }
  assert.deepEqual(texts, ["one", "two", "three"]);
});

test("the stream yields every durable event once in order, then deltas live", async () => {
  const s = await gw.createSession({ title: "stream" });
  const stream = s.events();
  const turn = await s.submit("alpha beta gamma");
  const items = await readUntil(stream, (e) => e.type === "message.complete");
  const seqs = items.filter((e) => e.seq !== undefined).map((e) => e.seq);
  assert.deepEqual(seqs, [1, 2, 3, 4]);
  assert.deepEqual(items.filter((e) => e.seq !== undefined).map((e) => e.type),
    ["session.created", "message.user", "message.start", "message.complete"]);
  const deltas = items.filter((e) => e.type === "message.delta").map((e) => e.payload.text).join("");
  assert.equal(deltas, (await turn.result()).text);
  // A second stream from the start reads the same history from the store.
  const late = await readUntil(s.events(), (e) => e.seq === 4);
  assert.deepEqual(late.map((e) => e.seq), [1, 2, 3, 4]);
  // ...and one from a seq gets only what follows it.
  const next = await s.submit("more");
  const tail = await readUntil(s.events({ since: 4 }), (e) => e.type === "message.complete");
  assert.deepEqual(tail.filter((e) => e.seq !== undefined).map((e) => e.seq), [5, 6, 7]);
  await next.result();
});

test("refusals carry the protocol's codes", async () => {
  const missing = gw.session("s_01J00000000000000000000000");
  await assert.rejects(missing.submit("x"), (err) => err instanceof RpcError && err.code === codes.SESSION_NOT_FOUND);
  const s = await gw.createSession({ title: "closing" });
  const stream = s.events();
  await s.close();
  const items = await readUntil(stream, (e) => e.type === "session.closed");
  assert.equal(items.at(-1).payload.reason, "client");
  // Nothing follows session.closed: the stream ends by itself.
  assert.deepEqual(await stream.next(), { value: undefined, done: true });
  await assert.rejects(s.submit("x"), (err) => err instanceof RpcError && err.code === codes.SESSION_CLOSED);
  await assert.rejects(gw.call("no.such.method"), (err) => err instanceof RpcError && err.code === codes.METHOD_NOT_FOUND);
});

test("a closed gateway object ends its streams and refuses its calls", async () => {
  const own = connect(gateway.url);
  const s = await own.createSession({ title: "closing the object" });
  const stream = s.events();
  await readUntil(stream, (e) => e.seq === 1);
  const hang = await s.submit("/hang");
  own.close();
  assert.equal(own.state, "closed");
  assert.deepEqual(await stream.next(), { value: undefined, done: true });
  await assert.rejects(hang.result(), ClosedError);
  await assert.rejects(s.submit("x"), ClosedError);
  await assert.rejects(own.sessions(), ClosedError);
  await gw.session(s.id).interrupt();
});

test("submit options: reject, interrupt, rollback and a dedupe key", async () => {
  const s = await gw.createSession({ title: "multitask" });
  const hang = await s.submit("/hang");
  const queued = await s.submit("queued one");
  await assert.rejects(s.submit("not now", { multitask: "reject" }), (err) => {
    assert.ok(err instanceof RpcError);
    assert.equal(err.code, codes.TURN_IN_PROGRESS);
    return true;
  });
  const instead = await s.submit("instead", { multitask: "interrupt", dropQueued: true, dedupeKey: "k1" });
  assert.equal(instead.status, "started");
  assert.equal(instead.duplicate, false);
  const stopped = await hang.result();
  assert.equal(stopped.failure_reason, "superseded");
  assert.equal((await queued.result()).failure_reason, "dequeued");
  const twice = await s.submit("instead", { dedupeKey: "k1" });
  assert.equal(twice.duplicate, true);
  assert.equal(twice.id, instead.id);
  assert.equal((await instead.result()).text, "instead");

  const long = await s.submit("/hang");
  for await (const d of long.deltas()) {
    assert.equal(d.text, "…");
    break;
  }
  const rolled = await s.submit("/history", { multitask: "rollback" });
  assert.equal((await long.result()).failure_reason, "superseded");
  const history = JSON.parse((await rolled.result()).text);
  // The first `/hang` was interrupted, not rolled back: it stays.
  assert.deepEqual(history.at(-1), ["assistant", "instead"], JSON.stringify(history));
  assert.equal(history.filter(([, text]) => text === "/hang").length, 1, JSON.stringify(history));
});
