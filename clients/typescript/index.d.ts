// Types of tether-client (hand-written; the code is plain JavaScript in
// src/). The wire shapes are docs/PROTOCOL.md Part 1's.

/** A JSON value as the gateway sends it. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** The gateway's error codes (PROTOCOL 1.6). */
export declare const codes: {
  readonly PARSE_ERROR: -32700;
  readonly INVALID_REQUEST: -32600;
  readonly METHOD_NOT_FOUND: -32601;
  readonly INVALID_PARAMS: -32602;
  readonly INTERNAL_ERROR: -32603;
  readonly SESSION_NOT_FOUND: 4001;
  readonly SESSION_CLOSED: 4002;
  readonly SESSION_BUSY: 4009;
  readonly FRAME_TOO_LARGE: 4013;
  readonly RATE_LIMITED: 4029;
  readonly HANDOFF_CONFLICT: 4090;
  readonly TURN_IN_PROGRESS: 4091;
  readonly RESUME_TOO_LARGE: 4130;
  readonly HOST_UNAVAILABLE: 5019;
  readonly STORAGE_FULL: 5070;
  readonly STORAGE_WRITE_FAILED: 5071;
  readonly STORAGE_UNAVAILABLE: 5072;
};

/** The base class of every error this library throws on its own account. */
export declare class TetherError extends Error {}

/** The gateway answered with an error; nothing was changed by the request. */
export declare class RpcError extends TetherError {
  readonly method: string;
  /** The protocol's code, e.g. `codes.SESSION_NOT_FOUND`. */
  readonly code: number;
  readonly data: { [key: string]: Json } | undefined;
}

/** The connection dropped before the answer: the request may or may not have run. */
export declare class ConnectionLostError extends TetherError {
  readonly method: string;
}

/**
 * The gateway refused the connection (401: token, 403: origin or address),
 * or closed it because its token ended (4401) or was revoked (4403), and no
 * new token could be had (a fixed token; a provider that failed, `status`
 * `"provider"`, or gave the same token again); not retried.
 */
export declare class AuthError extends TetherError {
  readonly status: number | "provider";
}

/** `gateway.token_expiring`'s params. */
export interface TokenExpiring {
  /** The token's `exp`, seconds since the Unix epoch. */
  expires_at: number;
  expires_in_s: number;
}

/**
 * Gives a token for a connection: called for every connect (the first, a
 * reconnect, after a gateway restart), on `gateway.token_expiring` (the
 * new token is sent with `gateway.refresh_token`), and once after a
 * refusal (4401, 4403, HTTP 401). Typically it asks the app's backend.
 */
export type TokenProvider = () => Promise<string> | string;

/**
 * No connection opened within the connect timeout (`connectTimeoutMs`)
 * while the request waited; it was never sent. The gateway object keeps
 * trying (see its `state` events).
 */
export declare class UnreachableError extends TetherError {
  readonly url: string;
  /** Failed attempts since the last open connection. */
  readonly attempts: number;
  /** Why the last one failed (`connect ECONNREFUSED 127.0.0.1:7878`, `HTTP 404`, ...). */
  readonly last: string;
}

/**
 * Nothing to open a WebSocket with: no global `WebSocket` (Node 20) and no
 * `ws` package next to the library or the application. The gateway object
 * closes with it at once.
 */
export declare class NoWebSocketError extends TetherError {}

/** The application closed the gateway object. */
export declare class ClosedError extends TetherError {}

/**
 * A turn whose end can never be known: the gateway's store changed
 * (`reason` "epoch"), or the session's history went back and the turn was
 * in the lost part (`reason` "rollback").
 */
export declare class ResetError extends TetherError {
  readonly epoch: string;
  readonly reason: "epoch" | "rollback";
}

export type SessionStatus = "idle" | "running" | "parked" | "closed";

