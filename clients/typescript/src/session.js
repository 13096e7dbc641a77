// One session as the application sees it: every durable event once, in seq
// order, whatever happens to the connection (PROTOCOL 1.4 session.resume,
// 1.5), plus its running turns' text.
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

import { ConnectionLostError, RpcError, codes } from "./errors.js";
import { EventStream } from "./stream.js";
import { Turn, TurnRecords } from "./turn.js";

// Pages of `session.events.since` when filling a gap or a resync.
const FILL_PAGE = 1000;
// The first retry of a resume the gateway refused for a passing reason
// (4009 too many peers, storage unavailable, ...), doubling to the backoff cap.
const ATTACH_RETRY_MS = 500;

export class Session {
  constructor(gw, id) {
    this.gw = gw;
    this.id = id;
    this.info = null;
    this.todos = null;
    // Highest durable seq taken in; meaningful once `known`.
    this.watermark = 0;
    this.known = false;
    // Whether to be attached on every connection (set by first use).
    this.wanted = false;
    this.attachedOn = 0;
    this.attaching = null;
    this.holding = false;
    this.held = [];
    this.filling = false;
    this.closed = false;
    this.readToEnd = false;
    this.failure = null;
    this.shutDown = false;
    this.streams = new Set();
    this.turns = new TurnRecords();
    this.submitting = 0;
    this.waiters = [];
    this.retryMs = ATTACH_RETRY_MS;
    this.retryTimer = null;
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

  // --- for streams and turns ---

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

  _want() {
    this.wanted = true;
    if (this.gw.state === "open" && this.attachedOn !== this.gw.generation) {
      this._attach(this.gw.generation);
    }
  }

  // Resolves once attached on the current connection (or closed, where the
  // gateway answers for itself); rejects with UnreachableError when no
  // connection opens within the connect timeout.
  async _attached() {
    this._want();
    const timeout = this.gw.options.connectTimeoutMs;
    const since = Date.now();
    for (;;) {
      if (this.failure || this.gw.failure) {
        throw this.failure || this.gw.failure;
      }
      if (this.closed || (this.gw.state === "open" && this.attachedOn === this.gw.generation)) {
        return;
      }
      if (this.gw.state !== "open") {
        const left = since + timeout - Date.now();
        if (left <= 0) {
          throw this.gw._unreachable(since);
        }
        await this.gw._whenOpen(left, since);
        continue;
      }
      await new Promise((resolve) => this.waiters.push(resolve));
    }
  }

  _wake() {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) {
      w();
    }
    for (const s of this.streams) {
      s._wake();
    }
  }

  // --- from the gateway object ---

  _created(r, generation, early) {
    this.info = r.session;
    this.known = true;
    this.watermark = 0;
    if (generation) {
      this.wanted = true;
      this.attachedOn = generation;
    }
    for (const ev of early) {
      this._accept(ev);
    }
    this._wake();
  }

  _connected(generation) {
    this.retryMs = ATTACH_RETRY_MS;
    if (this.wanted && !this.closed && !this.failure) {
      this._attach(generation);
    }
  }

  _disconnected() {
    this.holding = false;
    this.held = [];
    this.attaching = null;
    this._wake();
  }

  _reset(epoch, previous) {
    this.watermark = 0;
    this.known = false;
    this.closed = false;
    this.readToEnd = false;
    this.attachedOn = 0;
    this.holding = false;
    this.held = [];
    this.todos = null;
    this.turns.reset(epoch);
    const marker = { type: "reset", session_id: this.id, reason: "epoch", epoch, previous_epoch: previous };
    for (const s of this.streams) {
      s._reset(marker);
    }
    this._wake();
  }

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

  _shutdown(err, failed) {
    this.shutDown = true;
    if (this.retryTimer) {
      clearTimeout(this.retryTimer);
    }
    if (failed) {
      this.failure = err;
    }
    this.turns.failAll(err);
    for (const s of [...this.streams]) {
      if (failed) {
        s._wake();
      } else {
        s._finish();
      }
    }
    this._wake();
  }

  _fail(err) {
    this.failure = err;
    this.wanted = false;
    this.turns.failAll(err);
    this._wake();
  }

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

  _onLive(ev) {
    if (this.wanted) {
      this._accept(ev, false);
    }
  }

  // --- attach and replay ---

  _attach(generation) {
    if (this.attaching && this.attaching.generation === generation) {
      return this.attaching.promise;
    }
    const promise = this._resume(generation);
    this.attaching = { generation, promise };
    promise.finally(() => {
      if (this.attaching && this.attaching.promise === promise) {
        this.attaching = null;
      }
    });
    return promise;
  }

  async _resume(generation) {
    this.holding = true;
    this.held = [];
    const params = { session_id: this.id, omit_messages: true };
    if (this.known) {
      params.last_seen = this.watermark;
    }
    let r;
    try {
      r = await this.gw._callOn(generation, "session.resume", params);
      if (generation !== this.gw.generation) {
        return;
      }
      this.info = r.session;
      if (!this.known) {
        // First attach: the stream(s) read the history from the store.
        this.watermark = r.latest_seq;
        this.known = true;
      } else if (typeof r.latest_seq === "number" && r.latest_seq < this.watermark) {
        this._rolledBack(r.latest_seq);
      } else if (r.resync) {
        await this._fill(generation, r.latest_seq);
      } else {
        for (const ev of r.events || []) {
          this._accept(ev, true);
        }
      }
    } catch (err) {
      if (generation !== this.gw.generation) {
        return;
      }
      this.holding = false;
      this.held = [];
      this._refused(err, generation);
      return;
    }
    if (generation !== this.gw.generation) {
      return;
    }
    this._activeTurn(r.active_turn);
    if (r.todos) {
      this._todos(r.todos);
    }
    this.attachedOn = generation;
    this.retryMs = ATTACH_RETRY_MS;
    this._release();
    this._wake();
  }

  _refused(err, generation) {
    if (!(err instanceof RpcError)) {
      return; // the connection went: the next one attaches again
    }
    if (err.code === codes.SESSION_CLOSED) {
      this._markClosed();
    } else if (err.code === codes.SESSION_NOT_FOUND) {
      this._fail(err);
    } else {
      // Refused for now (4009 too many peers, storage trouble): try again.
      this.gw.emitter.emit("error", err);
      const delay = this.retryMs;
      this.retryMs = Math.min(this.retryMs * 2, this.gw.options.backoff.maxMs);
      this.retryTimer = setTimeout(() => {
        this.retryTimer = null;
        if (this.wanted && !this.shutDown && generation === this.gw.generation) {
          this._attach(generation);
        }
      }, delay);
    }
  }

  // Closed while we were not attached (4002): streams read the rest of
  // its events from the store, through its `session.closed`.
  _markClosed() {
    this.closed = true;
    this.readToEnd = true;
    this.wanted = false;
    this._wake();
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
