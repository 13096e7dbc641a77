//! The three servers behind one face: rooms to subscribe to, a way to come
//! back after a drop, and a publisher. Scenarios are written against this,
//! so every figure is measured the same way on every target.

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use super::conn::{Conn, Event};
use super::publish::{self, Schedule};
use super::tally::Shared;
use super::{limit, socketio, tether, TargetKind};

/// A server ready for clients: its rooms exist.
pub struct Target {
    pub kind: TargetKind,
    url: String,
    /// tether's session ids, or the baselines' room names.
    pub rooms: Vec<String>,
    /// tether: the connection that creates sessions and submits prompts.
    control: Option<Mutex<Conn>>,
}

/// Where a client was when it dropped: what it presents to come back.
#[derive(Debug, Clone)]
pub enum Watermark {
    /// The last durable `seq` held (events arrive in order, so every one
    /// up to it is held).
    Tether(u64),
    /// The private session id and the last offset received.
    Socketio { pid: String, offset: Option<String> },
    /// Nothing: the limit has no recovery.
    Limit,
}

/// Connections opened at once: more would overflow the servers' listen
/// backlogs and turn into SYN retransmits, a second each.
const CONNECT_CONCURRENCY: usize = 128;

/// A subscribed client and its tally.
pub struct Client {
    pub room: usize,
    pub sub: Subscribed,
    pub tally: Shared,
}

/// A subscribed connection.
pub struct Subscribed {
    pub conn: Conn,
    /// Socket.IO's private session id.
    pub pid: Option<String>,
    /// The server replayed what the client missed (a resubscription).
    pub recovered: bool,
}

impl Target {
    /// Connects and creates `rooms` rooms (sessions on tether).
    pub async fn prepare(kind: TargetKind, url: &str, rooms: usize) -> anyhow::Result<Target> {
        let (control, rooms) = match kind {
            TargetKind::Tether => {
                let mut ctl = tether::connect(url).await?;
                let ids = tether::create_sessions(&mut ctl, rooms).await?;
                (Some(Mutex::new(ctl)), ids)
            }
            TargetKind::Socketio => {
                socketio::check_url(url)?;
                (None, (0..rooms).map(|k| format!("r{k}")).collect())
            }
            TargetKind::Limit => (None, (0..rooms).map(|k| format!("r{k}")).collect()),
        };
        Ok(Target {
            kind,
            url: url.to_owned(),
            rooms,
            control,
        })
    }

    /// The server's WebSocket URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn room(&self, k: usize) -> anyhow::Result<&str> {
        self.rooms
            .get(k)
            .map(String::as_str)
            .context("room index out of range")
    }

    /// Opens a connection subscribed to room `k`, from its beginning (on
    /// tether the replay from seq 1 goes to `on_event`).
    pub async fn subscribe(
        &self,
        k: usize,
        on_event: &mut impl FnMut(Event),
    ) -> anyhow::Result<Subscribed> {
        let first = match self.kind {
            TargetKind::Tether => Watermark::Tether(0),
            TargetKind::Socketio => Watermark::Socketio {
                pid: String::new(),
                offset: None,
            },
            TargetKind::Limit => Watermark::Limit,
        };
        self.resubscribe(k, &first, on_event).await
    }

    /// Subscribes `clients` clients, client `i` to room `i mod rooms`, each
    /// with a fresh tally that holds what its subscription replayed.
    pub async fn subscribe_all(&self, clients: usize) -> anyhow::Result<Vec<Client>> {
        let rooms = self.rooms.len().max(1);
        futures::stream::iter(0..clients)
            .map(|i| async move {
                let tally = Shared::default();
                let room = i % rooms;
                let record = &mut |e| tally.lock().record(e, super::conn::unix_micros());
                let sub = self.subscribe(room, record).await?;
                anyhow::Ok(Client { room, sub, tally })
            })
            .buffer_unordered(CONNECT_CONCURRENCY)
            .try_collect()
            .await
    }

    /// Opens a new connection to room `k` and presents `mark`; what the
    /// server replays goes to `on_event`.
    pub async fn resubscribe(
        &self,
        k: usize,
        mark: &Watermark,
        on_event: &mut impl FnMut(Event),
    ) -> anyhow::Result<Subscribed> {
        let room = self.room(k)?;
        match mark {
            Watermark::Tether(last_seen) => {
                let mut conn = tether::connect(&self.url).await?;
                let replayed = tether::attach(&mut conn, room, *last_seen, on_event).await?;
                Ok(Subscribed {
                    conn,
                    pid: None,
                    recovered: *last_seen > 0 && replayed,
                })
            }
            Watermark::Socketio { pid, offset } => {
                let previous = offset.as_deref().map(|o| (pid.as_str(), o));
                let mut c = socketio::connect(&self.url, previous, on_event).await?;
                if !c.recovered {
                    socketio::join(&mut c.conn, room, on_event).await?;
                }
                Ok(Subscribed {
                    conn: c.conn,
                    pid: Some(c.pid),
                    recovered: c.recovered,
                })
            }
            Watermark::Limit => {
                let mut conn = Conn::open(TargetKind::Limit, &self.url).await?;
                limit::join(&mut conn, room, on_event).await?;
                Ok(Subscribed {
                    conn,
                    pid: None,
                    recovered: false,
                })
            }
        }
    }

    /// Starts publishing `sched` to every room. On tether this returns
    /// once every session's `/flood` turn is accepted and there is nothing
    /// to wait for; on the baselines it returns the publisher's task.
    pub async fn publish(
        &self,
        sched: &Schedule,
    ) -> anyhow::Result<Option<JoinHandle<anyhow::Result<()>>>> {
        let kind = self.kind;
        match kind {
            TargetKind::Tether => {
                let mut ctl = self
                    .control
                    .as_ref()
                    .context("no control connection")?
                    .lock()
                    .await;
                tether::flood(&mut ctl, &self.rooms, sched).await?;
                Ok(None)
            }
            TargetKind::Socketio | TargetKind::Limit => {
                let conn = match kind {
                    TargetKind::Socketio => {
                        socketio::connect(&self.url, None, &mut |_| {}).await?.conn
                    }
                    _ => Conn::open(kind, &self.url).await?,
                };
                let rooms = self.rooms.clone();
                let sched = sched.clone();
                Ok(Some(tokio::spawn(async move {
                    publish::run(kind, conn, &rooms, &sched).await
                })))
            }
        }
    }
}