export interface SessionInfo {
  session_id: string;
  profile: string;
  title: string;
  status: SessionStatus;
  created_at: string;
  updated_at: string;
  parent_session_id: string | null;
  history_version: number;
  message_count: number;
  latest_seq: number;
  peers: number;
  close_on_disconnect: boolean;
  /** Who is attached, in the session's own answers (resume, create); absent in lists. */
  attached?: AttachedPeer[];
}

export interface AttachedPeer {
  peer_id: string;
  transport: "ws" | "sse" | "http" | "stdio";
}

export interface Message {
  seq: number;
  role: "user" | "assistant" | "tool" | "system";
  text: string;
  turn_id?: string;
  ts: string;
  /** On an assistant message whose turn did not complete: how it ended. */
  status?: "error" | "interrupted";
  failure_reason?: string;
  /** The message of the turn's `error` event. */
  error?: string;
}

export interface TodoItem {
  id: string;
  text: string;
  status: string;
}

export interface Todos {
  items: TodoItem[];
  revision: number;
}

/** The payload of `message.complete`: how a turn ended. */
export interface TurnResult {
  text: string;
  status: "complete" | "error" | "interrupted";
  /** `host_crash`, `host_timeout`, `gateway_restart`, `gateway_shutdown`, `dequeued`, `superseded`, `engine_error`, ... */
  failure_reason?: string;
  recoverable?: boolean;
  usage?: { [key: string]: Json };
}

/** A piece of a turn's assistant text: `offset` is the UTF-8 length of the text before it. */
export interface Delta {
  text: string;
  offset: number;
}

/** An event as the gateway sends it (the `params` of an `event` notification). */
export interface TetherEvent {
  type: string;
  session_id?: string;
  /** Present on durable events only. */
  seq?: number;
  turn_id?: string;
  trace_id?: string;
  ts?: string;
  payload: { [key: string]: Json };
}

/**
 * Yielded by `session.events()` when what the stream held no longer
 * applies: `epoch` (the gateway's store changed; the stream starts over at
 * seq 1 of the new store, or ends with 4001 if the session is not there),
 * `truncated` (events `after`+1..`upto` were removed by retention) or
 * `rollback` (the session's history went back: events `after`+1..`upto`
 * that were yielded are gone, and the events that follow reuse those seqs).
 */
export interface ResetEvent {
  type: "reset";
  session_id: string;
  reason: "epoch" | "truncated" | "rollback";
  epoch?: string;
  previous_epoch?: string;
  after?: number;
  upto?: number;
}

export type StreamItem = TetherEvent | ResetEvent;

export interface ReadyPayload {
  server: string;
  version: string;
  protocol: number;
  epoch: string;
  peer_id: string;
  profile: string;
  heartbeat_s: number;
  limits: { max_frame_bytes: number; [key: string]: Json };
}

export type ConnectionState = "connecting" | "open" | "reconnecting" | "closed";

export interface StateChange {
  state: ConnectionState;
  /** `open`: the connection's `gateway.ready` payload. */
  ready?: ReadyPayload;
  /** `reconnecting`: milliseconds until the next attempt, and its number. */
  delay?: number;
  attempt?: number;
  /** `reconnecting`: how the last connection ended (1013 for a slow consumer, 1001 a drain). */
  code?: number;
  reason?: string;
  /** HTTP status of a refused upgrade, where the runtime shows it. */
  status?: number;
  /**
   * `reconnecting`: why the attempt failed, where the runtime shows it
   * (`connect ECONNREFUSED ...`, `no answer within 10000 ms`);
   * `closed`: why retrying cannot help (AuthError, NoWebSocketError).
   */
  error?: Error;
}

/** The gateway's store changed: every session starts over. */
export interface EpochReset {
  reason: "epoch";
  epoch: string;
  previousEpoch: string;
}

/** A session's history went back to `after` (it had been read up to `upto`). */
export interface RollbackReset {
  reason: "rollback";
  sessionId: string;
  epoch: string;
  after: number;
  upto: number;
}

export type ResetInfo = EpochReset | RollbackReset;

