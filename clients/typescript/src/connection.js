// The gateway object's connection: opening the WebSocket, giving up on an
// attempt that does not reach `gateway.ready` in time, reading its frames
// (answers to the requests, events to their sessions), reconnecting after
// every drop (backing off exponentially, with jitter and a cap), noticing a
// changed store (`gateway.ready`'s epoch, PROTOCOL 1.3), pinging a quiet
// socket, and the end. Kept apart from what the application asks of the
// gateway object (gateway.js), which this is the base of.

import { backoffDelay } from "./backoff.js";
import { Emitter } from "./emitter.js";
import { decodeFrame, MAX_DEPTH, TOO_DEEP } from "./decode.js";
import { AuthError, RpcError, TetherError, UnreachableError, codes } from "./errors.js";
import { Requests } from "./requests.js";
import { NoWebSocketError, openSocket } from "./transport.js";

// A socket the runtime still thinks is open may be dead (a laptop that
// slept, a NAT that forgot us). The gateway's pings are answered out of
// sight of scripts, so after a quiet heartbeat period we ask
// `gateway.ping` and give up on a socket that does not answer within this.
const PING_TIMEOUT_MS = 10000;

export class Connection {
  // `url`, `options` and `client` as the gateway object settled them.
  constructor(url, options, client) {
    this.url = url;
    this.options = options;
    // Who this object says it is on every connection (`gateway.hello`).
    this.client = client;
    this.state = "connecting";
    this.ready = null;
    this.epoch = null;
    // Connections that reached `gateway.ready`; a session is attached on
    // one of them, and everything tied to a connection carries its number.
    this.generation = 0;
    this.socket = null;
    this.attempt = 0;
    this.requests = new Requests(this);
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
    this.attemptTimer = null;
    this.openWaiters = [];
    // Failed attempts since the last open connection, and why the last
    // one failed: what an UnreachableError tells.
    this.failedAttempts = 0;
    this.lastProblem = "";
    // The token the last socket was opened with, and one the provider
    // already gave for the next (after a refusal, or a refresh).
    this.lastToken = undefined;
    this.nextToken = undefined;
    // A refused token was replaced by the provider and that connection
    // has not opened yet: a second refusal stops (the provider is asked
    // once per refusal, never in a loop).
    this.retriedToken = false;
  }

  // The token of the next connection: the fixed one, or the provider's
  // (asked for every connect). Throws AuthError when the provider fails.
  async _tokenForConnect() {
    const given = this.options.token;
    if (typeof given !== "function") {
      return given;
    }
    if (this.nextToken !== undefined) {
      const t = this.nextToken;
      this.nextToken = undefined;
      return t;
    }
    return await this._askProvider();
  }

  async _askProvider() {
    let t;
    try {
      t = await this.options.token();
    } catch (err) {
      throw new AuthError("provider", { cause: err });
    }
    if (typeof t !== "string" || t === "") {
      throw new AuthError("provider");
    }
    return t;
  }

  // Resolves once a connection is open; rejects with the object's failure,
  // or with UnreachableError after `timeoutMs` (Infinity: never) of a wait
  // that began at `since`.
  _whenOpen(timeoutMs, since = Date.now()) {
    if (this.failure) {
      return Promise.reject(this.failure);
    }
    if (this.state === "open") {
      return Promise.resolve(this.ready);
    }
    return new Promise((resolve, reject) => {
      const w = { resolve, reject, timer: null };
      if (Number.isFinite(timeoutMs)) {
        w.timer = setTimeout(() => {
          const i = this.openWaiters.indexOf(w);
          if (i >= 0) {
            this.openWaiters.splice(i, 1);
            reject(this._unreachable(since));
          }
        }, timeoutMs);
      }
      this.openWaiters.push(w);
    });
  }

  _unreachable(since) {
    return new UnreachableError(this.url, Date.now() - since, this.failedAttempts, this.lastProblem);
  }

  // --- requests on the connection (requests.js keeps them across drops) ---

