// The gateway object the application holds: one connection to a tether
// gateway, kept open for it (connection.js: it reconnects after every drop,
// re-attaches every session in use and notices a changed store), and what
// the application asks of it: calls, sessions, the list of them, the end.
//
// Requests made while disconnected wait for the next connection, for the
// connect timeout at most (then UnreachableError, while the object keeps
// trying). A request in flight when the connection drops is sent again only
// if it changes nothing (a read); any other fails with ConnectionLostError,
// since the gateway may have executed it (a prompt sent twice would run
// twice). What cannot work at all (no WebSocket implementation, a refused
// token) closes the object at once with that error.

import { DEFAULT_BACKOFF } from "./backoff.js";
import { Connection } from "./connection.js";
import { ClosedError, RpcError, codes } from "./errors.js";
import { connectTimeout, wsUrl } from "./options.js";
import { READS } from "./requests.js";
import { Session } from "./session.js";

const LIST_PAGE = 100;

export function connect(url, options = {}) {
  const gw = new Gateway(url, options);
  gw._start();
  return gw;
}

export class Gateway extends Connection {
  constructor(url, options = {}) {
    super(wsUrl(url), {
      token: options.token,
      profile: options.profile,
      impl: options.WebSocket,
      backoff: Object.assign({}, DEFAULT_BACKOFF, options.backoff || {}),
      maxBuffered: options.maxBuffered,
      connectTimeoutMs: connectTimeout(options.connectTimeoutMs),
    }, describe(options.client));
  }

  on(name, fn) {
    return this.emitter.on(name, fn);
  }

  off(name, fn) {
    this.emitter.off(name, fn);
  }

  // Resolves with `gateway.ready`'s payload once a connection is open;
  // rejects with UnreachableError after the connect timeout.
  opened() {
    return this._whenOpen(this.options.connectTimeoutMs);
  }

  // A JSON-RPC call: resolves with `result`, rejects with an RpcError (the
  // gateway's code in `.code`), ConnectionLostError, AuthError,
  // ClosedError, or UnreachableError when no connection opened within the
  // connect timeout. A read refused for the rate limit (4029) is asked again
  // after the wait the gateway names: a burst of reads (every stream
  // catching up after a reconnect) is the library's doing, not the app's.
  call(method, params = {}) {
    return this._request(method, params, this.options.connectTimeoutMs);
  }

  // A call that waits for a connection for `timeoutMs` at most (Infinity
  // for the library's own reads, which follow the session through any
  // outage).
  async _request(method, params, timeoutMs) {
    for (;;) {
      try {
        return await this._call(method, params, timeoutMs);
      } catch (err) {
        if (!(err instanceof RpcError) || err.code !== codes.RATE_LIMITED || !READS.has(method)) {
          throw err;
        }
        const wait = (err.data && err.data.retry_after_ms) || 100;
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
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
}

// `gateway.hello`'s params from the `client` option: what the application
// gave (`name`, `device`, `app`, `meta`) and an `instance` of this object's
// own unless it gave one.
function describe(client = {}) {
  const d = {};
  for (const key of ["name", "device", "app", "instance", "meta"]) {
    if (client[key] !== undefined && client[key] !== null) {
      d[key] = client[key];
    }
  }

  if (d.instance === undefined) {
    d.instance = "i-" + randomHex();
  }

  return d;
}

function randomHex() {
  const c = globalThis.crypto;
  if (c && typeof c.getRandomValues === "function") {
    const bytes = c.getRandomValues(new Uint8Array(12));
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  return Math.random().toString(16).slice(2) + Date.now().toString(16);
}