export interface GatewayEvents {
  state: StateChange;
  connecting: StateChange;
  open: StateChange;
  reconnecting: StateChange;
  closed: StateChange;
  reset: ResetInfo;
  error: Error;
  event: TetherEvent;
  /** The gateway says the connection's token ends soon. */
  token_expiring: TokenExpiring;
  /** The provider's new token replaced the connection's (`gateway.refresh_token`'s answer). */
  token_refreshed: { expires_at: number | null };
}

export interface BackoffOptions {
  /** First delay ceiling, doubled per failed attempt (default 250). */
  initialMs?: number;
  /** Cap of the ceiling (default 5000). Each delay is between half and all of its ceiling. */
  maxMs?: number;
}

export interface ConnectOptions {
  /**
   * Sent as `Authorization: Bearer` with `ws`, as `?token=` with a standard
   * WebSocket: a fixed token, or a provider of fresh ones (see
   * {@link TokenProvider}) that keeps a signed-in user connected across
   * expiries and gateway restarts.
   */
  token?: string | TokenProvider;
  /** For a gateway without tokens: the profile to work in (default `default`). */
  profile?: string;
  /** A WebSocket constructor to use instead of the runtime's (or the `ws` package). */
  WebSocket?: unknown;
  backoff?: BackoffOptions;
  /** Items a stream holds for a slow reader before it reads the store instead (default 10000). */
  maxBuffered?: number;
  /**
   * How long one connection attempt may take, and how long a request (or
   * `opened()`) waits for a connection before it rejects with
   * UnreachableError (default 10000; 0 or null: no limit). Streams of
   * `events()` and turns wait as long as it takes.
   */
  connectTimeoutMs?: number | null;
  /**
   * Who this client is, told to the other peers of the sessions it attaches
   * (`gateway.hello`, sent on every connection). `instance` defaults to a
   * random id of this object: the same on every reconnect, so reconnects
   * are not announced as leaves and joins.
   */
  client?: ClientInfo;
}

/** What a peer says of itself (PROTOCOL Part 4, "Presence"). */
export interface ClientInfo {
  /** At most 128 bytes each, no control characters. */
  name?: string;
  device?: string;
  app?: string;
  /** At most 64 bytes. */
  instance?: string;
  /** At most 1024 bytes as JSON. */
  meta?: { [key: string]: unknown };
}

/** One attached peer, on any node. */
export interface PresenceEntry {
  peer_id: string;
  /** The connection's profile, never the client's word. */
  profile: string;
  client: ClientInfo | null;
  transport: string;
  /** The cluster node it is connected to (null on a single gateway). */
  node: string | null;
  attached_at: string;
}

/** A `presence.joined` or `presence.left` event. */
export interface PresenceChange {
  type: "joined" | "left";
  peers: PresenceEntry[];
  ts: string;
}

export interface CreateSessionOptions {
  title?: string;
  profile?: string;
  close_on_disconnect?: boolean;
  /** Default true: the new session's events stream to this connection. */
  attach?: boolean;
  messages?: { role: "user" | "assistant" | "system"; text: string }[];
  engine?: { [key: string]: Json };
  follow_profile_config?: boolean;
}

export interface EventsOptions {
  /** Yield durable events with seq > since (default 0: all of them). */
  since?: number;
  maxBuffered?: number;
}

export interface ResumeResult {
  session: SessionInfo;
  epoch: string;
  latest_seq: number;
  messages?: Message[];
  active_turn: { turn_id: string; trace_id: string; text: string; started_at: string } | null;
  todos: Todos | null;
  events?: TetherEvent[];
  truncated?: boolean;
  resync?: boolean;
}

/** Throws a TypeError at once for a URL that cannot work. */
export declare function connect(url: string, options?: ConnectOptions): Gateway;

/** `ws://HOST:PORT/ws` from what a user may give (`http://HOST:PORT`, `HOST:PORT`, `:PORT`). */
export declare function wsUrl(raw: string): string;

