//! `tether attach` as a person first meets it: the banner it starts with,
//! and how every turn ended, whether the ending arrives live, after a
//! reconnect (a turn cut by a gateway crash is ended by the next gateway,
//! so its ending only ever comes in a replay) or in the transcript shown
//! at the start. Black-box: the real gateway and client, assertions on
//! what the client prints.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::process::Command;

use common::terminal::{count_lines, new_session, stderr, tether, Attached};
use common::{tempdir, Gateway};

const ERROR: &str = "[turn failed: boom (engine_error); sending it again may fail the same way]";
const CRASH_SUFFIX: &str = "(host_crash); send it again]";
const INTERRUPTED: &str = "[interrupted]";
const DEQUEUED: &str =
    "[dropped from the queue before it ran (dequeued); send it again if you still want it]";
const SHUTDOWN: &str = "[interrupted: the gateway was shut down (gateway_shutdown); send it again]";
const RESTART: &str = "[turn failed: the gateway stopped mid-turn and was restarted \
                       (gateway_restart); send it again]";

#[test]
fn attach_starts_with_a_banner_and_tells_every_ending_live_and_after_a_reconnect() {
    let dir = tempdir();
    let mut gw = Gateway::start(dir.path(), &[]);
    let url = gw.url();
    let id = new_session(&url, "outcomes");

    let mut at = Attached::start(&url, &id);
    at.wait_stderr("the banner", |e| e.contains("[attached to"));
    let banner = at.stderr();
    let banner = banner.lines().next().expect("a line");
    assert_eq!(
        banner,
        format!(
            "[attached to {id} \"outcomes\" (idle, seq 1): type a prompt and press Enter \
             to send it; Ctrl-C interrupts the running turn, or quits when none runs]"
        ),
        "the banner names the session, its title and seq, and how to send and interrupt"
    );

    // An engine error and a host crash, each on its own line.
    at.line("/error boom");
    at.wait_stdout("the engine error", |o| o.contains(ERROR));
    at.line("/crash");
    at.wait_stdout("the host crash", |o| {
        o.lines()
            .any(|l| l.starts_with("[turn failed: ") && l.ends_with(CRASH_SUFFIX))
    });

    // An interrupt (Ctrl-C) of a running turn drops the prompt queued
    // behind it: two endings.
    at.line("/hang");
    at.wait_stdout("the hanging turn", |o| o.ends_with('…'));
    at.line("queued one");
    at.wait_stdout("the queued prompt", |o| {
        o.contains("[queued behind the running turn]")
    });
    at.interrupt();
    at.wait_stdout("the interrupt", |o| {
        o.contains(INTERRUPTED) && o.contains(DEQUEUED)
    });

    // A gateway that drains ends the running turn and tells its peers
    // before it closes them.
    at.line("/hang");
    at.wait_stdout("the second hanging turn", |o| o.ends_with('…'));
    assert_eq!(gw.terminate(), Some(0), "the drain exits 0");
    at.wait_stdout("the shutdown ending", |o| o.contains(SHUTDOWN));
    at.wait_stderr("the lost connection", |e| e.contains("[connection lost"));

    gw.restart_same_port();
    at.wait_stderr("the reconnect", |e| {
        e.contains("[reconnected, 0 missed events]")
    });

    // A gateway killed mid-turn: the next one writes the turn's ending at
    // its start, and the client sees it in the replay after its reconnect.
    at.line("/hang");
    at.wait_stdout("the third hanging turn", |o| o.ends_with('…'));
    gw.restart_same_port();
    at.wait_stdout("the restart ending", |o| o.contains(RESTART));
    at.wait_stderr("the second reconnect", |e| {
        e.contains("[reconnected, 1 missed event]")
    });
    assert_eq!(at.finish(), Some(0), "stderr: {}", at.stderr());

    let out = at.stdout();
    for line in [ERROR, INTERRUPTED, DEQUEUED, SHUTDOWN, RESTART] {
        assert_eq!(count_lines(&out, line), 1, "{line:?} once in:\n{out}");
    }
}

/// `tether send TEXT` in the background, as a script would start it,
/// watched like an attach (its reply on stdout, notices on stderr).
fn send_in_background(url: &str, id: &str, text: &str) -> Attached {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tether"));
    cmd.args(["send", "--url", url, id, text])
        .env_remove("TETHER_TOKEN");
    Attached::spawn(cmd)
}

/// A `/hang` turn sent in the background, once it runs (its one delta
/// reached the sender).
fn hanging(url: &str, id: &str) -> Attached {
    let hang = send_in_background(url, id, "/hang");
    hang.wait_stdout("the hanging turn", |o| o.contains('…'));
    hang
}

#[test]
fn a_fresh_attach_shows_how_each_turn_of_the_transcript_ended() {
    let dir = tempdir();
    let mut gw = Gateway::start(dir.path(), &[]);
    let url = gw.url();
    let id = new_session(&url, "history");

    for (text, code) in [("fine", 0), ("/error boom", 1), ("/crash", 1)] {
        let out = tether(&url, &["send", &id, text], None);
        assert_eq!(out.status.code(), Some(code), "{text}: {}", stderr(&out));
    }

    // Interrupted (Ctrl-C to `send`), with a prompt queued behind it.
    let mut hang = hanging(&url, &id);
    let mut queued = send_in_background(&url, &id, "behind it");
    queued.wait_stderr("the queued prompt", |e| {
        e.contains("[queued behind the running turn]")
    });
    hang.interrupt();
    assert_eq!(hang.finish(), Some(1), "{}", hang.stderr());
    assert_eq!(queued.finish(), Some(1), "{}", queued.stderr());

    // Cut by a drain, then by a crash of the gateway.
    let mut hang = hanging(&url, &id);
    assert_eq!(gw.terminate(), Some(0));
    assert_eq!(hang.finish(), Some(1), "{}", hang.stderr());
    gw.restart();
    let url = gw.url();
    let mut hang = hanging(&url, &id);
    gw.restart();
    assert_eq!(
        hang.finish(),
        Some(2),
        "a lost connection: {}",
        hang.stderr()
    );
    let url = gw.url();

    let out = tether(&url, &["attach", &id], Some(""));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    let crash = shown
        .lines()
        .find(|l| l.starts_with("[turn failed: ") && l.ends_with(CRASH_SUFFIX))
        .unwrap_or_else(|| panic!("no host crash in:\n{shown}"));
    let expected = [
        "> fine",
        "fine",
        "> /error boom",
        ERROR,
        "> /crash",
        "…",
        crash,
        "> /hang",
        "> behind it",
        "…",
        INTERRUPTED,
        DEQUEUED,
        "> /hang",
        "…",
        SHUTDOWN,
        "> /hang",
        RESTART,
    ];
    assert_eq!(
        shown.lines().collect::<Vec<_>>(),
        expected,
        "the transcript with every ending, in order"
    );
}
