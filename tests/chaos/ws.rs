//! A WebSocket client for chaos runs: unlike `common::Client` it never
//! panics on a closed connection; it reports it, and the caller reconnects.

use std::collections::VecDeque;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub struct Ws {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    events: VecDeque<Value>,
}

const CALL_WAIT: Duration = Duration::from_secs(20);

impl Ws {
    /// Connected and past `gateway.ready`, or `None`.
    pub async fn connect(url: &str) -> Option<Ws> {
        let (ws, _) = tokio::time::timeout(CALL_WAIT, tokio_tungstenite::connect_async(url))
            .await
            .ok()?
            .ok()?;
        let mut c = Ws {
            ws,
            next_id: 1,
            events: VecDeque::new(),
        };
        let ready = c.frame(CALL_WAIT).await.ok()??;
        (ready["params"]["type"] == "gateway.ready").then_some(c)
    }

    /// Next JSON frame; `Ok(None)` on timeout, `Err` once closed.
    async fn frame(&mut self, wait: Duration) -> Result<Option<Value>, ()> {
        loop {
            match tokio::time::timeout(wait, self.ws.next()).await {
                Err(_) => return Ok(None),
                Ok(Some(Ok(Message::Text(t)))) => {
                    return serde_json::from_str(&t).map(Some).map_err(|_| ())
                }
                Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => continue,
                Ok(_) => return Err(()),
            }
        }
    }

    /// The result, `Err(Some(error))` for a JSON-RPC error, `Err(None)`
    /// when the connection is gone (or the answer did not come in time).
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, Option<Value>> {
        let id = self.next_id;
        self.next_id += 1;
        let text = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string();
        self.ws
            .send(Message::Text(text.into()))
            .await
            .map_err(|_| None)?;
        let deadline = tokio::time::Instant::now() + CALL_WAIT;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let frame = self.frame(left).await.map_err(|_| None)?.ok_or(None)?;
            if frame["id"] == id {
                return match frame.get("error") {
                    Some(e) => Err(Some(e.clone())),
                    None => Ok(frame["result"].clone()),
                };
            }
            if frame["method"] == "event" {
                self.events.push_back(frame["params"].clone());
            }
        }
    }

    /// Next event; `Ok(None)` when none came within `wait`.
    pub async fn event(&mut self, wait: Duration) -> Result<Option<Value>, ()> {
        if let Some(e) = self.events.pop_front() {
            return Ok(Some(e));
        }
        loop {
            match self.frame(wait).await? {
                None => return Ok(None),
                Some(f) if f["method"] == "event" => return Ok(Some(f["params"].clone())),
                Some(_) => {}
            }
        }
    }
}
