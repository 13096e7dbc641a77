//! `tether bench storm`: every client drops its connection at once while
//! events keep being appended, then all of them reconnect on new
//! connections and `session.resume` from their watermarks. Measures how
//! long the resume and the catch-up take, and checks that every client
//! ends holding each seq of its session exactly once.
//!
//! Gateway and generator run as in `fanout` (one pinned runtime each, real
//! WebSocket clients over loopback). The gateway side appends at a fixed
//! rate, independent of delivery, and publishes per session the latest seq
//! it emitted, so a client can tell what "caught up" means at the instant
//! it reconnected: holding every event produced before it came back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::Args;
use futures::{SinkExt, StreamExt};
use ractor::ActorRef;
use serde_json::{json, Value};
use tether_actors::session::SessionMsg;
use tether_protocol::SessionId;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::MissedTickBehavior;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use super::harness::{
    events, on_pinned_thread, peak_rss_kib, pinned_runtime, process_cpu_s, session_actor,
    start_gateway, thread_cpu_s, Ws,
};
use super::store::cpu_label;
use tether_gateway::AppState;

/// Thread name of the load generator's runtime (the gateway's CPU time is
/// the process's minus these threads').
const LOAD_THREADS: &str = "tether-load";

/// Read buffer of a generator client; event frames are a few hundred bytes.
const CLIENT_READ_BUFFER: usize = 8 * 1024;

/// Longest wait for any single frame or step; only bounds a stall.
const STALL: Duration = Duration::from_secs(60);

#[derive(Debug, Args, Clone)]
pub struct StormBench {
    /// WebSocket clients; client i attaches to session i mod --sessions.
    #[arg(long, default_value_t = 1000)]
    clients: usize,
    /// Sessions.
    #[arg(long, default_value_t = 250)]
    sessions: usize,
    /// Durable events appended per second, over all sessions, on a fixed
    /// schedule that does not wait for delivery.
    #[arg(long, default_value_t = 2_000)]
    rate: u64,
    /// Events per emission.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Payload size of each event in bytes.
    #[arg(long, default_value_t = 100)]
    payload_bytes: usize,
    /// Streaming before the drop, in ms.
    #[arg(long, default_value_t = 1000)]
    warmup_ms: u64,
    /// Time between the drop and the reconnects, in ms (events keep flowing).
    #[arg(long, default_value_t = 200)]
    down_ms: u64,
    /// Streaming after every client resumed, before appends stop, in ms.
    #[arg(long, default_value_t = 1000)]
    after_ms: u64,
    /// Listen backlog of the gateway's socket. 4096 is what `tether serve`
    /// uses; tokio's `TcpListener::bind` default is 128, and a storm of
    /// connects beyond it overflows the accept queue: the dropped SYNs are
    /// retried by the clients' kernels after 1 s.
    #[arg(long, default_value_t = 4096)]
    backlog: u32,
    /// CPU the gateway runs on.
    #[arg(long, default_value_t = 0)]
    server_cpu: usize,
    /// CPU the load generator (clients) runs on.
    #[arg(long, default_value_t = 1)]
    client_cpu: usize,
}

/// What the controller tells every client task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Stream,
    Drop,
    Reconnect,
}

/// What a client task tells the controller.
enum Ack {
    Dropped,
    CaughtUp,
}

/// The seqs one client holds, counted over both of its connections.
#[derive(Default)]
struct Held {
    /// `counts[seq]`: how many times that seq arrived.
    counts: Vec<u32>,
    /// Every seq in 1..=upto is held.
    upto: u64,
}

impl Held {
    fn add(&mut self, seq: u64) {
        let i = seq as usize;
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
        while self
            .counts
            .get(self.upto as usize + 1)
            .is_some_and(|c| *c > 0)
        {
            self.upto += 1;
        }
    }
}

/// Shared between the controller and the client tasks.
#[derive(Clone)]
struct Control {
    url: String,
    phase: watch::Receiver<Phase>,
    acks: mpsc::UnboundedSender<Ack>,
    /// Latest seq emitted per session, written by the gateway side.
    latest: Arc<Vec<AtomicU64>>,
    /// The last seq of every session, once appends stopped.
    finals: watch::Receiver<Option<Arc<Vec<u64>>>>,
}

