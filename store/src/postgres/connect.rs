//! Connections to the server: what the URL says, what every connection is set to, and the
//! writer's lock.
//!
//! # The writer's lock
//!
//! Unless its gateways run as the nodes of a cluster (below), a database belongs to one
//! gateway, like a data directory. The writer connection holds a
//! session-level advisory lock for as long as it lives, and writes nothing on a connection that
//! does not hold it. Putting the lock on the writer's own connection (not on a side connection)
//! is what makes two things true at once:
//!
//! - a second gateway cannot write while the first one's writer is connected, and it learns so
//!   at start (`Held`, exit 64);
//! - a new writer connection of this gateway (after a lost connection or a restarted StoreWriter
//!   actor) can only start once the backend of the old one is gone, so whatever the old
//!   connection was committing has finished one way or the other before the new one reads a
//!   single `latest_seq`. That is what lets the writer resolve a commit in doubt by reading.
//!
//! An old connection of this very process that still holds the lock (the server has not yet
//! noticed that its client went away) is terminated. So is one of a tether process on this
//! same host that no longer exists (a gateway killed with `kill -9` and started again: its
//! backend may outlive it by a moment). A live gateway's connection never is.
//!
//! # A cluster node's writer (issue 19)
//!
//! A node of a cluster (`cluster/`) must share the database with the other nodes, so its writer
//! takes the gateway key in *shared* mode (the nodes coexist; a single gateway, which wants it
//! exclusive, is kept out, and keeps them out) and, exclusively, a key of its own derived from
//! its node id: that second lock keeps the property above (a new writer connection of this
//! node starts only once the old one's backend is gone), which the writer's in-doubt handling
//! relies on. What keeps two nodes from writing one session is not a lock here but the
//! ownership row and its fence (`cluster/fenced.rs`). A node's connections also set
//! `idle_in_transaction_session_timeout` and `lock_timeout` below the lease, so a node paused
//! inside a transaction cannot hold an ownership row past it.

use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection, Row};

use crate::{mask_url, OpenError, PostgresConfig, StoreError};

/// The advisory lock key of "this database's gateway": `tether` in ASCII, then 1.
const LOCK_KEY: i64 = 0x7465_7468_6572_0001;
/// Longest a new writer connection waits for an old one of this process to let go of the lock.
const TAKEOVER_WAIT: Duration = Duration::from_secs(10);
/// Longest a single connection attempt may take (an unreachable host may drop SYNs).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// Everything needed to open connections, parsed once from a [`PostgresConfig`].
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The URL with its password masked, for messages and logs.
    pub url: String,
    options: PgConnectOptions,
    pub connect_timeout: Duration,
    pub statement_timeout: Duration,
    pub in_doubt_wait: Duration,
    pub read_connections: u32,
    /// How the writer holds the database: as its one gateway, or as a node of a cluster.
    pub lock: WriterLock,
}

/// How a writer connection holds the database (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriterLock {
    /// The database's one gateway: the gateway key, exclusively.
    Gateway,
    /// A node of a cluster: the gateway key shared, and `key` (the node's own) exclusively,
    /// on a connection whose `lock_timeout` and `idle_in_transaction_session_timeout` are these.
    Node {
        key: i64,
        lock_timeout: Duration,
        idle_in_transaction_timeout: Duration,
    },
}

/// Why a connection could not be made.
#[derive(Debug, Clone)]
pub(crate) enum ConnectError {
    /// Worth retrying: refused, timed out, the server starting or shutting down.
    Unreachable(String),
    /// The server said no (credentials, database, permissions): retrying will not help.
    Refused(String),
    /// Another gateway's writer holds the lock.
    Held(String),
    /// A newer writer of this process holds the lock: this one was replaced and must stop.
    Superseded,
    /// Anything else.
    Store(StoreError),
}

impl ConnectError {
    /// As the error an operation gets while the writer cannot connect.
    pub(crate) fn to_store_error(&self, url: &str) -> StoreError {
        match self {
            ConnectError::Unreachable(cause) | ConnectError::Refused(cause) => {
                StoreError::Unavailable(format!("{url}: {cause}"))
            }
            ConnectError::Held(holder) => StoreError::Unavailable(format!(
                "{url} is held by another tether gateway ({holder}); not writing"
            )),
            ConnectError::Superseded => {
                StoreError::Unavailable("this store writer was replaced by a newer one".into())
            }
            ConnectError::Store(e) => e.clone(),
        }
    }

