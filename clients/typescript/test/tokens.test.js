// Tokens (PROTOCOL 1.1): a token picks the profile, another profile's
// sessions are invisible, and a refused token closes the gateway object at
// once (retrying cannot help) instead of reconnecting forever.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { AuthError, codes, connect, RpcError } from "../src/index.js";
import { Gateway, nextEmit } from "./harness.js";

let gateway;

before(async () => {
  gateway = await Gateway.start({ args: ["--token", "alice:secret-a", "--token", "bob:secret-b"] });
});

after(async () => {
  await gateway.stop();
});

test("a token's profile sees its own sessions only", async () => {
  const alice = connect(gateway.url, { token: "secret-a" });
  const bob = connect("http://" + gateway.addr, { token: "secret-b" });
  try {
    assert.equal((await alice.opened()).profile, "alice");
    assert.equal((await bob.opened()).profile, "bob");
    const s = await alice.createSession({ title: "alice's" });
    assert.equal((await (await s.submit("hi alice")).result()).text, "hi alice");
    assert.deepEqual((await alice.sessions()).map((i) => i.title), ["alice's"]);
    assert.deepEqual(await bob.sessions(), []);
    await assert.rejects(bob.session(s.id).submit("not yours"),
      (err) => err instanceof RpcError && err.code === codes.SESSION_NOT_FOUND);
  } finally {
    alice.close();
    bob.close();
  }
});

test("a wrong or missing token closes the gateway object with AuthError", async () => {
  for (const token of ["wrong", undefined]) {
    const gw = connect(gateway.url, { token });
    const closed = nextEmit(gw, "closed");
    await assert.rejects(gw.createSession({ title: "x" }), (err) => err instanceof AuthError && err.status === 401);
    const c = await closed;
    assert.ok(c.error instanceof AuthError);
    assert.equal(gw.state, "closed");
    await assert.rejects(gw.opened(), AuthError);
  }
});
