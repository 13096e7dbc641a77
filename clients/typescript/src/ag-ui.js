// TetherAgent: an AG-UI `HttpAgent` (@ag-ui/client 1.x) for tether's
// AG-UI routes (docs/PROTOCOL.md "The AG-UI routes"), with what AG-UI
// itself lacks: a run survives a dropped connection, `connect()` joins a
// run that is already going (a reload, a second tab, a device), and
// `abortRun()` stops the run for every client of the thread.
//
// Every event tether sends carries an SSE id. The agent keeps the last one;
// when a run's stream breaks it continues from that id on
// `GET …/threads/{threadId}/events` (`Last-Event-ID`), so each event and
// each byte of text arrives once. A stream opened that way is verified by
// AG-UI from its start, so tether opens again what the client had open
// (the run, a text message, a tool call); within a run that resumes, the
// agent drops those re-opened starts, which the run has already had.
//
// Imported as "tether-client/ag-ui"; @ag-ui/client and rxjs are the
// application's own (peer dependencies).

import { HttpAgent } from "@ag-ui/client";
import { Observable } from "rxjs";

/** How often a run tries to continue after its stream broke. */
const RESUMES = 5;

/** The AG-UI starts a resumed stream may open again, and their ends. */
const OPENS = {
  TEXT_MESSAGE_START: (e) => `text:${e.messageId}`,
  TOOL_CALL_START: (e) => `tool:${e.toolCallId}`,
  REASONING_START: (e) => `span:${e.messageId}`,
  REASONING_MESSAGE_START: (e) => `reasoning:${e.messageId}`,
};
const CLOSES = {
  TEXT_MESSAGE_END: (e) => `text:${e.messageId}`,
  TOOL_CALL_END: (e) => `tool:${e.toolCallId}`,
  REASONING_END: (e) => `span:${e.messageId}`,
  REASONING_MESSAGE_END: (e) => `reasoning:${e.messageId}`,
};

export class TetherAgent extends HttpAgent {
  /**
   * @param {object} config HttpAgent's config; `url` is the gateway's
   *   `…/v1/ag-ui`. `lastEventId`: where a `connect()` continues from
   *   (kept by the agent as events arrive; an app that reloads may save
   *   it). `resumes`: how often a run continues after its stream broke
   *   (5).
   */
  constructor(config) {
    super(config);
    this.lastEventId = config.lastEventId;
    this.resumes = config.resumes ?? RESUMES;
    // The id of each event, until the agent has applied it: `lastEventId`
    // is that of the last event whose change reached `messages` or
    // `state`, so an app that saves both together saves a matching pair
    // (an event read but not applied when a stream broke is not counted).
    // (AG-UI's pipeline hands its subscribers copies of the events, in
    // order: each is matched with the oldest id waiting of its type.)
    this.ids = [];
    let current;
    const commit = () => {
      if (current !== undefined) this.lastEventId = current;
    };
    this.subscribe({
      onEvent: ({ event }) => {
        const i = this.ids.findIndex((e) => e.type === event.type);
        if (i >= 0) {
          current = this.ids[i].id;
          this.ids.splice(0, i + 1);
        }
      },
      onMessagesChanged: commit,
      onStateChanged: commit,
      onRunFinishedEvent: commit,
      onRunErrorEvent: commit,
    });
  }

  /** `…/v1/ag-ui/threads/{threadId}`. */
  threadUrl() {
    const base = this.url.replace(/\/+$/, "");
    return `${base}/threads/${encodeURIComponent(this.threadId)}`;
  }

  /** The run: HttpAgent's POST, continued where it broke. */
  run(input) {
    return this.#stream(() => this.fetch(this.url, this.requestInit(input)), true);
  }

  /**
   * Joins the thread's run: from `lastEventId` when the agent has one,
   * else the running run from its start; nothing when no run goes on.
   */
  connect() {
    if (this.abortController.signal.aborted) this.abortController = new AbortController();
    return this.#stream(() => this.#events(), true);
  }

