// Any JSON the gateway may send is survived: an event nested 200,000
// levels deep (a compute host's payload, stored before the gateway bounded
// them) is delivered in its place, with what is deeper than MAX_DEPTH left
// out, whether it comes live, in a page of `session.events.since` or in a
// resume's replay, and the session goes on (the next submit answers, its
// turn ends). A frame that is not JSON at all resets the connection rather
// than leave its request waiting forever. The real gateway sends neither
// (it refuses deep host payloads), hence a fake one.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { connect, ConnectionLostError, MAX_DEPTH, TOO_DEEP } from "../src/index.js";
import { cutText, decodeFrame } from "../src/decode.js";
import { deepJson, FakeGateway } from "./fake_gateway.js";
import { nextEmit, readUntil, seqsOf } from "./harness.js";

const DEPTH = 200000;

// Depth of a decoded value, counted without recursion.
function depthOf(value) {
  let max = 0;
  const stack = [[value, 1]];
  while (stack.length > 0) {
    const [v, d] = stack.pop();
    if (v !== null && typeof v === "object") {
      max = Math.max(max, d);
      for (const child of Object.values(v)) {
        stack.push([child, d + 1]);
      }
    }
  }
  return max;
}

test("a value nested deeper than MAX_DEPTH is cut, by value or by text, and the rest kept", () => {
  const text = '{"a":"[[{{\\"]]","deep":' + deepJson(DEPTH) + ',"b":[1,{"c":"}"}]}';
  const { value, cut } = decodeFrame(text);
  assert.equal(cut, true);
  assert.equal(value.a, '[[{{"]]');
  assert.deepEqual(value.b, [1, { c: "}" }]);
  assert.equal(depthOf(value), MAX_DEPTH);
  assert.ok(JSON.stringify(value).includes(JSON.stringify(TOO_DEEP)));

  // What an engine whose JSON.parse cannot go that deep gets instead.
  const byText = JSON.parse(cutText(text));
  assert.deepEqual(byText, value);

  const shallow = '{"x":' + deepJson(MAX_DEPTH - 1) + "}";
  assert.deepEqual(decodeFrame(shallow), { value: JSON.parse(shallow), cut: false });
  assert.equal(cutText(shallow), shallow);
  assert.throws(() => decodeFrame("{not json"), SyntaxError);
});

// A fake gateway with one session whose store the test appends to; events
// are kept as JSON text, since JSON.stringify cannot write them.
function fakeStore() {
  const store = [];
  const info = {
    session_id: "s_1", profile: "default", title: "deep", status: "idle", created_at: "t", updated_at: "t",
    parent_session_id: null, history_version: 1, message_count: 0, latest_seq: 0, peers: 1, close_on_disconnect: false,
  };
  const add = (type, extra = "", payload = "{}") => {
    const seq = store.length + 1;
    store.push('{"type":"' + type + '","session_id":"s_1","seq":' + seq + extra + ',"ts":"t","payload":' + payload + "}");
    return store[seq - 1];
  };
  const since = (lastSeen) => store.slice(lastSeen);
  let turns = 0;
  const answer = (method, params, conn, id) => {
    const latest = store.length;
    const head = '{"jsonrpc":"2.0","id":' + id + ',"result":';
    if (method === "session.resume") {
      let extra = "";
      if (params.last_seen !== undefined) {
        extra = ',"events":[' + since(params.last_seen).join(",") + '],"resync":false,"truncated":false';
      }
      return { raw: head + '{"session":' + JSON.stringify(info) + ',"epoch":"e_fake","latest_seq":' + latest +
        ',"active_turn":null,"todos":null' + extra + "}}" };
    }
    if (method === "session.events.since") {
      return { raw: head + '{"events":[' + since(params.last_seen).join(",") + '],"latest_seq":' + latest +
        ',"truncated":false,"has_more":false,"epoch":"e_fake"}}' };
    }
    if (method === "prompt.submit") {
      turns += 1;
      const turn = ',"turn_id":"t_' + turns + '"';
      const user = add("message.user", turn, JSON.stringify({ text: params.text }));
      const done = add("message.complete", turn, JSON.stringify({ text: params.text, status: "complete" }));
      setTimeout(() => {
        conn.send('{"jsonrpc":"2.0","method":"event","params":' + user + "}");
        conn.send('{"jsonrpc":"2.0","method":"event","params":' + done + "}");
      }, 10);
      return { turn_id: "t_" + turns, trace_id: "tr_" + turns, status: "started" };
    }
    throw Object.assign(new Error("not in this fake: " + method), { code: -32601 });
  };
  return { store, add, answer };
}

