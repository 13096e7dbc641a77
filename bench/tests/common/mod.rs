//! What the smoke runs share: run the real `tether-bench` binary against
//! the real `tether` binary and read its JSON report.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The `tether` binary under test: cargo builds it into the same directory
/// as `tether-bench` when the workspace's tests are built
/// (`cargo test --workspace`).
fn tether_bin() -> PathBuf {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_tether-bench"));
    let tether = bench.with_file_name("tether");
    assert!(
        tether.is_file(),
        "{} is not built: run these tests with `cargo test --workspace` \
         (or `cargo build -p tether` first)",
        tether.display()
    );
    tether
}

/// Runs `tether-bench ARGS` (killed after `limit`) and returns the JSON
/// report, the last stdout line that is an object. Both pipes are read on
/// threads while it runs, so a chatty run never blocks on a full pipe.
pub fn run_bench(args: &[&str], limit: Duration) -> Value {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tether-bench"))
        .args(args)
        .env("TETHER_BIN", tether_bin())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tether-bench");
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
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for tether-bench") {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tether bench {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = out.join().expect("stdout reader");
    let stderr = err.join().expect("stderr reader");
    assert!(
        status.success(),
        "tether bench {args:?} failed: {status}\nstdout: {stdout}\nstderr: {stderr}"
    );
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no report in {stdout:?}"));
    serde_json::from_str(line).expect("report is JSON")
}
