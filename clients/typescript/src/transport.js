// One WebSocket to the gateway, whichever implementation the runtime has:
// the global `WebSocket` (browsers, Node >= 22) or the `ws` package (Node
// 20, which has none). Callers see one small interface: `send(text)`,
// `close(code, reason)`, and the callbacks `onopen()`, `onmessage(text)`,
// `onclose({ code, reason, status, error })`, where `status` is the HTTP
// status of a refused upgrade and `error` what went wrong (a refused
// connection, say) when the runtime lets us see them (`ws` does, a browser
// never does: there a refusal is a plain 1006 close).

import { TetherError } from "./errors.js";

// The gateway does not bound what it sends (a resume of a long transcript,
// a `/big` reply); neither do we, short of a size that means a broken peer.
const MAX_INBOUND = 512 * 1024 * 1024;

let wsPackage = null;

// Where `ws` is looked for: first from this library's own files (an install
// that copied it, as `npm install` from the registry or with
// `--install-links` does), then from the application's (the main script's
// directory and the working directory), because `npm install <path>` of a
// local checkout only links the library, and Node resolves a linked
// package's imports from where its files really are, never from the app.
async function loadWs() {
  if (wsPackage) {
    return wsPackage;
  }
  let mod = null;
  try {
    mod = await import("ws");
  } catch (err) {
    mod = await wsOfTheApp();
    if (!mod) {
      throw new NoWebSocketError(err);
    }
  }
  wsPackage = mod.WebSocket || mod.default || mod;
  return wsPackage;
}

async function wsOfTheApp() {
  if (typeof process === "undefined" || !process.versions || !process.versions.node) {
    return null;
  }
  // A computed specifier, so that bundlers for browsers (which have a
  // global WebSocket and never get here) leave Node's module alone.
  const nodeModule = "node:module";
  const { createRequire } = await import(/* webpackIgnore: true */ /* @vite-ignore */ nodeModule);
  const bases = [];
  if (process.argv && process.argv[1]) {
    bases.push(process.argv[1]);
  }
  bases.push(process.cwd() + "/package.json");
  for (const base of bases) {
    try {
      return createRequire(base)("ws");
    } catch (err) {
      // Not there: the next place.
    }
  }
  return null;
}

// Nothing to open a WebSocket with: retrying cannot help, so the gateway
// object closes with this error, at once.
export class NoWebSocketError extends TetherError {
  constructor(cause) {
    super("tether-client: this runtime has no global WebSocket (Node 20 has none) and the `ws` package " +
      "cannot be found, neither next to tether-client nor in your app: run `npm install ws` in your app, " +
      "or install tether-client with `npm install --install-links <path>`", { cause });
    this.name = "NoWebSocketError";
  }
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
    this.error = undefined;
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
    // Every error is followed by a close; the close does the work, and
    // tells why (a refused connection, an unknown host, ...).
    ws.on("error", (err) => {
      this.error = this.error || err;
    });
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
      this.onclose({ code, reason, status: this.status, error: this.error });
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
  abandon(reason = "unresponsive") {
    if (typeof this.ws.terminate === "function") {
      this.ws.terminate();
    } else {
      this.close(4000, reason);
    }
    this.finish(1006, reason);
  }
}