    pub(crate) fn into_open_error(self, url: &str, waited: Duration) -> OpenError {
        let url = url.to_string();
        match self {
            ConnectError::Unreachable(cause) => OpenError::Unreachable { url, waited, cause },
            ConnectError::Refused(cause) => OpenError::Refused { url, cause },
            ConnectError::Held(holder) => OpenError::Held { url, holder },
            ConnectError::Superseded => {
                OpenError::Store(ConnectError::Superseded.to_store_error(&url))
            }
            ConnectError::Store(e) => OpenError::Store(e),
        }
    }
}

impl Settings {
    pub(crate) fn new(cfg: &PostgresConfig) -> Result<Settings, OpenError> {
        let url = mask_url(&cfg.url);
        let bad = |reason: String| OpenError::BadUrl {
            url: url.clone(),
            reason,
        };
        if !(cfg.url.starts_with("postgres://") || cfg.url.starts_with("postgresql://")) {
            return Err(bad("expected postgres://USER@HOST/DB".into()));
        }
        let options = PgConnectOptions::from_str(&cfg.url).map_err(|e| bad(e.to_string()))?;
        Ok(Settings {
            url,
            options,
            connect_timeout: cfg.connect_timeout,
            statement_timeout: cfg.statement_timeout,
            in_doubt_wait: cfg.in_doubt_wait,
            read_connections: cfg.read_connections.max(1),
            lock: WriterLock::Gateway,
        })
    }

    /// The options every connection of a cluster node adds (module doc): waits on locks and
    /// idle transactions bounded below the lease.
    pub(crate) fn node_options(&self, role: &str) -> Option<PgConnectOptions> {
        let WriterLock::Node {
            lock_timeout,
            idle_in_transaction_timeout,
            ..
        } = self.lock
        else {
            return None;
        };
        Some(
            self.options
                .clone()
                .application_name(&format!("tether {role} {}", process().describe()))
                .options([
                    ("statement_timeout", millis(self.statement_timeout)),
                    ("lock_timeout", millis(lock_timeout)),
                    (
                        "idle_in_transaction_session_timeout",
                        millis(idle_in_transaction_timeout),
                    ),
                ]),
        )
    }

    /// Options of a pooled (reader, handoff) connection.
    pub(crate) fn pool_options(&self, role: &str) -> PgConnectOptions {
        self.options
            .clone()
            .application_name(&format!("tether {role} {}", process().describe()))
            .options([
                ("statement_timeout", millis(self.statement_timeout)),
                ("lock_timeout", millis(self.statement_timeout)),
            ])
    }

    /// One connection attempt, bounded in time.
    pub(crate) async fn connect(
        &self,
        options: &PgConnectOptions,
    ) -> Result<PgConnection, ConnectError> {
        let attempt = ATTEMPT_TIMEOUT.min(self.connect_timeout.max(Duration::from_millis(100)));
        match tokio::time::timeout(attempt, options.connect()).await {
            Err(_) => Err(ConnectError::Unreachable(format!(
                "no answer within {} ms",
                attempt.as_millis()
            ))),
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(classify_connect(e)),
        }
    }

