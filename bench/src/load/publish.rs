//! The publishing schedule, shared by all three targets, and the baselines'
//! publisher.
//!
//! Room `k`'s event `i` is meant to leave at `t0 + (i + k/S) / r` (S rooms,
//! r events a second per room): the rooms are staggered evenly, so the
//! servers see a steady stream rather than S events at once every 1/r
//! seconds. The schedule never waits on delivery; each event carries the
//! time it was meant to leave, so a server that falls behind shows it as
//! latency at the clients. Against tether the compute hosts keep this
//! schedule (echo's `/flood`, one turn per session, started at the room's
//! own `t0`); against the baselines one publisher connection does.

use std::time::Duration;

use serde_json::json;

use super::conn::{unix_micros, Conn};
use super::{socketio, TargetKind};

/// One publishing phase.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub rooms: usize,
    /// Events a second per room.
    pub per_room: f64,
    /// Events per room.
    pub count: u64,
    /// Unix microseconds of room 0's first event.
    pub t0_us: u64,
    /// Payload size, about.
    pub bytes: usize,
}

impl Schedule {
    /// Room `k`'s first event, unix microseconds.
    pub fn room_t0(&self, k: usize) -> u64 {
        self.t0_us + (k as f64 * 1e6 / (self.rooms as f64 * self.per_room)).round() as u64
    }

    /// When room `k`'s event `i` is meant to leave (the same rounding as
    /// echo's `/flood`).
    pub fn due(&self, k: usize, i: u64) -> u64 {
        self.room_t0(k) + (i as f64 * 1e6 / self.per_room).round() as u64
    }

    /// How many of room `k`'s events were meant to leave by `at_us`.
    pub fn released(&self, k: usize, at_us: u64) -> u64 {
        let t0 = self.room_t0(k);
        if at_us < t0 {
            return 0;
        }
        let i = ((at_us - t0) as f64 * self.per_room / 1e6).floor() as u64 + 1;
        i.min(self.count)
    }

    /// Unix microseconds of the last event of all.
    pub fn end_us(&self) -> u64 {
        self.due(self.rooms.saturating_sub(1), self.count.saturating_sub(1))
    }
}

/// The baselines' event body, padded to about `bytes` of JSON, `room`
/// first (the limit's clients recognize events by it).
fn body(room: &str, n: u64, t_us: u64, bytes: usize) -> String {
    let unpadded = json!({"room": room, "n": n, "t_us": t_us, "pad": ""}).to_string();
    let pad = "x".repeat(bytes.saturating_sub(unpadded.len()));
    format!(r#"{{"room":"{room}","n":{n},"t_us":{t_us},"pad":"{pad}"}}"#)
}

/// Publishes `sched` to `rooms` over `conn` (a connected publisher that is
/// in no room), on time, answering the server's heartbeats meanwhile.
pub async fn run(
    kind: TargetKind,
    mut conn: Conn,
    rooms: &[String],
    sched: &Schedule,
) -> anyhow::Result<()> {
    let s = sched.rooms as u64;
    for j in 0..s * sched.count {
        let (k, i) = ((j % s) as usize, j / s);
        let due = sched.due(k, i);
        loop {
            let now = unix_micros();
            if due <= now {
                break;
            }
            conn.flush().await?;
            tokio::select! {
                () = tokio::time::sleep(Duration::from_micros(due - now)) => break,
                // Heartbeats are answered inside `next`; nothing else comes.
                frame = conn.next() => { frame?; }
            }
        }
        let room = rooms.get(k).map_or("", String::as_str);
        let body = body(room, i, due, sched.bytes);
        let frame = match kind {
            TargetKind::Socketio => socketio::publish_frame(&body),
            _ => body,
        };
        conn.feed(frame).await?;
    }
    conn.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rooms_are_staggered_and_release_in_order() {
        let s = Schedule {
            rooms: 4,
            per_room: 10.0,
            count: 5,
            t0_us: 1_000_000,
            bytes: 100,
        };
        assert_eq!(s.room_t0(1), 1_025_000);
        assert_eq!(s.due(1, 2), 1_225_000);
        assert_eq!(s.released(1, 1_024_999), 0);
        assert_eq!(s.released(1, 1_225_000), 3);
        assert_eq!(s.released(1, 9_000_000), 5);
        assert_eq!(s.end_us(), 1_475_000);
        let b = body("r1", 3, 1_700_000_000_000_000, 100);
        assert!(
            b.starts_with(r#"{"room":"r1","n":3,"#) && (99..=100).contains(&b.len()),
            "{b}"
        );
    }
}
