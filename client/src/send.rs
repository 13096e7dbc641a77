//! `tether send SESSION TEXT`: one prompt, its reply on stdout.
//!
//! Made for scripts: stdout carries the reply text and nothing else, so
//! `tether send "$ID" "..." > reply.txt` captures exactly the answer; tool
//! calls and other happenings go to stderr. Only the turn this command
//! submitted is followed (by the `turn_id` `prompt.submit` answers), so
//! another face's turn on the same session never leaks into the output.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;
use tether_protocol::{ResumeResult, SubmitResult};
use tokio::signal::unix::{signal, SignalKind};

use super::conn::{ClientError, Conn, Event, Incoming};
use super::outcome;
use super::view::{bracket, styled, summary, TurnText};
use super::{exit, Target, EXIT_HELP};

/// A second Ctrl-C within this window quits without waiting for the
/// interrupted turn to end.
const QUIT_WINDOW: Duration = Duration::from_secs(2);

#[derive(Debug, Args)]
#[command(after_help = EXIT_HELP)]
pub struct SendArgs {
    #[command(flatten)]
    pub target: Target,
    /// The session to send to.
    pub session: String,
    /// The prompt; `-` reads it from stdin (a final newline is dropped).
    pub text: String,
}

pub async fn run(args: SendArgs) -> Result<u8, ClientError> {
    let text = prompt_text(&args.text)?;
    let mut conn = Conn::open(&args.target).await?;
    let session = args.session.as_str();
    // Attach first, so that every event of the turn reaches us.
    let _: ResumeResult = conn
        .call(
            "session.resume",
            json!({"session_id": session, "omit_messages": true}),
        )
        .await?;
    // Ctrl-C keeps its default (quit at once) until there is a turn to
    // interrupt.
    let mut sigint = signal(SignalKind::interrupt()).map_err(ClientError::io("signal"))?;
    let submit = conn
        .request(
            "prompt.submit",
            json!({"session_id": session, "text": text}),
        )
        .await?;
    let mut turn = Turn::default();
    // Events of some turn that arrive before we know which one is ours.
    let mut early: Vec<Event> = Vec::new();
    let mut turn_id: Option<String> = None;
    let mut last_sigint: Option<Instant> = None;
    loop {
        tokio::select! {
            frame = conn.next() => match frame.map_err(lost_mid_turn(session))? {
                Incoming::Reply(r) if r.id == submit => {
                    let accepted: SubmitResult = serde_json::from_value(r.outcome?)
                        .map_err(|e| ClientError::Protocol(format!("prompt.submit: {e}")))?;
                    let ours = accepted.turn_id.to_string();
                    for e in early.drain(..).filter(|e| e.turn_id.as_ref() == Some(&ours)) {
                        if let Some(code) = turn.step(&e)? {
                            return Ok(code);
                        }
                    }
                    turn_id = Some(ours);
                }
                Incoming::Reply(_) => {}
                Incoming::Event(e) => match &turn_id {
                    None if e.turn_id.is_some() => early.push(e),
                    Some(ours) if e.turn_id.as_ref() == Some(ours) => {
                        if let Some(code) = turn.step(&e)? {
                            return Ok(code);
                        }
                    }
                    _ => {}
                },
            },
            _ = sigint.recv() => {
                if turn_id.is_none() || last_sigint.is_some_and(|t| t.elapsed() < QUIT_WINDOW) {
                    turn.end_line()?;
                    return Ok(exit::SIGINT);
                }
                last_sigint = Some(Instant::now());
                eprintln!("{}", bracket("interrupting; Ctrl-C again quits", turn.styled));
                conn.request("session.interrupt", json!({"session_id": session})).await?;
            }
        }
    }
}

/// The prompt from the argument, or from stdin for `-`.
fn prompt_text(arg: &str) -> Result<String, ClientError> {
    if arg != "-" {
        return Ok(arg.to_string());
    }
    let mut text = std::io::read_to_string(std::io::stdin()).map_err(ClientError::io("stdin"))?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}

fn lost_mid_turn(session: &str) -> impl Fn(ClientError) -> ClientError + '_ {
    move |e| match e {
        ClientError::Lost(why) => ClientError::Lost(format!(
            "{why}; the turn may go on in the gateway (follow it with `tether attach {session}`)"
        )),
        other => other,
    }
}

/// Our turn's output: text to stdout as it streams, the rest to stderr.
#[derive(Default)]
struct Turn {
    text: TurnText,
    /// Something was printed and the line is not ended yet.
    mid_line: bool,
    /// The turn's `error` event, for the final message.
    error: Option<String>,
    styled: bool,
}

impl Turn {
    /// Handles one event of our turn; `Some(exit status)` once it ended.
    fn step(&mut self, e: &Event) -> Result<Option<u8>, ClientError> {
        self.styled = styled(std::io::stderr().is_terminal());
        let text = e.payload["text"].as_str().unwrap_or_default();
        match e.kind.as_str() {
            "message.delta" => {
                let offset = e.payload["offset"].as_u64().unwrap_or_default() as usize;
                let new = self.text.delta(offset, text);
                self.print(new)?;
            }
            "error" => self.error = Some(text_of(e, "message")),
            "message.complete" => {
                let rest = self.text.rest(text);
                self.print(rest)?;
                self.end_line()?;
                return Ok(Some(self.verdict(e)));
            }
            _ => {
                if let Some(s) = summary(e) {
                    eprintln!("{}", bracket(&s, self.styled));
                }
            }
        }
        Ok(None)
    }

    /// The exit status for the turn's `message.complete`, explaining a
    /// failure on stderr in the words `attach` uses for it.
    fn verdict(&self, e: &Event) -> u8 {
        let status = e.payload["status"].as_str().unwrap_or("error");
        let reason = e.payload["failure_reason"].as_str();
        let recoverable = e.payload["recoverable"].as_bool();
        match outcome::line(status, reason, recoverable, self.error.as_deref()) {
            None => exit::OK,
            Some(ending) => {
                eprintln!("tether send: {ending}");
                exit::FAILED
            }
        }
    }

    fn print(&mut self, text: &str) -> Result<(), ClientError> {
        if text.is_empty() {
            return Ok(());
        }
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(ClientError::io("stdout"))?;
        self.mid_line = !text.ends_with('\n');
        Ok(())
    }

    fn end_line(&mut self) -> Result<(), ClientError> {
        if self.mid_line {
            self.print("\n")?;
        }
        Ok(())
    }
}

fn text_of(e: &Event, key: &str) -> String {
    e.payload[key].as_str().unwrap_or_default().to_string()
}
