// A stand-in for the gateway, for what the real one never sends (JSON
// nested 200,000 levels deep, a frame that is not JSON): a WebSocket
// server that says `gateway.ready` and answers each request with what the
// test's `answer(method, params, conn)` returns (a `{ raw }` object is sent
// as that text, verbatim).

import { WebSocketServer } from "ws";

export class FakeGateway {
  static async start(answer, { port = 0 } = {}) {
    const fake = new FakeGateway(answer);
    await fake.listen(port);
    return fake;
  }

  constructor(answer) {
    this.answer = answer;
    this.conns = new Set();
    this.connections = 0;
    this.requests = [];
    this.server = null;
    this.port = 0;
  }

  listen(port) {
    return new Promise((resolve, reject) => {
      this.server = new WebSocketServer({ host: "127.0.0.1", port, path: "/ws" });
      this.server.once("error", reject);
      this.server.once("listening", () => {
        this.port = this.server.address().port;
        resolve();
      });
      this.server.on("connection", (ws) => this.accept(ws));
    });
  }

  get url() {
    return "ws://127.0.0.1:" + this.port + "/ws";
  }

  accept(ws) {
    this.connections += 1;
    const conn = {
      ws,
      number: this.connections,
      send: (value) => ws.send(typeof value === "string" ? value : JSON.stringify(value)),
      event: (params) => conn.send({ jsonrpc: "2.0", method: "event", params }),
    };
    this.conns.add(conn);
    ws.on("close", () => this.conns.delete(conn));
    conn.event({
      type: "gateway.ready",
      payload: {
        server: "fake", version: "0", protocol: 1, epoch: "e_fake", peer_id: "p_" + conn.number,
        profile: "default", heartbeat_s: 15, limits: { max_frame_bytes: 1048576 },
      },
    });
    ws.on("message", async (data) => {
      const req = JSON.parse(data.toString("utf8"));
      this.requests.push(req);
      let reply;
      try {
        const result = await this.answer(req.method, req.params || {}, conn);
        if (result && typeof result.raw === "string") {
          ws.send(result.raw);
          return;
        }
        reply = { jsonrpc: "2.0", id: req.id, result };
      } catch (err) {
        reply = { jsonrpc: "2.0", id: req.id, error: { code: err.code || -32603, message: err.message } };
      }
      ws.send(JSON.stringify(reply));
    });
  }

  // Drops every connection, as a crash would.
  cut() {
    for (const c of this.conns) {
      c.ws.terminate();
    }
  }

  close() {
    this.cut();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

// JSON text of `depth` nested arrays around `inner`.
export function deepJson(depth, inner = "1") {
  return "[".repeat(depth) + inner + "]".repeat(depth);
}
