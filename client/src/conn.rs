//! One WebSocket connection to the gateway, as the client commands use it.
//!
//! A connection carries two interleaved streams: replies to our requests
//! (matched by id) and event notifications. Simple commands want "call and
//! wait for the answer" while events pile up; `attach` wants everything in
//! arrival order from one `select!` branch. [`Conn`] serves both: [`Conn::call`]
//! sets aside what arrives before its reply, and [`Conn::next`] hands that
//! back first, so nothing is lost or reordered between the two styles.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use tether_protocol::codes;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::header::{HeaderValue, AUTHORIZATION};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::Target;

/// How long the TCP connect, the upgrade and the `gateway.ready` frame may
/// take together.
const CONNECT_WAIT: Duration = Duration::from_secs(10);

/// Largest frame we accept: the gateway does not bound what it sends (a
/// resume of a long transcript, a `/big` reply), so neither do we, short of
/// a size that signals a broken peer.
const MAX_INBOUND: usize = 512 << 20;

/// Why a client command could not do its job.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("bad --url {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("cannot connect to {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("the gateway wants a token (HTTP 401): pass --token or set TETHER_TOKEN")]
    NoToken,
    #[error("the gateway refused the token (HTTP 401): check --token / TETHER_TOKEN")]
    BadToken,
    #[error("the gateway refused the connection (HTTP {status}){body}")]
    Refused { status: u16, body: String },
    #[error("connection to the gateway lost{0}")]
    Lost(String),
    #[error("{0}")]
    Rpc(RpcError),
    #[error("unexpected answer from the gateway: {0}")]
    Protocol(String),
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
}

impl ClientError {
    /// The exit status this failure maps to (see `super::exit`).
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Rpc(_) => super::exit::FAILED,
            _ => super::exit::USAGE,
        }
    }

    pub fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> ClientError {
        move |source| ClientError::Io { what, source }
    }

    /// The JSON-RPC error code, when the gateway answered with one.
    pub fn rpc_code(&self) -> Option<i64> {
        match self {
            ClientError::Rpc(e) => Some(e.code),
            _ => None,
        }
    }
}

/// An error answer from the gateway, with the method it answered.
#[derive(Debug)]
pub struct RpcError {
    pub method: &'static str,
    pub code: i64,
    pub message: String,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The gateway's 4001 deliberately says nothing (it cannot tell
        // "unknown" from "another profile's"), so say what it means here.
        match self.code {
            codes::SESSION_NOT_FOUND => write!(
                f,
                "no such session (error {}: unknown id, or another profile's)",
                self.code
            ),
            codes::SESSION_CLOSED => write!(f, "the session is closed (error {})", self.code),
            _ => write!(
                f,
                "{} failed: {} (error {})",
                self.method, self.message, self.code
            ),
        }
    }
}

/// An event notification's params (PROTOCOL 1.2), kept loose so that an
/// event type this client does not know is skipped rather than fatal.
#[derive(Debug, Clone, Deserialize)]
pub struct Event {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub seq: Option<u64>,
    #[serde(default)]
    pub turn_id: Option<String>,
    #[serde(default)]
    pub payload: Value,
}

/// The answer to one of our requests.
#[derive(Debug)]
pub struct Reply {
    pub id: u64,
    pub outcome: Result<Value, ClientError>,
}

/// What arrives on a connection, in arrival order.
#[derive(Debug)]
pub enum Incoming {
    Event(Event),
    Reply(Reply),
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A connected, greeted gateway connection.
pub struct Conn {
    ws: Ws,
    next_id: u64,
    /// Request id → method, to name the method in an error answer.
    methods: HashMap<u64, &'static str>,
    /// Frames read while [`Conn::call`] waited for its own reply.
    queued: VecDeque<Incoming>,
    profile: Option<String>,
    /// The store's epoch from `gateway.ready` (PROTOCOL 1.3).
    pub epoch: String,
}

impl Conn {
    /// Connects, upgrades (with the bearer token) and reads `gateway.ready`.
    pub async fn open(target: &Target) -> Result<Conn, ClientError> {
        let url = ws_url(&target.url)?;
        match tokio::time::timeout(CONNECT_WAIT, Self::handshake(&url, target)).await {
            Ok(result) => result,
            Err(_) => Err(ClientError::Connect {
                url,
                reason: format!("no answer within {} s", CONNECT_WAIT.as_secs()),
            }),
        }
    }

