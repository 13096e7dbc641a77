// One connection to a tether gateway, kept open for the application: it
// reconnects after every drop (backing off exponentially, with jitter and a
// cap), re-attaches every session in use, and notices a changed store
// (`gateway.ready`'s epoch, PROTOCOL 1.3).
//
// Requests made while disconnected wait for the next connection. A request
// in flight when the connection drops is sent again only if it changes
// nothing (a read); any other fails with ConnectionLostError, since the
// gateway may have executed it (a prompt sent twice would run twice).

import { backoffDelay, DEFAULT_BACKOFF } from "./backoff.js";
import { Emitter } from "./emitter.js";
import { AuthError, ClosedError, ConnectionLostError, RpcError, codes } from "./errors.js";
import { Session } from "./session.js";
import { byteLength } from "./text.js";
import { openSocket } from "./transport.js";

// Methods that change nothing, so they may be sent again on a new
// connection when the old one dropped before their answer.
const READS = new Set([
  "gateway.ping",
  "session.list",
  "session.events.since",
  "session.events.stats",
  "handoff.state",
]);

// A socket the runtime still thinks is open may be dead (a laptop that
// slept, a NAT that forgot us). The gateway's pings are answered out of
// sight of scripts, so after a quiet heartbeat period we ask
// `gateway.ping` and give up on a socket that does not answer within this.
const PING_TIMEOUT_MS = 10000;

const LIST_PAGE = 100;

export function connect(url, options = {}) {
  const gw = new Gateway(url, options);
  gw._start();
  return gw;
}

export class Gateway {
  constructor(url, options = {}) {
    this.url = wsUrl(url);
    this.options = {
      token: options.token,
      profile: options.profile,
      impl: options.WebSocket,
      backoff: Object.assign({}, DEFAULT_BACKOFF, options.backoff || {}),
      maxBuffered: options.maxBuffered,
    };
    this.state = "connecting";
    this.ready = null;
    this.epoch = null;
    // Connections that reached `gateway.ready`; a session is attached on
    // one of them, and everything tied to a connection carries its number.
    this.generation = 0;
    this.socket = null;
    this.attempt = 0;
    this.nextId = 1;
    this.pending = new Map();
    this.waiting = [];
    this.sessionsById = new Map();
    this.emitter = new Emitter();
    this.failure = null;
    // `session.create` attaches the caller, and its first events may come
    // before its answer; they wait here until the answer names the session.
    this.creating = 0;
    this.stash = new Map();
    this.lastHeard = 0;
    this.pingTimer = null;
    this.retryTimer = null;
    this.openWaiters = [];
  }

  on(name, fn) {
    return this.emitter.on(name, fn);
  }

  off(name, fn) {
    this.emitter.off(name, fn);
  }

  // Resolves with `gateway.ready`'s payload once a connection is open.
  opened() {
    if (this.failure) {
      return Promise.reject(this.failure);
    }
    if (this.state === "open") {
      return Promise.resolve(this.ready);
    }
    return new Promise((resolve, reject) => this.openWaiters.push({ resolve, reject }));
  }

