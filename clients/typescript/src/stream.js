// `session.events()`: one reader's position in a session's event log.
//
// Each stream has its own cursor (the last durable seq it yielded) and a
// bounded queue of what the session took in live. Whatever the stream
// lacks, because it started after those events were taken in, fell behind
// past its bound, or the store changed, it reads from the store with
// `session.events.since`, paging through `has_more`. Each queued item
// remembers the session's watermark when it was taken in, so a transient
// delta is yielded only after every durable event that preceded it.

const DEFAULT_MAX_BUFFERED = 10000;
const SINCE_PAGE = 1000;

export class EventStream {
  constructor(session, since, maxBuffered) {
    this.session = session;
    this.cursor = since;
    this.maxBuffered = maxBuffered || DEFAULT_MAX_BUFFERED;
    // `{ ev, mark }` taken in live, or `{ marker }`.
    this.queue = [];
    // `{ ev }` or `{ marker }` read from the store, yielded before the queue.
    this.front = [];
    this.wakeup = null;
    this.finished = false;
    // A `session.closed` was yielded: nothing can follow it.
    this.ended = false;
    // The session's watermark when a cursor beyond it was last checked
    // against the store.
    this.checkedAt = -1;
    session._addStream(this);
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  async next() {
    try {
      return await this._next();
    } catch (err) {
      if (this.session.shutDown && !this.session.failure) {
        // The application closed the gateway object: the stream just ends.
        this._finish();
        return { value: undefined, done: true };
      }
      this._finish();
      throw err;
    }
  }

  async _next() {
    for (;;) {
      if (this.finished || this.ended) {
        this._finish();
        return { value: undefined, done: true };
      }
      if (this.front.length > 0) {
        const item = this.front.shift();
        if (item.marker) {
          if (item.marker.reason === "truncated") {
            this.cursor = Math.max(this.cursor, item.marker.upto);
          }
          return { value: item.marker, done: false };
        }
        if (item.ev.seq > this.cursor) {
          return this._yield(item.ev);
        }
        continue;
      }
      if (this.queue.length > 0) {
        const item = this.queue[0];
        if (item.marker) {
          this.queue.shift();
          return { value: item.marker, done: false };
        }
        const ev = item.ev;
        const durable = typeof ev.seq === "number";
        if (durable && ev.seq <= this.cursor) {
          this.queue.shift();
          continue;
        }
        const need = durable ? ev.seq - 1 : item.mark;
        if (this.cursor < need) {
          await this._fill(need);
          continue;
        }
        this.queue.shift();
        return durable ? this._yield(ev) : { value: ev, done: false };
      }
      const s = this.session;
      if (s.failure) {
        throw s.failure;
      }
      if (s.known && this.cursor > s.watermark && this.checkedAt !== s.watermark) {
        // Beyond all the session has: asked for with a `since` kept from
        // before the store went back (a restore). The store says.
        this.checkedAt = s.watermark;
        await this._fill(Infinity);
        continue;
      }
      if (this.cursor < s.watermark) {
        await this._fill(s.watermark);
        continue;
      }
      if (s.closed && s.readToEnd) {
        // Closed while we were not attached: the rest is in the store.
        if (!(await this._fill(Infinity))) {
          this._finish();
          return { value: undefined, done: true };
        }
        continue;
      }
      if (s.shutDown) {
        this._finish();
        return { value: undefined, done: true };
      }
      await new Promise((resolve) => {
        this.wakeup = resolve;
      });
    }
  }

  return() {
    this._finish();
    return Promise.resolve({ value: undefined, done: true });
  }

  _yield(ev) {
    this.cursor = ev.seq;
    if (ev.type === "session.closed") {
      this.ended = true;
    }
    return { value: ev, done: false };
  }

  // Reads one page of the store after the cursor, up to `upto`; whether it
  // found anything to yield. A range the store no longer has (retention,
  // PROTOCOL 1.4 `truncated`) becomes a `reset` item, since it can never
  // be yielded.
  async _fill(upto) {
    const s = this.session;
    const from = this.cursor;
    // No connect timeout: a stream follows its session through any outage.
    const r = await s.gw._request("session.events.since", {
      session_id: s.id, last_seen: from, limit: SINCE_PAGE,
    }, Infinity);
    if (this.finished || this.cursor !== from) {
      return false;
    }
    if (typeof r.latest_seq === "number" && r.latest_seq < from) {
      // The session's history went back below this cursor: what was
      // yielded after `latest_seq` is gone, and new events reuse the seqs.
      this.cursor = r.latest_seq;
      this.front.push({ marker: { type: "reset", session_id: s.id, reason: "rollback", after: r.latest_seq, upto: from } });
      return true;
    }
    const events = r.events.filter((ev) => ev.seq > from && ev.seq <= upto);
    const first = events.length > 0 ? events[0].seq : upto + 1;
    if (Number.isFinite(first) && first > from + 1) {
      this.front.push({ marker: { type: "reset", session_id: s.id, reason: "truncated", after: from, upto: first - 1 } });
    }
    for (const ev of events) {
      this.front.push({ ev });
    }
    return this.front.length > 0;
  }

  // --- from the session ---

  _push(ev, mark) {
    if (this.finished) {
      return;
    }
    if (this.queue.length >= this.maxBuffered) {
      // The reader is far behind: stop holding what it has not read; it
      // reads the store from its cursor instead (transient deltas of that
      // stretch are lost, as the protocol allows).
      this.queue = [];
    }
    this.queue.push({ ev, mark });
    this._wake();
  }

  // The session's history went back to `latest`: what this stream holds
  // may be of the lost part (durable events up to `latest` are read from
  // the store again); if it yielded beyond `latest`, it says so before the
  // new events that reuse those seqs.
  _rolledBack(marker, latest) {
    this.queue = [];
    this.front = [];
    if (this.cursor > latest) {
      this.queue.push({ marker: Object.assign({}, marker, { upto: this.cursor }) });
      this.cursor = latest;
    }
    this.ended = false;
    this._wake();
  }

  _reset(marker) {
    this.queue = [{ marker }];
    this.front = [];
    this.cursor = 0;
    this.ended = false;
    this._wake();
  }

  _wake() {
    if (this.wakeup) {
      const w = this.wakeup;
      this.wakeup = null;
      w();
    }
  }

  _finish() {
    if (!this.finished) {
      this.finished = true;
      this.session._removeStream(this);
      this._wake();
    }
  }
}
