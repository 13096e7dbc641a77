// Types of "tether-client/ag-ui" (src/ag-ui.js).

import { HttpAgent, type HttpAgentConfig, type BaseEvent, type RunAgentInput } from "@ag-ui/client";
import type { Observable } from "rxjs";

export interface TetherAgentConfig extends HttpAgentConfig {
  /** Where `connect()` continues from; kept by the agent as events arrive. */
  lastEventId?: string;
  /** How often a run continues after its stream broke (default 5). */
  resumes?: number;
}

/**
 * An AG-UI HttpAgent for tether's AG-UI routes: its runs survive a dropped
 * connection, `connect()` joins a run already going (from `lastEventId`,
 * or from the run's start), and `abortRun()` stops the run for every
 * client of the thread.
 */
export declare class TetherAgent extends HttpAgent {
  constructor(config: TetherAgentConfig);
  /** The SSE id of the last event received: a resume continues after it. */
  lastEventId: string | undefined;
  resumes: number;
  /** `…/v1/ag-ui/threads/{threadId}`. */
  threadUrl(): string;
  run(input: RunAgentInput): Observable<BaseEvent>;
  connect(input: RunAgentInput): Observable<BaseEvent>;
  /** Stops the thread's running run, whichever client started it. */
  stop(): Promise<void>;
}
