// A token provider keeps a signed-in user connected (docs/CLIENTS.md,
// "Tokens that expire"): a 5-second JWT refreshed on every
// `gateway.token_expiring` keeps one connection for a minute with prompts
// answered; a provider that cannot give a new token after an expiry is
// asked once and the object stops with AuthError; a gateway restart is
// reconnected with a fresh token from the provider.

import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { AuthError, connect } from "../src/index.js";
import { Gateway, TETHER_BIN, freePort, nextEmit, tempDir, until } from "./harness.js";

const secret = "s".repeat(16) + Math.random().toString(16).slice(2).padEnd(24, "0");
const secretFile = join(tempDir(), "secret");
writeFileSync(secretFile, secret);

function b64url(data) {
  return Buffer.from(data).toString("base64url");
}

// An HS256 JWT of `sub` ending `ttlS` seconds from now.
function mint(sub, ttlS) {
  const now = Math.floor(Date.now() / 1000);
  const head = b64url(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const body = b64url(JSON.stringify({ sub, iat: now, exp: now + ttlS }));
  const mac = createHmac("sha256", secret).update(head + "." + body).digest("base64url");
  return head + "." + body + "." + mac;
}

let gateway;

before(async () => {
  gateway = await Gateway.start({
    port: await freePort(),
    args: [
      "--jwt-secret-file", secretFile,
      "--jwt-leeway-s", "0",
      "--token-expiring-s", "3",
      "--host-command", TETHER_BIN + " host --engine echo",
    ],
  });
});

after(async () => {
  await gateway.stop();
});

test("a 5-second token refreshed by the provider keeps one connection for a minute, prompts flowing", async () => {
  let asked = 0;
  const gw = connect(gateway.url, { token: async () => { asked += 1; return mint("alice", 5); } });
  const opens = [];
  const drops = [];
  gw.on("open", (s) => opens.push(s));
  gw.on("reconnecting", (s) => drops.push(s));
  let refreshed = 0;
  gw.on("token_refreshed", () => { refreshed += 1; });
  try {
    const s = await gw.createSession({ title: "kept" });
    const end = Date.now() + 60000;
    let n = 0;
    while (Date.now() < end) {
      const turn = await s.submit("prompt " + n);
      const r = await turn.result();
      assert.equal(r.status, "complete");
      assert.equal(r.text, "prompt " + n);
      n += 1;
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    assert.equal(opens.length, 1, "one connection: " + JSON.stringify(drops));
    assert.deepEqual(drops, []);
    assert.ok(refreshed >= 10, "refreshed " + refreshed + " times");
    assert.equal(asked, refreshed + 1);
  } finally {
    gw.close();
  }
});

test("an expired token whose provider fails is asked once, then AuthError", async () => {
  let asked = 0;
  const gw = connect(gateway.url, {
    token: async () => {
      asked += 1;
      if (asked > 1) {
        throw new Error("the backend is down");
      }
      return mint("alice", 2);
    },
  });
  // Asked at the refusal: once, whatever the warnings before it asked.
  const atRefusal = [];
  gw.on("reconnecting", () => atRefusal.push(asked));
  try {
    await gw.opened();
    const closed = await nextEmit(gw, "closed");
    assert.ok(closed.error instanceof AuthError, String(closed.error));
    assert.equal(closed.error.status, "provider");
    assert.equal(atRefusal.length, 1, "one try: " + atRefusal);
    assert.equal(asked, atRefusal[0] + 1);
    await assert.rejects(gw.call("gateway.ping", {}), AuthError);
  } finally {
    gw.close();
  }
  // A provider that gives the same expired token again: asked once more, then stop.
  const stale = mint("alice", 1);
  let staleAsked = 0;
  await new Promise((resolve) => setTimeout(resolve, 2100));
  const again = connect(gateway.url, { token: () => { staleAsked += 1; return stale; } });
  const closed = await nextEmit(again, "closed");
  assert.ok(closed.error instanceof AuthError);
  assert.equal(closed.error.status, 401);
  assert.equal(staleAsked, 2);
  again.close();
});

test("a fixed token that expires ends the object with AuthError 4401, not a reconnect storm", async () => {
  const gw = connect(gateway.url, { token: mint("alice", 2) });
  const states = [];
  gw.on("state", (s) => states.push(s.state));
  try {
    await gw.opened();
    const closed = await nextEmit(gw, "closed");
    assert.ok(closed.error instanceof AuthError);
    assert.equal(closed.error.status, 4401);
    assert.ok(!states.includes("reconnecting"), states.join(","));
  } finally {
    gw.close();
  }
});

test("after a gateway restart the provider gives the token of the new connection", async () => {
  let asked = 0;
  const gw = connect(gateway.url, {
    token: async () => { asked += 1; return mint("alice", 4); },
    backoff: { initialMs: 50, maxMs: 500 },
  });
  try {
    await gw.opened();
    const s = await gw.createSession({ title: "restart" });
    const reopened = nextEmit(gw, "open");
    await gateway.kill9();
    // The first token is over before the gateway is back.
    await new Promise((resolve) => setTimeout(resolve, 4500));
    await gateway.spawn();
    await reopened;
    await until(() => asked >= 2, "the provider asked again");
    const r = await (await s.submit("after the restart")).result();
    assert.equal(r.text, "after the restart");
  } finally {
    gw.close();
  }
});