    /// Opens a writer connection and takes the lock on it. `writer` and `conn` number this
    /// process's writers and each writer's connections, so an old connection can be told from
    /// a newer one (see the module doc).
    pub(crate) async fn connect_writer(
        &self,
        writer: u64,
        conn: u64,
    ) -> Result<PgConnection, ConnectError> {
        let me = WriterTag {
            node: matches!(self.lock, WriterLock::Node { .. }),
            nonce: process().nonce,
            writer,
            conn,
        };
        // Keepalives: the server drops a backend whose client vanished (a network cut) within
        // about 25 s, which frees the lock for the gateway that comes back.
        let mut options = self
            .options
            .clone()
            .application_name(&me.application_name())
            .options([
                ("tcp_keepalives_idle", "10".to_string()),
                ("tcp_keepalives_interval", "5".to_string()),
                ("tcp_keepalives_count", "3".to_string()),
                ("statement_timeout", millis(self.statement_timeout)),
            ]);
        options = match self.lock {
            WriterLock::Gateway => {
                options.options([("lock_timeout", millis(self.statement_timeout))])
            }
            WriterLock::Node {
                lock_timeout,
                idle_in_transaction_timeout,
                ..
            } => options.options([
                ("lock_timeout", millis(lock_timeout)),
                (
                    "idle_in_transaction_session_timeout",
                    millis(idle_in_transaction_timeout),
                ),
            ]),
        };
        let mut c = self.connect(&options).await?;
        ensure_durable(&mut c).await.map_err(ConnectError::Store)?;
        match self.lock {
            WriterLock::Gateway => take_lock(&mut c, me, LOCK_KEY, false).await?,
            WriterLock::Node { key, .. } => {
                take_lock(&mut c, me, LOCK_KEY, true).await?;
                take_lock(&mut c, me, key, false).await?;
            }
        }
        Ok(c)
    }
}

/// The advisory lock key of a cluster node's writer: `tn` in the high 16 bits (never the
/// gateway key, whose are `te`) and 48 bits of a hash of the node id. Node ids are fresh and
/// random, so two nodes share a key with odds of about one in 2^48 per pair (they would then
/// see each other as `Held`).
pub(crate) fn node_lock_key(node_id: &str) -> i64 {
    // FNV-1a: stable across builds and processes (unlike the std hasher).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in node_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (0x746e_i64 << 48) | (h & 0xffff_ffff_ffff) as i64
}

/// Takes `key` on `c` (shared or exclusive), ending a stale holder where the module doc says
/// so.
async fn take_lock(
    c: &mut PgConnection,
    me: WriterTag,
    key: i64,
    shared: bool,
) -> Result<(), ConnectError> {
    let statement = if shared {
        "SELECT pg_try_advisory_lock_shared($1)"
    } else {
        "SELECT pg_try_advisory_lock($1)"
    };
    let started = tokio::time::Instant::now();
    loop {
        let taken: bool = sqlx::query_scalar(statement)
            .bind(key)
            .fetch_one(&mut *c)
            .await
            .map_err(classify_connect)?;
        if taken {
            return Ok(());
        }
        let holder = lock_holder(&mut *c, key, shared)
            .await
            .map_err(classify_connect)?;
        match holder {
            Some(h) if h.tag.is_some_and(|t| t.same_kind(&me) && t < me) => {
                if started.elapsed() > TAKEOVER_WAIT {
                    return Err(ConnectError::Unreachable(format!(
                        "an old writer connection of this gateway (backend {}) still holds the lock",
                        h.backend_pid
                    )));
                }
                tracing::info!(
                    backend_pid = h.backend_pid,
                    "ending an old writer connection of this gateway"
                );
                let _ = sqlx::query("SELECT pg_terminate_backend($1)")
                    .bind(h.backend_pid)
                    .execute(&mut *c)
                    .await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Some(h) if h.tag.is_some_and(|t| t.same_kind(&me)) => {
                return Err(ConnectError::Superseded)
            }
            Some(h) if h.of_a_dead_process_here() && started.elapsed() < TAKEOVER_WAIT => {
                tracing::info!(backend_pid = h.backend_pid, holder = %h.describe(), "ending the writer connection of a gateway that is gone");
                let _ = sqlx::query("SELECT pg_terminate_backend($1)")
                    .bind(h.backend_pid)
                    .execute(&mut *c)
                    .await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Some(h) => return Err(ConnectError::Held(h.describe())),
            // Released between the two statements: try again (a holder this role cannot
            // see would look the same, hence the bound).
            None if started.elapsed() < TAKEOVER_WAIT => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            None => {
                return Err(ConnectError::Held(
                    "a server backend this user cannot see".into(),
                ))
            }
        }
    }
}

fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis().max(1))
}

