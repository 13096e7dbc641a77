//! The least a WebSocket room broadcaster can do: the ceiling tether's
//! fan-out is compared against (bench/compare.sh, binary `tether-limit`).
//!
//! No persistence, no sequence numbers, no replay, no protocol beyond two
//! JSON shapes: `{"join":"ROOM"}` joins a room (answered `{"joined":"ROOM"}`
//! once the join is in effect, so a generator knows when to publish), and
//! any other text frame with a `"room"` field is sent verbatim to every
//! other member of that room. The binary runs it on one thread
//! (`current_thread`): the figure is what one core can fan out. A frame is received once and shared by all
//! members (`Utf8Bytes` is reference counted), as tether shares its
//! serialized frames.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

/// tungstenite's read buffer is 128 KiB by default and all of it becomes
/// resident (it is zeroed before the first read); 2 KiB is what tether's
/// gateway uses (gateway/src/server.rs), so idle memory compares like for
/// like.
const READ_BUFFER: usize = 2 * 1024;

/// What the broadcaster reads of a frame; every other field is the payload.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    join: Option<&'a str>,
    #[serde(borrow)]
    room: Option<&'a str>,
}

type Outbox = mpsc::UnboundedSender<Utf8Bytes>;

/// Room name → (connection id, its outbox).
#[derive(Default)]
struct Rooms(Mutex<HashMap<String, Vec<(u64, Outbox)>>>);

impl Rooms {
    fn join(&self, room: &str, id: u64, tx: Outbox) {
        let mut rooms = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        rooms.entry(room.to_owned()).or_default().push((id, tx));
    }

    fn leave(&self, room: &str, id: u64) {
        let mut rooms = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(members) = rooms.get_mut(room) {
            members.retain(|(m, _)| *m != id);
        }
    }

    fn publish(&self, room: &str, from: u64, frame: &Utf8Bytes) {
        let rooms = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for (id, tx) in rooms.get(room).into_iter().flatten() {
            if *id != from {
                // A member whose writer is gone is removed when its reader ends.
                let _ = tx.send(frame.clone());
            }
        }
    }
}

/// Accepts and serves connections on `listener` until accepting fails.
pub async fn serve(listener: TcpListener) -> std::io::Result<()> {
    let rooms = Arc::new(Rooms::default());
    let mut next_id = 0u64;
    loop {
        let (stream, _) = listener.accept().await?;
        next_id += 1;
        tokio::spawn(connection(stream, next_id, rooms.clone()));
    }
}

/// One connection: a reader that joins and publishes, and a writer that
/// drains this member's outbox, flushing once per burst.
async fn connection(stream: TcpStream, id: u64, rooms: Arc<Rooms>) {
    let _ = stream.set_nodelay(true);
    let config = WebSocketConfig::default().read_buffer_size(READ_BUFFER);
    let Ok(ws) = tokio_tungstenite::accept_async_with_config(stream, Some(config)).await else {
        return;
    };
    let (mut sink, mut stream) = ws.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Utf8Bytes>();
    let writer = tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            if sink.feed(Message::Text(frame)).await.is_err() {
                return;
            }
            while let Ok(frame) = rx.try_recv() {
                if sink.feed(Message::Text(frame)).await.is_err() {
                    return;
                }
            }
            if sink.flush().await.is_err() {
                return;
            }
        }
    });
    let mut joined = Vec::new();
    while let Some(Ok(msg)) = stream.next().await {
        let Message::Text(text) = msg else { continue };
        let Ok(head) = serde_json::from_str::<Head>(&text) else {
            continue;
        };
        if let Some(room) = head.join {
            rooms.join(room, id, tx.clone());
            joined.push(room.to_owned());
            let reply = serde_json::json!({ "joined": room }).to_string();
            let _ = tx.send(reply.into());
        } else if let Some(room) = head.room {
            rooms.publish(room, id, &text);
        }
    }
    for room in &joined {
        rooms.leave(room, id);
    }
    writer.abort();
}
