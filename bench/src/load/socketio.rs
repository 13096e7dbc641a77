//! The Socket.IO baseline (bench/socketio/server.js, Socket.IO 4.8 with
//! `connectionStateRecovery`), spoken directly: Engine.IO v4 over a
//! WebSocket, with just enough of Socket.IO's framing.
//!
//! - Engine.IO: the server opens with `0{"sid","pingInterval",...}`, pings
//!   with `2` every `pingInterval`, and drops a client that does not answer
//!   `3` within `pingTimeout` ([`super::conn::Conn::next`] answers).
//! - Socket.IO: `40` connects to the main namespace; the answer is
//!   `40{"sid","pid"}`, `pid` being the private session id that recovery
//!   needs. Events are `42["name",args...]`, an acknowledged one
//!   `42ID["name",...]`, answered `43ID[...]`.
//! - Recovery: with `connectionStateRecovery` on, the server appends an
//!   offset (the id of the packet in its in-memory buffer) as the last
//!   argument of every event broadcast to a room. A client that comes back
//!   sends `40{"pid":PID,"offset":LAST_OFFSET}`; when the server still has
//!   that session and that offset it restores the rooms, answers with the
//!   same `pid` and sends the missed packets (possibly before its `40`
//!   answer). Otherwise the `pid` is new and the client starts over.
//!
//! The rooms are `r0`, `r1`, ...; clients join with the acknowledged event
//! `join`; the publisher sends `pub` `{"room","n","t_us","pad"}`, which the
//! server broadcasts to the room as `ev` (the publisher excluded).

use anyhow::{bail, Context};
use serde_json::{json, Value};

use super::conn::{flood_in, Conn, Event, Frame};
use super::TargetKind;

/// Engine.IO's heartbeat, and the answer.
pub const PING: &str = "2";
pub const PONG: &str = "3";

/// How a broadcast event frame starts.
const EVENT_HEAD: &str = r#"42["ev","#;

pub fn parse(text: &str) -> Option<Frame> {
    if !text.starts_with(EVENT_HEAD) {
        return None;
    }
    // The offset is the last argument: `...,"OFFSET"]`.
    let offset = text
        .strip_suffix("\"]")
        .and_then(|s| s.rfind('"').map(|i| s[i + 1..].to_owned()));
    Some(Frame::Event(super::turns::baseline_event(
        text,
        flood_in(text),
        offset,
    )))
}

/// A connected Socket.IO client.
pub struct Connected {
    pub conn: Conn,
    /// The private session id (what a recovery presents).
    pub pid: String,
    /// The server restored a previous session.
    pub recovered: bool,
}

/// Connects; with `previous` (`pid`, `offset`) asks to recover that
/// session. Missed packets go to `on_event`.
pub async fn connect(
    url: &str,
    previous: Option<(&str, &str)>,
    on_event: &mut impl FnMut(Event),
) -> anyhow::Result<Connected> {
    let mut conn = Conn::open(TargetKind::Socketio, url).await?;
    conn.until(on_event, |t| t.starts_with('0').then_some(Ok(())))
        .await
        .context("no Engine.IO open packet")?;
    let connect = match previous {
        Some((pid, offset)) => format!("40{}", json!({"pid": pid, "offset": offset})),
        None => "40".to_owned(),
    };
    conn.send(connect).await?;
    let pid = conn
        .until(on_event, |t| {
            if t.starts_with("44") {
                return Some(Err(anyhow::anyhow!("connect refused: {t}")));
            }
            let body = t.strip_prefix("40")?;
            let v: Value = serde_json::from_str(body).ok()?;
            Some(
                v["pid"]
                    .as_str()
                    .map(str::to_owned)
                    .context("no pid: is connectionStateRecovery on?"),
            )
        })
        .await?;
    let recovered = previous.is_some_and(|(old, _)| old == pid);
    Ok(Connected {
        conn,
        pid,
        recovered,
    })
}

/// Joins room `room` and waits for the server's acknowledgement.
pub async fn join(
    conn: &mut Conn,
    room: &str,
    on_event: &mut impl FnMut(Event),
) -> anyhow::Result<()> {
    conn.send(format!("421{}", json!(["join", room]))).await?;
    conn.until(on_event, |t| t.starts_with("431").then_some(Ok(())))
        .await
        .with_context(|| format!("join {room} not acknowledged"))
}

/// A `pub` event carrying one benchmark event for `room`.
pub fn publish_frame(body: &str) -> String {
    format!(r#"42["pub",{body}]"#)
}

/// Fails unless `url` looks like an Engine.IO WebSocket endpoint.
pub fn check_url(url: &str) -> anyhow::Result<()> {
    if !url.contains("EIO=4") || !url.contains("transport=websocket") {
        bail!("a Socket.IO url needs ?EIO=4&transport=websocket: {url}");
    }
    Ok(())
}
