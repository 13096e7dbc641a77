// One open session: draws what `session.events()` of tether-client yields
// (clients/typescript, served at /console/tether-client/). The library
// holds the exactly-once rules (watermark, resume, resync, epoch, the
// running turn's text across reconnects), so the page only draws: each
// durable event once, in seq order, and each turn's deltas by offset.
//
// A closed session cannot be resumed (4002); the library then reads its
// events from the store and the stream ends after its `session.closed`,
// which makes the view read-only.

import { RpcError } from "./tether-client/index.js";
import { Transcript } from "./transcript.js";

// How often the header's facts are refreshed (joins and leaves come as
// presence events; the rest the page asks for).
const INFO_POLL_MS = 10000;

export class SessionView {
  // `dom`: the elements of the session pane (see console.js).
  constructor(gw, id, dom) {
    this.gw = gw;
    this.id = id;
    this.session = gw.session(id);
    this.dom = dom;
    this.transcript = new Transcript(dom.transcript);
    this.watermark = 0;
    this.disposed = false;
    this.closed = false;
    this.connected = gw.state === "open";
    this.todosRevision = -1;
    this.info = { session_id: id };
    this.libraryInfo = null;
    this.duplicates = 0;
    this.transcript.clear();
    dom.todos.hidden = true;
    dom.todoItems.replaceChildren();
    dom.attached.replaceChildren();
    dom.view.dataset.sessionId = id;
    dom.view.dataset.duplicates = "0";
    this.showInfo();
    this.showWatermark();
    this.setClosed(false);
    this.presence = null;
    this.poll = setInterval(() => this.refreshInfo(), INFO_POLL_MS);
    this.stream = this.session.events();
    // Who is there: the snapshot, read again on every join or leave (the
    // events are a diff the page need not keep).
    this.stopPresence = this.session.onPresence(() => this.refreshPresence());
    this.refreshPresence();
    this.follow();
  }

  dispose() {
    this.disposed = true;
    clearInterval(this.poll);
    this.stopPresence();
    // Ends the stream and stops its frames; a failure only means the
    // socket is already gone.
    this.session.detach().catch(() => {});
  }

  async follow() {
    try {
      for await (const ev of this.stream) {
        if (this.disposed) {
          break;
        }
        this.transcript.scrolled(() => this.draw(ev));
        // The library's SessionInfo is renewed by each resume (the peer
        // count with it) and by `session.info` events.
        if (this.session.info && this.session.info !== this.libraryInfo) {
          this.libraryInfo = this.session.info;
          this.showInfo(this.session.info);
        }
      }
    } catch (err) {
      if (!this.disposed) {
        const code = err instanceof RpcError ? " (" + err.code + ")" : "";
        this.notice("Cannot open the session: " + err.message + code, "error");
      }
      return;
    }
    if (!this.disposed && this.closed) {
      this.showInfo({ status: "closed" });
    }
  }

