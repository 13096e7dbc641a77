// A burst of reads past the gateway's rate limit (4029, PROTOCOL 1.10): the
// library asks again after the wait the gateway names, so the application
// sees every answer and no refusal.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { connect } from "../src/index.js";
import { Gateway } from "./harness.js";

let gateway;

before(async () => {
  gateway = await Gateway.start({ args: ["--rate-limit-rps", "20"] });
});

after(async () => {
  await gateway.stop();
});

test("reads refused for the rate limit are asked again", async () => {
  const gw = connect(gateway.url);
  try {
    await gw.opened();
    // 60 at once against a burst of 40.
    const answers = await Promise.all(Array.from({ length: 60 }, () => gw.call("session.events.stats")));
    assert.equal(answers.length, 60);
    assert.ok(answers.every((a) => typeof a.sessions_live === "number"));
  } finally {
    gw.close();
  }
});
