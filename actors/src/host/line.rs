//! Reading a host's stdout a line at a time, never holding more than the
//! host line cap of any one line.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// How much of a line over the host line cap is kept, to tell which turn
/// or request it belonged to; the rest is read and dropped.
pub(super) const PEEK_BYTES: usize = 4096;

/// One line of host output.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Line {
    /// A line (without its `\n`) is in the buffer.
    Full,
    /// The line (`bytes` long, without its `\n`) was longer than the cap;
    /// the buffer holds its first [`PEEK_BYTES`] at most.
    TooLong {
        bytes: u64,
    },
    Eof,
}

/// Reads one line into `buf` (cleared first) without ever holding more than
/// `max` bytes of it: of a longer line only the first [`PEEK_BYTES`] are
/// kept, the rest is consumed and dropped. A last line without `\n` counts
/// as a line.
pub(super) async fn read_line_bounded<R: AsyncBufRead + Unpin>(
    input: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    buf.clear();
    let mut too_long = false;
    let mut bytes = 0u64;
    let mut any = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (too_long, any) {
                (true, _) => Line::TooLong { bytes },
                (false, true) => Line::Full,
                (false, false) => Line::Eof,
            });
        }
        any = true;
        let (chunk, used, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], i + 1, true),
            None => (available, available.len(), false),
        };
        bytes += chunk.len() as u64;
        if !too_long && buf.len() + chunk.len() > max {
            too_long = true;
            buf.truncate(PEEK_BYTES);
            buf.shrink_to(PEEK_BYTES.max(64 * 1024));
        }
        if too_long {
            let room = PEEK_BYTES.saturating_sub(buf.len());
            buf.extend_from_slice(&chunk[..room.min(chunk.len())]);
        } else {
            buf.extend_from_slice(chunk);
        }
        input.consume(used);
        if done {
            return Ok(if too_long {
                Line::TooLong { bytes }
            } else {
                Line::Full
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use tether_protocol::peek_frame;
    use tokio::io::BufReader;

    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<Result<String, (Line, usize)>> {
        // A tiny buffer, so lines span several reads.
        let mut r = BufReader::with_capacity(4, input);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        loop {
            match read_line_bounded(&mut r, &mut buf, max).await.unwrap() {
                Line::Full => out.push(Ok(String::from_utf8(buf.clone()).unwrap())),
                Line::Eof => return out,
                other => out.push(Err((other, buf.len()))),
            }
        }
    }

    #[tokio::test]
    async fn lines_are_split_and_bounded() {
        let got = lines(b"hello\n0123456789abc\n\nlast", 10).await;
        assert_eq!(
            got,
            vec![
                Ok("hello".to_string()),
                Err((Line::TooLong { bytes: 13 }, 13)),
                Ok(String::new()),
                Ok("last".to_string()),
            ]
        );
        assert_eq!(lines(b"", 10).await, vec![]);
        assert_eq!(
            lines(b"0123456789x", 10).await,
            vec![Err((Line::TooLong { bytes: 11 }, 11))]
        );
        assert_eq!(
            lines(b"0123456789\n", 10).await,
            vec![Ok("0123456789".to_string())]
        );
    }

    #[tokio::test]
    async fn of_a_line_over_the_cap_only_its_first_bytes_are_kept() {
        let mut line = br#"{"type":"event","turn_id":"t_1","event":{"payload":{"text":""#.to_vec();
        line.extend(std::iter::repeat_n(b'x', 100_000));
        line.extend(b"\"}}}\n{\"type\":\"pong\",\"nonce\":1}\n");
        let mut r = BufReader::with_capacity(1000, line.as_slice());
        let mut buf = Vec::new();
        let got = read_line_bounded(&mut r, &mut buf, 50_000).await.unwrap();
        let first_line = line.iter().position(|&b| b == b'\n').unwrap();
        assert_eq!(
            got,
            Line::TooLong {
                bytes: first_line as u64
            }
        );
        assert_eq!(buf.len(), PEEK_BYTES);
        assert_eq!(buf.as_slice(), &line[..PEEK_BYTES]);
        assert_eq!(peek_frame(&buf).turn_id.as_deref(), Some("t_1"));
        // The next line is read whole.
        assert_eq!(
            read_line_bounded(&mut r, &mut buf, 50_000).await.unwrap(),
            Line::Full
        );
        assert_eq!(buf, br#"{"type":"pong","nonce":1}"#);
    }
}
