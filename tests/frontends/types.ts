// Compiled (never run) by tests/ag_ui.rs: the TetherAgent's types
// (clients/typescript/ag-ui.d.ts) against @ag-ui/client's own.
import type { BaseEvent } from "@ag-ui/client";
import { TetherAgent } from "tether-client/ag-ui";

const agent = new TetherAgent({
  url: "http://127.0.0.1:7878/v1/ag-ui",
  headers: { authorization: "Bearer t" },
  threadId: "thread-1",
  lastEventId: "12.1.40.0",
  resumes: 3,
});
const id: string | undefined = agent.lastEventId;
const thread: string = agent.threadUrl();
const stopped: Promise<void> = agent.stop();
agent.addMessage({ id: "1", role: "user", content: "hello" });
const events = agent.connect({ threadId: "thread-1", runId: "r", messages: [], tools: [], context: [] });
events.subscribe((e: BaseEvent) => e.type);
void agent.runAgent();
void agent.connectAgent();
agent.abortRun();
void [id, thread, stopped];
