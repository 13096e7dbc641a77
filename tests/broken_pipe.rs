//! A closed stdout or stderr never panics the gateway (README, "Logs"):
//! `tether serve 2>&1 | tee log` and a Ctrl-C kill `tee` along with the
//! gateway, so the drain's log lines meet a pipe nobody reads. The gateway
//! must drain and exit as it would otherwise (0), never 101 from a panic
//! in a log write or a `println!`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{complete, session, submit, tempdir, turn_events, Client};

/// How long the gateway gets to drain and exit after the signal.
const EXIT_WAIT: Duration = Duration::from_secs(15);

/// Kills the gateway if the test ends early.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(dir: &std::path::Path, listen: &str) -> Kill {
    Kill(
        Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["serve", "--listen", listen, "--hosts", "1", "--data-dir"])
            .arg(dir)
            // Every actor and session at work logs: plenty of lines to
            // meet the closed pipe.
            .env("RUST_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tether"),
    )
}

fn signal(child: &Child, name: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status();
}

fn wait_exit(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + EXIT_WAIT;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        assert!(Instant::now() < deadline, "the gateway did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A turn and a few requests: log lines at every step.
async fn work(addr: &str) {
    let mut c = Client::connect(&format!("ws://{addr}/ws")).await;
    let id = session(&mut c).await;
    let t = submit(&mut c, &id, "hello through a dead pipe").await;
    assert_eq!(
        complete(&turn_events(&mut c, &t).await)["text"],
        "hello through a dead pipe"
    );
    c.close().await;
}

/// The reader of both pipes goes away while the gateway runs, as `tee`
/// does on Ctrl-C; then the signal.
#[tokio::test]
async fn a_reader_that_dies_first_does_not_make_the_drain_panic() {
    for sig in ["INT", "TERM"] {
        let dir = tempdir();
        let mut gw = serve(dir.path(), "127.0.0.1:0");
        let mut line = String::new();
        let mut stdout = BufReader::new(gw.0.stdout.take().unwrap());
        stdout.read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("tether listening on http://")
            .unwrap_or_else(|| panic!("unexpected start-up line {line:?}"))
            .to_string();
        // Both read ends closed: every later write gets EPIPE.
        drop(stdout);
        drop(gw.0.stderr.take());
        work(&addr).await;
        signal(&gw.0, sig);
        let status = wait_exit(&mut gw.0);
        assert_eq!(status.code(), Some(0), "SIG{sig}: {status}");
    }
}

/// A free loopback address whose port the kernel never hands to a `:0`
/// bind. The gateway below cannot say where it listens (its stdout is
/// closed first), so its port is chosen beforehand; one taken from the
/// ephemeral range could go, between the choice and the gateway's bind, to
/// a gateway the other test starts on `:0`, and this test would then talk
/// to that one (seen once in a full run: the probe connected, and the
/// WebSocket was refused when that gateway stopped).
fn free_port_outside_ephemeral_range() -> String {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| {
            let mut it = t.split_whitespace().map(|n| n.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999));
    // Start somewhere that depends on the process, so two runs at once
    // rarely try the same ports.
    let start = 20_000 + (std::process::id() % 10_000) as u16;
    (start..u16::MAX)
        .chain(10_000..start)
        .filter(|p| !(range.0..=range.1).contains(p))
        .find_map(|port| {
            std::net::TcpListener::bind(("127.0.0.1", port))
                .ok()
                .map(|l| l.local_addr().expect("local addr").to_string())
        })
        .expect("a free port outside the ephemeral range")
}

/// Both pipes closed before the gateway writes anything, its listening
/// line included: it serves all the same, and drains cleanly.
#[tokio::test]
async fn pipes_closed_from_the_start_do_not_stop_the_gateway() {
    let dir = tempdir();
    let addr = free_port_outside_ephemeral_range();
    let mut gw = serve(dir.path(), &addr);
    drop(gw.0.stdout.take());
    drop(gw.0.stderr.take());
    let deadline = Instant::now() + EXIT_WAIT;
    while tokio::net::TcpStream::connect(&addr).await.is_err() {
        if let Some(status) = gw.0.try_wait().unwrap() {
            panic!("the gateway exited before it listened: {status}");
        }
        assert!(Instant::now() < deadline, "the gateway never listened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    work(&addr).await;
    signal(&gw.0, "INT");
    let status = wait_exit(&mut gw.0);
    assert_eq!(status.code(), Some(0), "{status}");
}
