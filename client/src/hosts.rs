//! `tether hosts`: the compute hosts of the gateway this command talks to.
//!
//! It exists so that "kill the hosts" can mean *this gateway's* hosts. A
//! pattern (`pkill -f "tether host"`) matches every tether host on the
//! machine, other users' and other gateways' included, and with a
//! `--host-command "tether host …"` the gateway itself, whose command line
//! holds that text. The gateway knows its hosts' pids
//! (`session.events.stats` `hosts`), so `kill -9 $(tether hosts --pids)`
//! reaches exactly those.

use std::io::{IsTerminal, Write};

use clap::Args;
use serde_json::json;
use tether_protocol::StatsResult;

use super::conn::{ClientError, Conn};
use super::{exit, Target};

#[derive(Debug, Args)]
pub struct HostsArgs {
    #[command(flatten)]
    pub target: Target,
    /// Only the pids of the hosts that have a process, one per line (for
    /// `kill $(tether hosts --pids)`).
    #[arg(long, conflicts_with = "json")]
    pub pids: bool,
    /// One JSON object per host (the gateway's `hosts` entries).
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: HostsArgs) -> Result<u8, ClientError> {
    let mut conn = Conn::open(&args.target).await?;
    let stats: StatsResult = conn.call("session.events.stats", json!({})).await?;
    let stdout = std::io::stdout();
    let header = !args.pids && !args.json && stdout.is_terminal();
    let mut out = stdout.lock();
    if header {
        writeln!(
            out,
            "{:<4}  {:<8}  {:<9}  {:<6}  RESTARTS",
            "HOST", "PID", "STATE", "TURNS"
        )
        .map_err(ClientError::io("stdout"))?;
    }
    for h in &stats.hosts {
        let line = if args.json {
            serde_json::to_string(h).map_err(|e| ClientError::Protocol(e.to_string()))?
        } else if args.pids {
            // A slot between processes (backoff, resting) has no pid.
            match h.pid {
                Some(pid) => pid.to_string(),
                None => continue,
            }
        } else {
            let pid = h.pid.map_or_else(|| "-".to_string(), |p| p.to_string());
            format!(
                "{:<4}  {:<8}  {:<9}  {:<6}  {}",
                h.host_id, pid, h.state, h.active_turns, h.restarts
            )
        };
        writeln!(out, "{line}").map_err(ClientError::io("stdout"))?;
    }
    out.flush().map_err(ClientError::io("stdout"))?;
    Ok(exit::OK)
}