  /** Stops the thread's running run, whichever client started it. */
  async stop() {
    const res = await this.fetch(`${this.threadUrl()}/stop`, {
      method: "POST",
      headers: { ...this.headers },
    });
    if (!res.ok && res.status !== 404) throw new Error(`stop: HTTP ${res.status}: ${await res.text()}`);
  }

  /** Stops the run for every client, then ends this one's stream. */
  abortRun() {
    this.stop().catch(() => {});
    super.abortRun();
  }

  #events(from = this.lastEventId) {
    const headers = { ...this.headers, Accept: "text/event-stream" };
    if (from) headers["Last-Event-ID"] = from;
    return this.fetch(`${this.threadUrl()}/events`, {
      method: "GET",
      headers,
      signal: this.abortController.signal,
    });
  }

  /**
   * The events of `open()`'s response, then of the resume route each time
   * the stream breaks before the run ends.
   */
  #stream(open, resume) {
    return new Observable((subscriber) => {
      let closed = false;
      const state = { runActive: false, ended: false, open: new Set() };
      // The id of the last event read: where this stream continues.
      let read;
      (async () => {
        let first = true;
        let failures = 0;
        for (;;) {
          let res;
          try {
            res = await (first ? open() : this.#events(read));
          } catch (e) {
            if (closed || this.abortController.signal.aborted) return subscriber.error(e);
            if (first || ++failures > this.resumes) return subscriber.error(e);
            await pause(failures);
            continue;
          }
          if (res.status === 204) return subscriber.complete();
          if (!res.ok) {
            const err = new Error(`HTTP ${res.status}: ${await res.text()}`);
            err.status = res.status;
            return subscriber.error(err);
          }
          const resumed = !first;
          first = false;
          try {
            for await (const { id, event } of readSse(res.body)) {
              if (closed) return;
              if (id !== undefined) read = id;
              if (resumed && reopened(state, event)) continue;
              track(state, event);
              failures = 0;
              if (read !== undefined) this.ids.push({ type: event.type, id: read });
              subscriber.next(event);
            }
          } catch (e) {
            if (closed || this.abortController.signal.aborted) return subscriber.error(e);
          }
          if (state.ended) return subscriber.complete();
          if (!resume || ++failures > this.resumes) {
            return subscriber.error(new Error("the run's stream ended before the run did"));
          }
          await pause(failures);
        }
      })();
      return () => {
        closed = true;
      };
    });
  }
}

/** Whether a resumed stream's event opens what the run has open already. */
function reopened(state, event) {
  if (event.type === "RUN_STARTED") return state.runActive;
  const key = OPENS[event.type]?.(event);
  return key !== undefined && state.open.has(key);
}

function track(state, event) {
  if (event.type === "RUN_STARTED") {
    state.runActive = true;
    state.ended = false;
  } else if (event.type === "RUN_FINISHED" || event.type === "RUN_ERROR") {
    state.runActive = false;
    state.ended = true;
    state.open.clear();
  } else if (OPENS[event.type]) {
    state.open.add(OPENS[event.type](event));
  } else if (CLOSES[event.type]) {
    state.open.delete(CLOSES[event.type](event));
  }
}

/** 250 ms, doubled per failure, at most 5 s. */
function pause(failures) {
  return new Promise((r) => setTimeout(r, Math.min(5000, 250 * 2 ** (failures - 1))));
}

/** The events of an SSE body, with the id each carries (if any). */
async function* readSse(body) {
  const decoder = new TextDecoder();
  let buf = "";
  for await (const chunk of body) {
    buf += decoder.decode(chunk, { stream: true });
    let i;
    while ((i = buf.search(/\r?\n\r?\n/)) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(buf[i] === "\r" ? i + 4 : i + 2);
      let id;
      const data = [];
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith("id:")) id = line.slice(3).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length > 0) yield { id, event: JSON.parse(data.join("\n")) };
    }
  }
}