  // A JSON-RPC call: resolves with `result`, rejects with an RpcError (the
  // gateway's code in `.code`), ConnectionLostError, AuthError or
  // ClosedError. A read refused for the rate limit (4029) is asked again
  // after the wait the gateway names: a burst of reads (every stream
  // catching up after a reconnect) is the library's doing, not the app's.
  async call(method, params = {}) {
    for (;;) {
      try {
        return await this._call(method, params);
      } catch (err) {
        if (!(err instanceof RpcError) || err.code !== codes.RATE_LIMITED || !READS.has(method)) {
          throw err;
        }
        const wait = (err.data && err.data.retry_after_ms) || 100;
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  }

  _call(method, params) {
    if (this.failure) {
      return Promise.reject(this.failure);
    }
    return new Promise((resolve, reject) => {
      const call = { method, params: this._withProfile(params), resolve, reject, retry: READS.has(method), generation: 0 };
      if (this.state === "open") {
        this._send(call);
      } else {
        this.waiting.push(call);
      }
    });
  }

  // Like `call`, but only on connection `generation` and never sent again:
  // for the steps of a re-attach, which the next connection redoes anyway.
  _callOn(generation, method, params) {
    if (this.failure) {
      return Promise.reject(this.failure);
    }
    if (this.state !== "open" || this.generation !== generation) {
      return Promise.reject(new ConnectionLostError(method));
    }
    return new Promise((resolve, reject) => {
      this._send({ method, params: this._withProfile(params), resolve, reject, retry: false, generation });
    });
  }

  async createSession(options = {}) {
    const params = Object.assign({}, options);
    const attach = params.attach !== false;
    this.creating += 1;
    let r;
    try {
      r = await this.call("session.create", params);
    } finally {
      this.creating -= 1;
    }
    const id = r.session.session_id;
    const s = this.session(id);
    const early = this.stash.get(id) || [];
    this.stash.delete(id);
    if (this.creating === 0) {
      this.stash.clear();
    }
    s._created(r, attach ? this.generation : 0, early);
    return s;
  }

  // The handle of a session (the same object for the same id). It attaches
  // when first used: `events()`, `submit()`.
  session(id) {
    let s = this.sessionsById.get(id);
    if (!s) {
      s = new Session(this, id);
      this.sessionsById.set(id, s);
    }
    return s;
  }

  // Every session of the profile, newest first, following `next_cursor`
  // to the end.
  async sessions({ includeClosed = false, pageSize = LIST_PAGE } = {}) {
    const all = [];
    let cursor = null;
    for (;;) {
      const params = { limit: pageSize, include_closed: includeClosed };
      if (cursor) {
        params.cursor = cursor;
      }
      const r = await this.call("session.list", params);
      all.push(...r.sessions);
      if (!r.next_cursor || r.next_cursor === cursor) {
        return all;
      }
      cursor = r.next_cursor;
    }
  }

  // Closes the connection for good: what waits ends (iterators finish,
  // calls and turns reject with ClosedError).
  close() {
    if (this.state === "closed") {
      return;
    }
    this._shutdown(new ClosedError(), false);
  }

  _start() {
    // After the caller's `connect(...)` returns, so that listeners it adds
    // at once hear the first state too.
    queueMicrotask(() => {
      if (this.state === "connecting") {
        this._setState("connecting");
        this._open();
      }
    });
  }

  _setState(state, detail = {}) {
    this.state = state;
    const change = Object.assign({ state }, detail);
    this.emitter.emit("state", change);
    this.emitter.emit(state, change);
  }

  async _open() {
    this.retryTimer = null;
    if (this.state === "closed") {
      return;
    }
    let socket;
    try {
      socket = await openSocket(this.url, { token: this.options.token, impl: this.options.impl });
    } catch (err) {
      this.emitter.emit("error", err);
      this._scheduleReconnect({ error: err });
      return;
    }
    if (this.state === "closed") {
      socket.close(1000, "");
      return;
    }
    this.socket = socket;
    socket.onmessage = (text) => {
      if (this.socket === socket) {
        this.lastHeard = Date.now();
        this._onText(text);
      }
    };
    socket.onclose = (info) => {
      if (this.socket === socket) {
        this._dropped(info);
      }
    };
  }

  _onText(text) {
    let frame;
    try {
      frame = JSON.parse(text);
    } catch (err) {
      this.emitter.emit("error", new Error("tether-client: a frame that is not JSON: " + text.slice(0, 200)));
      return;
    }
    for (const f of Array.isArray(frame) ? frame : [frame]) {
      if (f && f.method === "event" && f.params) {
        this._onEvent(f.params);
      } else if (f && f.id !== undefined && f.id !== null && this.pending.has(f.id)) {
        const call = this.pending.get(f.id);
        this.pending.delete(f.id);
        if (f.error) {
          call.reject(new RpcError(call.method, f.error));
        } else {
          call.resolve(f.result);
        }
      } else if (f && f.error) {
        this.emitter.emit("error", new RpcError("(a frame)", f.error));
      }
    }
  }

  _onEvent(ev) {
    if (ev.type === "gateway.ready") {
      this._onReady(ev.payload || {});
      return;
    }
    if (typeof ev.session_id !== "string") {
      this.emitter.emit("event", ev);
      return;
    }
    const s = this.sessionsById.get(ev.session_id);
    if (s) {
      s._onLive(ev);
    } else if (this.creating > 0) {
      let early = this.stash.get(ev.session_id);
      if (!early) {
        early = [];
        this.stash.set(ev.session_id, early);
      }
      early.push(ev);
    }
  }

  _onReady(ready) {
    const previous = this.epoch;
    this.ready = ready;
    this.generation += 1;
    this.attempt = 0;
    const reset = previous !== null && typeof ready.epoch === "string" && ready.epoch !== previous;
    if (typeof ready.epoch === "string") {
      this.epoch = ready.epoch;
    }
    if (reset) {
      // Another store: every watermark means nothing there.
      for (const s of this.sessionsById.values()) {
        s._reset(ready.epoch, previous);
      }
      this.emitter.emit("reset", { epoch: ready.epoch, previousEpoch: previous });
    }
    this._setState("open", { ready });
    this._startPings();
    for (const s of this.sessionsById.values()) {
      s._connected(this.generation);
    }
    const waiting = this.waiting;
    this.waiting = [];
    for (const call of waiting) {
      this._send(call);
    }
    const waiters = this.openWaiters;
    this.openWaiters = [];
    for (const w of waiters) {
      w.resolve(ready);
    }
  }

  _send(call) {
    const id = this.nextId++;
    const frame = JSON.stringify({ jsonrpc: "2.0", id, method: call.method, params: call.params });
    const limit = this.ready && this.ready.limits && this.ready.limits.max_frame_bytes;
    if (typeof limit === "number" && frame.length > limit / 4 && byteLength(frame) > limit) {
      // The gateway would answer 4013 with `id` null: no way to tell which
      // request it was, so refuse it here with the same code.
      call.reject(new RpcError(call.method, {
        code: codes.FRAME_TOO_LARGE,
        message: "the request is larger than the gateway's max_frame_bytes (" + limit + ")",
      }));
      return;
    }
    this.pending.set(id, call);
    if (!this.socket || !this.socket.send(frame)) {
      // Never left: safe to send on the next connection, whatever it is.
      this.pending.delete(id);
      if (call.generation) {
        call.reject(new ConnectionLostError(call.method));
      } else {
        this.waiting.push(call);
      }
    }
  }

  _dropped({ code, reason, status }) {
    this.socket = null;
    this._stopPings();
    const pending = [...this.pending.values()];
    this.pending.clear();
    const again = [];
    for (const call of pending) {
      if (call.retry && !call.generation) {
        again.push(call);
      } else {
        call.reject(new ConnectionLostError(call.method));
      }
    }
    this.waiting = again.concat(this.waiting);
    for (const s of this.sessionsById.values()) {
      s._disconnected();
    }
    if (this.state === "closed") {
      return;
    }
    if (status === 401 || status === 403) {
      this._shutdown(new AuthError(status), true);
      return;
    }
    this._scheduleReconnect({ code, reason, status });
  }

  _scheduleReconnect(detail) {
    if (this.state === "closed") {
      return;
    }
    const delay = backoffDelay(this.attempt, this.options.backoff);
    this.attempt += 1;
    this._setState("reconnecting", Object.assign({ delay, attempt: this.attempt }, detail));
    this.retryTimer = setTimeout(() => this._open(), delay);
  }

  // The end: by the application (`close()`) or because retrying cannot
  // help (`failed`: a refused token).
  _shutdown(err, failed) {
    this.failure = err;
    if (this.retryTimer) {
      clearTimeout(this.retryTimer);
      this.retryTimer = null;
    }
    this._stopPings();
    const socket = this.socket;
    this.socket = null;
    this._setState("closed", failed ? { error: err } : {});
    if (socket) {
      socket.close(1000, "");
    }
    for (const call of [...this.pending.values(), ...this.waiting]) {
      call.reject(err);
    }
    this.pending.clear();
    this.waiting = [];
    for (const w of this.openWaiters) {
      w.reject(err);
    }
    this.openWaiters = [];
    for (const s of this.sessionsById.values()) {
      s._shutdown(err, failed);
    }
    if (failed) {
      this.emitter.emit("error", err);
    }
  }

  _withProfile(params) {
    const p = Object.assign({}, params || {});
    if (this.options.profile && p.profile === undefined) {
      p.profile = this.options.profile;
    }
    return p;
  }

  _startPings() {
    this._stopPings();
    const every = Math.max(5, (this.ready && this.ready.heartbeat_s) || 15) * 1000;
    const socket = this.socket;
    this.pingTimer = setInterval(() => {
      if (this.socket !== socket || Date.now() - this.lastHeard < every) {
        return;
      }
      const timer = setTimeout(() => {
        if (this.socket === socket) {
          this.emitter.emit("error", new Error("tether-client: no answer to gateway.ping; reconnecting"));
          socket.abandon();
        }
      }, PING_TIMEOUT_MS);
      this._callOn(this.generation, "gateway.ping", {}).then(
        () => clearTimeout(timer),
        () => clearTimeout(timer),
      );
    }, every);
    // A quiet timer must not keep a Node process alive by itself.
    if (this.pingTimer && typeof this.pingTimer.unref === "function") {
      this.pingTimer.unref();
    }
  }

  _stopPings() {
    if (this.pingTimer !== null) {
      clearInterval(this.pingTimer);
      this.pingTimer = null;
    }
  }
}

// `ws://HOST:PORT/ws` as given; `http(s)://HOST:PORT` (what `tether serve`
// prints) and a bare `HOST:PORT` mean its `/ws` route.
export function wsUrl(raw) {
  let url = String(raw).trim();
  if (!/^[a-z]+:\/\//i.test(url)) {
    url = "ws://" + url;
  }
  const u = new URL(url);
  if (u.protocol === "http:") {
    u.protocol = "ws:";
  } else if (u.protocol === "https:") {
    u.protocol = "wss:";
  } else if (u.protocol !== "ws:" && u.protocol !== "wss:") {
    throw new TypeError("tether-client: not a gateway URL: " + raw + " (use ws://HOST:PORT/ws)");
  }
  if (u.pathname === "/" || u.pathname === "") {
    u.pathname = "/ws";
  }
  return u.toString();
}
