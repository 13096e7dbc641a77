// Drives the Vercel AI SDK's own chat client (AbstractChat with
// DefaultChatTransport, and readUIMessageStream) against a tether gateway,
// for tests/ai_sdk.rs. One scenario per run:
//
//   node ai_sdk.mjs SCENARIO
//
// with TETHER_URL (http://HOST:PORT), CHAT_ID, PROMPT, optionally
// TETHER_TOKEN and AI_PACKAGE (`ai`, the default, or `ai7`). The scenario
// prints JSON lines: `{"event": ...}` as it goes, and one `{"result": ...}`
// at the end; where it must wait for the test (a gateway restart) it
// reads a line from stdin.

import { createInterface } from "node:readline";

const ai = await import(process.env.AI_PACKAGE || "ai");
const { AbstractChat, DefaultChatTransport, readUIMessageStream } = ai;

const base = process.env.TETHER_URL;
const chatId = process.env.CHAT_ID || "chat-1";
const prompt = process.env.PROMPT || "hello from the AI SDK";
const token = process.env.TETHER_TOKEN;
const headers = token ? { authorization: `Bearer ${token}` } : {};
const api = `${base}/v1/ai-sdk/chat`;

const say = (v) => process.stdout.write(JSON.stringify(v) + "\n");
const stdin = createInterface({ input: process.stdin });
const lines = stdin[Symbol.asyncIterator]();
const waitLine = async () => (await lines.next()).value;

// The state the React and Vue bindings keep, in memory.
class MemoryState {
  constructor(messages = []) {
    this.messages = messages;
    this.status = "ready";
    this.error = undefined;
  }
  pushMessage(m) {
    this.messages = this.messages.concat(m);
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(i, m) {
    this.messages = [...this.messages.slice(0, i), this.snapshot(m), ...this.messages.slice(i + 1)];
  }
  snapshot(x) {
    return structuredClone(x);
  }
}

class Chat extends AbstractChat {
  constructor({ messages, ...init }) {
    super({ ...init, state: new MemoryState(messages) });
  }
}

// A fetch that counts the text deltas of each response it streams, and
// can cut a response (as a dropped network would) after `cutAfter` deltas.
function tappedFetch({ cutAfter, onDelta } = {}) {
  const seen = { deltas: 0, responses: [] };
  const f = async (url, init) => {
    const res = await fetch(url, init);
    const index = seen.responses.length;
    seen.responses.push({ url: String(url), method: init?.method || "GET", status: res.status, session: res.headers.get("x-tether-session-id") });
    if (!res.body || res.status !== 200) return res;
    const decoder = new TextDecoder();
    let buf = "";
    let deltas = 0;
    const reader = res.body.getReader();
    let cutNow = false;
    const body = new ReadableStream({
      async pull(controller) {
        // Cut once the chunk with the last delta was read: erroring the
        // stream would drop a chunk still queued in it.
        if (cutNow) {
          reader.cancel().catch(() => {});
          return controller.error(new TypeError("network error (cut by the test)"));
        }
        const { done, value } = await reader.read();
        if (done) return controller.close();
        buf += decoder.decode(value, { stream: true });
        let cut = false;
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (block.includes('"type":"text-delta"')) {
            deltas++;
            seen.deltas++;
            onDelta?.(seen.deltas, index);
            if (cutAfter !== undefined && deltas >= cutAfter) cut = true;
          }
        }
        controller.enqueue(value);
        if (cut) {
          cutAfter = undefined;
          cutNow = true;
        }
      },
      cancel(reason) {
        return reader.cancel(reason);
      },
    });
    return new Response(body, { status: res.status, headers: res.headers });
  };
  return { fetch: f, seen };
}

function newChat(fetchFn, messages) {
  const errors = [];
  const chat = new Chat({
    id: chatId,
    messages,
    transport: new DefaultChatTransport({ api, headers, fetch: fetchFn }),
    onError: (e) => errors.push(String(e?.message || e)),
  });
  return { chat, errors };
}

async function stopChat() {
  const res = await fetch(`${api}/${encodeURIComponent(chatId)}/stop`, { method: "POST", headers });
  return { status: res.status, body: await res.text() };
}

async function transcript() {
  const res = await fetch(`${api}/${encodeURIComponent(chatId)}/messages`, { headers });
  const text = await res.text();
  return { status: res.status, messages: res.status === 200 ? JSON.parse(text) : text };
}

// Resolves once the chat shows some text of its answer.
async function answerShown(chat) {
  const shown = () => chat.messages.some((m) => m.role === "assistant" && m.parts.some((p) => p.type === "text" && p.text));
  while (!shown()) await new Promise((r) => setTimeout(r, 10));
}

const view = (chat, errors) => ({ status: chat.status, error: chat.error?.message, errors, messages: chat.messages });

// Resolves once `n` deltas went through `seen` (counted, never timed), or,
// with `response`, through that response (the first is 0).
function deltasReached(n, response) {
  let resolve;
  let inResponse = 0;
  const p = new Promise((r) => (resolve = r));
  const onDelta = (count, index) => {
    if (response === undefined) return count >= n && resolve();
    if (index === response && ++inResponse >= n) resolve();
  };
  return { promise: p, onDelta };
}