struct ClientOutcome {
    session: usize,
    watermark: u64,
    /// Latest seq emitted when the client started reconnecting.
    target: u64,
    replayed: u64,
    resync: bool,
    reconnect_at: Instant,
    /// `gateway.ready` arrived on the new connection.
    ready_at: Instant,
    resumed_at: Instant,
    caught_up_at: Instant,
    held: Held,
}

pub fn run(b: StormBench) -> anyhow::Result<()> {
    if b.sessions == 0 || b.clients == 0 || b.rate == 0 || b.batch == 0 {
        bail!("--clients, --sessions, --rate and --batch must be positive");
    }
    let latest: Arc<Vec<AtomicU64>> =
        Arc::new((0..b.sessions).map(|_| AtomicU64::new(1)).collect());
    let (addr_tx, addr_rx) = oneshot::channel();
    let (ids_tx, ids_rx) = oneshot::channel::<Vec<SessionId>>();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (finals_tx, finals_rx) = oneshot::channel::<Vec<u64>>();
    let (done_tx, done_rx) = oneshot::channel::<()>();
    let sb = b.clone();
    let sc = latest.clone();
    let server = std::thread::spawn(move || {
        on_pinned_thread(sb.server_cpu, move || {
            serve(sb, sc, addr_tx, ids_rx, stop_rx, finals_tx, done_rx)
        })
    });
    let cb = b.clone();
    // Named so its CPU time can be told from the gateway's.
    let client = std::thread::Builder::new()
        .name(LOAD_THREADS.into())
        .spawn(move || -> anyhow::Result<Report> {
            let rt = pinned_runtime(LOAD_THREADS, cb.client_cpu, 1)?;
            rt.block_on(load(cb, latest, addr_rx, ids_tx, stop_tx, finals_rx))
        })?;
    let outcome = client
        .join()
        .map_err(|_| anyhow!("load generator panicked"));
    let _ = done_tx.send(());
    let server_cpu_s = server
        .join()
        .map_err(|_| anyhow!("server thread panicked"))?;
    let report = outcome??;
    server_cpu_s?;
    report.print(&b)
}

/// The gateway side: serve, drive every session at the fixed rate until
/// told to stop, then hand back each session's last seq.
fn serve(
    b: StormBench,
    latest: Arc<Vec<AtomicU64>>,
    addr_tx: oneshot::Sender<std::net::SocketAddr>,
    ids_rx: oneshot::Receiver<Vec<SessionId>>,
    stop_rx: oneshot::Receiver<()>,
    finals_tx: oneshot::Sender<Vec<u64>>,
    done_rx: oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    let rt = pinned_runtime("tether-gw", b.server_cpu, 1)?;
    rt.block_on(async move {
        let gw = start_gateway(tether_actors::GatewayConfig::default()).await?;
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind((std::net::Ipv4Addr::LOCALHOST, 0).into())?;
        let listener = socket.listen(b.backlog)?;
        let addr = listener.local_addr()?;
        let (_shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
        let app = AppState::new(gw.handle.ctx().clone(), shutdown_rx);
        tokio::spawn(tether_gateway::serve(listener, app, Default::default()));
        let _ = addr_tx.send(addr);
        let ids = ids_rx.await.context("load generator gave up")?;
        let (stop, stopped) = watch::channel(false);
        // Each session emits one batch per period; the sessions' ticks are
        // spread over the period so the appends do not come in waves.
        let period = Duration::from_secs_f64(b.sessions as f64 * b.batch as f64 / b.rate as f64);
        let start = tokio::time::Instant::now();
        let mut drivers = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            let actor = session_actor(&gw.handle, id).await?;
            let first = start + period.mul_f64(i as f64 / b.sessions as f64);
            drivers.push(tokio::spawn(drive_at_rate(
                actor,
                first,
                period,
                b.batch,
                b.payload_bytes,
                latest.clone(),
                i,
                stopped.clone(),
            )));
        }
        let _ = stop_rx.await;
        let _ = stop.send(true);
        let mut finals = Vec::new();
        for d in drivers {
            finals.push(d.await??);
        }
        let _ = finals_tx.send(finals);
        let _ = done_rx.await;
        gw.handle.shutdown(Duration::from_secs(5)).await;
        Ok(())
    })
}

