//! `tether bench writer`: committed events per second through the
//! StoreWriter actor on its own (no sessions, no peers). Appends come from
//! a stand-in for sessions that keeps a few appends in flight per session,
//! as live sessions do.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use clap::Args;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::json;
use tether_actors::event::EventRecord;
use tether_actors::session::SessionMsg;
use tether_actors::store_writer::StoreWriterMsg;
use tether_actors::GatewayConfig;
use tether_protocol::{now_ms, SessionId};
use tether_store::{NewSession, SessionPatch};
use tokio::sync::oneshot;

use super::harness::{
    events, on_pinned_thread, peak_rss_kib, pinned_runtime, process_cpu_s, start_gateway_on,
};
use super::store::cpu_label;

#[derive(Debug, Args)]
pub struct WriterBench {
    /// Sessions appending at once.
    #[arg(long, default_value_t = 100)]
    sessions: usize,
    /// Events per append.
    #[arg(long, default_value_t = 50)]
    append_events: usize,
    /// Events per session (rounded down to whole appends).
    #[arg(long, default_value_t = 10_000)]
    events: usize,
    /// Appends in flight per session.
    #[arg(long, default_value_t = 2)]
    in_flight: usize,
    /// Payload size of each event in bytes.
    #[arg(long, default_value_t = 100)]
    payload_bytes: usize,
    /// CPU the gateway runs on.
    #[arg(long, default_value_t = 0)]
    server_cpu: usize,
    /// Run on PostgreSQL: a database of the bench's own, created (and
    /// dropped) on the server this URL names; its user must be allowed to
    /// create databases. Without it, SQLite in a temporary directory.
    #[arg(long, value_name = "SERVER_URL")]
    postgres: Option<String>,
}

/// Plays the sessions: sends appends, counts commits, sends more.
struct Sessions;

struct SessionsState {
    writer: ActorRef<StoreWriterMsg>,
    ids: Vec<SessionId>,
    next_seq: Vec<u64>,
    remaining: Vec<usize>,
    index: HashMap<u64, usize>,
    append_events: usize,
    payload_bytes: usize,
    in_flight: usize,
    committed: u64,
    target: u64,
    done: Option<oneshot::Sender<()>>,
}

impl Actor for Sessions {
    type Msg = SessionMsg;
    type State = SessionsState;
    type Arguments = SessionsState;

    async fn pre_start(
        &self,
        _: ActorRef<SessionMsg>,
        s: SessionsState,
    ) -> Result<SessionsState, ActorProcessingErr> {
        Ok(s)
    }

    async fn post_start(
        &self,
        myself: ActorRef<SessionMsg>,
        s: &mut SessionsState,
    ) -> Result<(), ActorProcessingErr> {
        for i in 0..s.ids.len() {
            for _ in 0..s.in_flight.min(s.remaining[i]) {
                s.send(&myself, i)?;
            }
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<SessionMsg>,
        msg: SessionMsg,
        s: &mut SessionsState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            // `gen` carries the session index: the writer echoes it back.
            SessionMsg::Committed { gen, .. } => {
                let i = s.index.get(&gen).copied().ok_or("unknown session")?;
                s.committed += s.append_events as u64;
                if s.remaining[i] > 0 {
                    s.send(&myself, i)?;
                }
                if s.committed >= s.target {
                    if let Some(done) = s.done.take() {
                        let _ = done.send(());
                    }
                }
            }
            SessionMsg::AppendFailed { code, .. } => {
                return Err(format!("append failed: {code}").into())
            }
            _ => {}
        }
        Ok(())
    }
}

impl SessionsState {
    fn send(&mut self, myself: &ActorRef<SessionMsg>, i: usize) -> Result<(), ActorProcessingErr> {
        self.remaining[i] -= 1;
        let rows = events(self.append_events, self.payload_bytes)
            .into_iter()
            .map(|mut rec: EventRecord| {
                rec.seq = Some(self.next_seq[i]);
                self.next_seq[i] += 1;
                rec.to_row()
            })
            .collect();
        self.writer.cast(StoreWriterMsg::Append {
            session_id: self.ids[i].clone(),
            gen: i as u64,
            events: rows,
            patch: SessionPatch {
                updated_at_ms: Some(now_ms()),
                ..SessionPatch::default()
            },
            notify: myself.clone(),
        })?;
        Ok(())
    }
}

pub fn run(b: WriterBench) -> anyhow::Result<()> {
    let cpu = b.server_cpu;
    on_pinned_thread(cpu, move || {
        let rt = pinned_runtime("tether-gw", cpu, 1)?;
        rt.block_on(async move {
            let gw = start_gateway_on(GatewayConfig::default(), b.postgres.as_deref()).await?;
            let writer = gw
                .handle
                .ctx()
                .writer()
                .ok_or_else(|| anyhow!("no writer"))?;
            let mut ids = Vec::new();
            for _ in 0..b.sessions {
                let id = SessionId::new();
                let session = NewSession {
                    id: id.clone(),
                    profile: "default".into(),
                    title: String::new(),
                    parent_session_id: None,
                    kind: "chat".into(),
                    close_on_disconnect: false,
                    engine_pin: None,
                    follow_profile_config: false,
                    created_at_ms: now_ms(),
                    message_count: 0,
                };
                let r = writer
                    .call(
                        |reply| StoreWriterMsg::Create {
                            session: Box::new(session),
                            events: Vec::new(),
                            reply,
                        },
                        None,
                    )
                    .await?;
                if !matches!(r, ractor::rpc::CallResult::Success(Ok(()))) {
                    return Err(anyhow!("create failed"));
                }
                ids.push(id);
            }
            let (done_tx, done_rx) = oneshot::channel();
            let appends = (b.events / b.append_events.max(1)).max(1);
            let target = (b.sessions * appends * b.append_events) as u64;
            let state = SessionsState {
                writer,
                next_seq: vec![1; b.sessions],
                remaining: vec![appends; b.sessions],
                index: (0..b.sessions).map(|i| (i as u64, i)).collect(),
                ids,
                append_events: b.append_events,
                payload_bytes: b.payload_bytes,
                in_flight: b.in_flight,
                committed: 0,
                target,
                done: Some(done_tx),
            };
            let cpu0 = process_cpu_s();
            let t0 = Instant::now();
            let (actor, _) = Actor::spawn(None, Sessions, state).await?;
            tokio::time::timeout(Duration::from_secs(300), done_rx).await??;
            let secs = t0.elapsed().as_secs_f64();
            let cpu = process_cpu_s() - cpu0;
            let report = json!({
                "scenario": "writer",
                "backend": if b.postgres.is_some() { "postgres" } else { "sqlite" },
                "sessions": b.sessions,
                "append_events": b.append_events,
                "appends_per_session": appends,
                "in_flight": b.in_flight,
                "payload_bytes": b.payload_bytes,
                "server_cpu": cpu_label(b.server_cpu),
                "seconds": secs,
                "committed_events_per_s": (target as f64 / secs).round(),
                "cpu_seconds": cpu,
                "peak_rss_kib": peak_rss_kib(),
            });
            println!("{report}");
            actor.stop(None);
            gw.handle.shutdown(Duration::from_secs(5)).await;
            Ok(())
        })
    })
}