/** The default `connectTimeoutMs`. */
export declare const DEFAULT_CONNECT_TIMEOUT_MS: number;
/** Values nested deeper than this in a frame are replaced by `TOO_DEEP`. */
export declare const MAX_DEPTH: number;
export declare const TOO_DEEP: string;

export declare function backoffDelay(attempt: number, options?: Required<BackoffOptions>, random?: () => number): number;
export declare const DEFAULT_BACKOFF: Readonly<Required<BackoffOptions>>;

export declare class Gateway {
  readonly url: string;
  readonly state: ConnectionState;
  /** The current (or last) connection's `gateway.ready` payload. */
  readonly ready: ReadyPayload | null;
  readonly epoch: string | null;
  on<K extends keyof GatewayEvents>(name: K, listener: (value: GatewayEvents[K]) => void): () => void;
  off<K extends keyof GatewayEvents>(name: K, listener: (value: GatewayEvents[K]) => void): void;
  /** Resolves once a connection is open; rejects with UnreachableError after the connect timeout. */
  opened(): Promise<ReadyPayload>;
  /** Any method of PROTOCOL 1.4; waits for a connection (the connect timeout at most). */
  call<T = any>(method: string, params?: { [key: string]: unknown }): Promise<T>;
  createSession(options?: CreateSessionOptions): Promise<Session>;
  session(id: string): Session;
  sessions(options?: { includeClosed?: boolean; pageSize?: number }): Promise<SessionInfo[]>;
  close(): void;
}

export declare class Session {
  readonly id: string;
  /** The latest SessionInfo known (from resumes and `session.info` events). */
  readonly info: SessionInfo | null;
  readonly todos: Todos | null;
  /** The highest durable seq taken in. */
  readonly latestSeq: number;
  events(options?: EventsOptions): EventStream;
  submit(text: string, options?: SubmitOptions): Promise<Turn>;
  interrupt(): Promise<{ status: "interrupted" | "idle" }>;
  compress(options?: { focus?: string }): Promise<{ status: "compressed" | "pending"; history_version?: number; removed?: number; request_id?: string }>;
  /** The session as it stands (messages, active turn, todos), without attaching. */
  snapshot(): Promise<ResumeResult>;
  branch(options?: { uptoSeq?: number; title?: string }): Promise<Session>;
  close(): Promise<{ closed: true }>;
  detach(): Promise<void>;
  /** Who is attached now, on every node. */
  presence(): Promise<PresenceEntry[]>;
  /** Calls `fn` on each join and leave while attached; returns what stops it. */
  onPresence(fn: (change: PresenceChange) => void): () => void;
}

export declare class EventStream implements AsyncIterableIterator<StreamItem> {
  [Symbol.asyncIterator](): EventStream;
  next(): Promise<IteratorResult<StreamItem, undefined>>;
  return(): Promise<IteratorResult<StreamItem, undefined>>;
}

/** `prompt.submit`'s options (PROTOCOL 1.4). */
export interface SubmitOptions {
  /** What the prompt does to a running or queued turn (default "enqueue"). */
  multitask?: "enqueue" | "reject" | "interrupt" | "rollback";
  /** With "interrupt": the queued prompts end `dequeued` too. */
  dropQueued?: boolean;
  /** A prompt with a key seen within the window gets that turn back. */
  dedupeKey?: string;
}

export declare class Turn {
  readonly id: string;
  readonly traceId: string;
  readonly status: "started" | "queued";
  /** The `dedupeKey` matched an earlier prompt's: this is that turn. */
  readonly duplicate: boolean;
  readonly session: Session;
  /** The turn's `message.complete` payload, whatever ended it. */
  result(): Promise<TurnResult>;
  deltas(): AsyncIterableIterator<Delta>;
  events(): AsyncIterableIterator<TetherEvent>;
  interrupt(): Promise<{ status: "interrupted" | "idle" }>;
}
