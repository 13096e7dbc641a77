//! Structured logs on stderr (`--log-format text|json`, filter by `RUST_LOG`).

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

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
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