/// Emits `batch` events every `period` until `stop`, publishing the
/// latest seq emitted after each emission, and returns the last seq once
/// all are committed. The schedule never waits for commits or delivery
/// (missed ticks are made up in a burst).
#[allow(clippy::too_many_arguments)]
async fn drive_at_rate(
    actor: ActorRef<SessionMsg>,
    first: tokio::time::Instant,
    period: Duration,
    batch: usize,
    bytes: usize,
    latest: Arc<Vec<AtomicU64>>,
    index: usize,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<u64> {
    let mut tick = tokio::time::interval_at(first, period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    // Seq 1 is `session.created`; nothing else but these events is durable.
    let mut seq: u64 = 1;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        actor.cast(SessionMsg::Emit {
            events: events(batch, bytes),
        })?;
        seq += batch as u64;
        if let Some(l) = latest.get(index) {
            l.store(seq, Ordering::Release);
        }
    }
    match actor
        .call(|reply| SessionMsg::Flush { reply }, Some(STALL))
        .await?
    {
        ractor::rpc::CallResult::Success(()) => Ok(seq),
        other => Err(anyhow!("flush failed: {other:?}")),
    }
}

/// The load generator: attach everyone, then run the storm.
async fn load(
    b: StormBench,
    latest: Arc<Vec<AtomicU64>>,
    addr_rx: oneshot::Receiver<std::net::SocketAddr>,
    ids_tx: oneshot::Sender<Vec<SessionId>>,
    stop_tx: oneshot::Sender<()>,
    finals_rx: oneshot::Receiver<Vec<u64>>,
) -> anyhow::Result<Report> {
    let addr = addr_rx.await?;
    let url = format!("ws://{addr}/ws");
    let mut ids: Vec<String> = Vec::new();
    let mut clients = Vec::new();
    for i in 0..b.clients {
        let session = i % b.sessions;
        let mut ws = connect_lean(&url).await?;
        let mut held = Held::default();
        if session == ids.len() {
            let r = call(
                &mut ws,
                &mut held,
                "session.create",
                json!({"attach": true}),
            )
            .await?;
            let id = r["session"]["session_id"]
                .as_str()
                .context("session id")?
                .to_string();
            ids.push(id);
        } else {
            let id = ids.get(session).context("session id")?;
            // From seq 1, so that every client must end holding 1..latest.
            let r = call(
                &mut ws,
                &mut held,
                "session.resume",
                json!({"session_id": id, "last_seen": 0, "omit_messages": true}),
            )
            .await?;
            add_replay(&r, &mut held)?;
        }
        clients.push((ws, session, held));
    }
    ids_tx
        .send(ids.iter().cloned().map(SessionId::from).collect())
        .map_err(|_| anyhow!("gateway side gone"))?;

    let (phase_tx, phase) = watch::channel(Phase::Stream);
    let (finals_set, finals) = watch::channel(None);
    let (acks, mut acks_rx) = mpsc::unbounded_channel();
    let ctl = Control {
        url,
        phase,
        acks,
        latest,
        finals,
    };
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|(ws, session, held)| {
            let id = ids.get(session).cloned().unwrap_or_default();
            tokio::spawn(client(ws, session, id, held, ctl.clone()))
        })
        .collect();
    drop(ctl);

    // The second half of the warm-up gives the gateway's CPU cost of the
    // streaming alone, to tell the storm's own cost apart.
    let half = Duration::from_millis(b.warmup_ms / 2);
    tokio::time::sleep(half).await;
    let steady_from = (process_cpu_s() - thread_cpu_s(LOAD_THREADS), Instant::now());
    tokio::time::sleep(half).await;
    let cpu_before = (process_cpu_s(), thread_cpu_s(LOAD_THREADS));
    let steady_server_cpu_per_s =
        (cpu_before.0 - cpu_before.1 - steady_from.0) / steady_from.1.elapsed().as_secs_f64();
    let dropped_at = Instant::now();
    phase_tx.send(Phase::Drop)?;
    wait_acks(&mut acks_rx, b.clients, |a| matches!(a, Ack::Dropped)).await?;
    let all_dropped_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(b.down_ms)).await;
    let reconnect_at = Instant::now();
    phase_tx.send(Phase::Reconnect)?;
    wait_acks(&mut acks_rx, b.clients, |a| matches!(a, Ack::CaughtUp)).await?;
    let all_caught_up_at = Instant::now();
    let cpu_after = (process_cpu_s(), thread_cpu_s(LOAD_THREADS));
    tokio::time::sleep(Duration::from_millis(b.after_ms)).await;
    let _ = stop_tx.send(());
    let last = tokio::time::timeout(STALL, finals_rx)
        .await
        .context("appends did not stop")??;
    finals_set.send(Some(Arc::new(last.clone())))?;
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await??);
    }
    let storm_cpu = cpu_after.0 - cpu_before.0;
    let storm_client_cpu = cpu_after.1 - cpu_before.1;
    Ok(Report {
        outcomes,
        finals: last,
        dropped_at,
        drop_spread: all_dropped_at - dropped_at,
        reconnect_at,
        all_caught_up_at,
        storm_server_cpu_s: storm_cpu - storm_client_cpu,
        steady_server_cpu_per_s,
        storm_client_cpu_s: storm_client_cpu,
        server_cpu_s: process_cpu_s() - thread_cpu_s(LOAD_THREADS),
    })
}

