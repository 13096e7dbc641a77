//! The writer's lock: who holds it, and when a holder may be ended.
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
//! # A cluster node's writer
//!
//! A node of a cluster (`cluster/`) must share the database with the other nodes, so its writer
//! takes the gateway key in *shared* mode (the nodes coexist; a single gateway, which wants it
//! exclusive, is kept out, and keeps them out) and, exclusively, a key of its own derived from
//! its node id: that second lock keeps the property above (a new writer connection of this
//! node starts only once the old one's backend is gone), which the writer's in-doubt handling
//! relies on. What keeps two nodes from writing one session is not a lock here but the
//! ownership row and its fence (`postgres/fencing.rs`). A node's connections also set
//! `idle_in_transaction_session_timeout` and `lock_timeout` below the lease, so a node paused
//! inside a transaction cannot hold an ownership row past it.

use std::sync::OnceLock;
use std::time::Duration;

use sqlx::postgres::PgConnection;
use sqlx::Row;

use super::{classify_connect, ConnectError};

/// The advisory lock key of "this database's gateway": `tether` in ASCII, then 1.
pub(super) const LOCK_KEY: i64 = 0x7465_7468_6572_0001;
/// Longest a new writer connection waits for an old one of this process to let go of the lock.
const TAKEOVER_WAIT: Duration = Duration::from_secs(10);

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
pub(super) async fn take_lock(
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

/// Who this process is, for the lock holder's `application_name`.
pub(super) struct Process {
    pub(super) nonce: u64,
    pid: u32,
    host: String,
}

impl Process {
    pub(super) fn describe(&self) -> String {
        format!("pid {} on {}", self.pid, self.host)
    }
}

pub(super) fn process() -> &'static Process {
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
pub(super) struct WriterTag {
    /// A cluster node's writer (`tether-node-writer`): never mistaken for an old connection
    /// of a gateway-mode writer of the same process, or the other way round (a test process
    /// runs both).
    pub(super) node: bool,
    pub(super) nonce: u64,
    pub(super) writer: u64,
    pub(super) conn: u64,
}

impl WriterTag {
    /// A writer of this very process and of the same kind (gateway or node).
    fn same_kind(&self, other: &WriterTag) -> bool {
        self.nonce == other.nonce && self.node == other.node
    }

    /// `tether-writer NONCE WRITER.CONN pid PID on HOST` (`tether-node-writer …` for a
    /// node), cut to the server's 63 bytes (the parsed part comes first, so a long host name
    /// only loses its end).
    pub(super) fn application_name(&self) -> String {
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
}
