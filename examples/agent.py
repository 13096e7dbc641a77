#!/usr/bin/env python3
"""An agent for tether's `command` engine: the contract is docs/ENGINES.md."""
import json, os, sys, time

turn = json.load(sys.stdin)  # {"history": [...], "prompt": "...", "config": {...}}
history, prompt = turn["history"], turn["prompt"]
if os.environ.get("TETHER_OP") == "compress":  # the whole of stdout is the summary
    print(f"{len(history)} messages; the user said: " + " / ".join(
        m["text"] for m in history if m["role"] == "user"))
    sys.exit(0)
if prompt == "fail":  # a non-zero exit fails the turn with the end of stderr
    print("agent.py: the model is on fire", file=sys.stderr)
    sys.exit(3)
if prompt == "sleep":  # runs until interrupted (SIGTERM to its process group)
    print(f"sleeping as pid {os.getpid()}", flush=True)
    time.sleep(3600)
if prompt == "tool":  # a JSON line with an event `type` is that event
    call = {"tool_id": "t1", "name": "clock"}
    print(json.dumps({"type": "tool.start", **call, "args": {}}), flush=True)
    print(json.dumps({"type": "tool.complete", **call, "result": time.strftime("%H:%M"),
                      "is_error": False}), flush=True)
for line in ["Hello from agent.py.", f"You said: {prompt}",  # any other line is text
             f"Turn {os.environ['TETHER_TURN_ID']}, {len(history)} messages before it."]:
    print(line, flush=True)
