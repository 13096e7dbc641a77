// One WebSocket to the gateway, whichever implementation the runtime has:
// the global `WebSocket` (browsers, Node >= 22) or the `ws` package (Node
// 20, which has none). Callers see one small interface: `send(text)`,
// `close(code, reason)`, and the callbacks `onopen()`, `onmessage(text)`,
// `onclose({ code, reason, status })`, where `status` is the HTTP status of
// a refused upgrade when the runtime lets us see it (`ws` does, a browser
// never does: there a refusal is a plain 1006 close).

// The gateway does not bound what it sends (a resume of a long transcript,
// a `/big` reply); neither do we, short of a size that means a broken peer.
const MAX_INBOUND = 512 * 1024 * 1024;

let wsPackage = null;

async function loadWs() {
  if (!wsPackage) {
    let mod;
    try {
      mod = await import("ws");
    } catch (err) {
      throw new Error("tether-client: this runtime has no global WebSocket and the `ws` package is not installed", { cause: err });
    }
    wsPackage = mod.WebSocket || mod.default;
  }
  return wsPackage;
}

// `impl`: a WebSocket constructor given by the application (options
// `WebSocket`), else the runtime's.
export async function openSocket(url, { token, impl }) {
  const Impl = impl || globalThis.WebSocket || (await loadWs());
  const isWsPackage = Impl === wsPackage || typeof Impl.prototype?.terminate === "function";
  const socket = new Socket();
  if (isWsPackage) {
    // Node: the token as a header, so it stays out of logs of URLs.
    const headers = token ? { Authorization: "Bearer " + token } : {};
    const ws = new Impl(url, { headers, maxPayload: MAX_INBOUND, perMessageDeflate: false });
    socket.attachWs(ws);
  } else {
    // Browsers cannot set headers on a WebSocket (PROTOCOL 1.1).
    socket.attachStandard(new Impl(token ? withToken(url, token) : url));
  }
  return socket;
}

export function withToken(url, token) {
  const u = new URL(url);
  u.searchParams.set("token", token);
  return u.toString();
}

class Socket {
  constructor() {
    this.ws = null;
    this.closed = false;
    this.status = undefined;
    this.onopen = () => {};
    this.onmessage = () => {};
    this.onclose = () => {};
  }

  attachWs(ws) {
    this.ws = ws;
    ws.on("open", () => this.onopen());
    ws.on("message", (data, isBinary) => {
      if (!isBinary) {
        this.onmessage(data.toString("utf8"));
      }
    });
    ws.on("unexpected-response", (req, res) => {
      this.status = res.statusCode;
      res.resume();
      ws.terminate();
    });
    // Every error is followed by a close; the close does the work.
    ws.on("error", () => {});
    ws.on("close", (code, reason) => this.finish(code, reason.toString("utf8")));
  }

  attachStandard(ws) {
    this.ws = ws;
    ws.onopen = () => this.onopen();
    ws.onmessage = (ev) => {
      if (typeof ev.data === "string") {
        this.onmessage(ev.data);
      }
    };
    ws.onerror = () => {};
    ws.onclose = (ev) => this.finish(ev.code, ev.reason || "");
  }

  finish(code, reason) {
    if (!this.closed) {
      this.closed = true;
      this.onclose({ code, reason, status: this.status });
    }
  }

  // Whether it was handed to the socket (false once it is closing).
  send(text) {
    if (this.closed || this.ws.readyState !== 1) {
      return false;
    }
    this.ws.send(text);
    return true;
  }

  close(code = 1000, reason = "") {
    try {
      this.ws.close(code, reason);
    } catch (err) {
      // Already closing, or a code the runtime refuses: the close event
      // still comes.
    }
  }

  // Gives up on a socket that stopped answering, without waiting for a
  // close handshake it will never finish.
  abandon() {
    if (typeof this.ws.terminate === "function") {
      this.ws.terminate();
    } else {
      this.close(4000, "unresponsive");
    }
    this.finish(1006, "unresponsive");
  }
}
