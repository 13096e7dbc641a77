//! A hand-written HTTP/1.1 client on a plain TCP socket: one request per
//! connection, and `text/event-stream` read incrementally (PROTOCOL 1.9),
//! for the tests of the HTTP transport and of SSE through any node.

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::FRAME_WAIT;
use serde_json::Value;

/// A complete HTTP response.
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

pub fn head_text(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    len: usize,
) -> String {
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    // The gateway's own address unless the caller sends another Host.
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "POST" {
        req.push_str(&format!("Content-Length: {len}\r\n"));
    }
    req.push_str("\r\n");
    req
}

/// Reads the status line and headers.
pub async fn read_head<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).await.expect("status line");
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).await.expect("header line");
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').expect("header");
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    (status, headers)
}

/// One request on its own connection (`Connection: close`).
pub async fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    http_within(FRAME_WAIT, addr, method, path, headers, body).await
}

/// [`http`], answered within `wait`: for a request the gateway may hold
/// longer than a frame's wait (a chat's create waits for the erase of the
/// id's previous life, up to the call timeout).
pub async fn http_within(
    wait: std::time::Duration,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let fut = async {
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        let head = head_text(addr, method, path, headers, body.len());
        tcp.write_all(head.as_bytes()).await.expect("write");
        tcp.write_all(body).await.expect("write body");
        let mut r = BufReader::new(tcp);
        let (status, headers) = read_head(&mut r).await;
        let chunked = headers.iter().any(|(k, v)| {
            k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
        });
        let mut body = Vec::new();
        if chunked {
            while let Some(chunk) = read_chunk(&mut r).await {
                body.extend_from_slice(&chunk);
            }
        } else {
            r.read_to_end(&mut body).await.expect("body");
        }
        Resp {
            status,
            headers,
            body,
        }
    };
    tokio::time::timeout(wait, fut)
        .await
        .expect("timed out waiting for an HTTP response")
}

/// Next chunk of a chunked body; `None` at the last chunk or EOF.
pub async fn read_chunk<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> Option<Vec<u8>> {
    let mut line = String::new();
    if r.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let size = usize::from_str_radix(line.trim().split(';').next()?.trim(), 16).ok()?;
    if size == 0 {
        return None;
    }
    let mut buf = vec![0; size + 2];
    r.read_exact(&mut buf).await.ok()?;
    buf.truncate(size);
    Some(buf)
}

/// One SSE event as received.
#[derive(Debug, Default)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
    pub comments: Vec<String>,
}

impl SseEvent {
    pub fn params(&self) -> Value {
        serde_json::from_str(&self.data).expect("data is JSON")
    }
}

/// An open `text/event-stream`, read incrementally.
pub struct Sse {
    r: BufReader<TcpStream>,
    chunked: bool,
    buf: String,
}

impl Sse {
    pub async fn open(addr: &str, path: &str, headers: &[(&str, &str)]) -> Result<Sse, Resp> {
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        let head = head_text(addr, "GET", path, headers, 0);
        tcp.write_all(head.as_bytes()).await.expect("write");
        let mut r = BufReader::new(tcp);
        let (status, headers) = tokio::time::timeout(FRAME_WAIT, read_head(&mut r))
            .await
            .expect("timed out waiting for the SSE head");
        let chunked = headers.iter().any(|(k, v)| {
            k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
        });
        if status != 200 {
            let mut body = Vec::new();
            if chunked {
                while let Some(c) = read_chunk(&mut r).await {
                    body.extend_from_slice(&c);
                }
            } else {
                let _ = r.read_to_end(&mut body).await;
            }
            return Err(Resp {
                status,
                headers,
                body,
            });
        }
        let ct = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        assert!(ct.starts_with("text/event-stream"), "content-type {ct}");
        Ok(Sse {
            r,
            chunked,
            buf: String::new(),
        })
    }

    /// Next line of the stream; `None` at its end.
    pub async fn line(&mut self) -> Option<String> {
        loop {
            if let Some(pos) = self.buf.find('\n') {
                let line: String = self.buf.drain(..=pos).collect();
                return Some(line.trim_end_matches(['\n', '\r']).to_string());
            }
            let more = if self.chunked {
                read_chunk(&mut self.r).await?
            } else {
                let mut b = vec![0; 4096];
                let n = self.r.read(&mut b).await.ok()?;
                if n == 0 {
                    return None;
                }
                b.truncate(n);
                b
            };
            self.buf
                .push_str(std::str::from_utf8(&more).expect("UTF-8"));
        }
    }

    /// Next event or comment block; `None` when the stream ended.
    pub async fn block(&mut self) -> Option<SseEvent> {
        let fut = async {
            let mut ev = SseEvent::default();
            let mut any = false;
            loop {
                let line = self.line().await?;
                if line.is_empty() {
                    if any {
                        return Some(ev);
                    }
                    continue;
                }
                any = true;
                if let Some(c) = line.strip_prefix(':') {
                    ev.comments.push(c.trim().to_string());
                } else if let Some(v) = line.strip_prefix("id: ") {
                    ev.id = Some(v.to_string());
                } else if let Some(v) = line.strip_prefix("event: ") {
                    ev.event = Some(v.to_string());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    if !ev.data.is_empty() {
                        ev.data.push('\n');
                    }
                    ev.data.push_str(v);
                } else {
                    panic!("unexpected SSE line {line:?}");
                }
            }
        };
        tokio::time::timeout(FRAME_WAIT, fut)
            .await
            .expect("timed out waiting for an SSE event")
    }

    /// Next event, skipping keep-alive comments.
    pub async fn event(&mut self) -> SseEvent {
        loop {
            let b = self.block().await.expect("stream ended");
            if b.event.is_some() {
                return b;
            }
        }
    }

    /// The stream ends within the frame wait.
    pub async fn expect_end(&mut self) {
        while let Some(b) = self.block().await {
            assert!(b.event.is_none(), "unexpected event {b:?}");
        }
    }
}

pub async fn sse(addr: &str, path: &str, headers: &[(&str, &str)]) -> Sse {
    match Sse::open(addr, path, headers).await {
        Ok(s) => s,
        Err(r) => panic!(
            "GET {path}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        ),
    }
}
