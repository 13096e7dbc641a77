// tether-client: the client side of tether's protocol (docs/PROTOCOL.md
// Part 1), for browsers and Node >= 20. See docs/CLIENTS.md.

export { connect, Gateway, wsUrl } from "./gateway.js";
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
  codes,
} from "./errors.js";
