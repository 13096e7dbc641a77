// How a session stays attached: on every connection the gateway object opens
// it resumes from its watermark (`session.resume` with `last_seen`), holding
// live frames until the replay is in; a resume refused for a passing reason
// is tried again with backoff, and the gateway object's news (created, a new
// connection, a drop, another store, the end) lands here. Kept apart from
// the exactly-once rules it relies on (delivery.js) and from the methods the
// application calls (session.js).

import { RpcError, codes } from "./errors.js";
import { Delivery } from "./delivery.js";

// The first retry of a resume the gateway refused for a passing reason
// (4009 too many peers, storage unavailable, ...), doubling to the backoff cap.
const ATTACH_RETRY_MS = 500;

// The base of Session: its attachment, connection after connection.
export class Attachment extends Delivery {
  constructor(gw, id) {
    super(gw, id);
    // The connection (generation) this session is attached on, 0 if none,
    // and the resume in flight.
    this.attachedOn = 0;
    this.attaching = null;
    this.failure = null;
    this.shutDown = false;
    // Who waits for the attachment (`_attached`).
    this.waiters = [];
    this.retryMs = ATTACH_RETRY_MS;
    this.retryTimer = null;
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

  // Another store (see delivery.js's rules): the watermark means nothing there.
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
}
