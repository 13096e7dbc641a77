// What a newcomer runs into before anything works, said at once or within
// the connect timeout, never a silent wait: a URL that cannot work throws
// at `connect`; a runtime with nothing to open a WebSocket with closes the
// gateway object with NoWebSocketError; an unreachable gateway is retried
// with backoff, every attempt visible as a `state` change with its reason,
// and a request that waited `connectTimeoutMs` for a connection rejects
// with UnreachableError (while the object keeps trying, and connects once
// there is a gateway to connect to).

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cpSync, mkdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import net from "node:net";
import { join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { connect, UnreachableError, wsUrl } from "../src/index.js";
import { FakeGateway } from "./fake_gateway.js";
import { freePort, tempDir } from "./harness.js";

const here = fileURLToPath(new URL(".", import.meta.url));
const FAST = { initialMs: 20, maxMs: 100 };

test("a URL that cannot work throws at connect, at once", () => {
  for (const bad of ["ws://exa mple:1/ws", "ws://h:99999/ws", "ftp://h/ws", "ws://:1/ws", ""]) {
    assert.throws(() => connect(bad), (err) => err instanceof TypeError && /gateway URL/.test(err.message), bad);
  }
  assert.throws(() => connect("ws://h:1/ws", { connectTimeoutMs: -1 }), TypeError);
  assert.equal(wsUrl(":7878"), "ws://127.0.0.1:7878/ws", "as for `tether serve --listen :7878`");
});

test("a dead port: every attempt is a state change with its reason, a request fails after the connect timeout", async () => {
  const port = await freePort();
  const gw = connect("ws://127.0.0.1:" + port + "/ws", { connectTimeoutMs: 500, backoff: FAST });
  const states = [];
  gw.on("state", (s) => states.push(s));
  let fake = null;
  try {
    const started = Date.now();
    await assert.rejects(gw.createSession({ title: "x" }), (err) => {
      assert.ok(err instanceof UnreachableError, String(err));
      assert.match(err.message, /could not connect to ws:\/\/127\.0\.0\.1:\d+\/ws within 0\.\d s/);
      assert.match(err.message, /ECONNREFUSED/);
      assert.ok(err.attempts >= 1);
      return true;
    });
    assert.ok(Date.now() - started < 5000, "within the connect timeout, give or take a loaded machine");
    await assert.rejects(gw.opened(), UnreachableError);
    assert.equal(states[0].state, "connecting");
    const retries = states.filter((s) => s.state === "reconnecting");
    assert.ok(retries.length >= 2, "retried with backoff");
    assert.match(retries[0].error.message, /ECONNREFUSED/);
    assert.ok(retries.every((s) => s.delay > 0 && s.attempt > 0));

    // Still trying: a gateway that appears is connected to.
    fake = await FakeGateway.start(() => ({ sessions: [], next_cursor: null }), { port });
    assert.equal((await gw.opened()).server, "fake");
    assert.deepEqual(await gw.sessions(), []);
  } finally {
    gw.close();
    if (fake) {
      await fake.close();
    }
  }
});

test("an attempt that is never answered is given up after the connect timeout, and tried again", async () => {
  // A TCP listener that accepts and says nothing; then a WebSocket server
  // that upgrades and says nothing (not a tether gateway).
  const silentTcp = net.createServer(() => {});
  await new Promise((r) => silentTcp.listen(0, "127.0.0.1", r));
  const silentWs = await FakeGateway.start(() => null);
  silentWs.accept = () => {};
  try {
    for (const url of ["ws://127.0.0.1:" + silentTcp.address().port + "/ws", silentWs.url]) {
      const gw = connect(url, { connectTimeoutMs: 300, backoff: FAST });
      const retry = new Promise((resolveRetry) => gw.on("reconnecting", resolveRetry));
      try {
        const r = await retry;
        assert.match(r.error.message, /no answer within 300 ms/, url);
        await assert.rejects(gw.call("session.list"), UnreachableError);
      } finally {
        gw.close();
      }
    }
  } finally {
    silentTcp.close();
    await silentWs.close();
  }
});

// A library installed without `ws` (a linked local checkout on Node 20):
// the app's own `ws` is used; with none anywhere, the object closes at once
// with an error that says what to install.
test("without a WebSocket implementation the object closes at once; the app's own ws is found", { skip: typeof globalThis.WebSocket === "function" && "this Node has a global WebSocket" }, async () => {
  const dir = tempDir();
  const fake = await FakeGateway.start(() => ({ sessions: [], next_cursor: null }));
  try {
    cpSync(resolve(here, "../src"), join(dir, "lib/src"), { recursive: true });
    mkdirSync(join(dir, "app"));
    writeFileSync(join(dir, "app/main.mjs"), `
      import { connect } from "../lib/src/index.js";
      const gw = connect(process.argv[2]);
      const states = [];
      gw.on("state", (s) => states.push(s.state));
      try {
        console.log(JSON.stringify({ ok: await gw.sessions(), states }));
      } catch (err) {
        console.log(JSON.stringify({ error: err.name, message: err.message, states }));
      }
      gw.close();
    `);
    // Not spawnSync: the fake gateway answers from this process.
    const run = () => new Promise((resolveRun) => {
      execFile(process.execPath, ["main.mjs", fake.url], { cwd: join(dir, "app"), timeout: 20000 },
        (error, stdout, stderr) => resolveRun({ stdout, stderr }));
    });
    const without = await run();
    const out = JSON.parse(without.stdout);
    assert.equal(out.error, "NoWebSocketError", without.stdout + without.stderr);
    assert.match(out.message, /npm install ws/);
    assert.deepEqual(out.states, ["connecting", "closed"], "closed at once, never retried");

    mkdirSync(join(dir, "app/node_modules"));
    symlinkSync(resolve(here, "../node_modules/ws"), join(dir, "app/node_modules/ws"), "dir");
    const withWs = await run();
    assert.deepEqual(JSON.parse(withWs.stdout).ok, [], withWs.stdout + withWs.stderr);
  } finally {
    await fake.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
