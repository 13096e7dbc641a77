// The gateway object's requests across connections: each JSON-RPC call is
// sent on the open connection, or waits for the next one (for its timeout
// at most, then UnreachableError); one in flight when the connection drops
// is sent again only if it changes nothing (a read), any other fails with
// ConnectionLostError, since the gateway may have executed it (a prompt
// sent twice would run twice).

import { ConnectionLostError, RpcError, codes } from "./errors.js";
import { byteLength } from "./text.js";

// Methods that change nothing, so they may be sent again on a new
// connection when the old one dropped before their answer.
export const READS = new Set([
  "gateway.ping",
  "session.list",
  "session.events.since",
  "session.events.stats",
  "handoff.state",
]);

export class Requests {
  // `gw`: the gateway object, for its connection (`state`, `socket`,
  // `ready`, `generation`, `failure`) and what an UnreachableError says.
  constructor(gw) {
    this.gw = gw;
    this.nextId = 1;
    // Sent on the current connection, by id.
    this.pending = new Map();
    // Waiting for a connection.
    this.waiting = [];
  }

  // Sent now if a connection is open, else when one is: waits `timeoutMs`
  // for it at most (Infinity: as long as it takes).
  call(method, params, timeoutMs) {
    return new Promise((resolve, reject) => {
      const call = { method, params, resolve, reject, retry: READS.has(method), generation: 0, timeoutMs, timer: null };
      if (this.gw.state === "open") {
        this.send(call);
      } else {
        this.wait(call);
      }
    });
  }

  // Only on connection `generation`, and never sent again.
  callOn(generation, method, params) {
    if (this.gw.state !== "open" || this.gw.generation !== generation) {
      return Promise.reject(new ConnectionLostError(method));
    }
    return new Promise((resolve, reject) => {
      this.send({ method, params, resolve, reject, retry: false, generation, timeoutMs: Infinity, timer: null });
    });
  }

  wait(call) {
    this.waiting.push(call);
    this.arm(call);
  }

  arm(call) {
    if (!Number.isFinite(call.timeoutMs) || call.timer !== null) {
      return;
    }
    const since = Date.now();
    call.timer = setTimeout(() => {
      call.timer = null;
      const i = this.waiting.indexOf(call);
      if (i >= 0) {
        this.waiting.splice(i, 1);
        call.reject(this.gw._unreachable(since));
      }
    }, call.timeoutMs);
  }

  send(call) {
    if (call.timer !== null) {
      clearTimeout(call.timer);
      call.timer = null;
    }
    const id = this.nextId++;
    const frame = JSON.stringify({ jsonrpc: "2.0", id, method: call.method, params: call.params });
    const ready = this.gw.ready;
    const limit = ready && ready.limits && ready.limits.max_frame_bytes;
    if (typeof limit === "number" && frame.length > limit / 4 && byteLength(frame) > limit) {
      // The gateway would answer 4013 with `id` null: no way to tell which
      // request it was, so refuse it here with the same code.
      call.reject(new RpcError(call.method, {
        code: codes.FRAME_TOO_LARGE,
        message: "the request is larger than the gateway's max_frame_bytes (" + limit + ")",
      }));
      return;
    }
    this.pending.set(id, call);
    const socket = this.gw.socket;
    if (!socket || !socket.send(frame)) {
      // Never left: safe to send on the next connection, whatever it is.
      this.pending.delete(id);
      if (call.generation) {
        call.reject(new ConnectionLostError(call.method));
      } else {
        this.wait(call);
      }
    }
  }

  // An answer (`f.id` of a pending call); whether it was one.
  answered(f) {
    const call = this.pending.get(f.id);
    if (!call) {
      return false;
    }
    this.pending.delete(f.id);
    if (f.error) {
      call.reject(new RpcError(call.method, f.error));
    } else {
      call.resolve(f.result);
    }
    return true;
  }

  // A connection opened: what waited goes out on it.
  opened() {
    const waiting = this.waiting;
    this.waiting = [];
    for (const call of waiting) {
      this.send(call);
    }
  }

  // The connection dropped: reads in flight wait for the next one, the
  // rest fail.
  dropped() {
    const again = [];
    for (const call of this.pending.values()) {
      if (call.retry && !call.generation) {
        again.push(call);
      } else {
        call.reject(new ConnectionLostError(call.method));
      }
    }
    this.pending.clear();
    this.waiting = again.concat(this.waiting);
    for (const call of again) {
      this.arm(call);
    }
  }

  // The end: everything rejects with `err`.
  fail(err) {
    for (const call of [...this.pending.values(), ...this.waiting]) {
      clearTimeout(call.timer);
      call.reject(err);
    }
    this.pending.clear();
    this.waiting = [];
  }
}
