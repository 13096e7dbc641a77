// Drives AG-UI's own client (@ag-ui/client's HttpAgent, whose event
// verifier is always on) and the TypeScript library's TetherAgent against a
// tether gateway, for tests/ag_ui.rs. One scenario per run:
//
//   node --preserve-symlinks ag_ui.mjs SCENARIO
//
// with TETHER_URL, THREAD_ID, PROMPT and optionally TETHER_TOKEN. Prints
// one `{"result": ...}` line (or `{"failed": ...}`).

import { HttpAgent } from "@ag-ui/client";
import { TetherAgent } from "tether-client/ag-ui";

const base = process.env.TETHER_URL;
const threadId = process.env.THREAD_ID || "thread-1";
const prompt = process.env.PROMPT || "hello from AG-UI";
const token = process.env.TETHER_TOKEN;
const headers = token ? { authorization: `Bearer ${token}` } : {};
const url = `${base}/v1/ag-ui`;

const say = (v) => process.stdout.write(JSON.stringify(v) + "\n");

// A fetch that counts the TEXT_MESSAGE_CONTENT events of each response and
// can cut one (as a dropped network would) after `cutAfter` of them.
function tappedFetch({ cutAfter, onContent } = {}) {
  const seen = { responses: [] };
  const f = async (u, init) => {
    const res = await fetch(u, init);
    const index = seen.responses.length;
    seen.responses.push({ url: String(u), method: init?.method || "GET", status: res.status, lastEventId: init?.headers?.["Last-Event-ID"] });
    if (!res.body || res.status !== 200) return res;
    const decoder = new TextDecoder();
    const reader = res.body.getReader();
    let buf = "";
    let contents = 0;
    let cutNow = false;
    const body = new ReadableStream({
      async pull(controller) {
        if (cutNow) {
          reader.cancel().catch(() => {});
          return controller.error(new TypeError("network error (cut by the test)"));
        }
        const { done, value } = await reader.read();
        if (done) return controller.close();
        buf += decoder.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (block.includes('"TEXT_MESSAGE_CONTENT"')) {
            contents++;
            onContent?.(contents, index);
            if (index === 0 && cutAfter !== undefined && contents >= cutAfter) cutNow = true;
          }
        }
        controller.enqueue(value);
      },
      cancel(reason) {
        return reader.cancel(reason);
      },
    });
    return new Response(body, { status: res.status, headers: res.headers });
  };
  return { fetch: f, seen };
}

function reached(n, response) {
  let resolve;
  const promise = new Promise((r) => (resolve = r));
  return { promise, onContent: (count, index) => index === response && count >= n && resolve() };
}

// Runs `agent` (one run, or a connect), collecting every event it applied.
async function drive(agent, how) {
  const events = [];
  let error;
  const subscriber = {
    onEvent: ({ event }) => {
      events.push(event);
    },
    onRunFailed: ({ error: e }) => {
      error = String(e?.message || e);
    },
  };
  try {
    if (how === "connect") await agent.connectAgent({}, subscriber);
    else await agent.runAgent({}, subscriber);
  } catch (e) {
    error = String(e?.message || e);
  }
  return { events, error, messages: structuredClone(agent.messages) };
}

function userAgent(Agent, fetchFn, extra = {}) {
  const agent = new Agent({ url, headers, threadId, fetch: fetchFn, ...extra });
  agent.addMessage({ id: `u-${Date.now()}`, role: "user", content: prompt });
  return agent;
}

async function transcript() {
  // The same thread id names the same session on the AI SDK routes.
  const res = await fetch(`${base}/v1/ai-sdk/chat/${encodeURIComponent(threadId)}/messages`, { headers });
  return res.status === 200 ? res.json() : { status: res.status };
}

const types = (events) => events.map((e) => e.type);

const scenarios = {
  // One run with HttpAgent, verified by AG-UI's own verifier.
  async run() {
    const tap = tappedFetch();
    const r = await drive(userAgent(HttpAgent, tap.fetch), "run");
    return { ...r, types: types(r.events), transcript: await transcript() };
  },

  // A run stopped by another client: RUN_FINISHED, cancelled.
  async stop() {
    const first = reached(1, 0);
    const tap = tappedFetch({ onContent: first.onContent });
    const running = drive(userAgent(HttpAgent, tap.fetch), "run");
    await first.promise;
    const res = await fetch(`${url}/threads/${encodeURIComponent(threadId)}/stop`, { method: "POST", headers });
    const r = await running;
    return { stopped: { status: res.status, body: await res.text() }, ...r, types: types(r.events) };
  },

  // TetherAgent's run is cut mid-answer and continues by itself from the
  // last event id; the test stops it once the resumed stream went on.
  async resume() {
    const more = reached(4, 1);
    const tap = tappedFetch({ cutAfter: 3, onContent: more.onContent });
    const agent = userAgent(TetherAgent, tap.fetch);
    const running = drive(agent, "run");
    await more.promise;
    await agent.stop();
    const r = await running;
    return { ...r, types: types(r.events), responses: tap.seen.responses, transcript: await transcript() };
  },

  // A run cut with no resume left (a reload): a new TetherAgent with the
  // messages and the last event id the page kept connects, and goes on
  // from exactly there.
  async reload() {
    const tap = tappedFetch({ cutAfter: 3 });
    const first = userAgent(TetherAgent, tap.fetch, { resumes: 0 });
    const cut = await drive(first, "run");
    const second = new TetherAgent({ url, headers, threadId, lastEventId: first.lastEventId, initialMessages: cut.messages });
    const r = await drive(second, "connect");
    return { cut: { ...cut, types: types(cut.events) }, lastEventId: first.lastEventId, ...r, types: types(r.events), transcript: await transcript() };
  },

  // A second client joins the run of the first mid-way with connect():
  // the run from its start, then live.
  async join() {
    const two = reached(2, 0);
    const tap = tappedFetch({ onContent: two.onContent });
    const running = drive(userAgent(HttpAgent, tap.fetch), "run");
    await two.promise;
    const joined = await drive(new TetherAgent({ url, headers, threadId }), "connect");
    const a = await running;
    return { a: { ...a, types: types(a.events) }, b: { ...joined, types: types(joined.events) } };
  },

  async capabilities() {
    const res = await fetch(`${url}/capabilities`, { headers });
    return { status: res.status, body: await res.json() };
  },
};

const run = scenarios[process.argv[2]];
if (!run) {
  console.error(`unknown scenario ${process.argv[2]}`);
  process.exit(2);
}
try {
  say({ result: await run() });
} catch (e) {
  say({ failed: String(e?.stack || e) });
}
process.exit(0);
