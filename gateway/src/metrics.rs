//! `GET /metrics`: the gateway's counters for Prometheus (docs/METRICS.md).
//!
//! The numbers are kept by the actors (`tether_actors::metrics`); this file
//! names them and writes them out ([`text`]). Only the parked-session count
//! is computed per scrape, from the store (sessions not closed minus those
//! live here), because parked sessions have no actor that could count them.
//!
//! Access is that of `/ws` and `/rpc` (the `crate::auth` middleware): with
//! tokens, any profile's token; without, loopback only. Not exempt like the
//! probes: the counts are process-wide (every profile's sessions), and a
//! reverse proxy on the same host makes every client look like loopback.

mod text;

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use tether_actors::metrics::{Metrics, ReplayKind, Transport};
use tracing::warn;

use crate::server::AppState;
use text::{Kind, Text};

/// `GET /metrics`.
pub async fn metrics(State(app): State<AppState>) -> Response {
    let m = &app.ctx.metrics;
    let live = m.sessions_live.get();
    let parked = match app.ctx.reader.count_open_sessions().await {
        // Read one after the other: a session created in between may count
        // as parked for one scrape; never below zero.
        Ok(open) => Some((i64::try_from(open).unwrap_or(i64::MAX) - live).max(0)),
        Err(e) => {
            warn!(error = %e, "cannot count sessions for /metrics; tether_sessions_parked left out");
            None
        }
    };
    let body = encode(m, app.ctx.hosts_up(), parked);
    let mut resp = body.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(text::CONTENT_TYPE),
    );
    resp
}

/// Every family, in the order of docs/METRICS.md: a flat table, in one
/// function per section of that page.
fn encode(m: &Metrics, hosts_up: usize, parked: Option<i64>) -> String {
    let mut t = Text::default();
    capacity(&mut t, m, hosts_up, parked);
    traffic(&mut t, m);
    turns(&mut t, m);
    host_failures(&mut t, m);
    store(&mut t, m);
    replays(&mut t, m);
    t.finish()
}

/// Connections, sessions, host slots.
fn capacity(t: &mut Text, m: &Metrics, hosts_up: usize, parked: Option<i64>) {
    let name = "tether_connections_open";
    t.family(
        name,
        Kind::Gauge,
        "Client connections open: WebSockets, SSE streams, POST /rpc requests being answered.",
    );
    for transport in Transport::ALL {
        let open = m.connection_gauge(transport).get();
        t.sample(name, &[("transport", transport.label())], open);
    }
    t.single(
        "tether_sessions_live",
        Kind::Gauge,
        "Sessions with a live actor in this gateway.",
        m.sessions_live.get(),
    );
    if let Some(parked) = parked {
        t.single(
            "tether_sessions_parked",
            Kind::Gauge,
            "Sessions in the store that are neither closed nor live here.",
            parked,
        );
    }
    t.single(
        "tether_hosts_up",
        Kind::Gauge,
        "Compute-host slots that can take work now or once they have started.",
        hosts_up,
    );
    t.single(
        "tether_hosts_ready",
        Kind::Gauge,
        "Compute-host slots whose host said hello and takes work now.",
        m.hosts_ready.get(),
    );
}

/// Events written and frames delivered, and what the outboxes did.
fn traffic(t: &mut Text, m: &Metrics) {
    let outbox = m.outbox.snapshot();
    t.counters(&[
        (
            "tether_events_appended_total",
            "Durable events committed to the store.",
            m.events_appended.get(),
        ),
        (
            "tether_deliveries_total",
            "Event frames handed to client connections (one per peer per frame; replies not counted).",
            m.outbox.deliveries(),
        ),
        (
            "tether_outbox_coalesced_total",
            "Deltas joined to the delta queued before them in a pressured outbox.",
            outbox.coalesced,
        ),
        (
            "tether_outbox_dropped_total",
            "Transient frames dropped because a peer's outbox was full.",
            outbox.dropped,
        ),
        (
            "tether_slow_consumer_closes_total",
            "Peers closed with 1013 because what waited for them (events, replies) was over the outbox bound.",
            outbox.slow_consumer_closes,
        ),
    ]);
}

fn turns(t: &mut Text, m: &Metrics) {
    let name = "tether_turns_total";
    t.family(
        name,
        Kind::Counter,
        "Turns ended (message.complete written), by status and failure_reason.",
    );
    for (status, reason, n) in m.turns.snapshot() {
        match reason {
            None => t.sample(name, &[("status", status)], n),
            Some(r) => t.sample(name, &[("status", status), ("failure_reason", r)], n),
        };
    }
    t.histogram(
        "tether_turn_duration_seconds",
        "Turns that ran here, from their start (acceptance, or leaving the queue) to message.complete.",
        &m.turn_duration.snapshot(),
    );
}

/// Host restarts and rests, and control answers that came late.
fn host_failures(t: &mut Text, m: &Metrics) {
    t.counters(&[
        (
            "tether_host_restarts_total",
            "Compute-host processes restarted after they died.",
            m.host_restarts.get(),
        ),
        (
            "tether_host_rests_total",
            "Times a compute-host slot exceeded its restart intensity and began to rest.",
            m.host_rests.get(),
        ),
        (
            "tether_late_acks_adopted_total",
            "Control answers that came after their wait and were delivered by the late handler.",
            m.late_acks_adopted.get(),
        ),
        (
            "tether_late_acks_expired_total",
            "Late handlers whose TTL ran out before their answer came.",
            m.late_acks_expired.get(),
        ),
        (
            "tether_late_acks_evicted_total",
            "Late handlers evicted to stay within --late-ack-cap.",
            m.late_acks_evicted.get(),
        ),
    ]);
}

fn store(t: &mut Text, m: &Metrics) {
    t.histogram(
        "tether_store_commit_duration_seconds",
        "Group commits of the store writer (one transaction each).",
        &m.store_commits.snapshot(),
    );
    t.single(
        "tether_store_write_errors_total",
        Kind::Counter,
        "Store writes that failed for a storage reason (full, I/O, unavailable).",
        m.store_write_errors.get(),
    );
    t.single(
        "tether_store_writable",
        Kind::Gauge,
        "1 unless the latest commit that touched the store failed for a storage reason.",
        u8::from(m.store_writable()),
    );
}

fn replays(t: &mut Text, m: &Metrics) {
    let name = "tether_replay_requests_total";
    t.family(
        name,
        Kind::Counter,
        "Replays answered: session.resume with last_seen (SSE opens with Last-Event-ID included) and session.events.since.",
    );
    for kind in ReplayKind::ALL {
        let n = m.replay_requests[kind as usize].get();
        t.sample(name, &[("method", kind.label())], n);
    }
    let name = "tether_replayed_events_total";
    t.family(name, Kind::Counter, "Events returned by those replays.");
    for kind in ReplayKind::ALL {
        let n = m.replayed_events[kind as usize].get();
        t.sample(name, &[("method", kind.label())], n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every family has its `# TYPE`, and every sample belongs to the
    /// family declared last (a histogram's by its suffixes).
    #[test]
    fn every_sample_follows_its_type_line() {
        let m = Metrics::default();
        let out = encode(&m, 2, Some(0));
        let mut family = String::new();
        let mut families = 0;
        for line in out.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                family = rest.split(' ').next().unwrap_or_default().to_string();
                families += 1;
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|b| *b == family))
                .unwrap_or(name);
            assert_eq!(base, family, "{line}");
        }
        assert_eq!(families, 22);
    }
}
