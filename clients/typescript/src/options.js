// What the application gives `connect()`, checked there and then: a URL
// that cannot work, or a timeout that means nothing, is a TypeError at once
// rather than a reconnect loop that never says why.

// How long one connection attempt may take (TCP, the WebSocket upgrade and
// the gateway's first frame), and how long a request waits for a
// connection before it fails with UnreachableError.
export const DEFAULT_CONNECT_TIMEOUT_MS = 10000;

// `connectTimeoutMs` as given: a positive number of milliseconds, or
// 0 / null / Infinity for no timeout at all.
export function connectTimeout(value) {
  if (value === undefined) {
    return DEFAULT_CONNECT_TIMEOUT_MS;
  }
  if (value === null || value === 0 || value === Infinity) {
    return Infinity;
  }
  if (typeof value !== "number" || !(value > 0)) {
    throw new TypeError("tether-client: connectTimeoutMs must be a positive number of milliseconds (or 0 for none): " + value);
  }
  return value;
}

// `ws://HOST:PORT/ws` as given; `http(s)://HOST:PORT` (what `tether serve`
// prints) and a bare `HOST:PORT` mean its `/ws` route, and `:PORT` means
// 127.0.0.1, as it does for `tether serve --listen`.
export function wsUrl(raw) {
  let url = String(raw).trim();
  if (/^:\d+(\/|$)/.test(url)) {
    url = "127.0.0.1" + url;
  }
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(url)) {
    url = "ws://" + url;
  }
  let u;
  try {
    u = new URL(url);
  } catch (err) {
    throw notAGatewayUrl(raw, err);
  }
  if (u.protocol === "http:") {
    u.protocol = "ws:";
  } else if (u.protocol === "https:") {
    u.protocol = "wss:";
  } else if (u.protocol !== "ws:" && u.protocol !== "wss:") {
    throw notAGatewayUrl(raw);
  }
  if (!u.hostname) {
    throw notAGatewayUrl(raw);
  }
  if (u.pathname === "/" || u.pathname === "") {
    u.pathname = "/ws";
  }
  return u.toString();
}

function notAGatewayUrl(raw, cause) {
  return new TypeError("tether-client: not a gateway URL: " + JSON.stringify(String(raw)) +
    " (use ws://HOST:PORT/ws)", cause ? { cause } : undefined);
}