async fn wait_acks(
    rx: &mut mpsc::UnboundedReceiver<Ack>,
    n: usize,
    want: impl Fn(&Ack) -> bool,
) -> anyhow::Result<()> {
    let mut seen = 0;
    while seen < n {
        let ack = tokio::time::timeout(STALL, rx.recv())
            .await
            .context("clients stalled")?
            .context("a client task ended early")?;
        if want(&ack) {
            seen += 1;
        }
    }
    Ok(())
}

/// One client: stream, drop abruptly, reconnect, resume, catch up, and
/// read until the session's last seq.
async fn client(
    mut ws: Ws,
    session: usize,
    id: String,
    mut held: Held,
    mut ctl: Control,
) -> anyhow::Result<ClientOutcome> {
    loop {
        tokio::select! {
            biased;
            _ = ctl.phase.wait_for(|p| *p != Phase::Stream) => break,
            msg = ws.next() => record(msg, &mut held)?,
        }
    }
    let watermark = held.upto;
    // No close frame: the socket just goes away, as with a lost network.
    drop(ws);
    let _ = ctl.acks.send(Ack::Dropped);
    ctl.phase.wait_for(|p| *p == Phase::Reconnect).await?;

    let reconnect_at = Instant::now();
    let target = ctl
        .latest
        .get(session)
        .map(|c| c.load(Ordering::Acquire))
        .context("session index")?;
    let mut ws = tokio::time::timeout(STALL, connect_lean(&ctl.url))
        .await
        .context("reconnect stalled")??;
    let ready_at = Instant::now();
    let r = tokio::time::timeout(
        STALL,
        call(
            &mut ws,
            &mut held,
            "session.resume",
            json!({"session_id": id, "last_seen": watermark,
                "attach": true, "omit_messages": true}),
        ),
    )
    .await
    .context("resume stalled")??;
    let resumed_at = Instant::now();
    let resync = r["resync"].as_bool().unwrap_or(false);
    let replayed = add_replay(&r, &mut held)?;
    while held.upto < target {
        let msg = tokio::time::timeout(STALL, ws.next())
            .await
            .context("catch-up stalled")?;
        record(msg, &mut held)?;
    }
    let caught_up_at = Instant::now();
    let _ = ctl.acks.send(Ack::CaughtUp);

    loop {
        let last = ctl
            .finals
            .borrow_and_update()
            .as_ref()
            .and_then(|f| f.get(session).copied());
        if last.is_some_and(|l| held.upto >= l) {
            break;
        }
        tokio::select! {
            changed = ctl.finals.changed() => changed?,
            msg = tokio::time::timeout(STALL, ws.next()) => record(msg.context("stream stalled")?, &mut held)?,
        }
    }
    Ok(ClientOutcome {
        session,
        watermark,
        target,
        replayed,
        resync,
        reconnect_at,
        ready_at,
        resumed_at,
        caught_up_at,
        held,
    })
}

