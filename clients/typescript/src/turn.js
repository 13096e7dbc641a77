// A turn (one prompt and its reply). The session keeps a record per turn it
// sees, built from the same events its streams get; a Turn object is the
// application's handle on one record: its deltas, its events, its end.
//
// `result()` is the turn's `message.complete` payload whatever ended it
// (completed, failed, interrupted, the host or the gateway crashed), since
// the protocol promises exactly one per accepted turn and this library
// replays it after any reconnect or gateway restart.

import { ResetError } from "./errors.js";
import { TurnText } from "./text.js";

// Completed turns remembered, so that a `submit` whose answer comes after
// its turn's events still finds them.
const DONE_TURNS = 64;

// A session's turn records, by turn id.
export class TurnRecords {
  constructor() {
    this.byId = new Map();
  }

  values() {
    return this.byId.values();
  }

  // The record of `turnId`, made when first seen.
  get(turnId, traceId) {
    let rec = this.byId.get(turnId);
    if (!rec) {
      rec = new TurnRecord(turnId);
      this.byId.set(turnId, rec);
    }
    if (!rec.traceId && typeof traceId === "string") {
      rec.traceId = traceId;
    }
    return rec;
  }

  // Drops the oldest completed turns beyond DONE_TURNS (a Turn object
  // keeps its own record alive).
  forget() {
    let done = 0;
    for (const rec of this.byId.values()) {
      if (rec.complete) {
        done += 1;
      }
    }
    for (const [id, rec] of this.byId) {
      if (done <= DONE_TURNS) {
        break;
      }
      if (rec.complete) {
        this.byId.delete(id);
        done -= 1;
      }
    }
  }

  // Every turn not ended fails with `err`.
  failAll(err) {
    for (const rec of this.byId.values()) {
      rec.fail(err);
    }
  }

  // Another store: no turn of this one can be reported on.
  reset(epoch) {
    this.failAll(new ResetError(epoch, "epoch"));
    this.byId.clear();
  }

  // The session's history went back to `latest`: a turn not ended whose
  // events were all lost will never be heard of again; one with an event
  // still in the store is ended by the gateway (its restart ends every
  // turn it finds running).
  rolledBack(epoch, latest) {
    const err = new ResetError(epoch, "rollback");
    for (const [id, rec] of this.byId) {
      if (!rec.complete && !(rec.firstSeq !== null && rec.firstSeq <= latest)) {
        rec.fail(err);
        this.byId.delete(id);
      }
    }
  }
}

export class TurnRecord {
  constructor(turnId) {
    this.turnId = turnId;
    this.traceId = null;
    this.text = new TurnText();
    this.reasoning = new TurnText();
    // The turn's events as taken in, kept while someone may want them: a
    // Turn object, or a submit whose answer has not come yet.
    this.events = [];
    this.keep = false;
    // The seq of its first durable event taken in.
    this.firstSeq = null;
    this.complete = null;
    this.error = null;
    this.wakers = new Set();
    this.settled = null;
    this.result = new Promise((resolve, reject) => {
      this.settled = { resolve, reject };
    });
    // A rejection nobody awaited must not crash a Node process.
    this.result.catch(() => {});
  }

  push(ev, keepAnyway) {
    if (this.firstSeq === null && typeof ev.seq === "number") {
      this.firstSeq = ev.seq;
    }
    if (this.keep || keepAnyway) {
      this.events.push(ev);
    }
    this.wake();
  }

  done(payload) {
    this.complete = payload;
    this.settled.resolve(payload);
    this.wake();
  }

  fail(err) {
    if (!this.complete && !this.error) {
      this.error = err;
      this.settled.reject(err);
      this.wake();
    }
  }

  wake() {
    for (const w of [...this.wakers]) {
      w();
    }
  }

  changed() {
    return new Promise((resolve) => {
      const w = () => {
        this.wakers.delete(w);
        resolve();
      };
      this.wakers.add(w);
    });
  }

  // What of `ev` (an event of this turn) is new: `out` the event to pass
  // on (a delta trimmed to the bytes not held yet; null: nothing new), and
  // for a message.complete `missing`, its text that never came as deltas
  // (dropped, or sent while we were away), as one last delta, so that the
  // deltas add up to the text.
  take(ev, sessionId) {
    const p = ev.payload || {};
    if (ev.type === "message.delta" || ev.type === "reasoning.delta") {
      const text = ev.type === "message.delta" ? this.text : this.reasoning;
      const piece = this.complete ? null : text.delta(p.offset, p.text);
      return { out: piece && Object.assign({}, ev, { payload: Object.assign({}, p, piece) }), missing: null };
    }
    if (ev.type === "message.complete") {
      return { out: ev, missing: this.rest(sessionId, p.text) };
    }
    return { out: ev, missing: null };
  }

  // The part of the turn's whole `text` not held yet, as a delta (or null).
  rest(sessionId, text) {
    const piece = this.complete ? null : this.text.rest(text);
    return piece && this.syntheticDelta(sessionId, piece.offset, piece.text);
  }

  syntheticDelta(sessionId, offset, text) {
    return {
      type: "message.delta",
      session_id: sessionId,
      turn_id: this.turnId,
      trace_id: this.traceId || undefined,
      ts: new Date().toISOString(),
      payload: { text, offset },
    };
  }
}

export class Turn {
  constructor(session, rec, reply) {
    this.session = session;
    this.record = rec;
    this.id = reply.turn_id;
    this.traceId = reply.trace_id;
    // "started" or "queued" behind the running turn.
    this.status = reply.status;
    // The `dedupeKey` matched an earlier prompt's: this is that turn.
    this.duplicate = reply.duplicate === true;
  }

  // The message.complete payload: `{ text, status, failure_reason?, ... }`.
  result() {
    return this.record.result;
  }

  // Every event of this turn, from its first, through its message.complete.
  events() {
    return this._iterate(() => true);
  }

  // The assistant text as `{ text, offset }` pieces: each byte once, in
  // order, adding up to the message.complete text.
  deltas() {
    return this._iterate((ev) => ev.type === "message.delta", (ev) => ev.payload);
  }

  interrupt() {
    return this.session.interrupt();
  }

  _iterate(wanted, map = (ev) => ev) {
    const rec = this.record;
    let index = 0;
    let over = false;
    return {
      [Symbol.asyncIterator]() {
        return this;
      },
      async next() {
        for (;;) {
          if (over) {
            return { value: undefined, done: true };
          }
          while (index < rec.events.length) {
            const ev = rec.events[index++];
            if (wanted(ev)) {
              return { value: map(ev), done: false };
            }
          }
          if (rec.complete) {
            over = true;
            continue;
          }
          if (rec.error) {
            over = true;
            throw rec.error;
          }
          await rec.changed();
        }
      },
      return() {
        over = true;
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }
}
