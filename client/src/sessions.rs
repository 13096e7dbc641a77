//! `tether sessions`: every session of the profile, newest first.
//!
//! It follows `next_cursor` to the end, so the listing is whole however many
//! sessions there are; the cursor is stable while sessions are created, so
//! no session is listed twice (PROTOCOL Part 4, `session.list` order).

use std::io::{IsTerminal, Write};

use clap::Args;
use serde_json::{json, Value};

use super::conn::{ClientError, Conn};
use super::{exit, Target};

/// Sessions per page: the protocol's maximum, to keep round trips few.
const PAGE: u64 = 500;

#[derive(Debug, Args)]
pub struct SessionsArgs {
    #[command(flatten)]
    pub target: Target,
    /// One JSON object (the gateway's SessionInfo) per line.
    #[arg(long)]
    pub json: bool,
    /// Include closed sessions.
    #[arg(long)]
    pub all: bool,
}

pub async fn run(args: SessionsArgs) -> Result<u8, ClientError> {
    let mut conn = Conn::open(&args.target).await?;
    let stdout = std::io::stdout();
    let header = !args.json && stdout.is_terminal();
    let mut out = stdout.lock();
    let mut cursor: Option<String> = None;
    let mut first = true;
    let mut nodes = false;
    loop {
        let mut params = json!({"limit": PAGE, "include_closed": args.all});
        if let Some(c) = &cursor {
            params["cursor"] = json!(c);
        }
        let page: Value = conn.call("session.list", params).await?;
        let sessions = page["sessions"]
            .as_array()
            .ok_or_else(|| ClientError::Protocol("session.list without sessions".into()))?;
        if first {
            // A cluster names each session's owner node; a single gateway
            // does not, and keeps the narrower table.
            nodes = sessions.iter().any(|s| s.get("owner_node").is_some());
        }
        if first && header {
            let node = if nodes {
                format!("{:<26}  ", "NODE")
            } else {
                String::new()
            };
            writeln!(
                out,
                "{:<28}  {:<7}  {:<24}  {node}TITLE",
                "ID", "STATUS", "UPDATED"
            )
            .map_err(ClientError::io("stdout"))?;
        }
        first = false;
        for s in sessions {
            let line = if args.json {
                s.to_string()
            } else {
                let field = |k: &str| s[k].as_str().unwrap_or_default().to_string();
                let node = if nodes {
                    // `-`: no live node owns it (parked, or its owner died).
                    let owner = s["owner_node"].as_str().unwrap_or("-");
                    format!("{owner:<26}  ")
                } else {
                    String::new()
                };
                format!(
                    "{:<28}  {:<7}  {:<24}  {node}{}",
                    field("session_id"),
                    field("status"),
                    field("updated_at"),
                    field("title")
                )
            };
            writeln!(out, "{line}").map_err(ClientError::io("stdout"))?;
        }
        match page["next_cursor"].as_str() {
            Some(next) if !sessions.is_empty() => cursor = Some(next.to_string()),
            _ => break,
        }
    }
    out.flush().map_err(ClientError::io("stdout"))?;
    Ok(exit::OK)
}
