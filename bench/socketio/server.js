// The Socket.IO baseline of tether's side-by-side benchmarks (bench/compare.sh):
// rooms stand for sessions, with connection state recovery on so that a client
// that drops can come back and get what it missed, as a tether peer resumes
// from its watermark. Nothing is persisted: the recovery buffer is the
// in-memory adapter's (every broadcast packet kept for maxDisconnectionDuration).
//
// Clients join a room with the acknowledged event `join`; a publisher's `pub`
// {"room","n","t_us","pad"} is broadcast to the room's members as `ev` (the
// publisher excluded). The generator (`tether bench load --target socketio`)
// speaks Engine.IO/Socket.IO's framing directly over a WebSocket.
//
// PORT (default 0: any free port); prints `socket.io listening on http://ADDR`
// once it accepts connections.
"use strict";

const http = require("node:http");
const { Server } = require("socket.io");

const httpServer = http.createServer();
const io = new Server(httpServer, {
  serveClient: false,
  connectionStateRecovery: {
    // Socket.IO's documented default.
    maxDisconnectionDuration: 2 * 60 * 1000,
    skipMiddlewares: true,
  },
});

io.on("connection", (socket) => {
  socket.on("join", (room, ack) => {
    socket.join(room);
    if (typeof ack === "function") ack();
  });
  socket.on("pub", (msg) => {
    if (msg && typeof msg.room === "string") socket.to(msg.room).emit("ev", msg);
  });
});

// The listen backlog `tether serve` uses (node's default is 511), so that a
// storm of reconnects meets the same accept queue on every server.
const listen = { port: Number(process.env.PORT || 0), host: "127.0.0.1", backlog: 4096 };
httpServer.listen(listen, () => {
  const { address, port } = httpServer.address();
  console.log(`socket.io listening on http://${address}:${port}`);
});
