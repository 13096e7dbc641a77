// Presence through the library: each object describes itself on every
// connection, a session's `presence()` lists who is attached, and
// `onPresence` hears joins and leaves (PROTOCOL Part 4, "Presence").

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { connect } from "../src/index.js";
import { Gateway, WAIT_MS } from "./harness.js";

let gateway;

before(async () => {
  gateway = await Gateway.start();
});

after(async () => {
  await gateway.stop();
});

// Resolves with the first change `pick` accepts.
function change(session, pick) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no presence change in time")), WAIT_MS);
    const stop = session.onPresence((c) => {
      if (pick(c)) {
        clearTimeout(timer);
        stop();
        resolve(c);
      }
    });
  });
}

test("two clients see each other join and leave, and the snapshot lists both", async () => {
  const ann = connect(gateway.url, { client: { name: "ann", device: "laptop", app: "tests" } });
  const bob = connect(gateway.url, { client: { name: "bob", meta: { seat: 2 } } });
  try {
    const s = await ann.createSession({ title: "presence" });
    const bobReady = await bob.opened();
    const bobJoined = change(s, (c) => c.type === "joined" && c.peers.some((p) => p.peer_id === bobReady.peer_id));
    const bobs = bob.session(s.id);
    const annSeen = change(bobs, (c) => c.type === "joined");
    const joined = await bobJoined;
    const entry = joined.peers.find((p) => p.peer_id === bobReady.peer_id);
    assert.equal(entry.client.name, "bob");
    assert.deepEqual(entry.client.meta, { seat: 2 });
    assert.match(entry.client.instance, /^i-/, "the library names its instance");
    await annSeen;

    const peers = await bobs.presence();
    assert.deepEqual(peers.map((p) => p.client && p.client.name).sort(), ["ann", "bob"]);
    assert.ok(peers.every((p) => p.profile === bobReady.profile && p.transport === "ws"));

    const left = change(s, (c) => c.type === "left");
    bob.close();
    const gone = await left;
    assert.deepEqual(gone.peers.map((p) => p.peer_id), [bobReady.peer_id]);
    assert.equal((await s.presence()).length, 1);
  } finally {
    ann.close();
    bob.close();
  }
});
