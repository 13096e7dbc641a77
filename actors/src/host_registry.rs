//! The host pid registry: `DATA_DIR/hosts.json`.
//!
//! Hosts run in their own process groups and exit by themselves when their
//! stdin closes, so a gateway that dies normally leaves nothing behind. A
//! gateway killed hard can, though (a host busy in a turn may not notice its
//! stdin closing for a while, and a host's own children never do). So the
//! supervisor records every host that said `hello`, with the command line it
//! had then (written by a task of its own, off the supervisor's handler), and the next gateway kills those groups at start
//! ([`kill_leftovers`]) — but only a pid whose command line is still the
//! recorded one: pids are recycled, and a recycled pid is someone else's
//! process.
//!
//! The file is tiny (one entry per slot) and written atomically (a temporary
//! file, then a rename), so a crash mid-write leaves the old or the new
//! version, never a torn one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// The registry's file name inside the data directory.
pub const FILE_NAME: &str = "hosts.json";

/// One running host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRecord {
    pub slot: u32,
    /// The host process, which leads its own process group.
    pub pid: u32,
    /// `/proc/PID/cmdline` as read when the host said `hello` (the
    /// arguments, each followed by a NUL byte).
    pub cmdline: Vec<u8>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct RegistryFile {
    hosts: Vec<HostRecord>,
}

/// The supervisor's view of the file: the hosts it started that are alive.
///
/// The file is written by a task of its own, never in the supervisor's
/// handler: a slow disk must not hold up the routing of every turn. The task
/// writes the latest snapshot only, so a burst of starts and deaths costs one
/// write, and the file always ends up matching the supervisor's view.
#[derive(Debug)]
pub(crate) struct HostRegistry {
    /// `None`: no data directory, nothing is recorded.
    snapshots: Option<watch::Sender<Snapshot>>,
    /// The version of the last snapshot on disk (or given up on).
    written: watch::Receiver<u64>,
    hosts: BTreeMap<u32, HostRecord>,
    version: u64,
}

/// The hosts alive now, numbered so that a flush knows when it is on disk.
#[derive(Debug, Default, Clone)]
struct Snapshot {
    version: u64,
    hosts: Vec<HostRecord>,
}

impl HostRegistry {
    /// Must be called inside a tokio runtime when `data_dir` is given.
    pub(crate) fn new(data_dir: Option<&Path>) -> Self {
        let (written_tx, written) = watch::channel(0);
        let snapshots = data_dir.map(|d| {
            let (tx, rx) = watch::channel(Snapshot::default());
            tokio::spawn(persist(d.join(FILE_NAME), rx, written_tx));
            tx
        });
        Self {
            snapshots,
            written,
            hosts: BTreeMap::new(),
            version: 0,
        }
    }

    /// Resolves once the file holds what the registry holds now (at once
    /// without a data directory): the drain waits for it, so a stopped
    /// gateway leaves a file that lists no host.
    pub(crate) fn flushed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let target = if self.snapshots.is_some() {
            self.version
        } else {
            0
        };
        let mut written = self.written.clone();
        async move {
            // An error means the writer task is gone: nothing more will be written.
            let _ = written.wait_for(|v| *v >= target).await;
        }
    }

    /// Records the host of `slot` (replacing any earlier one of that slot).
    /// A process that is already gone (no cmdline) is not recorded.
    pub(crate) fn record(&mut self, slot: u32, pid: u32) {
        // procfs lives in memory: this read never waits on a disk.
        let Some(cmdline) = read_cmdline(pid) else {
            debug!(host_id = slot, pid, "host has no cmdline; not recorded");
            return;
        };
        self.hosts.insert(slot, HostRecord { slot, pid, cmdline });
        self.publish();
    }

    /// Forgets the host of `slot` (it died or was stopped).
    pub(crate) fn remove(&mut self, slot: u32) {
        if self.hosts.remove(&slot).is_some() {
            self.publish();
        }
    }

    fn publish(&mut self) {
        if let Some(tx) = &self.snapshots {
            self.version += 1;
            tx.send_replace(Snapshot {
                version: self.version,
                hosts: self.hosts.values().cloned().collect(),
            });
        }
    }
}

/// Writes each new snapshot of the registry, until the registry is dropped.
async fn persist(path: PathBuf, mut rx: watch::Receiver<Snapshot>, on_disk: watch::Sender<u64>) {
    while rx.changed().await.is_ok() {
        let Snapshot { version, hosts } = rx.borrow_and_update().clone();
        let file = RegistryFile { hosts };
        let target = path.clone();
        let written = tokio::task::spawn_blocking(move || write_atomically(&target, &file)).await;
        if let Ok(Err(e)) | Err(e) = written.map_err(std::io::Error::other) {
            // Losing the registry only weakens the cleanup after a hard
            // crash; the gateway goes on.
            warn!(path = %path.display(), error = %e, "cannot write the host registry");
        }
        on_disk.send_replace(version);
    }
}

