//! The `HostSupervisor` and its `Host` actors against real `tether host`
//! processes: turns, sticky and least-loaded slots, crashes and restarts,
//! restart intensity, control requests with late acks, shutdown, and the
//! pid registry. A stand-in session actor collects what the supervisor
//! sends it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tether_actors::hooks::{ControlOutcome, HostsUnderTest, ToSession, TurnUpdate};
use tether_actors::{kill_leftovers, AfterIntensity, Backoff, HostConfig, RestartPolicy, Strategy};
use tether_protocol::FailureReason;
use tether_protocol::{ControlRequest, HostStat, TurnEndStatus, TurnStart};
use tokio::sync::mpsc;

/// How long a test waits for any one thing to happen.
const WAIT: Duration = Duration::from_secs(5);

/// A running supervisor, what its stand-in session saw, and the data dir.
struct Harness {
    sup: HostsUnderTest,
    seen: mpsc::UnboundedReceiver<ToSession>,
    dir: tempfile::TempDir,
}

/// `tether host --engine echo ARGS`, logging warnings only (through `env`,
/// which execs: the host's pid and cmdline are tether's).
fn host_command(args: &[&str]) -> Vec<String> {
    let mut cmd = vec![
        "env".to_string(),
        "RUST_LOG=warn".into(),
        env!("CARGO_BIN_EXE_tether").to_string(),
        "host".into(),
        "--engine".into(),
        "echo".into(),
    ];
    cmd.extend(args.iter().map(|s| s.to_string()));
    cmd
}

/// `slots` echo hosts, quick restarts (3 per minute, 20 ms backoff).
fn config(slots: usize, command: Vec<String>) -> HostConfig {
    let mut c = HostConfig::new(command);
    c.slots = slots;
    c.hello_timeout = Duration::from_secs(5);
    c.shutdown_grace = Duration::from_secs(2);
    c.restart = policy(3);
    c
}

fn policy(intensity: u32) -> RestartPolicy {
    resting_for(intensity, Duration::from_secs(60))
}

/// `intensity` restarts per `period`, then a rest until the period passed.
fn resting_for(intensity: u32, period: Duration) -> RestartPolicy {
    RestartPolicy {
        strategy: Strategy::OneForOne,
        intensity,
        period,
        backoff: Backoff::Exponential {
            base: Duration::from_millis(20),
            max: Duration::from_millis(100),
        },
        after_intensity: AfterIntensity::Rest,
    }
}

