//! A front-end stream read as it arrives: `POST` (or `GET`) on a
//! connection of its own, then the body's `data:` lines one by one.
#![allow(dead_code)]

use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::common::http::{head_text, read_chunk, read_head};
use crate::common::FRAME_WAIT;

pub struct Stream {
    r: BufReader<TcpStream>,
    buf: String,
    pub status: u16,
}

impl Stream {
    pub async fn open(addr: &str, method: &str, path: &str, token: &str, body: &Value) -> Stream {
        let body = if method == "POST" {
            body.to_string()
        } else {
            String::new()
        };
        let auth = format!("Bearer {token}");
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        let head = head_text(
            addr,
            method,
            path,
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            body.len(),
        );
        tcp.write_all(head.as_bytes()).await.expect("write");
        tcp.write_all(body.as_bytes()).await.expect("write body");
        let mut r = BufReader::new(tcp);
        let (status, _) = tokio::time::timeout(FRAME_WAIT, read_head(&mut r))
            .await
            .expect("a head in time");
        Stream {
            r,
            buf: String::new(),
            status,
        }
    }

    /// The next `data:` payload as JSON (`[DONE]` as a string); `None` at
    /// the end of the body.
    pub async fn data(&mut self) -> Option<Value> {
        loop {
            if let Some(pos) = self.buf.find('\n') {
                let line: String = self.buf.drain(..=pos).collect();
                if let Some(d) = line.trim_end().strip_prefix("data: ") {
                    return Some(serde_json::from_str(d).unwrap_or(Value::String(d.into())));
                }
                continue;
            }
            let chunk = tokio::time::timeout(FRAME_WAIT, read_chunk(&mut self.r))
                .await
                .expect("a chunk in time")?;
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Every payload up to the end of the body.
    pub async fn rest(&mut self) -> Vec<Value> {
        let mut all = Vec::new();
        while let Some(d) = self.data().await {
            all.push(d);
        }
        all
    }
}
