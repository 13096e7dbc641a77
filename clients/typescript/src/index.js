// tether-client: the client side of tether's protocol (docs/PROTOCOL.md
// Part 1), for browsers and Node >= 20. See docs/CLIENTS.md.

export { connect, Gateway } from "./gateway.js";
export { DEFAULT_CONNECT_TIMEOUT_MS, wsUrl } from "./options.js";
export { MAX_DEPTH, TOO_DEEP } from "./decode.js";
export { NoWebSocketError } from "./transport.js";
export { Session } from "./session.js";
export { EventStream } from "./stream.js";
export { Turn } from "./turn.js";
export { backoffDelay, DEFAULT_BACKOFF } from "./backoff.js";
export {
  AuthError,
  ClosedError,
  ConnectionLostError,
  ResetError,
  RpcError,
  TetherError,
  UnreachableError,
  codes,
} from "./errors.js";
