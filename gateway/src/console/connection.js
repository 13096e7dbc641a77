// The console's one WebSocket to the gateway: JSON-RPC calls, event
// delivery, and reconnection with backoff (PROTOCOL 1.1-1.3).
//
// Why a class of its own: a drop must never lose a call silently or leave
// the page thinking it is connected. Every pending call fails when the
// socket goes, the page hears about every state change, and a new socket is
// opened on its own, sooner at first and then less often, with jitter so
// that many consoles dropped by the same gateway restart do not all come
// back in the same instant.

const BACKOFF_BASE_MS = 250;
const BACKOFF_CAP_MS = 5000;
// A socket the browser still thinks is open may be dead (a laptop that slept,
// a NAT that forgot us). Pings from the gateway are answered by the browser
// out of sight of scripts, so the page asks `gateway.ping` itself when it has
// heard nothing for a while and gives up on a socket that does not answer.
const PING_TIMEOUT_MS = 10000;

export class RpcError extends Error {
  constructor(error) {
    super(error.message || "error " + error.code);
    this.code = error.code;
    this.data = error.data;
  }
}

export class Connection {
  // `handlers`: onState(state, detail), onReady(readyPayload),
  // onEvent(eventParams).
  constructor(url, handlers) {
    this.url = url;
    this.handlers = handlers;
    this.ws = null;
    this.state = "connecting";
    this.attempt = 0;
    this.nextId = 1;
    this.pending = new Map();
    this.ready = null;
    this.lastHeard = 0;
    this.pingTimer = null;
  }

  start() {
    this.open();
  }

  setState(state, detail) {
    this.state = state;
    this.handlers.onState(state, detail || "");
  }

  open() {
    this.setState(this.attempt === 0 && !this.ready ? "connecting" : "reconnecting",
      this.attempt > 0 ? "attempt " + (this.attempt + 1) : "");
    let ws;
    try {
      ws = new WebSocket(this.url);
    } catch (err) {
      this.scheduleReconnect();
      return;
    }
    this.ws = ws;
    ws.onmessage = (msg) => {
      if (this.ws === ws) {
        this.lastHeard = Date.now();
        this.onFrame(msg.data);
      }
    };
    ws.onclose = () => {
      if (this.ws === ws) {
        this.dropped();
      }
    };
    // An error is always followed by a close; the close does the work.
    ws.onerror = () => {};
  }

  onFrame(text) {
    let frame;
    try {
      frame = JSON.parse(text);
    } catch (err) {
      console.warn("tether: a frame that is not JSON", text);
      return;
    }
    for (const f of Array.isArray(frame) ? frame : [frame]) {
      if (f.method === "event" && f.params) {
        this.onEventFrame(f.params);
      } else if (f.id !== undefined && f.id !== null && this.pending.has(f.id)) {
        const call = this.pending.get(f.id);
        this.pending.delete(f.id);
        if (f.error) {
          call.reject(new RpcError(f.error));
        } else {
          call.resolve(f.result);
        }
      } else if (f.error) {
        console.warn("tether: error without a request", f.error);
      }
    }
  }

  onEventFrame(params) {
    if (params.type === "gateway.ready") {
      this.ready = params.payload || {};
      this.attempt = 0;
      this.setState("open");
      this.startPings();
      this.handlers.onReady(this.ready);
      return;
    }
    this.handlers.onEvent(params);
  }

  // The socket is gone: fail what waited on it and come back later.
  dropped() {
    this.ws = null;
    this.stopPings();
    const lost = new Error("connection lost");
    for (const call of this.pending.values()) {
      call.reject(lost);
    }
    this.pending.clear();
    this.scheduleReconnect();
  }

  scheduleReconnect() {
    const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** this.attempt);
    // Between half the ceiling and the ceiling ("equal jitter").
    const delay = Math.round(ceiling / 2 + Math.random() * (ceiling / 2));
    this.attempt += 1;
    this.setState("reconnecting", "in " + (delay / 1000).toFixed(1) + " s");
    setTimeout(() => this.open(), delay);
  }

  startPings() {
    this.stopPings();
    const every = Math.max(5, (this.ready && this.ready.heartbeat_s) || 15) * 1000;
    this.pingTimer = setInterval(() => {
      if (Date.now() - this.lastHeard < every) {
        return;
      }
      const ws = this.ws;
      const timer = setTimeout(() => {
        if (this.ws === ws && ws) {
          console.warn("tether: no answer to gateway.ping; reconnecting");
          ws.close();
          this.dropped();
        }
      }, PING_TIMEOUT_MS);
      this.call("gateway.ping", {}).then(() => clearTimeout(timer), () => clearTimeout(timer));
    }, every);
  }

  stopPings() {
    if (this.pingTimer !== null) {
      clearInterval(this.pingTimer);
      this.pingTimer = null;
    }
  }

  // A JSON-RPC call; resolves with `result`, rejects with an RpcError or,
  // when there is no open socket or it drops first, a plain Error.
  call(method, params) {
    if (!this.ws || this.state !== "open") {
      return Promise.reject(new Error("not connected"));
    }
    const id = this.nextId++;
    const frame = JSON.stringify({ jsonrpc: "2.0", id: id, method: method, params: params || {} });
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve: resolve, reject: reject });
      try {
        this.ws.send(frame);
      } catch (err) {
        this.pending.delete(id);
        reject(err);
      }
    });
  }
}