/// Commits must be durable when acknowledged (docs/RELIABILITY.md): a server (or role, or
/// database) configured with `synchronous_commit = off` is overridden for this connection. Any
/// other value (`local`, `on`, `remote_write`, `remote_apply`) already waits for a local flush.
async fn ensure_durable(c: &mut PgConnection) -> Result<(), StoreError> {
    let mode: String = sqlx::query_scalar("SELECT current_setting('synchronous_commit')")
        .fetch_one(&mut *c)
        .await
        .map_err(super::errors::map_sqlx)?;
    if mode == "off" {
        tracing::warn!(
            "the database has synchronous_commit = off; the writer sets it on for itself"
        );
        sqlx::query("SET synchronous_commit = on")
            .execute(&mut *c)
            .await
            .map_err(super::errors::map_sqlx)?;
    }
    Ok(())
}

/// Classifies an error met while connecting (or on a fresh connection).
pub(crate) fn classify_connect(e: sqlx::Error) -> ConnectError {
    let text = e.to_string();
    match &e {
        sqlx::Error::Database(db) => {
            let state = db.code().map(|c| c.into_owned()).unwrap_or_default();
            match state.as_str() {
                // The server is starting, stopping or full: wait for it.
                "57P01" | "57P02" | "57P03" | "53300" => ConnectError::Unreachable(text),
                // invalid_authorization_specification, invalid_password, invalid_catalog_name
                // (no such database), insufficient_privilege, invalid role.
                s if s.starts_with("28") || s == "3D000" || s == "42501" || s == "42704" => {
                    ConnectError::Refused(text)
                }
                s if s.starts_with("08") => ConnectError::Unreachable(text),
                _ => ConnectError::Store(super::errors::map_sqlx(e)),
            }
        }
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::PoolTimedOut => {
            ConnectError::Unreachable(text)
        }
        sqlx::Error::Tls(_) | sqlx::Error::Configuration(_) => ConnectError::Refused(text),
        _ => ConnectError::Store(super::errors::map_sqlx(e)),
    }
}

/// Who this process is, for the lock holder's `application_name`.
struct Process {
    nonce: u64,
    pid: u32,
    host: String,
}

impl Process {
    fn describe(&self) -> String {
        format!("pid {} on {}", self.pid, self.host)
    }
}

fn process() -> &'static Process {
    static PROCESS: OnceLock<Process> = OnceLock::new();
    PROCESS.get_or_init(|| Process {
        nonce: rand::random(),
        pid: std::process::id(),
        host: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "unknown host".into()),
    })
}

/// A writer connection's identity, ordered by (writer, connection) within one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct WriterTag {
    /// A cluster node's writer (`tether-node-writer`): never mistaken for an old connection
    /// of a gateway-mode writer of the same process, or the other way round (a test process
    /// runs both).
    node: bool,
    nonce: u64,
    writer: u64,
    conn: u64,
}

impl WriterTag {
    /// A writer of this very process and of the same kind (gateway or node).
    fn same_kind(&self, other: &WriterTag) -> bool {
        self.nonce == other.nonce && self.node == other.node
    }

    /// `tether-writer NONCE WRITER.CONN pid PID on HOST` (`tether-node-writer …` for a
    /// node), cut to the server's 63 bytes (the parsed part comes first, so a long host name
    /// only loses its end).
    fn application_name(&self) -> String {
        let mut name = format!(
            "{} {:016x} {}.{} {}",
            if self.node {
                "tether-node-writer"
            } else {
                "tether-writer"
            },
            self.nonce,
            self.writer,
            self.conn,
            process().describe()
        );
        let mut end = name.len().min(63);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
        name
    }

    fn parse(name: &str) -> Option<WriterTag> {
        let mut words = name.split(' ');
        let node = match words.next()? {
            "tether-writer" => false,
            "tether-node-writer" => true,
            _ => return None,
        };
        let nonce = u64::from_str_radix(words.next()?, 16).ok()?;
        let (writer, conn) = words.next()?.split_once('.')?;
        Some(WriterTag {
            node,
            nonce,
            writer: writer.parse().ok()?,
            conn: conn.parse().ok()?,
        })
    }
}

/// The backend holding the lock, as `pg_locks` and `pg_stat_activity` tell.
struct Holder {
    backend_pid: i32,
    application_name: String,
    client: Option<String>,
    tag: Option<WriterTag>,
}

