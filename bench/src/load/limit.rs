//! The limit baseline (bench/limit, `tether-limit`): a bare WebSocket room
//! broadcaster with no persistence, no sequence numbers and no recovery.
//!
//! `{"join":"ROOM"}` joins (answered `{"joined":"ROOM"}`); a publisher's
//! `{"room","n","t_us","pad"}` reaches every other member of the room
//! verbatim, so an event frame is exactly what the publisher sent.

use super::conn::{flood_in, Conn, Event, Frame};

/// How every published frame starts (the publisher writes `room` first).
const EVENT_HEAD: &str = r#"{"room":"#;

pub fn parse(text: &str) -> Option<Frame> {
    text.starts_with(EVENT_HEAD)
        .then(|| Frame::Event(super::turns::baseline_event(text, flood_in(text), None)))
}

/// Joins `room` and waits until the join is in effect.
pub async fn join(
    conn: &mut Conn,
    room: &str,
    on_event: &mut impl FnMut(Event),
) -> anyhow::Result<()> {
    conn.send(serde_json::json!({ "join": room }).to_string())
        .await?;
    conn.until(on_event, |t| {
        t.starts_with(r#"{"joined":"#).then_some(Ok(()))
    })
    .await
}
