//! The echo engine's `/flood N PER_SECOND BYTES [T0_US]`: a compute host
//! that publishes durable events on a fixed schedule, so that fan-out
//! benchmarks (`tether bench load`) measure the real path: host process →
//! gateway → store → every peer, not events injected inside the gateway.
//!
//! Event `i` (0-based) is a `tool.start` meant to leave at
//! `T0_US + i / PER_SECOND` (unix microseconds; `T0_US` defaults to the
//! turn's start). `tool.start` because it is durable, a host may send it
//! (PROTOCOL Part 2) and it is not part of the transcript, so a long flood
//! does not grow what a resume returns. Its payload is
//! `{"tool_id":"flood","name":"flood","args":{"n":i,"t_us":INTENDED,"pad":"x…"}}`,
//! padded to about BYTES of JSON.
//!
//! The schedule never waits on delivery. When the host falls behind (the
//! gateway reads its stdout slower than the schedule, and the stdout queue
//! pushes back), the late events go out at once, still stamped with the time
//! they were meant for: slow delivery then shows as latency at the clients
//! instead of hiding as a lower rate.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::echo::Stop;
use super::engine::{Cancel, TurnSink};
use crate::DirectiveError;

/// Most events one flood may ask for.
const MAX_COUNT: u64 = 100_000_000;
/// Largest padded payload.
const MAX_BYTES: usize = 1024 * 1024;
/// Fastest schedule of one turn (events per second).
const MAX_RATE: f64 = 10_000_000.0;

/// A parsed `/flood` directive.
#[derive(Debug, Clone, PartialEq)]
pub struct Flood {
    count: u64,
    per_second: f64,
    bytes: usize,
    t0_us: Option<u64>,
}

#[derive(Serialize)]
struct FloodArgs<'a> {
    n: u64,
    t_us: u64,
    pad: &'a str,
}

#[derive(Serialize)]
struct ToolStart<'a> {
    tool_id: &'static str,
    name: &'static str,
    args: FloodArgs<'a>,
}

impl Flood {
    /// `N PER_SECOND BYTES [T0_US]`; `Err` is the `turn.error` message.
    pub fn parse(args: &str) -> Result<Flood, DirectiveError> {
        let usage = || DirectiveError::Arguments {
            directive: "/flood",
            needs: "N PER_SECOND BYTES [T0_US]".into(),
            got: args.to_owned(),
        };
        let words: Vec<&str> = args.split_whitespace().collect();
        let [count, per_second, bytes, rest @ ..] = words.as_slice() else {
            return Err(usage());
        };
        let count = count
            .parse::<u64>()
            .ok()
            .filter(|n| *n <= MAX_COUNT)
            .ok_or_else(usage)?;
        let per_second = per_second
            .parse::<f64>()
            .ok()
            .filter(|r| r.is_finite() && *r > 0.0 && *r <= MAX_RATE)
            .ok_or_else(usage)?;
        let bytes = bytes
            .parse::<usize>()
            .ok()
            .filter(|b| *b <= MAX_BYTES)
            .ok_or_else(usage)?;
        let t0_us = match rest {
            [] => None,
            [t0] => Some(t0.parse::<u64>().map_err(|_| usage())?),
            _ => return Err(usage()),
        };
        Ok(Flood {
            count,
            per_second,
            bytes,
            t0_us,
        })
    }

    /// Emits the events on their schedule; `Err` when interrupted or when
    /// stdout is gone.
    pub async fn run(&self, out: &TurnSink, cancel: &Cancel) -> Result<(), Stop> {
        let t0 = self.t0_us.unwrap_or_else(unix_micros);
        let pad = "x".repeat(self.pad_len(t0));
        let period_us = 1_000_000.0 / self.per_second;
        for n in 0..self.count {
            if cancel.is_cancelled() {
                return Err(Stop);
            }
            // Rounded to whole microseconds: the stamp clients subtract.
            let due = t0 + (n as f64 * period_us).round() as u64;
            let now = unix_micros();
            if due > now {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_micros(due - now)) => {}
                    () = cancel.cancelled() => return Err(Stop),
                }
            }
            let payload = ToolStart {
                tool_id: "flood",
                name: "flood",
                args: FloodArgs {
                    n,
                    t_us: due,
                    pad: &pad,
                },
            };
            out.event("tool.start", &payload).await?;
        }
        Ok(())
    }

    /// Padding that brings the largest event's payload to about `bytes`.
    fn pad_len(&self, t0: u64) -> usize {
        let unpadded = ToolStart {
            tool_id: "flood",
            name: "flood",
            args: FloodArgs {
                n: self.count,
                t_us: t0,
                pad: "",
            },
        };
        let len = serde_json::to_string(&unpadded).map_or(0, |s| s.len());
        self.bytes.saturating_sub(len)
    }
}

fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked() {
        assert!(Flood::parse("").is_err());
        assert!(Flood::parse("10 100").is_err());
        assert!(Flood::parse("10 0 100").is_err());
        assert!(Flood::parse("10 fast 100").is_err());
        assert!(Flood::parse("10 100 100 soon").is_err());
        assert!(Flood::parse("10 100 100 1 2").is_err());
        assert_eq!(
            Flood::parse("10 2.5 100 1700000000000000").ok(),
            Some(Flood {
                count: 10,
                per_second: 2.5,
                bytes: 100,
                t0_us: Some(1_700_000_000_000_000),
            })
        );
    }

    #[test]
    fn payloads_are_padded_to_about_the_size_asked() {
        let flood = Flood::parse("1000 10 100").unwrap();
        let t0 = unix_micros();
        let payload = ToolStart {
            tool_id: "flood",
            name: "flood",
            args: FloodArgs {
                n: 999,
                t_us: t0,
                pad: &"x".repeat(flood.pad_len(t0)),
            },
        };
        let len = serde_json::to_string(&payload).unwrap().len();
        assert!((98..=100).contains(&len), "{len}");
    }
}