impl Holder {
    /// A tether writer of a process on this host that has exited.
    fn of_a_dead_process_here(&self) -> bool {
        let Some((_, who)) = self.application_name.split_once(" pid ") else {
            return false;
        };
        let Some((pid, host)) = who.split_once(" on ") else {
            return false;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            return false;
        };
        // The name may have been cut at 63 bytes, host last.
        let here = !host.is_empty() && process().host.starts_with(host);
        here && self.tag.is_some() && !std::path::Path::new(&format!("/proc/{pid}")).exists()
    }

    fn describe(&self) -> String {
        match self.application_name.split_once(" pid ") {
            Some((_, who)) if self.tag.is_some() => format!("pid {who}"),
            _ => format!(
                "server backend {} from {}",
                self.backend_pid,
                self.client.as_deref().unwrap_or("a local socket")
            ),
        }
    }
}

async fn lock_holder(
    c: &mut PgConnection,
    key: i64,
    shared: bool,
) -> Result<Option<Holder>, sqlx::Error> {
    // A bigint advisory key shows in pg_locks as classid = high 32 bits, objid = low 32 bits,
    // objsubid = 1. A shared request is refused only by an exclusive holder; an exclusive one
    // by any holder (several cluster nodes may hold the gateway key shared: one is named).
    let row = sqlx::query(
        "SELECT a.pid, COALESCE(a.application_name, ''), host(a.client_addr) \
         FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid \
         AND (NOT $3 OR l.mode = 'ExclusiveLock') AND l.pid <> pg_backend_pid() \
         LIMIT 1",
    )
    .bind(key >> 32)
    .bind(key & 0xffff_ffff)
    .bind(shared)
    .fetch_optional(&mut *c)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let application_name: String = row.try_get(1)?;
    Ok(Some(Holder {
        backend_pid: row.try_get(0)?,
        tag: WriterTag::parse(&application_name),
        application_name,
        client: row.try_get(2)?,
    }))
}

/// Closes a connection politely (the server frees its backend, and the lock, at once); a
/// connection that is already broken is simply dropped.
pub(crate) async fn close(c: PgConnection) {
    let _ = tokio::time::timeout(Duration::from_secs(1), c.close()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_tags_round_trip_and_order() {
        let a = WriterTag {
            node: false,
            nonce: 0xabc,
            writer: 2,
            conn: 7,
        };
        let name = a.application_name();
        assert!(name.len() <= 63, "{name}");
        assert_eq!(WriterTag::parse(&name), Some(a));
        let newer_conn = WriterTag { conn: 8, ..a };
        let newer_writer = WriterTag {
            writer: 3,
            conn: 1,
            ..a
        };
        assert!(a < newer_conn && newer_conn < newer_writer);
        assert_eq!(WriterTag::parse("tether reader pid 1 on h"), None);
        let node = WriterTag { node: true, ..a };
        let name = node.application_name();
        assert!(
            name.len() <= 63 && name.starts_with("tether-node-writer "),
            "{name}"
        );
        assert_eq!(WriterTag::parse(&name), Some(node));
        assert!(!node.same_kind(&a));
    }

    #[test]
    fn node_keys_are_never_the_gateway_key() {
        let (k1, k2) = (node_lock_key("n_1"), node_lock_key("n_2"));
        assert_ne!(k1, k2);
        assert_eq!(k1, node_lock_key("n_1"), "stable");
        for k in [k1, k2] {
            assert_ne!(k, LOCK_KEY);
            assert_eq!(k >> 48, 0x746e);
        }
    }

    #[test]
    fn urls_are_checked_before_any_connection() {
        let bad = Settings::new(&PostgresConfig::new("mysql://u:pw@h/d")).unwrap_err();
        assert!(bad.is_usage());
        assert!(!bad.to_string().contains("pw"), "{bad}");
        let bad = Settings::new(&PostgresConfig::new("postgres://u:pw@h:notaport/d")).unwrap_err();
        assert!(matches!(bad, OpenError::BadUrl { .. }), "{bad:?}");
        assert!(!bad.to_string().contains(":pw"), "{bad}");
        assert!(Settings::new(&PostgresConfig::new("postgres://u:pw@h/d")).is_ok());
    }
}
