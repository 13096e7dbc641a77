//! Structured logs on stderr (`--log-format text|json`, filter by `RUST_LOG`).
//!
//! Two rules hold for whatever reaches the log:
//!
//! - **One event, one line.** Text a compute host or an agent controls
//!   (a `turn.error` reason, an agent's stderr in an error) is logged as
//!   field values, and a value with a newline could otherwise start a line
//!   that reads as the gateway's own (`2026-… ERROR tether::serve: …`), or
//!   drive the terminal with escape sequences. In the text format every
//!   control character of every field is escaped (`\n`, `\u{1b}`); the
//!   JSON format escapes them already.
//! - **A log nobody reads is dropped, never fatal.** `tether serve 2>&1 |
//!   tee log` and a Ctrl-C kill `tee` with the gateway: the drain's log
//!   lines then meet a closed pipe. Log lines, and the few lines written
//!   to stdout and stderr outside the log ([`stdout_line`],
//!   [`stderr_line`]), ignore write errors rather than panic as `println!`
//!   and `eprintln!` do.

use std::fmt::{self, Write as _};
use std::io::{self, IsTerminal, Write};

use tracing::field::Field;
use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::format::{debug_fn, Writer};
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Without `RUST_LOG`: warnings and errors, plus the gateway's one line at
/// start and one at stop. A newcomer's terminal shows what needs a person;
/// `RUST_LOG=info` (or `debug`, or `tether_actors=debug`) shows the actors
/// and sessions at work.
const QUIET: &str = "warn,tether::serve=info";

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(QUIET));
    // Colour codes only for a person at a terminal, never into a pipe or a file.
    let ansi = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        // Its own report of a failed write is an `eprintln!`, which panics
        // on the closed pipe that made the write fail.
        .log_internal_errors(false)
        .with_writer(|| QuietStderr);
    match format {
        LogFormat::Text => builder
            .fmt_fields(debug_fn(escaped_field).delimited(" "))
            .init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// Writes `line` and a newline to stdout, ignoring a stdout that cannot be
/// written (see the module doc).
pub fn stdout_line(line: fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    let _ = out.write_fmt(line);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// Writes `line` and a newline to stderr, ignoring a stderr that cannot be
/// written (see the module doc).
pub fn stderr_line(line: fmt::Arguments<'_>) {
    let mut err = io::stderr().lock();
    let _ = err.write_fmt(line);
    let _ = err.write_all(b"\n");
}

/// stderr for log lines: a line that cannot be written is dropped (there
/// is nowhere left to report it).
struct QuietStderr;

impl Write for QuietStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = io::stderr().lock().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}

/// One field of the text format: `name=value` (the message bare), with
/// every control character of the value escaped.
fn escaped_field(w: &mut Writer<'_>, field: &Field, value: &dyn fmt::Debug) -> fmt::Result {
    let name = field.name();
    if name != "message" {
        w.write_str(name.strip_prefix("r#").unwrap_or(name))?;
        w.write_char('=')?;
    }
    write!(Escaping(w), "{value:?}")
}

/// Passes text on with its control characters (and the Unicode line and
/// paragraph separators) escaped as Rust writes them, so no value can end
/// its log line or reach the terminal as a control sequence.
struct Escaping<'a, W: fmt::Write>(&'a mut W);

impl<W: fmt::Write> fmt::Write for Escaping<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s;
        while let Some(i) = rest.find(needs_escape) {
            self.0.write_str(&rest[..i])?;
            let c = rest[i..].chars().next().unwrap_or_default();
            match c {
                '\n' => self.0.write_str("\\n")?,
                '\r' => self.0.write_str("\\r")?,
                '\t' => self.0.write_str("\\t")?,
                c => write!(self.0, "\\u{{{:x}}}", c as u32)?,
            }
            rest = &rest[i + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}')
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use super::Escaping;

    fn escaped(s: &str) -> String {
        let mut out = String::new();
        write!(Escaping(&mut out), "{s}").unwrap();
        out
    }

    #[test]
    fn control_characters_never_reach_the_log_raw() {
        assert_eq!(escaped("plain text, é ü"), "plain text, é ü");
        assert_eq!(
            escaped("x\n2026-01-01T00:00:00Z ERROR tether::serve: forged"),
            "x\\n2026-01-01T00:00:00Z ERROR tether::serve: forged"
        );
        assert_eq!(escaped("\u{1b}[31mred\r\t"), "\\u{1b}[31mred\\r\\t");
        assert_eq!(
            escaped("a\u{85}b\u{2028}c\u{7f}"),
            "a\\u{85}b\\u{2028}c\\u{7f}"
        );
        assert_eq!(escaped("\0"), "\\u{0}");
    }
}
