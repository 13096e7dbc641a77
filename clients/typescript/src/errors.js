// The errors an application gets from tether-client, each with what it
// needs to decide: the protocol's code for a refusal (PROTOCOL 1.6), whether
// a request may or may not have reached the gateway, or that retrying is
// pointless (a refused token).

// The gateway's error codes (PROTOCOL 1.6), by name.
export const codes = Object.freeze({
  PARSE_ERROR: -32700,
  INVALID_REQUEST: -32600,
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  INTERNAL_ERROR: -32603,
  SESSION_NOT_FOUND: 4001,
  SESSION_CLOSED: 4002,
  SESSION_BUSY: 4009,
  FRAME_TOO_LARGE: 4013,
  RATE_LIMITED: 4029,
  HANDOFF_CONFLICT: 4090,
  TURN_IN_PROGRESS: 4091,
  RESUME_TOO_LARGE: 4130,
  HOST_UNAVAILABLE: 5019,
  STORAGE_FULL: 5070,
  STORAGE_WRITE_FAILED: 5071,
  STORAGE_UNAVAILABLE: 5072,
});

// The base class: `instanceof TetherError` catches everything this library
// throws on its own account.
export class TetherError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = "TetherError";
  }
}

// The gateway answered a request with an error. Nothing was changed by it
// (PROTOCOL 1.6: a request that fails changes nothing).
export class RpcError extends TetherError {
  constructor(method, error) {
    const code = typeof error.code === "number" ? error.code : codes.INTERNAL_ERROR;
    super(method + " failed: " + (error.message || "error " + code) + " (" + code + ")");
    this.name = "RpcError";
    this.method = method;
    this.code = code;
    this.data = error.data;
  }
}

// The connection dropped while a request was in flight: the gateway may or
// may not have executed it. Not retried for the application, because a
// prompt sent twice runs twice; the session's events show what happened.
export class ConnectionLostError extends TetherError {
  constructor(method) {
    super(method + ": the connection dropped before the answer; it may or may not have been executed");
    this.name = "ConnectionLostError";
    this.method = method;
  }
}

// The gateway refused the connection itself (HTTP 401 for a missing or
// wrong token, 403 for an origin or address it does not serve), or closed
// it because its token ended (4401) or was revoked (4403), and no new
// token could be had: a fixed `token`, a token provider that failed
// (`status` "provider") or that gave the same token again. Retrying
// cannot help, so the gateway object closes.
export class AuthError extends TetherError {
  constructor(status, { cause, sameToken = false } = {}) {
    super(authMessage(status, sameToken), cause ? { cause } : undefined);
    this.name = "AuthError";
    this.status = status;
  }
}

function authMessage(status, sameToken) {
  const again = sameToken ? " (the token provider gave the same token again)" : "";
  switch (status) {
    case 401:
      return "the gateway refused the token (HTTP 401)" + again + ": pass a valid `token` or a token provider";
    case 4401:
      return "the connection's token expired (close 4401)" + again +
        ": pass a token provider (`token: async () => …`) to stay connected";
    case 4403:
      return "the connection's token was revoked (close 4403)" + again + ": sign in again";
    case "provider":
      return "the token provider failed to give a token (it threw, or returned no string)";
    default:
      return "the gateway refused the connection (HTTP " + status + ")";
  }
}

// The application closed the gateway object; what waited on it ends.
export class ClosedError extends TetherError {
  constructor() {
    super("the tether connection was closed by the application");
    this.name = "ClosedError";
  }
}

// The gateway could not be reached within the connect timeout (option
// `connectTimeoutMs`) while a request waited for a connection. The gateway
// object keeps trying (its `state` events say how); the request was never
// sent, so it changed nothing.
export class UnreachableError extends TetherError {
  constructor(url, waitedMs, attempts, last) {
    super("could not connect to " + url + " within " + (waitedMs / 1000).toFixed(1) + " s (" +
      attempts + (attempts === 1 ? " attempt" : " attempts") + (last ? "; last: " + last : "") +
      "); still trying: is the gateway running there?");
    this.name = "UnreachableError";
    this.url = url;
    this.attempts = attempts;
    this.last = last;
  }
}

// What the library knew of a session no longer holds, so a turn of it can
// never be reported on: `reason` "epoch" when the gateway's store was
// replaced (a new epoch, PROTOCOL 1.3), "rollback" when the session's
// history went back (a store restored from an older copy: the events this
// turn had are gone).
export class ResetError extends TetherError {
  constructor(epoch, reason = "epoch") {
    super(reason === "rollback"
      ? "the session's history went back (the gateway's store is older than what this client saw); " +
        "this turn was in the lost part and its end is unknowable"
      : "the gateway's event store changed (new epoch " + epoch + "); this turn's end is unknowable");
    this.name = "ResetError";
    this.epoch = epoch;
    this.reason = reason;
  }
}