    async fn handshake(url: &str, target: &Target) -> Result<Conn, ClientError> {
        let bad_url = |reason: String| ClientError::BadUrl {
            url: url.to_string(),
            reason,
        };
        let mut request = url
            .into_client_request()
            .map_err(|e| bad_url(e.to_string()))?;
        if let Some(token) = &target.token {
            let value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| bad_url("the token is not a valid header value".into()))?;
            request.headers_mut().insert(AUTHORIZATION, value);
        }
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_INBOUND))
            .max_frame_size(Some(MAX_INBOUND));
        let (ws, _) = tokio_tungstenite::connect_async_with_config(request, Some(config), true)
            .await
            .map_err(|e| refusal(url, target.token.is_some(), e))?;
        let mut conn = Conn {
            ws,
            next_id: 1,
            methods: HashMap::new(),
            queued: VecDeque::new(),
            profile: target.profile.clone(),
            epoch: String::new(),
        };
        match conn.read_socket().await? {
            Incoming::Event(e) if e.kind == "gateway.ready" => {
                conn.epoch = e.payload["epoch"].as_str().unwrap_or_default().to_string();
                Ok(conn)
            }
            other => Err(ClientError::Protocol(format!(
                "the first frame is not gateway.ready: {other:?}"
            ))),
        }
    }

    /// Sends a request without waiting; its [`Reply`] comes through
    /// [`Conn::next`]. The `--profile` is added to every request (methods
    /// that take none ignore it).
    pub async fn request(
        &mut self,
        method: &'static str,
        params: Value,
    ) -> Result<u64, ClientError> {
        let mut params = params;
        if let (Some(profile), Value::Object(map)) = (&self.profile, &mut params) {
            map.entry("profile")
                .or_insert_with(|| Value::String(profile.clone()));
        }
        let id = self.next_id;
        self.next_id += 1;
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.ws
            .send(Message::Text(frame.to_string().into()))
            .await
            .map_err(|e| ClientError::Lost(format!(": {e}")))?;
        self.methods.insert(id, method);
        Ok(id)
    }

    /// Sends a request and waits for its answer, decoded as `T`; frames
    /// that arrive meanwhile are kept for [`Conn::next`].
    pub async fn call<T: DeserializeOwned>(
        &mut self,
        method: &'static str,
        params: Value,
    ) -> Result<T, ClientError> {
        let id = self.request(method, params).await?;
        loop {
            match self.read_socket().await? {
                Incoming::Reply(r) if r.id == id => {
                    let value = r.outcome?;
                    return serde_json::from_value(value)
                        .map_err(|e| ClientError::Protocol(format!("{method}: {e}")));
                }
                other => self.queued.push_back(other),
            }
        }
    }

    /// The next frame, set-aside ones first. Cancel-safe (its only await is
    /// the socket read), so it can sit in a `select!`.
    pub async fn next(&mut self) -> Result<Incoming, ClientError> {
        if let Some(frame) = self.queued.pop_front() {
            return Ok(frame);
        }
        self.read_socket().await
    }

    async fn read_socket(&mut self) -> Result<Incoming, ClientError> {
        loop {
            let msg = match self.ws.next().await {
                None => return Err(ClientError::Lost(String::new())),
                Some(Err(e)) => return Err(ClientError::Lost(format!(": {e}"))),
                Some(Ok(msg)) => msg,
            };
            match msg {
                Message::Text(text) => {
                    if let Some(frame) = self.decode(text.as_str()) {
                        return Ok(frame);
                    }
                }
                Message::Close(Some(frame)) => {
                    let code: u16 = frame.code.into();
                    let reason = if frame.reason.is_empty() {
                        String::new()
                    } else {
                        format!(" {:?}", frame.reason.as_str())
                    };
                    return Err(ClientError::Lost(format!(
                        " (closed by the gateway: {code}{reason})"
                    )));
                }
                Message::Close(None) => return Err(ClientError::Lost(String::new())),
                // Pings are answered by tungstenite itself.
                _ => {}
            }
        }
    }

    /// A frame we can use, or `None` for one we skip (an answer without an
    /// id, which only a malformed request of ours could cause).
    fn decode(&mut self, text: &str) -> Option<Incoming> {
        let frame: Value = serde_json::from_str(text).ok()?;
        if frame.get("method").and_then(Value::as_str) == Some("event") {
            let event = serde_json::from_value(frame.get("params")?.clone()).ok()?;
            return Some(Incoming::Event(event));
        }
        let id = frame.get("id")?.as_u64()?;
        let method = self.methods.remove(&id).unwrap_or("request");
        let outcome = match frame.get("error") {
            Some(err) => Err(ClientError::Rpc(RpcError {
                method,
                code: err["code"].as_i64().unwrap_or_default(),
                message: err["message"].as_str().unwrap_or_default().to_string(),
            })),
            None => Ok(frame.get("result").cloned().unwrap_or(Value::Null)),
        };
        Some(Incoming::Reply(Reply { id, outcome }))
    }
}

