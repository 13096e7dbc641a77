// One session as the application sees it: every durable event once, in seq
// order, whatever happens to the connection, plus its running turns' text.
// This file holds what the application calls; how the session stays
// attached across connections is attach.js, and the exactly-once rules it
// takes its events in by are delivery.js (its bases, one concept each).

import { ConnectionLostError } from "./errors.js";
import { Attachment } from "./attach.js";
import { EventStream } from "./stream.js";
import { Turn } from "./turn.js";

export class Session extends Attachment {
  constructor(gw, id) {
    super(gw, id);
    this.presenceListeners = new Set();
  }

  get latestSeq() {
    return this.watermark;
  }

  // Every durable event with seq > `since`, once each, in order, then live
  // ones as they come, with the transient deltas of running turns.
  events({ since = 0, maxBuffered } = {}) {
    const stream = new EventStream(this, since, maxBuffered || this.gw.options.maxBuffered);
    this._want();
    return stream;
  }

  // `options`: `multitask` ("enqueue", "reject", "interrupt", "rollback"),
  // `dropQueued` (with "interrupt"), `dedupeKey` (PROTOCOL 1.4
  // `prompt.submit`).
  async submit(text, options = {}) {
    const params = { session_id: this.id, text };
    if (options.multitask !== undefined) {
      params.multitask = options.multitask;
    }
    if (options.dropQueued) {
      params.drop_queued = true;
    }
    if (options.dedupeKey !== undefined) {
      params.dedupe_key = options.dedupeKey;
    }
    await this._attached();
    this.submitting += 1;
    let r;
    try {
      r = await this.gw.call("prompt.submit", params);
    } finally {
      this.submitting -= 1;
    }
    const rec = this.turns.get(r.turn_id, r.trace_id);
    rec.keep = true;
    return new Turn(this, rec, r);
  }

  interrupt() {
    return this.gw.call("session.interrupt", { session_id: this.id });
  }

  compress(options = {}) {
    return this.gw.call("session.compress", Object.assign({ session_id: this.id }, options));
  }

  // The session as it stands (transcript `messages`, `active_turn`, `todos`),
  // without attaching.
  snapshot() {
    return this.gw.call("session.resume", { session_id: this.id, attach: false });
  }

  async branch(options = {}) {
    const params = { session_id: this.id };
    if (options.uptoSeq !== undefined) {
      params.upto_seq = options.uptoSeq;
    }
    if (options.title !== undefined) {
      params.title = options.title;
    }
    const r = await this.gw.call("session.branch", params);
    return this.gw.session(r.session.session_id);
  }

  close() {
    return this.gw.call("session.close", { session_id: this.id });
  }

  // Who is attached now, on every node: `[{peer_id, profile, client,
  // transport, node, attached_at}]` (PROTOCOL Part 4, "Presence").
  async presence() {
    const r = await this.gw.call("session.presence", { session_id: this.id });
    return r.peers;
  }

  // Calls `fn({type: "joined"|"left", peers, ts})` for each presence event
  // while the session is attached (they are transient: after a reconnect,
  // read `presence()` for the snapshot). Returns a function that stops it.
  // Key entries by `profile` and `client.instance` when there is one: a
  // reconnect keeps the instance and changes the peer id, and is not told.
  onPresence(fn) {
    this.presenceListeners.add(fn);
    this._want();
    return () => this.presenceListeners.delete(fn);
  }

  // Stops following the session: its streams end, and it is no longer
  // re-attached on reconnects.
  async detach() {
    this.wanted = false;
    this.attachedOn = 0;
    for (const s of [...this.streams]) {
      s._finish();
    }
    if (this.gw.state === "open") {
      try {
        await this.gw.call("session.detach", { session_id: this.id });
      } catch (err) {
        if (!(err instanceof ConnectionLostError)) {
          throw err;
        }
      }
    }
  }

  // --- from the gateway object ---

  _onPresence(ev) {
    const change = {
      type: ev.type === "presence.joined" ? "joined" : "left",
      peers: (ev.payload && ev.payload.peers) || [],
      ts: ev.ts,
    };
    for (const fn of [...this.presenceListeners]) {
      try {
        fn(change);
      } catch (err) {
        this.gw.emitter.emit("error", err);
      }
    }
  }
}
