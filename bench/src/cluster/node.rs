//! One `tether serve --cluster` process of the bench's cluster: started
//! pinned to its CPU (with `taskset`, which execs, so the child's pid is
//! tether's and its compute hosts inherit the pinning), on a fresh port and
//! a fresh data directory of its own, and killed with SIGKILL the way a
//! lost machine dies.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::harness::pinned_command;
use crate::load::proc;

/// Everything a node is started with besides its own data directory.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub tether: std::path::PathBuf,
    pub database_url: String,
    pub lease_s: f64,
    pub hosts: usize,
}

/// A running node. Dropping it kills it (and its hosts).
pub struct Node {
    child: Child,
    pub pid: u32,
    /// The node's CPU, `None` when unpinned.
    pub cpu: Option<usize>,
    /// `ws://ADDR/ws`.
    pub url: String,
    /// When it said it was listening.
    pub started: Instant,
    /// Killed and reaped: its pid may belong to someone else now.
    dead: bool,
    _dir: tempfile::TempDir,
}

impl Node {
    pub fn start(spec: &NodeSpec, cpu: Option<usize>) -> anyhow::Result<Node> {
        let dir = tempfile::tempdir()?;
        let exists = |c: usize| {
            core_affinity::get_core_ids()
                .unwrap_or_default()
                .iter()
                .any(|id| id.id == c)
        };
        let cpu = match cpu {
            Some(c) if !exists(c) => {
                eprintln!("bench: cpu {c} not available, the node runs unpinned");
                None
            }
            other => other,
        };
        let mut cmd = match cpu {
            Some(cpu) => pinned_command(cpu, &spec.tether),
            None => std::process::Command::new(&spec.tether),
        };
        let (child, addr) = crate::load::server::spawn_listening(cmd.args(args(spec, dir.path())))?;
        Ok(Node {
            pid: child.id(),
            child,
            cpu,
            url: format!("ws://{addr}/ws"),
            started: Instant::now(),
            dead: false,
            _dir: dir,
        })
    }

    /// SIGKILL to the node, then to the compute hosts it had: a machine
    /// lost, so no orphaned host lingers into the next round. The instant
    /// the node's kill was sent.
    pub fn kill_9(&mut self) -> Instant {
        if self.dead {
            return Instant::now();
        }
        self.dead = true;
        let hosts = proc::descendants(self.pid);
        let at = Instant::now();
        let _ = self.child.kill();
        let _ = self.child.wait();
        for pid in hosts {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        at
    }

    /// How long to wait until this node may take another node's session:
    /// a fresh node waits one full lease of its own first (docs/ARCHITECTURE.md,
    /// "Nodes and leases"), plus a heartbeat for the rounding.
    pub fn settled_in(&self, lease: Duration) -> Duration {
        (lease + Duration::from_secs(1)).saturating_sub(self.started.elapsed())
    }

    /// The node's own CPU seconds and its compute hosts', so far.
    pub fn cpu_s(&self) -> (f64, f64) {
        let s = proc::sample(Some(self.pid));
        (s.server_cpu_s, s.children_cpu_s)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.kill_9();
    }
}

fn args(spec: &NodeSpec, dir: &Path) -> Vec<String> {
    [
        "serve",
        "--cluster",
        "--database-url",
        &spec.database_url,
        "--data-dir",
        &dir.to_string_lossy(),
        "--listen",
        "127.0.0.1:0",
        "--node-lease-s",
        &spec.lease_s.to_string(),
        "--hosts",
        &spec.hosts.to_string(),
        // One driver connection per session submits every prompt.
        "--rate-limit-rps",
        "0",
        "--max-connections",
        "65536",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// `Cpus_allowed_list` of a process (how it is pinned), or `?`.
pub fn affinity(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_owned())
        })
        .unwrap_or_else(|| "?".to_owned())
}
