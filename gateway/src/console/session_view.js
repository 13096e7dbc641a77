// One open session: which of its events reach the screen, once each and in
// order, across reconnects (PROTOCOL 1.4 session.resume, 1.5).
//
// The rule is the protocol's own: the watermark is the highest seq drawn; a
// durable event at or below it is a duplicate and dropped; the next one
// must be watermark + 1. Every (re)connect resumes with `last_seen` = the
// watermark, and live frames that arrive while that resume is in flight are
// held and applied after its replay, so nothing is drawn out of order. A
// closed session cannot be resumed (4002) but its events can still be read,
// so it is shown read-only from `session.events.since`.

import { RpcError } from "./connection.js";
import { Transcript } from "./transcript.js";

// How often the header's facts (peer count above all) are refreshed: the
// gateway does not announce attaches, so the page asks.
const INFO_POLL_MS = 10000;
// Pages of `session.events.since` when reading a closed session.
const SINCE_PAGE = 1000;

export class SessionView {
  // `dom`: the elements of the session pane (see console.js).
  constructor(conn, id, dom) {
    this.conn = conn;
    this.id = id;
    this.dom = dom;
    this.transcript = new Transcript(dom.transcript);
    this.watermark = 0;
    this.epoch = null;
    this.resuming = false;
    this.held = [];
    this.generation = 0;
    this.disposed = false;
    this.closed = false;
    this.todosRevision = -1;
    this.info = { session_id: id };
    this.duplicates = 0;
    this.transcript.clear();
    dom.todos.hidden = true;
    dom.todoItems.replaceChildren();
    dom.view.dataset.sessionId = id;
    dom.view.dataset.duplicates = "0";
    this.showInfo();
    this.showWatermark();
    this.setClosed(false);
    this.poll = setInterval(() => this.refreshInfo(), INFO_POLL_MS);
  }

  dispose() {
    this.disposed = true;
    this.generation += 1;
    clearInterval(this.poll);
  }

  // Called on every `gateway.ready`: the first connection and each one after
  // a drop.
  connected(ready) {
    if (this.epoch && ready.epoch && ready.epoch !== this.epoch) {
      // Another store: our seqs mean nothing there. Start over.
      this.transcript.clear();
      this.transcript.note("The gateway's event store changed (new epoch); reloaded from scratch.", "warn");
      this.watermark = 0;
      this.todosRevision = -1;
      this.epoch = null;
    }
    this.resume();
  }

  disconnected() {
    this.transcript.markStale();
    // The resume in flight (if any) died with the socket; the next
    // connection starts another.
    this.generation += 1;
    this.resuming = false;
    this.held = [];
  }

  // A live event frame (of any session: the view keeps its own).
  apply(ev) {
    if (this.disposed || ev.session_id !== this.id) {
      return;
    }
    if (this.resuming) {
      this.held.push(ev);
      return;
    }
    this.transcript.scrolled(() => this.applyNow(ev, false));
  }

  applyNow(ev, replayed) {
    if (typeof ev.seq !== "number") {
      if (ev.type === "message.delta" || ev.type === "reasoning.delta") {
        this.transcript.delta(ev);
      }
      return;
    }
    if (ev.seq <= this.watermark) {
      this.duplicates += 1;
      this.dom.view.dataset.duplicates = String(this.duplicates);
      return;
    }
    if (ev.seq !== this.watermark + 1) {
      if (!replayed) {
        // Never expected; if it happens, ask again from what we have.
        console.warn("tether: seq gap", this.watermark, ev.seq);
        this.held = [ev];
        this.resume();
        return;
      }
      this.transcript.note("Events " + (this.watermark + 1) + "–" + (ev.seq - 1) +
        " are no longer stored.", "warn");
    }
    this.watermark = ev.seq;
    try {
      this.transcript.durable(ev);
      this.sideEffects(ev);
    } catch (err) {
      console.error("tether: could not draw event", ev, err);
    }
    this.showWatermark();
  }

  sideEffects(ev) {
    const p = ev.payload || {};
    switch (ev.type) {
      case "session.created":
        if (!this.info.title) {
          this.showInfo({ title: p.title });
        }
        break;
      case "todo.updated":
        this.showTodos(p);
        break;
      case "session.info":
        this.showInfo(p);
        break;
      case "session.closed":
        this.setClosed(true);
        break;
      case "message.start":
        this.showInfo({ status: "running" });
        break;
      case "message.complete":
      case "session.compacted":
        this.refreshInfo();
        break;
      default:
    }
  }

