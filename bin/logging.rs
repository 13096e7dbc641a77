//! Structured logs on stderr (`--log-format text|json`, filter by `RUST_LOG`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Without `RUST_LOG`: warnings and errors, plus the gateway's one line at
/// start and one at stop. A newcomer's terminal shows what needs a person;
/// `RUST_LOG=info` (or `debug`, or `tether_actors=debug`) shows the actors
/// and sessions at work.
const QUIET: &str = "warn,tether::serve=info";

/// `tether host --log-format`: the same two formats.
impl From<tether_host::LogFormat> for LogFormat {
    fn from(format: tether_host::LogFormat) -> Self {
        match format {
            tether_host::LogFormat::Text => Self::Text,
            tether_host::LogFormat::Json => Self::Json,
        }
    }
}

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(QUIET));
    // Colour codes only for a person at a terminal, never into a pipe or a file.
    let ansi = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
