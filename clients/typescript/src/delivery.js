// How a session takes in its events: every durable event once, in seq order,
// whatever happens to the connection (PROTOCOL 1.4 session.resume, 1.5), and
// how each one reaches the session's streams and turns. Kept apart from the
// attaching (attach.js) and the application's methods (session.js) because
// these are the exactly-once rules, and they read best in one place.
//
// The rules, the protocol's own:
// - the watermark is the highest seq taken in; a durable event at or below
//   it is a duplicate and dropped, the next one must be watermark + 1;
// - every (re)connect resumes with `last_seen` = the watermark, and live
//   frames that arrive while that resume is in flight are held and taken in
//   after its replay (a re-attached peer may get frames before the reply);
// - a `resync` (more missed than a resume replays) and a gap are filled by
//   paging `session.events.since` through `has_more`;
// - a changed epoch (another store) empties the watermark: every stream is
//   told (a `reset` item) and starts over from the new store;
// - a resume whose `latest_seq` is below the watermark, in the same epoch,
//   means the session's history went back (a store restored from an older
//   copy; the gateway answers it as a `resync`): the events after
//   `latest_seq` that were taken in are gone, and the store's next events
//   reuse their seqs. The watermark goes back to `latest_seq`, every
//   stream that yielded beyond it is told (a `reset` item, reason
//   `rollback`), and the new events are taken in as new, never dropped as
//   duplicates of the lost ones.

import { TurnRecords } from "./turn.js";

// Pages of `session.events.since` when filling a gap or a resync.
const FILL_PAGE = 1000;

// The base of Session: its event log's state and rules.
export class Delivery {
  constructor(gw, id) {
    this.gw = gw;
    this.id = id;
    this.info = null;
    this.todos = null;
    // Highest durable seq taken in; meaningful once `known`.
    this.watermark = 0;
    this.known = false;
    // Whether to be attached on every connection (set by first use, cleared
    // by the session's end).
    this.wanted = false;
    // Live frames wait in `held` while `holding` (a resume or a gap fill in
    // flight), to be taken in after what the store fills in.
    this.holding = false;
    this.held = [];
    this.filling = false;
    this.closed = false;
    // Closed while we were not attached: streams read the rest from the store.
    this.readToEnd = false;
    this.streams = new Set();
    this.turns = new TurnRecords();
    // `prompt.submit` calls in flight: meanwhile every turn's events are
    // kept, since the turn may be one of theirs, not named yet.
    this.submitting = 0;
  }

  // --- for streams ---

  _addStream(stream) {
    this.streams.add(stream);
    // A stream that starts mid-turn gets the text so far first.
    for (const rec of this.turns.values()) {
      if (!rec.complete && rec.text.bytes > 0) {
        stream._push(rec.syntheticDelta(this.id, 0, rec.text.text), this.watermark);
      }
    }
  }

  _removeStream(stream) {
    this.streams.delete(stream);
  }

  // --- the log ---

  // The session's history went back to `latest` (see the rules above).
  _rolledBack(latest) {
    const seen = this.watermark;
    this.watermark = latest;
    // Whatever closed it was lost too, or the resume would have said 4002.
    this.closed = false;
    this.readToEnd = false;
    this.turns.rolledBack(this.gw.epoch, latest);
    const marker = { type: "reset", session_id: this.id, reason: "rollback", after: latest, upto: seen };
    for (const s of this.streams) {
      s._rolledBack(marker, latest);
    }
    this.gw.emitter.emit("reset", { reason: "rollback", sessionId: this.id, epoch: this.gw.epoch, after: latest, upto: seen });
  }

  // Takes in events of `session.events.since` until the watermark reaches
  // `upto` (or the store has no more).
  async _fill(generation, upto) {
    while (this.watermark < upto) {
      const r = await this.gw._callOn(generation, "session.events.since", {
        session_id: this.id, last_seen: this.watermark, limit: FILL_PAGE,
      });
      if (generation !== this.gw.generation) {
        return;
      }
      const before = this.watermark;
      // Not beyond `upto`: what follows is held, transient frames among it,
      // and must be taken in in the order it came.
      for (const ev of r.events) {
        if (ev.seq <= upto) {
          this._accept(ev, true);
        }
      }
      if (!r.has_more || this.watermark === before) {
        return;
      }
    }
  }

  // A durable event beyond watermark + 1 arrived live: hold it (and what
  // follows) until the events between are read from the store.
  _fillGap() {
    if (this.filling) {
      return;
    }
    this.filling = true;
    const generation = this.gw.generation;
    const upto = this.held.find((ev) => typeof ev.seq === "number").seq - 1;
    this._fill(generation, upto).then(
      () => {
        this.filling = false;
        if (generation === this.gw.generation) {
          this._release();
        }
      },
      () => {
        // The connection went; the next resume replays from the watermark.
        this.filling = false;
      },
    );
  }

  _release() {
    this.holding = false;
    const held = this.held;
    this.held = [];
    for (const ev of held) {
      this._accept(ev, false);
    }
  }

  // `direct`: from a replay or a fill, in order by construction.
  _accept(ev, direct = false) {
    if (this.holding && !direct) {
      this.held.push(ev);
      return;
    }
    if (typeof ev.seq === "number") {
      if (ev.seq <= this.watermark) {
        return;
      }
      if (ev.seq > this.watermark + 1 && !direct) {
        this.holding = true;
        this.held.push(ev);
        this._fillGap();
        return;
      }
      this.watermark = ev.seq;
    }
    this._deliver(ev);
  }

  // --- what an event taken in does ---

  _deliver(ev) {
    const p = ev.payload || {};
    let rec = null;
    let out = ev;
    if (typeof ev.turn_id === "string") {
      rec = this.turns.get(ev.turn_id, ev.trace_id);
      const { out: fresh, missing } = rec.take(ev, this.id);
      if (!fresh) {
        return;
      }
      if (missing) {
        // Before the complete itself, whose seq the watermark already holds.
        this._fanout(missing, rec, ev.seq - 1);
      }
      out = fresh;
    }
    switch (ev.type) {
      case "todo.updated":
        this._todos(p);
        break;
      case "session.info":
        this.info = Object.assign({}, this.info || {}, p);
        break;
      case "session.closed":
        this.closed = true;
        this.wanted = false;
        break;
      default:
    }
    this._fanout(out, rec);
    if (rec && ev.type === "message.complete") {
      rec.done(p);
      this.turns.forget();
    }
  }

  // `mark`: the durable seq this event comes after.
  _fanout(ev, rec, mark = this.watermark) {
    for (const s of this.streams) {
      s._push(ev, mark);
    }
    if (rec) {
      rec.push(ev, this.submitting > 0);
    }
  }

  // The running turn of a resume: its text so far, as the part we lack.
  _activeTurn(active) {
    if (!active || typeof active.turn_id !== "string") {
      return;
    }
    const rec = this.turns.get(active.turn_id, active.trace_id);
    const missing = rec.rest(this.id, active.text);
    if (missing) {
      this._fanout(missing, rec);
    }
  }

  _todos(todos) {
    if (typeof todos.revision !== "number") {
      return;
    }
    // An older snapshot than the one held (PROTOCOL 1.10) is stale.
    if (!this.todos || todos.revision > this.todos.revision) {
      this.todos = { items: todos.items || [], revision: todos.revision };
    }
  }
}