  async resume() {
    if (this.disposed || this.conn.state !== "open") {
      return;
    }
    this.resuming = true;
    const gen = ++this.generation;
    try {
      const r = await this.conn.call("session.resume", {
        session_id: this.id, last_seen: this.watermark, omit_messages: true,
      });
      if (gen !== this.generation) {
        return;
      }
      this.epoch = r.epoch;
      console.info("tether: resumed " + this.id + " after seq " + this.watermark + ": " +
        (r.resync ? "resync" : (r.events || []).length + " events replayed") +
        (r.active_turn ? ", turn " + r.active_turn.turn_id + " running" : ""));
      if (r.resync) {
        await this.rebuild(gen, r.latest_seq);
        if (gen !== this.generation) {
          return;
        }
      } else {
        this.transcript.scrolled(() => {
          for (const ev of r.events || []) {
            this.applyNow(ev, true);
          }
        });
      }
      this.showInfo(r.session);
      if (r.todos) {
        this.showTodos(r.todos);
      }
      if (r.active_turn) {
        this.transcript.activeTurn(r.active_turn);
      }
      this.release();
    } catch (err) {
      if (gen !== this.generation) {
        return;
      }
      this.resuming = false;
      this.held = [];
      if (err instanceof RpcError && err.code === 4002) {
        this.readClosed(gen).catch(() => {
          // A lost socket: the next `gateway.ready` reads on.
        });
      } else if (err instanceof RpcError) {
        this.notice("Cannot open the session: " + err.message + " (" + err.code + ")", "error");
      }
      // Anything else is a lost socket: the next `gateway.ready` resumes.
    }
  }

  // Frames held during a resume, now that its replay is drawn.
  release() {
    const held = this.held;
    this.held = [];
    this.resuming = false;
    this.transcript.scrolled(() => {
      for (const ev of held) {
        this.applyNow(ev, false);
      }
    });
  }

  // More was missed than a resume replays: draw the transcript instead.
  async rebuild(gen, latest) {
    let r = null;
    try {
      r = await this.conn.call("session.resume", { session_id: this.id });
    } catch (err) {
      if (!(err instanceof RpcError)) {
        throw err;
      }
    }
    if (gen !== this.generation) {
      return;
    }
    this.transcript.clear();
    this.transcript.note("Earlier events are not shown: more were missed than a resume replays.", "warn");
    if (r && Array.isArray(r.messages)) {
      for (const m of r.messages) {
        this.transcript.message(m);
      }
      this.watermark = r.latest_seq;
    } else {
      this.transcript.note("The transcript is too large to show here.", "warn");
      this.watermark = latest;
    }
    this.showWatermark();
  }

  async readClosed(gen) {
    this.setClosed(true);
    let more = true;
    while (more) {
      const r = await this.conn.call("session.events.since", {
        session_id: this.id, last_seen: this.watermark, limit: SINCE_PAGE,
      });
      if (gen !== this.generation) {
        return;
      }
      this.transcript.scrolled(() => {
        for (const ev of r.events) {
          this.applyNow(ev, true);
        }
      });
      more = r.has_more && r.events.length > 0;
    }
    this.showInfo({ status: "closed" });
  }

  async refreshInfo() {
    if (this.disposed || this.closed || this.resuming || this.conn.state !== "open") {
      return;
    }
    try {
      const r = await this.conn.call("session.resume", {
        session_id: this.id, attach: false, omit_messages: true,
      });
      if (!this.disposed) {
        this.showInfo(r.session);
      }
    } catch (err) {
      // The next poll tries again; a closed session says so by its event.
    }
  }

  send(text) {
    return this.conn.call("prompt.submit", { session_id: this.id, text: text });
  }

  interrupt() {
    return this.conn.call("session.interrupt", { session_id: this.id });
  }

  compress() {
    return this.conn.call("session.compress", { session_id: this.id });
  }

  showInfo(fields) {
    Object.assign(this.info, fields || {});
    const i = this.info;
    const d = this.dom;
    d.title.textContent = i.title || "(untitled)";
    d.id.textContent = this.id;
    d.status.textContent = i.status || "";
    d.status.className = "status-" + (i.status || "unknown");
    d.peers.textContent = i.peers === undefined ? "?" : String(i.peers);
    d.messages.textContent = i.message_count === undefined ? "?" : String(i.message_count);
    document.title = "tether · " + (i.title || this.id);
    d.onInfo(i, this.watermark);
  }

  showWatermark() {
    this.dom.watermark.textContent = String(this.watermark);
    this.dom.onInfo(this.info, this.watermark);
  }

  showTodos(todos) {
    if (typeof todos.revision !== "number" || todos.revision <= this.todosRevision) {
      // An older snapshot than the one shown (PROTOCOL 1.10).
      return;
    }
    this.todosRevision = todos.revision;
    const d = this.dom;
    d.todos.hidden = false;
    d.todosRev.textContent = "rev " + todos.revision;
    d.todoItems.replaceChildren();
    for (const item of todos.items || []) {
      const li = document.createElement("li");
      li.className = "todo-" + (item.status || "pending");
      li.textContent = item.text || "";
      li.title = item.status || "";
      d.todoItems.append(li);
    }
  }

  setClosed(closed) {
    this.closed = closed;
    const d = this.dom;
    for (const b of [d.send, d.interrupt, d.compress, d.prompt]) {
      b.disabled = closed;
    }
    if (closed) {
      this.showInfo({ status: "closed" });
    }
  }

  notice(text, kind) {
    const n = this.dom.notice;
    n.textContent = text;
    n.className = "notice " + (kind || "info");
    n.hidden = !text;
  }
}
