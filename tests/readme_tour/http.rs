//! The tour's HTTP steps: the console's page, the raw protocol over
//! `curl` (`POST /rpc`, the SSE stream) and the probes.

use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::Value;

use super::readme::Cmd;
use super::run::{Run, README_ADDR};
use crate::common::terminal::WAIT;

impl Run {
    /// "Open <URL>": the console's page is there.
    pub fn open_console(&mut self, url: &str) {
        let path = url
            .strip_prefix(&format!("http://{README_ADDR}"))
            .unwrap_or_else(|| panic!("the console's URL is the gateway's: {url}"));
        let (status, body) = http(self.addr(), "GET", path, "");
        assert_eq!(status, 200, "{url}: {body}");
        assert!(body.contains("<title>tether console</title>"), "{body}");
        self.done("console");
    }

    /// `curl -X POST …/rpc` with `session.resume`: the events after seq 1,
    /// and the epoch the gateway had before the crash.
    pub fn rpc(&mut self, c: &Cmd) {
        if !self.curl {
            return;
        }
        let out = self.output(&self.adapted(c));
        assert!(out.status.success(), "{}: {out:?}", c.line);
        let r: Value = serde_json::from_slice(&out.stdout).expect("a JSON-RPC answer");
        let result = &r["result"];
        let seqs: Vec<u64> = result["events"]
            .as_array()
            .unwrap_or_else(|| panic!("no events: {r}"))
            .iter()
            .filter_map(|e| e["seq"].as_u64())
            .collect();
        let latest = result["latest_seq"].as_u64().expect("latest_seq");
        assert_eq!(seqs, (2..=latest).collect::<Vec<_>>(), "{r}");
        assert_eq!(
            result["epoch"].as_str(),
            self.epoch.as_deref(),
            "the epoch is the same across the restart"
        );
        self.done("rpc");
    }

    /// `curl -N …/events -H 'Last-Event-ID: 1'`: the events after seq 1,
    /// then live ones ("type in A and watch").
    pub fn follow(&mut self, c: &Cmd) {
        if !self.curl {
            return;
        }
        let follower = self.start(&self.adapted(c));
        follower.wait_stdout("the replayed events", |o| {
            o.contains("id: 2\nevent: message.user\n")
        });
        let live = "live to curl";
        self.type_in_a(live);
        follower.wait_stdout("the live turn", |o| {
            o.contains("event: message.complete\n") && o.contains(&format!(r#""text":"{live}""#))
        });
        self.follower = Some(follower);
        self.done("follow");
    }

    /// `curl …/metrics | grep '^tether_turns'`: the turn counters.
    pub fn metrics(&mut self, c: &Cmd) {
        if !self.curl {
            return;
        }
        let out = self.output(&self.adapted(c));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{}: {out:?}", c.line);
        assert!(
            text.lines().all(|l| l.starts_with("tether_turns"))
                && text.contains(r#"status="complete""#),
            "{text}"
        );
        self.done("metrics");
    }

    /// `curl …/readyz`: what the README's comment says it prints.
    pub fn readyz(&mut self, c: &Cmd) {
        if !self.curl {
            return;
        }
        let out = self.output(&self.adapted(c));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            c.comment,
            "{}",
            c.line
        );
        self.done("readyz");
    }
}

/// One HTTP/1.1 request, the connection closed after it: (status, body).
pub fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(WAIT)).expect("timeout");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(req.as_bytes()).expect("write");
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, body.to_string())
}