  draw(ev) {
    if (ev.type === "reset") {
      this.reset(ev);
      return;
    }
    if (typeof ev.seq !== "number") {
      if (ev.type === "message.delta" || ev.type === "reasoning.delta") {
        this.transcript.delta(ev);
      }
      return;
    }
    if (ev.seq <= this.watermark) {
      // The library promises this never happens; count it if it does.
      this.duplicates += 1;
      this.dom.view.dataset.duplicates = String(this.duplicates);
      return;
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

  reset(ev) {
    if (ev.reason === "epoch") {
      // Another store: what is drawn belongs to the old one. Start over.
      this.transcript.clear();
      this.transcript.note("The gateway's event store changed (new epoch); reloaded from scratch.", "warn");
      this.watermark = 0;
      this.todosRevision = -1;
      this.dom.todos.hidden = true;
    } else if (ev.reason === "rollback") {
      // The store went back (a restore): what is drawn after `after` is no
      // longer its history, and new events with those seqs follow.
      this.transcript.note("The gateway's store went back to event " + ev.after + ": events " + (ev.after + 1) +
        "–" + ev.upto + " above are gone; what follows is new.", "warn");
      this.watermark = ev.after;
    } else {
      this.transcript.note("Events " + (ev.after + 1) + "–" + ev.upto + " are no longer stored.", "warn");
      this.watermark = ev.upto;
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

  async refreshPresence() {
    if (this.disposed || this.closed) {
      return;
    }
    try {
      const peers = await this.session.presence();
      if (!this.disposed) {
        this.presence = peers;
        this.showPresence(peers);
      }
    } catch (err) {
      // A gateway without presence, or a drop: SessionInfo.attached stays.
    }
  }

  async refreshInfo() {
    if (this.disposed || this.closed || this.gw.state !== "open") {
      return;
    }
    this.refreshPresence();
    try {
      const r = await this.gw.call("session.resume", {
        session_id: this.id, attach: false, omit_messages: true,
      });
      if (!this.disposed) {
        this.showInfo(r.session);
        if (r.todos) {
          this.showTodos(r.todos);
        }
      }
    } catch (err) {
      // The next poll tries again; a closed session says so by its event.
    }
  }

  send(text) {
    return this.gw.call("prompt.submit", { session_id: this.id, text: text });
  }

  interrupt() {
    return this.session.interrupt();
  }

  compress() {
    return this.session.compress();
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
    this.showAttached(i.attached);
    this.updateControls();
    d.messages.textContent = i.message_count === undefined ? "?" : String(i.message_count);
    document.title = "tether · " + (i.title || this.id);
    d.onInfo(i, this.watermark);
  }

  // Who is attached (SessionInfo.attached, PROTOCOL Part 4): each peer's
  // id and transport, this page's own marked.
  showAttached(attached) {
    if (!Array.isArray(attached) || this.presence) {
      return;
    }
    const own = this.gw.ready && this.gw.ready.peer_id;
    const items = attached.map((p) => {
      const li = document.createElement("li");
      li.dataset.peerId = p.peer_id;
      li.dataset.transport = p.transport;
      li.textContent = p.peer_id + " · " + p.transport + (p.peer_id === own ? " (this page)" : "");
      li.classList.toggle("self", p.peer_id === own);
      return li;
    });
    this.dom.attached.replaceChildren(...items);
  }

  // Who is there (session.presence, on every node): each peer's name,
  // device and app as it described itself, its transport and node, this
  // page's own marked.
  showPresence(peers) {
    const own = this.gw.ready && this.gw.ready.peer_id;
    const items = peers.map((p) => {
      const c = p.client || {};
      const li = document.createElement("li");
      li.dataset.peerId = p.peer_id;
      li.dataset.transport = p.transport;
      const about = [c.device, c.app].filter(Boolean).join(", ");
      const parts = [(c.name || p.peer_id) + (about ? " (" + about + ")" : ""), p.transport];
      if (p.node) {
        parts.push(p.node);
      }
      li.textContent = parts.join(" · ") + (p.peer_id === own ? " (this page)" : "");
      li.title = p.peer_id + " · " + p.profile + " · since " + p.attached_at;
      li.classList.toggle("self", p.peer_id === own);
      return li;
    });
    this.dom.attached.replaceChildren(...items);
    this.dom.peers.textContent = String(peers.length);
  }

  // How many messages a compression would summarise: none in an empty
  // session, nor in one holding only its last summary.
  compressible() {
    const count = this.info.message_count;
    if (typeof count !== "number") {
      return null;
    }
    const summaryOnly = (this.info.history_version || 0) > 0 && count <= 1;
    return summaryOnly ? 0 : count;
  }

  setConnected(connected) {
    this.connected = connected;
    this.updateControls();
  }

  // The buttons act only on an open session over an open socket; the
  // prompt box stays editable while disconnected, so nothing typed is lost.
  updateControls() {
    const d = this.dom;
    const offline = !this.connected;
    const nothing = this.compressible() === 0;
    d.send.disabled = this.closed || offline;
    d.interrupt.disabled = this.closed || offline;
    d.compress.disabled = this.closed || offline || nothing;
    d.prompt.disabled = this.closed;
    const why = offline ? "Disconnected: waiting for the gateway" : "";
    d.send.title = why;
    d.interrupt.title = why;
    d.compress.title = why || (nothing ? "Nothing to compress yet" : "");
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
    this.updateControls();
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