/// Maps a failed upgrade to what the user should hear: a token problem, a
/// refusal with its body, or an unreachable gateway.
fn refusal(url: &str, had_token: bool, e: WsError) -> ClientError {
    match e {
        WsError::Http(response) => {
            let status = response.status().as_u16();
            if status == 401 {
                return if had_token {
                    ClientError::BadToken
                } else {
                    ClientError::NoToken
                };
            }
            let body = response
                .body()
                .as_deref()
                .map(String::from_utf8_lossy)
                .map(|b| b.trim().to_string())
                .filter(|b| !b.is_empty())
                .map(|b| format!(": {b}"))
                .unwrap_or_default();
            ClientError::Refused { status, body }
        }
        other => ClientError::Connect {
            url: url.to_string(),
            reason: other.to_string(),
        },
    }
}

/// Normalizes `--url`, for every client command: `ws://`/`wss://` as
/// given, `http(s)://HOST:PORT` and bare `HOST:PORT` (what `tether serve`
/// prints) to the `/ws` route, and a missing host (`:PORT`, as `tether
/// serve --listen :PORT` takes it) to 127.0.0.1.
fn ws_url(raw: &str) -> Result<String, ClientError> {
    let raw = raw.trim();
    let (scheme, rest) = if let Some(rest) = raw.strip_prefix("ws://") {
        ("ws://", rest)
    } else if let Some(rest) = raw.strip_prefix("wss://") {
        ("wss://", rest)
    } else if let Some(rest) = raw.strip_prefix("http://") {
        ("ws://", rest)
    } else if let Some(rest) = raw.strip_prefix("https://") {
        ("wss://", rest)
    } else if raw.contains("://") {
        return Err(ClientError::BadUrl {
            url: raw.to_string(),
            reason: "use ws://HOST:PORT/ws".into(),
        });
    } else {
        ("ws://", raw)
    };
    if rest.is_empty() {
        return Err(ClientError::BadUrl {
            url: raw.to_string(),
            reason: "no host".into(),
        });
    }
    let loopback;
    let rest = match rest.strip_prefix(':') {
        Some(after) => {
            let port = after.split(['/', '?']).next().unwrap_or_default();
            if port.parse::<u16>().is_err() {
                return Err(ClientError::BadUrl {
                    url: raw.to_string(),
                    reason: ":PORT needs a port number (1-65535)".into(),
                });
            }
            loopback = format!("127.0.0.1:{after}");
            loopback.as_str()
        }
        None => rest,
    };
    let has_path = rest.trim_end_matches('/').contains('/');
    Ok(if has_path {
        format!("{scheme}{rest}")
    } else {
        format!("{scheme}{}/ws", rest.trim_end_matches('/'))
    })
}

#[cfg(test)]
mod tests {
    use super::ws_url;

    #[test]
    fn urls_are_normalized_to_the_ws_route() {
        let ok = |s: &str| ws_url(s).expect("valid");
        assert_eq!(ok("ws://127.0.0.1:7878/ws"), "ws://127.0.0.1:7878/ws");
        assert_eq!(ok("http://127.0.0.1:9000"), "ws://127.0.0.1:9000/ws");
        assert_eq!(ok("http://127.0.0.1:9000/"), "ws://127.0.0.1:9000/ws");
        assert_eq!(ok("localhost:1"), "ws://localhost:1/ws");
        assert_eq!(ok("ws://h:1/ws?token=x"), "ws://h:1/ws?token=x");
        assert!(ws_url("ftp://h").is_err());
        assert!(ws_url("").is_err());
    }

    #[test]
    fn a_missing_host_is_loopback_as_for_listen() {
        let ok = |s: &str| ws_url(s).expect("valid");
        assert_eq!(ok(":9000"), "ws://127.0.0.1:9000/ws");
        assert_eq!(ok(":9000/"), "ws://127.0.0.1:9000/ws");
        assert_eq!(ok(":9000/ws"), "ws://127.0.0.1:9000/ws");
        assert_eq!(ok("ws://:9000/ws"), "ws://127.0.0.1:9000/ws");
        assert_eq!(ok("http://:9000"), "ws://127.0.0.1:9000/ws");
        assert_eq!(ok(" :9000 "), "ws://127.0.0.1:9000/ws");
        for bad in [":", ":x", ":70000", "http://:"] {
            assert!(ws_url(bad).is_err(), "{bad}");
        }
    }
}
