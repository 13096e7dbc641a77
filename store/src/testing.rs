//! Hooks for tests of this crate and of its users; not part of the supported API.
//!
//! The PostgreSQL runs of every suite need a server. `TETHER_TEST_POSTGRES` names one (a URL
//! whose user may create databases, e.g. `postgres://tether:tether@127.0.0.1:55432/postgres`),
//! and each test gets a throwaway database of its own in it ([`TestDatabase`]), dropped when the
//! test ends. Without the variable those runs are skipped, loudly (one line on the terminal per
//! test binary, past the test harness's capture), unless `TETHER_REQUIRE_POSTGRES=1` (CI) makes
//! the absence a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

use sqlx::postgres::PgConnection;
use sqlx::Connection;

pub use crate::postgres::{open_postgres_eraser, open_postgres_handoffs};
pub use crate::sqlite::open_sqlite_writer_with_page_headroom;

/// The variable naming the server the PostgreSQL runs use.
pub const POSTGRES_ENV: &str = "TETHER_TEST_POSTGRES";
/// Set to `1` to make a missing server a failure instead of a skip.
pub const REQUIRE_POSTGRES_ENV: &str = "TETHER_REQUIRE_POSTGRES";

/// The server to run PostgreSQL tests against, or `None` (after saying so) when there is none.
///
/// # Panics
///
/// When there is none and `TETHER_REQUIRE_POSTGRES=1`.
pub fn postgres_server() -> Option<String> {
    match std::env::var(POSTGRES_ENV) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            if std::env::var(REQUIRE_POSTGRES_ENV).as_deref() == Ok("1") {
                panic!("{REQUIRE_POSTGRES_ENV}=1 but {POSTGRES_ENV} is not set");
            }
            static SAID: Once = Once::new();
            SAID.call_once(|| {
                let exe = std::env::current_exe()
                    .ok()
                    .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
                    .unwrap_or_default();
                // Straight to the terminal: the test harness captures `eprintln!` of passing tests.
                let _ = writeln!(
                    std::io::stderr(),
                    "\n*** {exe}: PostgreSQL runs SKIPPED: {POSTGRES_ENV} is not set (set it to a server URL whose user may create databases; CI sets {REQUIRE_POSTGRES_ENV}=1) ***\n"
                );
            });
            None
        }
    }
}

/// A database of its own for one test, created on the server `TETHER_TEST_POSTGRES` names and
/// dropped (with whatever connections are still open on it) when this is dropped.
#[derive(Debug)]
pub struct TestDatabase {
    /// The URL of the new database (the server URL with its database replaced).
    pub url: String,
    admin: String,
    name: String,
}

