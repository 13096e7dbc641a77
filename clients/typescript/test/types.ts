// Compiled by `tsc --noEmit` only (never run): the declarations in
// index.d.ts must describe the API as docs/CLIENTS.md uses it.
import { connect, codes, RpcError, UnreachableError, type StreamItem, type TurnResult } from "tether-client";

export async function usage(): Promise<void> {
  const gw = connect("ws://127.0.0.1:7878/ws", { token: "secret", backoff: { maxMs: 2000 }, connectTimeoutMs: 30000 });
  const off = gw.on("state", (s) => console.log(s.state, s.delay ?? "", s.code ?? ""));
  gw.on("reset", (r) => {
    if (r.reason === "epoch") {
      console.log("store changed", r.previousEpoch, "->", r.epoch);
    } else {
      console.log("session", r.sessionId, "went back from", r.upto, "to", r.after);
    }
  });
  const session = await gw.createSession({ title: "demo" });
  const turn = await session.submit("hello");
  const again = await session.submit("hello", { multitask: "interrupt", dropQueued: true, dedupeKey: "k" });
  const duplicate: boolean = again.duplicate;
  let text = "";
  for await (const d of turn.deltas()) {
    text += d.text;
  }
  const result: TurnResult = await turn.result();
  if (result.text !== text || result.status !== "complete") {
    throw new Error(result.failure_reason);
  }
  for await (const ev of session.events({ since: 0 })) {
    const item: StreamItem = ev;
    if (item.type === "reset") {
      continue;
    }
    if ("seq" in item && item.type === "message.complete") {
      break;
    }
  }
  try {
    await gw.session("s_missing").submit("x");
  } catch (err) {
    if (err instanceof RpcError && err.code === codes.SESSION_NOT_FOUND) {
      console.log("no such session");
    } else if (err instanceof UnreachableError) {
      console.log("no gateway at", err.url, "after", err.attempts, "attempts:", err.last);
    }
  }
  const all = await gw.sessions({ includeClosed: true });
  console.log(all.map((s) => s.title), session.latestSeq, gw.ready?.profile);
  off();
  gw.close();
}