/// Connects like `harness::connect`, with a small read buffer: tungstenite
/// zeroes its whole read buffer (128 KiB by default) before every socket
/// read, which made the generator, not the gateway, the slow side of a
/// storm (a third of the generator's CPU in `perf`).
async fn connect_lean(url: &str) -> anyhow::Result<Ws> {
    let config = WebSocketConfig::default().read_buffer_size(CLIENT_READ_BUFFER);
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(url, Some(config), true).await?;
    ws.next().await.context("no ready frame")??;
    Ok(ws)
}

/// Counts the seq of an event frame; other frames are ignored.
fn record(
    msg: Option<Result<Message, tokio_tungstenite::tungstenite::Error>>,
    held: &mut Held,
) -> anyhow::Result<()> {
    let msg = msg.context("connection closed")??;
    if let Message::Text(t) = msg {
        if let Some(seq) = seq_of(&t) {
            held.add(seq);
        }
    }
    Ok(())
}

/// The `seq` of an event frame, read without a full JSON parse (the load
/// generator must not be the bottleneck). The gateway writes every event
/// frame with this head; a reply (whose result may hold replayed events
/// with their own `seq`) never starts with it.
fn seq_of(frame: &str) -> Option<u64> {
    const EVENT_HEAD: &str = r#"{"jsonrpc":"2.0","method":"event","params":"#;
    if !frame.starts_with(EVENT_HEAD) {
        return None;
    }
    let at = frame.find("\"seq\":")? + 6;
    let end = frame[at..]
        .find(|c: char| !c.is_ascii_digit())
        .map_or(frame.len(), |e| at + e);
    frame[at..end].parse().ok()
}

/// Sends a request and waits for its reply; events that arrive meanwhile
/// are counted (a creator's `session.created` may precede the reply).
async fn call(ws: &mut Ws, held: &mut Held, method: &str, params: Value) -> anyhow::Result<Value> {
    let frame = json!({"jsonrpc":"2.0","id":1,"method":method,"params":params});
    ws.send(Message::Text(frame.to_string().into())).await?;
    loop {
        let msg = tokio::time::timeout(STALL, ws.next())
            .await
            .context("reply stalled")?
            .context("closed")??;
        let Message::Text(t) = msg else { continue };
        if let Some(seq) = seq_of(&t) {
            held.add(seq);
            continue;
        }
        let v: Value = serde_json::from_str(&t)?;
        if v.get("id") == Some(&json!(1)) {
            if let Some(e) = v.get("error") {
                bail!("{method}: {e}");
            }
            return Ok(v["result"].clone());
        }
    }
}

/// Counts the events replayed in a resume result; how many there were.
fn add_replay(result: &Value, held: &mut Held) -> anyhow::Result<u64> {
    let Some(events) = result["events"].as_array() else {
        return Ok(0);
    };
    for e in events {
        held.add(e["seq"].as_u64().context("replayed event without seq")?);
    }
    Ok(events.len() as u64)
}

/// Everything measured, turned into the JSON line at the end.
struct Report {
    outcomes: Vec<ClientOutcome>,
    finals: Vec<u64>,
    dropped_at: Instant,
    drop_spread: Duration,
    reconnect_at: Instant,
    all_caught_up_at: Instant,
    storm_server_cpu_s: f64,
    /// Gateway CPU seconds per second while only streaming.
    steady_server_cpu_per_s: f64,
    storm_client_cpu_s: f64,
    server_cpu_s: f64,
}

/// Delivery over one client's two connections, checked against its
/// session's last seq.
#[derive(Default)]
struct Delivery {
    delivered: u64,
    expected: u64,
    gaps: u64,
    duplicates: u64,
    beyond: u64,
}

impl Delivery {
    fn add(&mut self, held: &Held, last: u64) {
        self.expected += last;
        for (seq, &c) in held.counts.iter().enumerate().skip(1) {
            if seq as u64 > last {
                self.beyond += u64::from(c);
            } else if c > 0 {
                self.delivered += 1;
                self.duplicates += u64::from(c - 1);
            }
        }
        let held_upto_last = held
            .counts
            .iter()
            .skip(1)
            .take(last as usize)
            .filter(|c| **c > 0);
        self.gaps += last - held_upto_last.count() as u64;
    }
}

