//! The tether side: JSON-RPC over `/ws`, sessions as rooms, and compute
//! hosts as publishers.
//!
//! Events are not injected into the gateway: each session runs one turn
//! whose prompt is the echo engine's `/flood` directive, so every event
//! travels the real path (host process → gateway → SQLite → every peer).
//! A control connection, attached to nothing, creates the sessions and
//! submits the prompts; the clients attach with `session.resume` and read.

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};

use super::conn::{flood_in, number_after, spaces, Conn, Event, Flood, Frame};
use super::publish::Schedule;
use super::TargetKind;

/// How every event frame of the gateway starts (a reply never does).
const EVENT_HEAD: &str = r#"{"jsonrpc":"2.0","method":"event","params":"#;

/// Requests in flight on the control connection.
const WINDOW: usize = 64;

pub fn parse(text: &str) -> Option<Frame> {
    if !text.starts_with(EVENT_HEAD) {
        return None;
    }
    let body = &text[EVENT_HEAD.len()..];
    let delta = body.starts_with(r#"{"type":"message.delta""#);
    let flood = if !delta && text.contains(r#""type":"tool.start""#) {
        flood_in(text)
    } else {
        None
    };
    let seq = if delta {
        None
    } else {
        number_after(text, "\"seq\":")
    };
    // A session's own `session.created` belongs to no turn: a client whose
    // resume raced its commit reads it live, and counted it would be an
    // extra durable event of the step (its seq still counts for gaps).
    let created = body.starts_with(r#"{"type":"session.created""#);
    Some(Frame::Event(Event {
        seq,
        flood,
        offset: None,
        durable: seq.is_some() && !created,
        pieces: if delta { spaces(text) } else { 0 },
        complete: body.starts_with(r#"{"type":"message.complete""#),
    }))
}

/// Opens a connection and reads `gateway.ready`.
pub async fn connect(url: &str) -> anyhow::Result<Conn> {
    let mut conn = Conn::open(TargetKind::Tether, url).await?;
    match tokio::time::timeout(super::conn::STALL, conn.next())
        .await
        .context("no gateway.ready")??
    {
        Frame::Event(_) => Ok(conn),
        Frame::Text(t) => bail!("expected gateway.ready, got {t}"),
    }
}

fn request(id: usize, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// Sends `requests` with at most [`WINDOW`] in flight; their results in
/// order. Events that arrive meanwhile go to `on_event`.
async fn pipelined(
    conn: &mut Conn,
    method: &str,
    params: Vec<Value>,
    on_event: &mut impl FnMut(Event),
) -> anyhow::Result<Vec<Value>> {
    let total = params.len();
    let mut results = vec![Value::Null; total];
    let mut params = params.into_iter().enumerate();
    let (mut sent, mut answered) = (0, 0);
    while answered < total {
        while sent < total && sent - answered < WINDOW {
            if let Some((i, p)) = params.next() {
                conn.send(request(i, method, p)).await?;
                sent += 1;
            }
        }
        let (id, result) = conn
            .until(on_event, |t| {
                let v: Value = serde_json::from_str(t).ok()?;
                let id = usize::try_from(v.get("id")?.as_u64()?).ok()?;
                Some(match v.get("error") {
                    Some(e) => Err(anyhow!("{method}: {e}")),
                    None => Ok((id, v["result"].clone())),
                })
            })
            .await?;
        *results.get_mut(id).context("reply to an unknown id")? = result;
        answered += 1;
    }
    Ok(results)
}

/// Creates `n` sessions nobody is attached to; their ids.
pub async fn create_sessions(ctl: &mut Conn, n: usize) -> anyhow::Result<Vec<String>> {
    let params = (0..n)
        .map(|i| json!({"title": format!("bench {i}"), "attach": false}))
        .collect();
    pipelined(ctl, "session.create", params, &mut |_| {})
        .await?
        .iter()
        .map(|r| {
            r["session"]["session_id"]
                .as_str()
                .map(str::to_owned)
                .context("session.create without a session_id")
        })
        .collect()
}

/// Attaches `conn` to a session, replaying every event after `last_seen`
/// into `on_event`. `Ok(false)` when the gateway answered `resync` (too
/// much was missed to replay).
pub async fn attach(
    conn: &mut Conn,
    session_id: &str,
    last_seen: u64,
    on_event: &mut impl FnMut(Event),
) -> anyhow::Result<bool> {
    let params = json!({"session_id": session_id, "last_seen": last_seen,
        "attach": true, "omit_messages": true});
    let result = pipelined(conn, "session.resume", vec![params], on_event)
        .await?
        .pop()
        .context("no resume result")?;
    for e in result["events"].as_array().into_iter().flatten() {
        let args = &e["payload"]["args"];
        let flood = match (
            e["type"].as_str(),
            args["n"].as_u64(),
            args["t_us"].as_u64(),
        ) {
            (Some("tool.start"), Some(n), Some(t_us)) => Some(Flood { n, t_us }),
            _ => None,
        };
        on_event(Event {
            seq: e["seq"].as_u64(),
            flood,
            durable: true,
            complete: e["type"] == "message.complete",
            ..Event::default()
        });
    }
    Ok(!result["resync"].as_bool().unwrap_or(false))
}

/// Starts one `/flood` turn per session on `sched`; returns once every
/// prompt was accepted (the hosts keep the schedule from there).
pub async fn flood(ctl: &mut Conn, sessions: &[String], sched: &Schedule) -> anyhow::Result<()> {
    let params = sessions
        .iter()
        .enumerate()
        .map(|(k, id)| {
            let text = format!(
                "/flood {} {} {} {}",
                sched.count,
                sched.per_room,
                sched.bytes,
                sched.room_t0(k)
            );
            json!({"session_id": id, "text": text})
        })
        .collect();
    pipelined(ctl, "prompt.submit", params, &mut |_| {}).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(text: &str) -> Event {
        match parse(text) {
            Some(Frame::Event(e)) => e,
            _ => panic!("not an event: {text}"),
        }
    }

    #[test]
    fn a_sessions_creation_is_not_counted_as_a_turns_durable_event() {
        let head = EVENT_HEAD;
        let created = event(&format!(
            r#"{head}{{"type":"session.created","session_id":"s_1","seq":1}}}}"#
        ));
        assert_eq!(created.seq, Some(1));
        assert!(!created.durable);
        let complete = event(&format!(
            r#"{head}{{"type":"message.complete","session_id":"s_1","seq":5}}}}"#
        ));
        assert_eq!(complete.seq, Some(5));
        assert!(complete.durable && complete.complete);
    }
}