impl Harness {
    /// Starts the supervisor and waits until `wait_up` slots are up.
    async fn start(mut config: HostConfig, wait_up: usize) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        config.data_dir = Some(dir.path().to_path_buf());
        let (sup, seen) = HostsUnderTest::start(config)
            .await
            .expect("start the host supervisor");
        let h = Harness { sup, seen, dir };
        // `up_slots` counts slots that can take work now or once they are
        // started, so readiness is read from the slots' states.
        let t0 = Instant::now();
        loop {
            let up = h.hosts().await.iter().filter(|s| s.state == "up").count();
            if up == wait_up {
                break;
            }
            assert!(
                t0.elapsed() < WAIT,
                "timed out waiting for {wait_up} slots up"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        h
    }

    fn up(&self) -> usize {
        self.sup.slots_up()
    }

    async fn hosts(&self) -> Vec<HostStat> {
        self.sup.stats(WAIT).await.expect("Hosts answered")
    }

    async fn host(&self, slot: usize) -> HostStat {
        self.hosts().await.swap_remove(slot)
    }

    /// Polls `cond` (which may look at the supervisor) until it holds.
    async fn wait_for<F>(&self, cond: F, what: &str)
    where
        F: for<'a> Fn(&'a Harness) -> bool,
    {
        let t0 = Instant::now();
        while !cond(self) {
            assert!(t0.elapsed() < WAIT, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until slot `slot` is `state` (per `Hosts`).
    async fn wait_state(&self, slot: usize, state: &str) -> HostStat {
        self.wait_state_within(slot, state, WAIT).await
    }

    async fn wait_state_within(&self, slot: usize, state: &str, wait: Duration) -> HostStat {
        let t0 = Instant::now();
        loop {
            let h = self.host(slot).await;
            if h.state == state {
                return h;
            }
            assert!(
                t0.elapsed() < wait,
                "slot {slot} never became {state}: {h:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn start_turn(&self, turn_id: &str, prompt: &str, preferred: Option<u32>) {
        let start = TurnStart {
            turn_id: turn_id.into(),
            session_id: format!("s_{turn_id}").into(),
            trace_id: "0123456789ab".into(),
            history_base: None,
            history: tether_protocol::History::empty(),
            prompt: prompt.into(),
            config: Map::new(),
        };
        self.sup.start_turn(start, preferred).expect("StartTurn");
    }

    async fn next(&mut self) -> ToSession {
        tokio::time::timeout(WAIT, self.seen.recv())
            .await
            .expect("timed out waiting for the supervisor")
            .expect("probe channel open")
    }

    /// The next update, which must be of `turn_id`.
    async fn update(&mut self, turn_id: &str) -> TurnUpdate {
        match self.next().await {
            ToSession::Turn(id, update) if id.as_str() == turn_id => update,
            other => panic!("expected an update of {turn_id}, got {other:?}"),
        }
    }

    /// The slot a turn started on.
    async fn started(&mut self, turn_id: &str) -> u32 {
        match self.update(turn_id).await {
            TurnUpdate::Started { host_id } => host_id,
            other => panic!("expected Started, got {other:?}"),
        }
    }

    /// Reads a turn's updates to its end: (events, last update).
    async fn finish(&mut self, turn_id: &str) -> (Vec<TurnUpdate>, TurnUpdate) {
        let mut events = Vec::new();
        loop {
            match self.update(turn_id).await {
                u @ (TurnUpdate::End { .. } | TurnUpdate::Error { .. }) => return (events, u),
                u => events.push(u),
            }
        }
    }

    /// Asserts that nothing reaches the session for `quiet`.
    async fn assert_quiet(&mut self, quiet: Duration) {
        if let Ok(Some(seen)) = tokio::time::timeout(quiet, self.seen.recv()).await {
            panic!("unexpected {seen:?}");
        }
    }

    async fn control(&self, request_id: &str, wait: Duration) -> ControlOutcome {
        self.call_control(request_id, wait).await
    }

    fn call_control(
        &self,
        request_id: &str,
        wait: Duration,
    ) -> impl std::future::Future<Output = ControlOutcome> + 'static {
        let request = ControlRequest {
            request_id: request_id.into(),
            op: "compress".into(),
            session_id: "s_control".into(),
            history: Vec::new(),
            args: json!({}),
        };
        let outcome = self.sup.control(request, wait, wait + WAIT);
        async move { outcome.await.expect("Control answered") }
    }

    async fn shutdown(&self) {
        self.sup.shutdown(WAIT).await.expect("Shutdown answered");
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.sup.stop();
    }
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn kill_9(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -9 {pid}");
}

/// The registry file's records as (slot, pid).
fn recorded(dir: &Path) -> Vec<(u64, u32)> {
    let Ok(text) = std::fs::read(dir.join("hosts.json")) else {
        return Vec::new();
    };
    let v: Value = serde_json::from_slice(&text).expect("hosts.json is JSON");
    v["hosts"]
        .as_array()
        .expect("hosts array")
        .iter()
        .map(|h| {
            (
                h["slot"].as_u64().expect("slot"),
                h["pid"].as_u64().expect("pid") as u32,
            )
        })
        .collect()
}

/// The registry file's records once `ok` holds for them. The supervisor
/// writes the file on a task of its own, after the change it records, so
/// a read right after the change may still see the one before.
async fn recorded_once(dir: &Path, ok: impl Fn(&[(u64, u32)]) -> bool) -> Vec<(u64, u32)> {
    let t0 = Instant::now();
    loop {
        let records = recorded(dir);
        if ok(&records) {
            return records;
        }
        assert!(t0.elapsed() < WAIT, "hosts.json never settled: {records:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn crash_error(update: &TurnUpdate) -> bool {
    matches!(update, TurnUpdate::Error { reason, .. } if reason == FailureReason::HostCrash.as_str())
}

#[tokio::test]
async fn a_turn_streams_started_events_and_end() {
    let mut h = Harness::start(config(1, host_command(&[])), 1).await;
    let stat = h.host(0).await;
    assert_eq!(stat.state, "up");
    assert!(stat.pid.is_some_and(alive), "{stat:?}");

    h.start_turn("t_1", "hello big world", None);
    assert_eq!(h.started("t_1").await, 0);
    let (events, end) = h.finish("t_1").await;
    // However the supervisor batched them, the deltas arrive whole and in order.
    let texts: Vec<String> = events
        .iter()
        .flat_map(|e| match e {
            TurnUpdate::Events(evs) => evs,
            other => panic!("expected events, got {other:?}"),
        })
        .map(|ev| {
            assert_eq!(ev.kind, "message.delta");
            let payload: serde_json::Value =
                serde_json::from_str(ev.payload.get()).expect("delta payload");
            payload["text"].as_str().expect("delta text").to_owned()
        })
        .collect();
    assert_eq!(texts, ["hello ", "big ", "world"]);
    assert_eq!(
        end,
        TurnUpdate::End {
            status: TurnEndStatus::Complete,
            text: "hello big world".into(),
            usage: None,
        }
    );
    // The routing entry is gone: nothing more comes, the slot is idle.
    h.assert_quiet(Duration::from_millis(100)).await;
    assert_eq!(h.host(0).await.active_turns, 0);
}

#[tokio::test]
async fn two_turns_run_on_two_slots() {
    let mut h = Harness::start(config(2, host_command(&[])), 2).await;
    h.start_turn("t_a", "/sleep 300\nfirst", None);
    h.start_turn("t_b", "/sleep 300\nsecond", None);
    // The least loaded slot, lowest first: the second turn goes to slot 1.
    assert_eq!(h.started("t_a").await, 0);
    assert_eq!(h.started("t_b").await, 1);
    let busy: Vec<u32> = h.hosts().await.iter().map(|s| s.active_turns).collect();
    assert_eq!(busy, [1, 1]);
    let mut ends = Vec::new();
    while ends.len() < 2 {
        if let ToSession::Turn(id, u @ TurnUpdate::End { .. }) = h.next().await {
            ends.push((id.into_string(), u));
        }
    }
    ends.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        ends,
        [
            (
                "t_a".to_string(),
                TurnUpdate::End {
                    status: TurnEndStatus::Complete,
                    text: "first".into(),
                    usage: None,
                }
            ),
            (
                "t_b".to_string(),
                TurnUpdate::End {
                    status: TurnEndStatus::Complete,
                    text: "second".into(),
                    usage: None,
                }
            ),
        ]
    );
}

#[tokio::test]
async fn the_preferred_slot_is_sticky_while_up() {
    let mut h = Harness::start(config(2, host_command(&[])), 2).await;
    for i in 0..3 {
        let id = format!("t_{i}");
        h.start_turn(&id, "hi", Some(1));
        assert_eq!(h.started(&id).await, 1);
        h.finish(&id).await;
    }
    // A preferred slot that does not exist: the least loaded one.
    h.start_turn("t_x", "hi", Some(7));
    assert_eq!(h.started("t_x").await, 0);
    h.finish("t_x").await;
    // Even while slot 1 is busy, a turn that prefers it goes there.
    h.start_turn("t_busy", "/sleep 300\nbusy", Some(1));
    assert_eq!(h.started("t_busy").await, 1);
    h.start_turn("t_sticky", "hi", Some(1));
    assert_eq!(h.started("t_sticky").await, 1);
}

#[tokio::test]
async fn a_crash_fails_the_turn_once_and_the_slot_restarts() {
    let mut h = Harness::start(config(1, host_command(&[])), 1).await;
    let before = h.host(0).await;
    let old_pid = before.pid.expect("pid");
    recorded_once(h.dir.path(), |r| r == [(0, old_pid)]).await;

    h.start_turn("t_crash", "/crash\nboom", None);
    assert_eq!(h.started("t_crash").await, 0);
    let (events, end) = h.finish("t_crash").await;
    // The delta the host wrote before dying is delivered before the crash.
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(crash_error(&end), "{end:?}");

    let after = h.wait_state(0, "up").await;
    assert_eq!(after.restarts, 1);
    let new_pid = after.pid.expect("new pid");
    assert_ne!(new_pid, old_pid);
    assert!(!alive(old_pid), "the crashed host is reaped");
    recorded_once(h.dir.path(), |r| r == [(0, new_pid)]).await;
    // Exactly once: nothing else about the crashed turn.
    h.assert_quiet(Duration::from_millis(100)).await;

    h.start_turn("t_again", "works again", None);
    assert_eq!(h.started("t_again").await, 0);
    let (_, end) = h.finish("t_again").await;
    assert!(matches!(end, TurnUpdate::End { .. }), "{end:?}");
}

#[tokio::test]
async fn kill_9_of_the_host_is_a_host_crash() {
    let mut h = Harness::start(config(1, host_command(&[])), 1).await;
    let recorded_pids = recorded_once(h.dir.path(), |r| r.len() == 1).await;
    let pid = recorded_pids[0].1;
    assert_eq!(h.host(0).await.pid, Some(pid));

    h.start_turn("t_hang", "/hang", None);
    assert_eq!(h.started("t_hang").await, 0);
    assert!(matches!(h.update("t_hang").await, TurnUpdate::Events(_)));
    kill_9(pid);
    let end = h.update("t_hang").await;
    assert!(crash_error(&end), "{end:?}");
    let after = h.wait_state(0, "up").await;
    assert_ne!(after.pid, Some(pid));
    assert_eq!(h.up(), 1);
}

#[tokio::test]
async fn exceeding_the_restart_intensity_rests_the_slot_then_it_is_retried() {
    let mut c = config(1, host_command(&[]));
    c.restart = resting_for(1, Duration::from_secs(2));
    let mut h = Harness::start(c, 1).await;

    h.start_turn("t_1", "/crash", None);
    h.started("t_1").await;
    assert!(crash_error(&h.finish("t_1").await.1));
    h.wait_state(0, "up").await;

    h.start_turn("t_2", "/crash", None);
    h.started("t_2").await;
    assert!(crash_error(&h.finish("t_2").await.1));

    let resting = h.wait_state(0, "resting").await;
    assert_eq!(resting.restarts, 1);
    assert_eq!(resting.pid, None);
    assert_eq!(h.up(), 0);
    // The supervisor itself goes on; new work is refused at once (nothing
    // waits for a resting slot).
    h.start_turn("t_3", "hi", None);
    match h.update("t_3").await {
        TurnUpdate::Error { reason, .. } => {
            assert_eq!(reason, FailureReason::HostUnavailable.as_str())
        }
        other => panic!("expected host_unavailable, got {other:?}"),
    }
    assert!(matches!(
        h.control("r_resting", Duration::from_secs(1)).await,
        ControlOutcome::Error(_)
    ));
    // Once its period has passed it is retried, and serves again.
    let up = h.wait_state_within(0, "up", Duration::from_secs(20)).await;
    assert_eq!(up.restarts, 2);
    h.start_turn("t_4", "back again", None);
    h.started("t_4").await;
    assert!(
        matches!(h.finish("t_4").await.1, TurnUpdate::End { text, .. } if text == "back again")
    );
}

#[tokio::test]
async fn a_resting_slot_leaves_the_others_serving() {
    let mut c = config(2, host_command(&[]));
    c.restart = policy(0);
    let mut h = Harness::start(c, 2).await;
    h.start_turn("t_crash", "/crash", Some(0));
    assert_eq!(h.started("t_crash").await, 0);
    assert!(crash_error(&h.finish("t_crash").await.1));
    h.wait_state(0, "resting").await;
    assert_eq!(h.up(), 1);
    // Sticky to a slot that rests: moved to the one that is up.
    h.start_turn("t_moved", "hi", Some(0));
    assert_eq!(h.started("t_moved").await, 1);
}

#[tokio::test]
async fn a_host_that_cannot_be_spawned_for_a_while_rests_and_comes_back() {
    // Like a moment of file-descriptor exhaustion: every spawn fails until
    // the command exists again. Spawn failures count like crashes.
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("host.sh");
    let mut c = config(1, vec![script.to_string_lossy().into_owned()]);
    c.restart = resting_for(2, Duration::from_secs(2));
    let mut h = Harness::start(c, 0).await;
    let resting = h.wait_state(0, "resting").await;
    assert_eq!(resting.restarts, 2);
    assert_eq!(h.up(), 0);
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nRUST_LOG=warn exec {} host --engine echo\n",
            env!("CARGO_BIN_EXE_tether")
        ),
    )
    .expect("write the host script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let up = h.wait_state_within(0, "up", Duration::from_secs(20)).await;
    assert_eq!(up.restarts, 3);
    h.start_turn("t_1", "spawned at last", None);
    h.started("t_1").await;
    assert!(matches!(h.finish("t_1").await.1, TurnUpdate::End { .. }));
}

#[tokio::test]
async fn a_control_request_waits_for_a_starting_host_instead_of_failing() {
    // The host says hello only after a while: a compression asked before
    // that waits for it.
    let command = vec![
        "sh".into(),
        "-c".into(),
        format!(
            "sleep 1; RUST_LOG=warn exec {} host --engine echo",
            env!("CARGO_BIN_EXE_tether")
        ),
    ];
    let h = Harness::start(config(1, command), 0).await;
    assert_eq!(h.host(0).await.state, "starting");
    assert_eq!(
        h.control("r_early", Duration::from_secs(30)).await,
        ControlOutcome::Ack(json!({"summary": "Summary of 0 messages.", "removed": 0}))
    );
}

#[tokio::test]
async fn a_held_control_request_fails_when_no_host_says_hello_in_time() {
    let mut c = config(1, vec!["sleep".into(), "30".into()]);
    c.hello_timeout = Duration::from_millis(300);
    let h = Harness::start(c, 0).await;
    match h.control("r_nobody", Duration::from_secs(30)).await {
        ControlOutcome::Error(message) => assert!(message.contains("came up"), "{message}"),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_control_answered_within_its_wait_is_acked() {
    let h = Harness::start(config(1, host_command(&[])), 1).await;
    let outcome = h.control("r_1", Duration::from_secs(3)).await;
    assert_eq!(
        outcome,
        ControlOutcome::Ack(json!({"summary": "Summary of 0 messages.", "removed": 0}))
    );
}

#[tokio::test]
async fn a_late_answer_is_delivered_once_as_control_late() {
    let mut h = Harness::start(config(1, host_command(&["--compress-delay-ms", "300"])), 1).await;
    let t0 = Instant::now();
    let outcome = h.control("r_late", Duration::from_millis(50)).await;
    assert_eq!(outcome, ControlOutcome::Pending);
    assert!(
        t0.elapsed() < Duration::from_millis(280),
        "{:?}",
        t0.elapsed()
    );
    match h.next().await {
        ToSession::ControlLate(id, Ok(result)) => {
            assert_eq!(id, "r_late");
            assert_eq!(result["removed"], 0);
        }
        other => panic!("expected ControlLate, got {other:?}"),
    }
    h.assert_quiet(Duration::from_millis(200)).await;
}

#[tokio::test]
async fn a_crash_fails_waiting_and_late_control_requests() {
    let mut h = Harness::start(
        config(1, host_command(&["--compress-delay-ms", "10000"])),
        1,
    )
    .await;
    assert_eq!(
        h.control("r_late", Duration::from_millis(20)).await,
        ControlOutcome::Pending
    );
    let waiting = tokio::spawn(h.call_control("r_waiting", Duration::from_secs(3)));
    // Let the second request reach the supervisor before the kill.
    tokio::time::sleep(Duration::from_millis(100)).await;
    kill_9(h.host(0).await.pid.expect("pid"));
    match waiting.await.expect("join") {
        ControlOutcome::Error(message) => assert!(message.contains("died"), "{message}"),
        other => panic!("expected Error, got {other:?}"),
    }
    match h.next().await {
        ToSession::ControlLate(id, Err(message)) => {
            assert_eq!(id, "r_late");
            assert!(message.contains("died"), "{message}");
        }
        other => panic!("expected a failed ControlLate, got {other:?}"),
    }
    h.assert_quiet(Duration::from_millis(100)).await;
}

#[tokio::test]
async fn shutdown_leaves_no_host_process() {
    let mut h = Harness::start(config(2, host_command(&[])), 2).await;
    let pids: Vec<u32> = h.hosts().await.iter().filter_map(|s| s.pid).collect();
    assert_eq!(pids.len(), 2);
    h.start_turn("t_hang", "/hang", None);
    h.started("t_hang").await;

    h.shutdown().await;
    for pid in &pids {
        assert!(!alive(*pid), "host {pid} outlived the shutdown");
    }
    // The host interrupted its turn on `shutdown` before exiting.
    let (_, end) = h.finish("t_hang").await;
    assert!(
        matches!(
            end,
            TurnUpdate::End {
                status: TurnEndStatus::Interrupted,
                ..
            }
        ),
        "{end:?}"
    );
    assert_eq!(h.up(), 0);
    assert!(h
        .hosts()
        .await
        .iter()
        .all(|s| s.state == "down" && s.pid.is_none()));
    recorded_once(h.dir.path(), |r| r.is_empty()).await;
    h.start_turn("t_after", "hi", None);
    assert!(
        matches!(h.update("t_after").await, TurnUpdate::Error { reason, .. } if reason == FailureReason::HostUnavailable.as_str())
    );
}

#[tokio::test]
async fn stopping_the_supervisor_kills_its_hosts() {
    let h = Harness::start(config(2, host_command(&[])), 2).await;
    let pids: Vec<u32> = h.hosts().await.iter().filter_map(|s| s.pid).collect();
    assert_eq!(pids.len(), 2);
    h.sup
        .stop_and_wait(WAIT)
        .await
        .expect("stop the supervisor");
    for pid in &pids {
        assert!(!alive(*pid), "host {pid} outlived its supervisor");
    }
}

#[tokio::test]
async fn a_host_without_hello_is_dead() {
    let mut c = config(1, vec!["sleep".into(), "30".into()]);
    c.hello_timeout = Duration::from_millis(200);
    c.restart = policy(1);
    let h = Harness::start(c, 0).await;
    assert_eq!(h.host(0).await.state, "starting");
    let resting = h.wait_state(0, "resting").await;
    assert_eq!(resting.restarts, 1);
    assert_eq!(h.up(), 0);
}

#[tokio::test]
async fn a_command_that_cannot_start_rests_the_slot() {
    let mut c = config(2, vec!["/nonexistent/tether-host".into()]);
    c.restart = policy(2);
    let h = Harness::start(c, 0).await;
    for slot in 0..2 {
        let resting = h.wait_state(slot, "resting").await;
        assert_eq!(resting.restarts, 2);
    }
    assert_eq!(h.up(), 0);
    assert!(matches!(
        h.control("r_none", Duration::from_secs(1)).await,
        ControlOutcome::Error(_)
    ));
}

#[tokio::test]
async fn a_silent_host_is_dead_after_three_heartbeats() {
    // Says hello (with its own pid: `exec` keeps the shell's), then
    // nothing: no heartbeat ever.
    let hello = r#"{"type":"hello","protocol":1,"pid":'$$',"engine":"mute","version":"0"}"#;
    let mut c = config(
        1,
        vec![
            "sh".into(),
            "-c".into(),
            format!("echo '{hello}'; exec sleep 30"),
        ],
    );
    c.heartbeat = Duration::from_millis(400); // told as 1 s: dead after 3 s
    c.restart = policy(0);
    let h = Harness::start(c, 1).await;
    let t0 = Instant::now();
    h.wait_for(|h| h.up() == 0, "the silent host to be declared dead")
        .await;
    let silent = t0.elapsed();
    assert!(silent > Duration::from_millis(2500), "{silent:?}");
    assert_eq!(h.host(0).await.state, "resting");
}

#[tokio::test]
async fn a_bad_line_is_answered_with_an_error_frame() {
    // The host prints garbage, and only becomes a real host once it has
    // read the gateway's `error` answer from its stdin.
    let script = format!(
        "echo 'not a frame'; read -r line; case \"$line\" in *'\"type\":\"error\"'*) RUST_LOG=warn exec {} host --engine echo;; esac; sleep 30",
        env!("CARGO_BIN_EXE_tether")
    );
    let mut c = config(1, vec!["sh".into(), "-c".into(), script]);
    c.hello_timeout = Duration::from_secs(3);
    c.restart = policy(0);
    let mut h = Harness::start(c, 1).await;
    h.start_turn("t_1", "still works", None);
    h.started("t_1").await;
    assert!(matches!(h.finish("t_1").await.1, TurnUpdate::End { .. }));
}

#[tokio::test]
async fn kill_leftovers_kills_recorded_hosts_but_not_recycled_pids() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A host left over by a gateway that was killed hard (its stdin is
    // still open: it would run on forever).
    let mut leftover = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["host", "--engine", "echo"])
        .env("TETHER_HEARTBEAT_S", "3600")
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start a host");
    // A pid recorded for a host, now reused by an unrelated process.
    let mut stranger = std::process::Command::new("sleep")
        .arg("30")
        .process_group(0)
        .spawn()
        .expect("start sleep");
    // Wait until the host runs its own image (cmdline is final).
    let t0 = Instant::now();
    let cmdline = loop {
        let c = std::fs::read(format!("/proc/{}/cmdline", leftover.id())).expect("cmdline");
        if c.windows(4).any(|w| w == b"host") {
            break c;
        }
        assert!(t0.elapsed() < WAIT);
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let file = json!({"hosts": [
        {"slot": 0, "pid": leftover.id(), "cmdline": cmdline},
        {"slot": 1, "pid": stranger.id(), "cmdline": cmdline},
    ]});
    std::fs::write(dir.path().join("hosts.json"), file.to_string()).expect("write");

    assert_eq!(kill_leftovers(dir.path()), 1);
    let status = leftover.wait().expect("wait");
    assert_eq!(status.signal(), Some(9), "{status:?}");
    assert!(
        stranger.try_wait().expect("try_wait").is_none(),
        "the stranger lives"
    );
    assert!(!dir.path().join("hosts.json").exists());
    let _ = stranger.kill();
    let _ = stranger.wait();
}
