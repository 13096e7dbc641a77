//! Credentials written into URLs, masked wherever a URL is shown.
//!
//! Operators put credentials in URLs: a database password
//! (`postgres://user:pw@db/x`), basic auth or a token for a model server
//! (`http://user:pw@host/v1`, `https://TOKEN@host/v1`, `?api_key=…`). Such a
//! URL ends up in error messages that reach clients (a turn's `error` event,
//! a compression's 5019), in log lines and in start-up errors. Everything
//! that shows a URL, or a text that may contain one (a command line, an
//! error from an HTTP client), passes it through [`mask_urls`] first, so
//! there is one rule for what is hidden.

/// `text` with the credentials of every URL in it replaced by `***`:
///
/// - the user-info part: `scheme://user:secret@host` becomes
///   `scheme://user:***@host` (the user name stays, to tell which account
///   was used), and a user-info without a password, `scheme://TOKEN@host`,
///   becomes `scheme://***@host` (a token is often written there);
/// - the value of every query parameter whose name looks like a credential
///   (it contains `pass`, `pwd`, `secret`, `token`, `key`, `sig`, `auth` or
///   `credential`, in any case): `?password=x` becomes `?password=***`.
///
/// A URL is anything of the form `scheme://…` up to the next whitespace or
/// quote; text without one comes back unchanged.
pub fn mask_urls(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    // Everything before `copied` is in `out` already.
    let mut copied = 0;
    let mut search = 0;
    while let Some(found) = text[search..].find("://") {
        let sep = search + found;
        let after = sep + 3;
        let scheme_start = scheme_start(bytes, sep);
        if scheme_start == sep {
            // `://` without a scheme before it: not a URL.
            search = after;
            continue;
        }
        let end = url_end(bytes, after);
        out.push_str(&text[copied..after]);
        mask_rest(&text[after..end], &mut out);
        copied = end;
        search = end.max(after);
    }
    out.push_str(&text[copied..]);
    out
}

/// Where the scheme ending at `sep` starts (`sep` itself when there is
/// none): letters, digits, `+`, `-` and `.`, beginning with a letter.
fn scheme_start(bytes: &[u8], sep: usize) -> usize {
    let mut start = sep;
    while start > 0 {
        let b = bytes[start - 1];
        if b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.') {
            start -= 1;
        } else {
            break;
        }
    }
    // The scheme begins with its first letter ("1http://" is "http://").
    while start < sep && !bytes[start].is_ascii_alphabetic() {
        start += 1;
    }
    start
}

/// Whether `b` ends a URL written in free text.
fn ends_url(b: u8) -> bool {
    b.is_ascii_whitespace()
        || b.is_ascii_control()
        || matches!(b, b'"' | b'\'' | b'<' | b'>' | b'`')
}

/// The end of the URL whose authority starts at `from`.
fn url_end(bytes: &[u8], from: usize) -> usize {
    bytes[from..]
        .iter()
        .position(|&b| ends_url(b))
        .map_or(bytes.len(), |i| from + i)
}

/// Appends `rest` (a URL after its `scheme://`) to `out`, masked.
fn mask_rest(rest: &str, out: &mut String) {
    // The authority runs to the first `/`, `?`, `#` or `\`; its user-info
    // ends at its last `@` (a password may itself contain `@` or `:`).
    let authority_end = rest.find(['/', '?', '#', '\\']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => {
            match authority[..at].find(':') {
                Some(colon) => {
                    out.push_str(&authority[..=colon]);
                    out.push_str("***");
                }
                None => out.push_str("***"),
            }
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    let tail = &rest[authority_end..];
    let Some(q) = tail.find('?') else {
        out.push_str(tail);
        return;
    };
    out.push_str(&tail[..=q]);
    let query = &tail[q + 1..];
    let (query, fragment) = match query.find('#') {
        Some(h) => query.split_at(h),
        None => (query, ""),
    };
    for (i, pair) in query.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        match pair.split_once('=') {
            Some((name, _)) if names_a_credential(name) => {
                out.push_str(name);
                out.push_str("=***");
            }
            _ => out.push_str(pair),
        }
    }
    out.push_str(fragment);
}

/// Whether a query parameter's name looks like it holds a credential.
fn names_a_credential(name: &str) -> bool {
    const MARKS: [&str; 8] = [
        "pass",
        "pwd",
        "secret",
        "token",
        "key",
        "sig",
        "auth",
        "credential",
    ];
    let name = name.to_ascii_lowercase();
    MARKS.iter().any(|m| name.contains(m))
}

#[cfg(test)]
mod tests {
    use super::mask_urls;

    #[test]
    fn passwords_in_user_info_are_masked_and_the_user_kept() {
        assert_eq!(
            mask_urls("postgres://tether:s3cret@db:5432/tether"),
            "postgres://tether:***@db:5432/tether"
        );
        assert_eq!(
            mask_urls("http://user:pw@127.0.0.1:9/v1"),
            "http://user:***@127.0.0.1:9/v1"
        );
        // A password holding `@` and `:`: everything up to the last `@`.
        assert_eq!(
            mask_urls("postgresql://u:p@ss:w@h/d"),
            "postgresql://u:***@h/d"
        );
        assert_eq!(mask_urls("http://:pw@h"), "http://:***@h");
    }

    #[test]
    fn a_user_info_without_a_password_is_masked_whole() {
        assert_eq!(
            mask_urls("https://sk-abc123@api.example/v1"),
            "https://***@api.example/v1"
        );
        assert_eq!(mask_urls("postgres://tether@db/x"), "postgres://***@db/x");
    }

    #[test]
    fn credential_query_parameters_are_masked() {
        assert_eq!(
            mask_urls("postgresql://u:p@h/d?sslmode=disable&password=x"),
            "postgresql://u:***@h/d?sslmode=disable&password=***"
        );
        assert_eq!(
            mask_urls("postgres://h/d?password=x"),
            "postgres://h/d?password=***"
        );
        assert_eq!(
            mask_urls("https://h/v1?api-key=abc&Access_Token=t&model=m#frag"),
            "https://h/v1?api-key=***&Access_Token=***&model=m#frag"
        );
    }

    #[test]
    fn urls_inside_text_are_found() {
        assert_eq!(
            mask_urls(
                "cannot reach the model server at http://u:pw@127.0.0.1:9/v1/chat/completions: refused"
            ),
            "cannot reach the model server at http://u:***@127.0.0.1:9/v1/chat/completions: refused"
        );
        assert_eq!(
            mask_urls(r#"tether host --base-url "http://a:b@h/v1" --db=postgres://c:d@e/f x"#),
            r#"tether host --base-url "http://a:***@h/v1" --db=postgres://c:***@e/f x"#
        );
        // A Debug-printed URL (quotes around it).
        assert_eq!(
            mask_urls(&format!("{:?}", "https://t@h")),
            "\"https://***@h\""
        );
    }

    #[test]
    fn text_without_urls_is_unchanged() {
        for text in [
            "",
            "not a url",
            "user:pw@host",
            "://x:y@z",
            "a :// b",
            "mail me at a@b.c",
            "http://host/path@x",
            "é://ü:ö@ä",
        ] {
            assert_eq!(mask_urls(text), text, "{text}");
        }
    }
}