let fake;
let data;

before(async () => {
  data = fakeStore();
  fake = await FakeGateway.start(null);
  // The fake's answers need the request id, for the raw ones.
  fake.answer = (method, params, conn) => {
    const req = fake.requests[fake.requests.length - 1];
    return data.answer(method, params, conn, req.id);
  };
});

after(async () => {
  await fake.close();
});

test("deep events arrive in their place, from a page, live and in a replay, and the session goes on", async () => {
  const deepTool = (seq) => data.add("tool.complete", "", '{"name":"x","result":' + deepJson(DEPTH) + ',"seq_was":' + seq + "}");
  data.add("session.created");
  deepTool(2);
  data.add("status.update", "", '{"kind":"ready"}');
  const gw = connect(fake.url, { backoff: { initialMs: 20, maxMs: 100 } });
  const errors = [];
  gw.on("error", (err) => errors.push(err));
  try {
    const s = gw.session("s_1");
    const stream = s.events();
    // From a page of session.events.since.
    const first = await readUntil(stream, (e) => e.seq === 3);
    assert.deepEqual(seqsOf(first), [1, 2, 3]);
    const deep = first[1];
    assert.equal(deep.type, "tool.complete");
    assert.equal(deep.payload.name, "x");
    assert.ok(JSON.stringify(deep).includes(JSON.stringify(TOO_DEEP)), "what was too deep is left out, visibly");
    assert.ok(depthOf(deep) <= MAX_DEPTH);
    assert.ok(errors.some((e) => /nested deeper than/.test(e.message)), "and the application is told");

    // Live.
    const live = deepTool(4);
    for (const c of fake.conns) {
      c.send('{"jsonrpc":"2.0","method":"event","params":' + live + "}");
    }
    const [four] = await readUntil(stream, (e) => e.seq === 4);
    assert.equal(four.payload.seq_was, 4);

    // In a resume's replay, after a drop.
    const back = nextEmit(gw, "open");
    fake.cut();
    deepTool(5);
    await back;
    const [five] = await readUntil(stream, (e) => e.seq === 5);
    assert.equal(five.payload.seq_was, 5);
    assert.equal(s.latestSeq, 5);

    const turn = await s.submit("still here");
    assert.equal((await turn.result()).text, "still here");
    const rest = await readUntil(stream, (e) => e.type === "message.complete");
    assert.deepEqual(seqsOf(rest), [6, 7]);
  } finally {
    gw.close();
  }
});

test("an answer that is not JSON resets the connection: a read is asked again, a write fails, nothing hangs", async () => {
  const other = await FakeGateway.start(null);
  // The first answer to each method is cut short.
  const garbled = new Set();
  other.answer = (method) => {
    if (!garbled.has(method)) {
      garbled.add(method);
      return { raw: '{"jsonrpc":"2.0","id":' };
    }
    if (method === "session.list") {
      return { sessions: [], next_cursor: null };
    }
    return { status: "idle" };
  };
  const gw = connect(other.url, { backoff: { initialMs: 20, maxMs: 100 } });
  const errors = [];
  gw.on("error", (err) => errors.push(err));
  try {
    assert.deepEqual(await gw.sessions(), [], "the read was asked again on a new connection");
    await assert.rejects(gw.call("session.interrupt", { session_id: "s_1" }), ConnectionLostError);
    assert.ok(errors.some((e) => /not JSON/.test(e.message)));
    assert.deepEqual(await gw.call("session.interrupt", { session_id: "s_1" }), { status: "idle" });
    assert.equal(other.connections, 3, "a new connection after each frame that was not JSON");
  } finally {
    gw.close();
    await other.close();
  }
});