impl Report {
    fn print(self, b: &StormBench) -> anyhow::Result<()> {
        let mut d = Delivery::default();
        let mut ready = Vec::new();
        let mut resume = Vec::new();
        let mut resume_rtt = Vec::new();
        let mut resume_from_drop = Vec::new();
        let mut caught_up = Vec::new();
        let mut caught_up_from_drop = Vec::new();
        let (mut missed, mut replayed, mut resyncs) = (0, 0, 0);
        for o in &self.outcomes {
            let last = self.finals.get(o.session).copied().unwrap_or(0);
            d.add(&o.held, last);
            missed += o.target.saturating_sub(o.watermark);
            replayed += o.replayed;
            resyncs += u64::from(o.resync);
            ready.push(o.ready_at - o.reconnect_at);
            resume.push(o.resumed_at - o.reconnect_at);
            resume_rtt.push(o.resumed_at - o.ready_at);
            resume_from_drop.push(o.resumed_at - self.dropped_at);
            caught_up.push(o.caught_up_at - o.reconnect_at);
            caught_up_from_drop.push(o.caught_up_at - self.dropped_at);
        }
        let ms = |d: Duration| (d.as_secs_f64() * 1e6).round() / 1e3;
        let report = json!({
            "scenario": "storm",
            "clients": b.clients,
            "sessions": b.sessions,
            "rate_events_per_s": b.rate,
            "batch": b.batch,
            "payload_bytes": b.payload_bytes,
            "down_ms": b.down_ms,
            "backlog": b.backlog,
            "server_cpu": cpu_label(b.server_cpu),
            "client_cpu": cpu_label(b.client_cpu),
            "drop_spread_ms": ms(self.drop_spread),
            "missed_events": missed,
            "replayed_events": replayed,
            "resyncs": resyncs,
            "ready_ms": summary(ready),
            "resume_ms": summary(resume),
            // `session.resume` sent on the open socket until its answer,
            // missed events included: the replay alone, without the TCP and
            // WebSocket handshakes of 1000 clients connecting at once.
            "resume_rtt_ms": summary(resume_rtt),
            "caught_up_ms": summary(caught_up),
            "resume_from_drop_ms": summary(resume_from_drop),
            "caught_up_from_drop_ms": summary(caught_up_from_drop),
            "all_caught_up_from_reconnect_ms": ms(self.all_caught_up_at - self.reconnect_at),
            "all_caught_up_from_drop_ms": ms(self.all_caught_up_at - self.dropped_at),
            "delivered": d.delivered,
            "expected": d.expected,
            "gaps": d.gaps,
            "duplicates": d.duplicates,
            "beyond_last": d.beyond,
            "storm_server_cpu_s": round3(self.storm_server_cpu_s),
            "steady_server_cpu_per_s": round3(self.steady_server_cpu_per_s),
            // What the storm cost the gateway beyond the streaming, per client.
            "server_cpu_ms_per_reconnect": round3(
                (self.storm_server_cpu_s
                    - self.steady_server_cpu_per_s
                        * (self.all_caught_up_at - self.dropped_at).as_secs_f64())
                    * 1000.0
                    / self.outcomes.len().max(1) as f64
            ),
            "storm_client_cpu_s": round3(self.storm_client_cpu_s),
            "server_cpu_s": round3(self.server_cpu_s),
            "peak_rss_kib": peak_rss_kib(),
        });
        println!("{report}");
        if d.delivered != d.expected
            || d.gaps > 0
            || d.duplicates > 0
            || d.beyond > 0
            || resyncs > 0
        {
            bail!(
                "delivery was not exact: {}/{}, {} gaps, {} duplicates, {} beyond the last seq, {resyncs} resyncs",
                d.delivered, d.expected, d.gaps, d.duplicates, d.beyond
            );
        }
        Ok(())
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// p50/p99/max in ms.
fn summary(mut v: Vec<Duration>) -> Value {
    v.sort();
    let at = |q: f64| -> Option<f64> {
        if v.is_empty() {
            return None;
        }
        let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
        v.get(i).map(|d| round3(d.as_secs_f64() * 1000.0))
    };
    json!({"p50": at(0.50), "p99": at(0.99), "max": at(1.0)})
}
