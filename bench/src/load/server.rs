//! The server under test: one given by `--url` (and `--server-pid`), or
//! one the generator starts itself, pinned with `taskset` to the server
//! CPU, on a fresh port (and, for tether, a fresh data directory), and
//! kills when done.
//!
//! Each server prints one line `... listening on http://ADDR` when it
//! accepts connections; that is how the generator learns the port.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context};

use super::{LoadBench, TargetKind};

pub struct Server {
    pub url: String,
    pub pid: Option<u32>,
    child: Option<Child>,
    _dir: Option<tempfile::TempDir>,
}

impl Server {
    pub fn start(b: &LoadBench) -> anyhow::Result<Server> {
        if let Some(url) = &b.url {
            return Ok(Server {
                url: url.clone(),
                pid: b.server_pid,
                child: None,
                _dir: None,
            });
        }
        let (program, args, dir) = command_of(b)?;
        let mut cmd = crate::harness::pinned_command(b.server_cpu, &program);
        let (child, addr) = spawn_listening(cmd.args(&args).env("PORT", "0"))?;
        let url = match b.target {
            TargetKind::Tether => format!("ws://{addr}/ws"),
            TargetKind::Limit => format!("ws://{addr}/"),
            TargetKind::Socketio => format!("ws://{addr}/socket.io/?EIO=4&transport=websocket"),
        };
        Ok(Server {
            url,
            pid: Some(child.id()),
            child: Some(child),
            _dir: dir,
        })
    }
}

/// The program to start for `--target`, its arguments, and (for tether)
/// the data directory it owns while it runs.
fn command_of(b: &LoadBench) -> anyhow::Result<(PathBuf, Vec<String>, Option<tempfile::TempDir>)> {
    let mut dir = None;
    let (program, args): (PathBuf, Vec<String>) = match b.target {
        TargetKind::Tether => {
            let d = tempfile::tempdir()?;
            let args = vec![
                "serve".into(),
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--data-dir".into(),
                d.path().to_string_lossy().into_owned(),
                "--hosts".into(),
                b.hosts.to_string(),
                // One control connection creates every session and
                // submits every prompt.
                "--rate-limit-rps".into(),
                "0".into(),
                "--max-connections".into(),
                (b.connections + 4096).max(65_536).to_string(),
            ];
            dir = Some(d);
            (crate::tether_exe()?, args)
        }
        TargetKind::Limit => {
            let bin = match &b.limit_bin {
                Some(p) => p.clone(),
                None => std::env::current_exe()?.with_file_name("tether-limit"),
            };
            if !bin.exists() {
                bail!(
                    "{} not found: build it (cargo build --release -p tether-bench-limit), \
                         or pass --limit-bin or --url",
                    bin.display()
                );
            }
            (bin, vec!["--listen".into(), "127.0.0.1:0".into()])
        }
        TargetKind::Socketio => {
            let dir = b
                .socketio_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("socketio"));
            if !dir.join("node_modules/socket.io").exists() {
                bail!(
                    "{} has no node_modules: run `npm ci` there, or pass --url",
                    dir.display()
                );
            }
            let script = dir.join("server.js").to_string_lossy().into_owned();
            (PathBuf::from(&b.node), vec![script])
        }
    };
    Ok((program, args, dir))
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `cmd` (a server whose stdout says where it listens, its stderr
/// shown) and waits for its address; a server that exits first, or never
/// says it, is killed and reaped.
pub(crate) fn spawn_listening(cmd: &mut Command) -> anyhow::Result<(Child, String)> {
    let program = cmd.get_program().to_owned();
    let mut child = cmd
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("start {}", program.to_string_lossy()))?;
    match read_address(&mut child) {
        Ok(addr) => Ok((child, addr)),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

/// Reads stdout up to the `listening on http://ADDR` line; the rest of
/// stdout is drained on a thread so the server never blocks on it.
fn read_address(child: &mut Child) -> anyhow::Result<String> {
    let stdout = child.stdout.take().context("child stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some((_, a)) = line.split_once("listening on http://") {
                    break a.trim().trim_end_matches('/').to_owned();
                }
            }
            _ => bail!("the server exited before listening (its stderr is above)"),
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    Ok(addr)
}
