//! A `tether serve` process on a given store, pinned to the server CPU:
//! how long it took to print its listening line, and its memory.

use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::harness::{pinned_command, rss_kib, status_kib};

/// How long a stopped gateway gets to drain before it is killed.
const STOP_WAIT: Duration = Duration::from_secs(20);

pub struct Gateway {
    child: Child,
    pub pid: u32,
    /// `HOST:PORT`.
    pub addr: String,
    /// From the spawn to the `tether listening` line.
    pub startup: Duration,
    _dir: tempfile::TempDir,
}

impl Gateway {
    /// `tether serve` on the store `url` with `hosts` compute hosts, in a
    /// fresh data directory of its own.
    pub fn start(url: &str, hosts: usize, cpu: usize) -> anyhow::Result<Gateway> {
        let dir = tempfile::tempdir()?;
        let mut cmd = pinned_command(cpu, &crate::tether_exe()?);
        cmd.arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(dir.path())
            .arg("--database-url")
            .arg(url)
            .arg("--hosts")
            .arg(hosts.to_string())
            // One control connection creates every session of the turn
            // benchmark and submits every prompt.
            .arg("--rate-limit-rps")
            .arg("0")
            .arg("--max-connections")
            .arg("65536");
        let t0 = Instant::now();
        let (child, addr) = crate::load::server::spawn_listening(&mut cmd)?;
        let startup = t0.elapsed();
        Ok(Gateway {
            pid: child.id(),
            child,
            addr,
            startup,
            _dir: dir,
        })
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/ws", self.addr)
    }

    /// Resident and anonymous resident memory, KiB.
    pub fn rss(&self) -> (u64, u64) {
        (rss_kib(self.pid), status_kib(self.pid, "RssAnon:"))
    }

    /// SIGTERM, and the drain waited for (killed if it takes too long).
    pub fn stop(mut self) -> anyhow::Result<()> {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid.to_string())
            .status();
        let t0 = Instant::now();
        while t0.elapsed() < STOP_WAIT {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("flat: the gateway did not stop within {STOP_WAIT:?}; killed");
        let _ = self.child.kill();
        let _ = self.child.wait();
        Ok(())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Samples a process's RSS every few milliseconds on a thread of its
/// own, keeping the highest.
pub struct RssPeak {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssPeak {
    pub fn start(pid: u32) -> RssPeak {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(rss_kib(pid)));
        let thread = {
            let (stop, peak) = (stop.clone(), peak.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        RssPeak {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    /// The highest RSS seen, KiB.
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak.load(Ordering::Relaxed)
    }
}