/// At gateway start: kills the process group of every host recorded in
/// `data_dir/hosts.json` whose current command line is still the recorded
/// one, then clears the file. Returns how many groups were killed.
pub fn kill_leftovers(data_dir: &Path) -> usize {
    let path = data_dir.join(FILE_NAME);
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return 0,
        Err(e) => {
            warn!(path = %path.display(), error = %e, "cannot read the host registry");
            return 0;
        }
    };
    let file: RegistryFile = match serde_json::from_slice(&text) {
        Ok(file) => file,
        Err(e) => {
            warn!(path = %path.display(), error = %e, "host registry is not valid; ignoring it");
            RegistryFile::default()
        }
    };
    let mut killed = 0;
    for host in &file.hosts {
        if host.cmdline.is_empty() || read_cmdline(host.pid).as_ref() != Some(&host.cmdline) {
            debug!(
                host_id = host.slot,
                pid = host.pid,
                "recorded host is gone (or its pid was recycled)"
            );
            continue;
        }
        if kill_group(host.pid) {
            info!(
                host_id = host.slot,
                pid = host.pid,
                "killed a host left over by an earlier gateway"
            );
            killed += 1;
        }
    }
    if let Err(e) = std::fs::remove_file(&path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            warn!(path = %path.display(), error = %e, "cannot clear the host registry");
        }
    }
    killed
}

/// SIGKILLs the process group led by `pid` (falling back to the process
/// alone if it leads none). Returns whether a signal was delivered.
pub(crate) fn kill_group(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 1 {
        // 0 and 1 would mean "my own group" / init: never a host.
        return false;
    }
    let pid = Pid::from_raw(raw);
    killpg(pid, Signal::SIGKILL).is_ok() || kill(pid, Signal::SIGKILL).is_ok()
}

/// `/proc/PID/cmdline`, or `None` when the process is gone (or is a zombie,
/// whose cmdline is empty) or there is no procfs.
pub(crate) fn read_cmdline(pid: u32) -> Option<Vec<u8>> {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    (!bytes.is_empty()).then_some(bytes)
}

fn write_atomically(path: &Path, file: &RegistryFile) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(file).map_err(std::io::Error::other)?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, json)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    /// The file once it holds `n` hosts (it is written by a task).
    async fn records_once(dir: &Path, n: usize) -> Vec<HostRecord> {
        for _ in 0..500 {
            if let Ok(text) = std::fs::read(dir.join(FILE_NAME)) {
                if let Ok(file) = serde_json::from_slice::<RegistryFile>(&text) {
                    if file.hosts.len() == n {
                        return file.hosts;
                    }
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the registry never held {n} hosts");
    }

    #[tokio::test]
    async fn records_and_removes_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let mut reg = HostRegistry::new(Some(dir.path()));
        let me = std::process::id();
        reg.record(1, me);
        reg.record(0, me);
        let hosts = records_once(dir.path(), 2).await;
        assert_eq!(hosts[0].slot, 0);
        assert_eq!(hosts[0].pid, me);
        assert_eq!(Some(hosts[0].cmdline.clone()), read_cmdline(me));
        reg.remove(0);
        assert_eq!(records_once(dir.path(), 1).await[0].slot, 1);
        assert!(!dir.path().join("hosts.json.tmp").exists());
    }

    #[test]
    fn no_data_dir_records_nothing() {
        let mut reg = HostRegistry::new(None);
        reg.record(0, std::process::id());
        reg.remove(0);
    }

    #[test]
    fn leftovers_with_a_recycled_pid_are_not_killed() {
        let dir = tempfile::tempdir().unwrap();
        // A live process recorded with another command line: its pid was
        // recycled since, so it is someone else's.
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let file = RegistryFile {
            hosts: vec![
                HostRecord {
                    slot: 0,
                    pid: sleeper.id(),
                    cmdline: b"tether\0host\0--engine\0echo\0".to_vec(),
                },
                // A pid that does not exist.
                HostRecord {
                    slot: 1,
                    pid: u32::MAX - 7,
                    cmdline: b"tether\0host\0".to_vec(),
                },
            ],
        };
        write_atomically(&dir.path().join(FILE_NAME), &file).unwrap();
        assert_eq!(kill_leftovers(dir.path()), 0);
        assert!(!dir.path().join(FILE_NAME).exists(), "the file is cleared");
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(sleeper.try_wait().unwrap().is_none(), "still running");
        // Nothing there: nothing to do.
        assert_eq!(kill_leftovers(dir.path()), 0);
        // Recorded with its real command line, it is killed.
        let file = RegistryFile {
            hosts: vec![HostRecord {
                slot: 0,
                pid: sleeper.id(),
                cmdline: read_cmdline(sleeper.id()).unwrap(),
            }],
        };
        write_atomically(&dir.path().join(FILE_NAME), &file).unwrap();
        assert_eq!(kill_leftovers(dir.path()), 1);
        let status = sleeper.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9));
    }

    #[test]
    fn a_garbled_registry_is_ignored_and_cleared() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), b"{not json").unwrap();
        assert_eq!(kill_leftovers(dir.path()), 0);
        assert!(!dir.path().join(FILE_NAME).exists());
    }

    #[test]
    fn never_signals_init_or_our_group() {
        assert!(!kill_group(0));
        assert!(!kill_group(1));
    }
}
