//! `GET /v1/ag-ui/capabilities`: what tether's AG-UI endpoint does, as
//! AG-UI's `AgentCapabilities`.

use serde_json::{json, Value};

pub fn capabilities() -> Value {
    json!({
        "identity": {
            "name": "tether",
            "type": "tether",
            "description": "a tether session gateway: each thread is a tether session",
            "version": env!("CARGO_PKG_VERSION"),
        },
        // Resumable: every event has an SSE id; GET
        // /v1/ag-ui/threads/{threadId}/events continues from it.
        "transport": {"streaming": true, "websocket": false, "httpBinary": false, "resumable": true},
        // The compute host owns the tools; the client's are not run.
        "tools": {"supported": true, "clientProvided": false},
        "state": {"snapshots": true, "deltas": false, "persistentState": true},
        "reasoning": {"supported": true, "streaming": true},
        "humanInTheLoop": {"supported": false, "interrupts": false},
    })
}
