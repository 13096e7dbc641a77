// Starts the real `tether` binary for the tests (TETHER_BIN, else the
// workspace's target/debug/tether) and cuts connections through a proxy.

import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
export const TETHER_BIN = process.env.TETHER_BIN || resolve(here, "../../../target/debug/tether");

// Generous: a loaded 2-core machine is slow to start processes.
export const WAIT_MS = 30000;

export function tempDir() {
  return mkdtempSync(join(tmpdir(), "tether-client-test-"));
}

// A port that was free a moment ago, for a gateway that must come back on
// the same address (clients reconnect to the URL they were given).
export async function freePort() {
  return new Promise((resolvePort, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolvePort(port));
    });
  });
}

// Gateways still running when the test process exits (a failed or timed
// out test) are killed with it, never left behind.
const running = new Set();
process.on("exit", () => {
  for (const child of running) {
    child.kill("SIGKILL");
  }
});

export class Gateway {
  // `args`: extra flags of `tether serve`.
  constructor({ args = [], port = 0, dataDir } = {}) {
    this.args = args;
    this.port = port;
    this.ownDir = !dataDir;
    this.dataDir = dataDir || tempDir();
    this.child = null;
    this.addr = null;
  }

  static async start(options) {
    const gw = new Gateway(options);
    await gw.spawn();
    return gw;
  }

  get url() {
    return "ws://" + this.addr + "/ws";
  }

  async spawn() {
    const listen = "127.0.0.1:" + this.port;
    const child = spawn(TETHER_BIN, ["serve", "--listen", listen, "--data-dir", this.dataDir, ...this.args], {
      env: Object.assign({}, process.env, { RUST_LOG: process.env.RUST_LOG || "warn" }),
      stdio: ["ignore", "pipe", "inherit"],
    });
    this.child = child;
    running.add(child);
    child.once("exit", () => running.delete(child));
    const lines = createInterface({ input: child.stdout });
    const line = await new Promise((resolveLine, reject) => {
      const timer = setTimeout(() => reject(new Error("tether did not start within " + WAIT_MS + " ms")), WAIT_MS);
      lines.once("line", (l) => {
        clearTimeout(timer);
        resolveLine(l);
      });
      child.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error("tether exited with " + code + " before listening"));
      });
    });
    const m = /^tether listening on http:\/\/(.+)$/.exec(line.trim());
    if (!m) {
      throw new Error("unexpected start-up line: " + line);
    }
    this.addr = m[1];
    this.port = Number(this.addr.split(":").pop());
  }

  async signal(sig) {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) {
      return;
    }
    const exited = new Promise((r) => child.once("exit", r));
    child.kill(sig);
    await exited;
  }

  // SIGKILL: no drain, no flush (the crash case).
  kill9() {
    return this.signal("SIGKILL");
  }

  // SIGTERM: the drain (turns end `gateway_shutdown`, clients get 1001).
  terminate() {
    return this.signal("SIGTERM");
  }

  // A new process on the same port, with the same data directory unless
  // another is given (a new data directory is a new epoch).
  async restart({ dataDir } = {}) {
    await this.kill9();
    if (dataDir) {
      this.dataDir = dataDir;
    }
    await this.spawn();
  }

  async stop() {
    await this.kill9();
    if (this.ownDir) {
      rmSync(this.dataDir, { recursive: true, force: true });
    }
  }
}

// A TCP forwarder the test can cut (every connection through it is
// destroyed, and new ones are refused until `restore()`), as a network does.
export class CutProxy {
  static async start(target) {
    const p = new CutProxy(target);
    await new Promise((r) => p.server.listen(0, "127.0.0.1", r));
    p.addr = "127.0.0.1:" + p.server.address().port;
    return p;
  }

  constructor(target) {
    const [host, port] = [target.slice(0, target.lastIndexOf(":")), Number(target.slice(target.lastIndexOf(":") + 1))];
    this.down = false;
    this.sockets = new Set();
    this.cuts = 0;
    this.server = net.createServer((client) => {
      if (this.down) {
        client.destroy();
        return;
      }
      const upstream = net.connect(port, host);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on("close", () => this.sockets.delete(s));
        s.on("error", () => {});
      }
      client.pipe(upstream);
      upstream.pipe(client);
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
    });
  }

  get url() {
    return "ws://" + this.addr + "/ws";
  }

  cut() {
    this.down = true;
    for (const s of this.sockets) {
      this.cuts += 1;
      s.destroy();
    }
  }

  restore() {
    this.down = false;
  }

  close() {
    this.cut();
    return new Promise((r) => this.server.close(r));
  }
}

// Resolves when `fn()` is truthy (polled), or fails after `ms`.
export async function until(fn, what, ms = WAIT_MS) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) {
      return v;
    }
    if (Date.now() > deadline) {
      throw new Error("timed out waiting for " + what);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

// Resolves with the next value `gw` emits for `name` that `pred` accepts.
export function nextEmit(gw, name, pred = () => true, ms = WAIT_MS) {
  return new Promise((resolveEmit, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error("no '" + name + "' within " + ms + " ms"));
    }, ms);
    const off = gw.on(name, (v) => {
      if (pred(v)) {
        clearTimeout(timer);
        off();
        resolveEmit(v);
      }
    });
  });
}

// Reads `stream` until `pred(item)`; returns every item read. Reads with
// `next()`, not `for await`, whose exit would end the stream: a test reads
// one stream in several stretches.
export async function readUntil(stream, pred, ms = WAIT_MS) {
  const items = [];
  const deadline = Date.now() + ms;
  for (;;) {
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error("timed out after " + items.length + " items: " +
        JSON.stringify(items.slice(-3)))), Math.max(1, deadline - Date.now()));
    });
    let r;
    try {
      r = await Promise.race([stream.next(), timeout]);
    } finally {
      clearTimeout(timer);
    }
    if (r.done) {
      throw new Error("the stream ended before the expected event; read " + items.length + " items");
    }
    items.push(r.value);
    if (pred(r.value, items)) {
      return items;
    }
  }
}

// The durable seqs of `items`, in the order they came.
export function seqsOf(items) {
  return items.filter((e) => typeof e.seq === "number").map((e) => e.seq);
}

export function range(from, to) {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}