const scenarios = {
  // One prompt, its whole answer.
  async send() {
    const tap = tappedFetch();
    const { chat, errors } = newChat(tap.fetch);
    await chat.sendMessage({ text: prompt });
    return { ...view(chat, errors), responses: tap.seen.responses, transcript: await transcript() };
  },

  // A chat whose first request carries an earlier conversation (a chat
  // the app had before it used tether): the session is seeded with it.
  async seeded() {
    const tap = tappedFetch();
    const { chat, errors } = newChat(tap.fetch, [
      { id: "m1", role: "user", parts: [{ type: "text", text: "first" }] },
      { id: "m2", role: "assistant", parts: [{ type: "text", text: "an answer" }] },
    ]);
    await chat.sendMessage({ text: prompt });
    return { ...view(chat, errors), responses: tap.seen.responses, transcript: await transcript() };
  },

  // Two first requests of one new chat at once (two tabs opened together):
  // one session, both prompts answered in it.
  async race() {
    const taps = [tappedFetch(), tappedFetch()];
    const chats = taps.map((t) => newChat(t.fetch));
    await Promise.all(chats.map(({ chat }, i) => chat.sendMessage({ text: `${prompt} ${i}` })));
    return {
      chats: chats.map(({ chat, errors }) => view(chat, errors)),
      sessions: taps.map((t) => t.seen.responses[0].session),
      transcript: await transcript(),
    };
  },

  // Several prompts in a row, then a regenerate of the last answer.
  async regenerate() {
    const { chat, errors } = newChat();
    for (const text of prompt.split("|")) await chat.sendMessage({ text });
    const before = structuredClone(chat.messages);
    await chat.regenerate();
    return { before, ...view(chat, errors), transcript: await transcript() };
  },

  // Several prompts, then the first one edited (sent again in its place).
  async edit() {
    const [first, ...rest] = prompt.split("|");
    const { chat, errors } = newChat();
    await chat.sendMessage({ text: first });
    for (const text of rest) await chat.sendMessage({ text });
    const firstId = chat.messages[0].id;
    await chat.sendMessage({ text: `${first} (edited)`, messageId: firstId });
    return { ...view(chat, errors), transcript: await transcript() };
  },

  // A turn stopped by another client (the stop route) while it streams.
  async stop() {
    const reached = deltasReached(1);
    const tap = tappedFetch({ onDelta: reached.onDelta });
    const { chat, errors } = newChat(tap.fetch);
    const sent = chat.sendMessage({ text: prompt });
    await reached.promise;
    const stopped = await stopChat();
    await sent;
    return { stopped, ...view(chat, errors), transcript: await transcript() };
  },

  // The fetch is cut mid-answer; resumeStream() replays the running turn
  // from its start, then live; the test stops the turn after more text.
  async "cut-resume"() {
    // Stopped once the resumed stream has gone on live for a while.
    const more = deltasReached(5, 1);
    const tap = tappedFetch({ cutAfter: 3, onDelta: more.onDelta });
    const { chat, errors } = newChat(tap.fetch);
    await chat.sendMessage({ text: prompt });
    const cut = view(chat, [...errors]);
    const resumed = chat.resumeStream();
    await more.promise;
    const stopped = await stopChat();
    await resumed;
    return { cut, stopped, ...view(chat, errors), responses: tap.seen.responses, transcript: await transcript() };
  },

  // The gateway is killed (-9) mid-answer and restarted by the test; the
  // chat then resumes: nothing runs any more (204), and what it shows is
  // what it had, once; the transcript says how the turn ended.
  async "kill-restart"() {
    const reached = deltasReached(3);
    const tap = tappedFetch({ onDelta: reached.onDelta });
    const { chat, errors } = newChat(tap.fetch);
    const sent = chat.sendMessage({ text: prompt });
    await reached.promise;
    await answerShown(chat);
    say({ event: "answering" });
    await waitLine(); // the test killed and restarted the gateway
    await sent;
    const cut = view(chat, [...errors]);
    await chat.resumeStream();
    const after = view(chat, [...errors]);
    // The chat goes on: a new prompt on the restarted gateway.
    await chat.sendMessage({ text: "after the restart" });
    return { cut, after, ...view(chat, errors), responses: tap.seen.responses, transcript: await transcript() };
  },

  // Two chat instances on one id (two tabs): the second joins the first's
  // running turn with resumeStream() and sees the same answer.
  async "two-tabs"() {
    const reached = deltasReached(2);
    const tapA = tappedFetch({ onDelta: reached.onDelta });
    const a = newChat(tapA.fetch);
    const sent = a.chat.sendMessage({ text: prompt });
    await reached.promise;
    const tapB = tappedFetch();
    const b = newChat(tapB.fetch);
    await b.chat.resumeStream();
    await sent;
    return { a: view(a.chat, a.errors), b: view(b.chat, b.errors), responsesB: tapB.seen.responses };
  },

  // Waits for the test to start a turn elsewhere (`tether attach`), then
  // reads it with the transport's reconnect and readUIMessageStream.
  async follow() {
    say({ event: "ready" });
    await waitLine();
    const transport = new DefaultChatTransport({ api, headers });
    const stream = await transport.reconnectToStream({ chatId });
    if (stream === null) return { message: null, transcript: await transcript() };
    let last;
    for await (const message of readUIMessageStream({ stream })) last = message;
    return { message: last, transcript: await transcript() };
  },

  // What the transport's reconnect and the transcript say for this chat.
  async peek() {
    const res = await fetch(`${api}/${encodeURIComponent(chatId)}/stream`, { headers });
    return { stream: res.status, transcript: await transcript() };
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
stdin.close();
process.exit(0);