  // Sent on the open connection, or on the next one within `timeoutMs`.
  _call(method, params, timeoutMs) {
    if (this.failure) {
      return Promise.reject(this.failure);
    }
    return this.requests.call(method, this._withProfile(params), timeoutMs);
  }

  // Like `call`, but only on connection `generation` and never sent again:
  // for the steps of a re-attach, which the next connection redoes anyway.
  _callOn(generation, method, params) {
    if (this.failure) {
      return Promise.reject(this.failure);
    }
    return this.requests.callOn(generation, method, this._withProfile(params));
  }

  // --- the connection's life ---

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
    if (state === "reconnecting" || state === "closed") {
      this._clearAttemptTimer();
    }
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
    let token;
    try {
      token = await this._tokenForConnect();
    } catch (err) {
      this._shutdown(err, true);
      return;
    }
    if (this.state === "closed") {
      return;
    }
    this.lastToken = token;
    try {
      socket = await openSocket(this.url, { token, impl: this.options.impl });
    } catch (err) {
      if (err instanceof NoWebSocketError || err instanceof TypeError || (err && err.name === "SyntaxError")) {
        // Nothing to connect with, or a URL the runtime refuses (ws throws
        // SyntaxError, a browser a DOMException of that name): trying
        // again cannot help.
        this._shutdown(err instanceof TetherError ? err : new TetherError("tether-client: cannot open " +
          this.url + ": " + err.message, { cause: err }), true);
        return;
      }
      this.emitter.emit("error", err);
      this._scheduleReconnect({ error: err });
      return;
    }
    if (this.state === "closed") {
      socket.close(1000, "");
      return;
    }
    this.socket = socket;
    // An attempt that neither fails nor reaches `gateway.ready` (a host
    // that drops packets, a server that is not a tether gateway) is given
    // up after the connect timeout, and tried again.
    const limit = this.options.connectTimeoutMs;
    if (Number.isFinite(limit)) {
      this.attemptTimer = setTimeout(() => {
        this.attemptTimer = null;
        if (this.socket === socket) {
          socket.error = socket.error || new Error("no answer within " + limit + " ms");
          socket.abandon("connect timeout");
        }
      }, limit);
    }
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
    let decoded;
    try {
      decoded = decodeFrame(text);
    } catch (err) {
      // A frame we cannot read may be the answer someone waits for: rather
      // than wait forever, start over on a new connection (reads are asked
      // again, sessions resume from their watermarks).
      this.emitter.emit("error", new TetherError("tether-client: a frame that is not JSON; reconnecting: " +
        text.slice(0, 200), { cause: err }));
      if (this.socket) {
        this.socket.error = new Error("the gateway sent a frame that is not JSON");
        this.socket.abandon("a frame that is not JSON");
      }
      return;
    }
    const frame = decoded.value;
    if (decoded.cut) {
      this.emitter.emit("error", new TetherError("tether-client: a frame from the gateway nested deeper than " +
        MAX_DEPTH + " levels; what was deeper was replaced by " + JSON.stringify(TOO_DEEP) + ": " + text.slice(0, 200)));
    }
    for (const f of Array.isArray(frame) ? frame : [frame]) {
      if (f && f.method === "event" && f.params) {
        this._onEvent(f.params);
      } else if (f && f.method === "gateway.token_expiring") {
        this._onTokenExpiring(f.params || {});
      } else if (f && f.id !== undefined && f.id !== null && this.requests.answered(f)) {
        // An answer, taken.
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
    if (s && typeof ev.type === "string" && ev.type.startsWith("presence.")) {
      s._onPresence(ev);
    } else if (s) {
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

  // `gateway.token_expiring`: told to the app, and with a provider a new
  // token is fetched and sent (`gateway.refresh_token`) on this same
  // connection, which then lives on with its attachments.
  _onTokenExpiring(params) {
    this.emitter.emit("token_expiring", params);
    if (typeof this.options.token !== "function") {
      return;
    }
    const generation = this.generation;
    this._askProvider()
      .then((token) => {
        if (this.generation !== generation || this.state !== "open") {
          return undefined;
        }
        return this._callOn(generation, "gateway.refresh_token", { token }).then((r) => {
          this.lastToken = token;
          this.emitter.emit("token_refreshed", r);
        });
      })
      .catch((err) => this.emitter.emit("error", err));
  }

  _onReady(ready) {
    const previous = this.epoch;
    this.ready = ready;
    this.retriedToken = false;
    this.generation += 1;
    this.attempt = 0;
    this.failedAttempts = 0;
    this._clearAttemptTimer();
    const reset = previous !== null && typeof ready.epoch === "string" && ready.epoch !== previous;
    if (typeof ready.epoch === "string") {
      this.epoch = ready.epoch;
    }
    if (reset) {
      // Another store: every watermark means nothing there.
      for (const s of this.sessionsById.values()) {
        s._reset(ready.epoch, previous);
      }
      this.emitter.emit("reset", { reason: "epoch", epoch: ready.epoch, previousEpoch: previous });
    }
    this._setState("open", { ready });
    this._startPings();
    this._hello(this.generation);
    for (const s of this.sessionsById.values()) {
      s._connected(this.generation);
    }
    this.requests.opened();
    const waiters = this.openWaiters;
    this.openWaiters = [];
    for (const w of waiters) {
      clearTimeout(w.timer);
      w.resolve(ready);
    }
  }

  // Says who this object is, first thing on every connection (before any
  // re-attach: a connection describes itself before it attaches), with the
  // same `instance` each time, so that the other peers of a session are
  // not told of our reconnects (PROTOCOL Part 4, "Presence"). A gateway
  // that does not know the method is left alone.
  _hello(generation) {
    this._callOn(generation, "gateway.hello", this.client).catch((err) => {
      if (err instanceof RpcError && err.code !== codes.METHOD_NOT_FOUND) {
        this.emitter.emit("error", err);
      }
    });
  }

  _clearAttemptTimer() {
    if (this.attemptTimer !== null) {
      clearTimeout(this.attemptTimer);
      this.attemptTimer = null;
    }
  }

  _dropped({ code, reason, status, error }) {
    this.socket = null;
    this._stopPings();
    this.requests.dropped();
    for (const s of this.sessionsById.values()) {
      s._disconnected();
    }
    if (this.state === "closed") {
      return;
    }
    // A refused token (401 at the door) or one that ended on the line
    // (4401 expired, 4403 revoked): the provider is asked once, and only a
    // new token is tried; otherwise the object stops with AuthError.
    if (status === 401 || status === 403 || code === 4401 || code === 4403) {
      this._tokenRefused(status === 401 || status === 403 ? status : code, { code, reason, status });
      return;
    }
    const detail = { code, reason, status };
    if (error) {
      detail.error = error;
    }
    this._scheduleReconnect(detail);
  }

  async _tokenRefused(why, detail) {
    if (typeof this.options.token !== "function" || why === 403 || this.retriedToken) {
      this._shutdown(new AuthError(why), true);
      return;
    }
    this.retriedToken = true;
    this._setState("reconnecting", Object.assign({ delay: 0, attempt: this.attempt, refreshing: true }, detail));
    let token;
    try {
      token = await this._askProvider();
    } catch (err) {
      this._shutdown(err, true);
      return;
    }
    if (this.state === "closed") {
      return;
    }
    if (token === this.lastToken) {
      this._shutdown(new AuthError(why, { sameToken: true }), true);
      return;
    }
    this.nextToken = token;
    this._open();
  }

  _scheduleReconnect(detail) {
    if (this.state === "closed") {
      return;
    }
    const delay = backoffDelay(this.attempt, this.options.backoff);
    this.attempt += 1;
    this.failedAttempts += 1;
    this.lastProblem = problem(detail);
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
    this.requests.fail(err);
    for (const w of this.openWaiters) {
      clearTimeout(w.timer);
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

// Why an attempt failed, in a few words, from a `reconnecting` change.
function problem({ error, status, code, reason }) {
  if (error) {
    return error.message || String(error);
  }

  if (status) {
    return "HTTP " + status;
  }

  return "closed" + (code ? " " + code : "") + (reason ? " (" + reason + ")" : "");
}
