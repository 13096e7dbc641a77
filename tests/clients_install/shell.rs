//! The reader's machine, as the install test gives it: a directory with a
//! fresh copy of the checkout's `clients/` as `tether/clients/` (no
//! `node_modules`, no venv, as a clone has), commands run with `sh` in it
//! under a time limit, and what they printed.

use std::io::Read;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a command did.
#[derive(Debug)]
pub struct Ran {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    pub fn both(&self) -> String {
        format!("--- stdout\n{}\n--- stderr\n{}", self.stdout, self.stderr)
    }
}

/// Build and install output a fresh clone does not have.
const NOT_IN_A_CLONE: &[&str] = &[
    "node_modules",
    ".venv",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    "dist",
    "build",
];

pub struct Machine {
    pub root: tempfile::TempDir,
}

impl Machine {
    pub fn new() -> Machine {
        let root = tempfile::tempdir().expect("tempdir");
        let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients");
        copy_tree(&clients, &root.path().join("tether/clients"));
        Machine { root }
    }

    pub fn path(&self) -> &Path {
        self.root.path()
    }

    /// `sh -ec SCRIPT` in `dir`, for `limit` at most (then killed, and not
    /// ok). The environment is the test's, without a tether token, and
    /// with npm and pip told to be quiet and to use what their caches hold
    /// before the network.
    pub fn sh(&self, dir: &Path, script: &str, limit: Duration) -> Ran {
        let mut cmd = Command::new("sh");
        cmd.arg("-ec")
            .arg(script)
            .current_dir(dir)
            .env_remove("TETHER_TOKEN")
            .env_remove("TETHER_PROFILE")
            .env("npm_config_prefer_offline", "true")
            .env("npm_config_audit", "false")
            .env("npm_config_fund", "false")
            .env("npm_config_update_notifier", "false")
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
            .env("PIP_NO_INPUT", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A group of its own, so that what it started (node, python)
            // goes with it when it is killed, and no pipe stays open.
            .process_group(0);
        run(cmd, limit)
    }
}

fn run(mut cmd: Command, limit: Duration) -> Ran {
    let started = Instant::now();
    let mut child = cmd.spawn().expect("start sh");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for sh") {
            break Some(status);
        }
        if started.elapsed() > limit {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Whatever is left of the group (all of it after the limit).
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .stderr(Stdio::null())
        .status();
    let _ = child.wait();
    let stdout = out.join().unwrap_or_default();
    let mut stderr = err.join().unwrap_or_default();
    if status.is_none() {
        stderr.push_str(&format!("\n(killed after {limit:?})"));
    }
    Ran {
        ok: status.is_some_and(|s| s.success()),
        stdout,
        stderr,
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read a directory of clients/") {
        let entry = entry.expect("an entry");
        let name = entry.file_name();
        let name_str = name.to_string_lossy();
        if NOT_IN_A_CLONE.contains(&name_str.as_ref()) || name_str.ends_with(".egg-info") {
            continue;
        }
        let kind = entry.file_type().expect("a file type");
        let target: PathBuf = to.join(&name);
        if kind.is_dir() {
            copy_tree(&entry.path(), &target);
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Whether `out` failed for want of a registry (no network, no DNS), not
/// for anything the docs or the libraries did.
pub fn no_registry(out: &Ran) -> bool {
    const SIGNS: &[&str] = &[
        "ENOTFOUND",
        "EAI_AGAIN",
        "ETIMEDOUT",
        "ECONNREFUSED",
        "ECONNRESET",
        "ENETUNREACH",
        "Failed to establish a new connection",
        "Temporary failure in name resolution",
        "No matching distribution found",
        "Could not find a version that satisfies",
    ];
    !out.ok
        && SIGNS
            .iter()
            .any(|s| out.stderr.contains(s) || out.stdout.contains(s))
}