impl TestDatabase {
    /// Creates a fresh, empty database on `server`.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or refuses: a test that asked for PostgreSQL fails.
    pub async fn create(server: &str) -> TestDatabase {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "tether_t{}_{}_{:08x}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            rand::random::<u32>()
        );
        let mut admin = PgConnection::connect(server)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", crate::mask_url(server)));
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        let _ = admin.close().await;
        TestDatabase {
            url: with_database(server, &name),
            admin: server.to_string(),
            name,
        }
    }

    /// [`TestDatabase::create`] from synchronous code (on a thread of its own).
    pub fn create_blocking(server: &str) -> TestDatabase {
        let server = server.to_string();
        std::thread::spawn(move || runtime().block_on(TestDatabase::create(&server)))
            .join()
            .unwrap_or_else(|_| panic!("creating a test database failed"))
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let name = self.name.clone();
        // A thread of its own: Drop may run inside a runtime, which must not block on another.
        let dropped = std::thread::spawn(move || {
            runtime().block_on(async move {
                let mut c = PgConnection::connect(&admin).await?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut c)
                    .await?;
                c.close().await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            let _ = writeln!(
                std::io::stderr(),
                "could not drop test database {}",
                self.name
            );
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"))
}

/// `server` with its database name replaced by `name` (query string kept).
pub fn with_database(server: &str, name: &str) -> String {
    let (head, query) = match server.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (server, None),
    };
    let authority_start = head.find("://").map_or(0, |i| i + 3);
    let base = match head[authority_start..].find('/') {
        Some(slash) => &head[..authority_start + slash],
        None => head,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_is_replaced_and_the_rest_kept() {
        assert_eq!(
            with_database("postgres://u:p@h:1/postgres", "t1"),
            "postgres://u:p@h:1/t1"
        );
        assert_eq!(with_database("postgres://u@h", "t1"), "postgres://u@h/t1");
        assert_eq!(
            with_database("postgres://u@h/x?sslmode=disable", "t1"),
            "postgres://u@h/t1?sslmode=disable"
        );
    }
}

/// A PostgreSQL server of a test's own (initdb in a temp dir, on a free loopback port), for the
/// tests that stop and restart the server under load: the shared `TETHER_TEST_POSTGRES` server
/// must stay up for the other tests. Stopped (immediately) when dropped.
///
/// The binaries are found in `TETHER_TEST_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin`
/// (Debian's layout). The server refuses to run as root, so as root it runs as the `postgres`
/// user through `runuser`.
#[derive(Debug)]
pub struct PgServer {
    dir: tempfile::TempDir,
    bin: std::path::PathBuf,
    port: u16,
    as_postgres: bool,
}

impl PgServer {
    /// Starts one, or returns `None` (after saying so loudly) when PostgreSQL is not
    /// installed here; with `TETHER_REQUIRE_POSTGRES=1` that is a failure instead.
    ///
    /// # Panics
    ///
    /// When the installed server fails to initialise or start.
    pub fn start() -> Option<PgServer> {
        let Some(bin) = pg_bin() else {
            if std::env::var(REQUIRE_POSTGRES_ENV).as_deref() == Ok("1") {
                panic!("{REQUIRE_POSTGRES_ENV}=1 but no PostgreSQL binaries (initdb, pg_ctl) were found");
            }
            let _ = writeln!(
                std::io::stderr(),
                "\n*** PostgreSQL server tests SKIPPED: no initdb/pg_ctl (apt-get install postgresql, or set TETHER_TEST_PG_BIN) ***\n"
            );
            return None;
        };
        let as_postgres = is_root();
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        if as_postgres {
            let status = std::process::Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .unwrap_or_else(|e| panic!("chown: {e}"));
            assert!(status.success(), "chown of the server's directory failed");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("a free port: {e}"));
        let server = PgServer {
            dir,
            bin,
            port,
            as_postgres,
        };
        let data = server.data();
        server.run(
            "initdb",
            &[
                "-D",
                &data,
                "-A",
                "trust",
                "-U",
                "tether",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        );
        server.start_again();
        Some(server)
    }

    /// A superuser URL of the server's `postgres` database (trust authentication).
    pub fn url(&self) -> String {
        format!("postgres://tether@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server the way an operator's restart does (`pg_ctl -m fast`: connections are
    /// ended, every committed transaction stays).
    pub fn stop(&self) {
        self.pg_ctl(&["stop", "-m", "fast", "-w"]);
    }

    /// Starts the stopped server again on the same port.
    pub fn start_again(&self) {
        let opts = format!(
            "-h 127.0.0.1 -p {} -k {}",
            self.port,
            self.dir.path().display()
        );
        let log = format!("{}/log", self.dir.path().display());
        self.pg_ctl(&["start", "-w", "-o", &opts, "-l", &log]);
    }

    /// `pg_ctl restart -m fast`.
    pub fn restart(&self) {
        self.stop();
        self.start_again();
    }

    /// Stops every process of this server with SIGSTOP: it keeps its connections open and
    /// answers nothing, as a hung or cut-off server does. [`PgServer::resume`] continues it.
    pub fn pause(&self) {
        assert!(self.signal_all("STOP"), "the server is not running");
    }

    /// Continues a server [`PgServer::pause`] stopped.
    pub fn resume(&self) {
        assert!(self.signal_all("CONT"), "the server is not running");
    }

    /// Sends `signal` to this server's postmaster (first) and to each of its children: only
    /// this server's, found by its pid file and the parent pid of every process. `false` when
    /// the server is not running (no pid file).
    fn signal_all(&self, signal: &str) -> bool {
        let pid_file = format!("{}/postmaster.pid", self.data());
        let Some(postmaster) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse::<u32>().ok())
        else {
            return false;
        };
        let mut pids = vec![postmaster];
        pids.extend(children_of(postmaster));
        for pid in pids {
            let _ = std::process::Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(pid.to_string())
                .status();
        }
        true
    }

    fn data(&self) -> String {
        format!("{}/data", self.dir.path().display())
    }

    fn pg_ctl(&self, args: &[&str]) {
        let data = self.data();
        let mut all = vec!["-D", data.as_str()];
        all.extend_from_slice(args);
        self.run("pg_ctl", &all);
    }

    fn run(&self, program: &str, args: &[&str]) {
        let exe = self.bin.join(program);
        let mut cmd = if self.as_postgres {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            std::process::Command::new(&exe)
        };
        let out = cmd
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // A paused server would never act on the stop.
        self.signal_all("CONT");
        let data = self.data();
        let exe = self.bin.join("pg_ctl");
        let mut cmd = if self.as_postgres {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            std::process::Command::new(&exe)
        };
        let _ = cmd
            .args(["-D", &data, "stop", "-m", "immediate", "-w"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// The pids whose parent is `parent` (from `/proc/PID/stat`).
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
                    let rest = &stat[stat.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

fn pg_bin() -> Option<std::path::PathBuf> {
    if let Ok(dir) = std::env::var("TETHER_TEST_PG_BIN") {
        let dir = std::path::PathBuf::from(dir);
        return dir.join("pg_ctl").exists().then_some(dir);
    }
    let mut found: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("pg_ctl").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

fn is_root() -> bool {
    // The effective uid, from the kernel, without a libc binding.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// `PRAGMA page_size` of the SQLite store file at `path`, read on a read-only connection of its
/// own (a running gateway's file may be read meanwhile).
///
/// # Panics
///
/// When the file cannot be opened or read.
pub async fn sqlite_page_size(path: &std::path::Path) -> i64 {
    use sqlx::ConnectOptions;
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .connect()
        .await
        .expect("open the store file");
    let size = sqlx::query_scalar("PRAGMA page_size")
        .fetch_one(&mut conn)
        .await
        .expect("page_size");
    conn.close().await.expect("close");
    size
}
