//! The opaque `next_cursor` of `session.list`.
//!
//! Keyset pagination on the list order (`created_at_ms` DESC, `id` DESC): the cursor is the key of
//! the last row of the previous page, and the next page starts strictly after it. Unlike an
//! offset, this visits every session exactly once even while sessions are created meanwhile.
//! The format (`c1.<created_at_ms>.<id>`) is not part of the API; the `c1` prefix lets a later
//! format reject old cursors cleanly instead of misreading them.

use crate::StoreError;

const PREFIX: &str = "c1";

/// The position after one row of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListCursor {
    pub created_at_ms: i64,
    pub id: String,
}

impl ListCursor {
    /// The cursor's text.
    pub(crate) fn encode(&self) -> String {
        format!("{PREFIX}.{}.{}", self.created_at_ms, self.id)
    }

    /// Parses a cursor produced by [`ListCursor::encode`]; anything else is `Invalid`.
    pub(crate) fn decode(text: &str) -> Result<Self, StoreError> {
        let bad = || StoreError::Invalid(format!("bad cursor {text:?}"));
        let mut parts = text.splitn(3, '.');
        if parts.next() != Some(PREFIX) {
            return Err(bad());
        }
        let created_at_ms = parts
            .next()
            .and_then(|ms| ms.parse::<i64>().ok())
            .ok_or_else(bad)?;
        let id = parts.next().filter(|id| !id.is_empty()).ok_or_else(bad)?;
        Ok(ListCursor {
            created_at_ms,
            id: id.to_owned(),
        })
    }
}

/// The `next_cursor` that continues a listing right after `row`: for a
/// caller that ends a page earlier than the store did (the reply's own
/// byte bound), so that paging still visits every session exactly once.
pub fn list_cursor_after(row: &crate::SessionRow) -> String {
    ListCursor {
        created_at_ms: row.created_at_ms,
        id: row.id.as_str().to_owned(),
    }
    .encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let c = ListCursor {
            created_at_ms: -12,
            id: "01J.X".into(),
        };
        assert_eq!(ListCursor::decode(&c.encode()), Ok(c));
    }

    #[test]
    fn rejects_garbage() {
        for text in ["", "c1", "c1.", "c1.12", "c1.12.", "c2.12.x", "c1.x.y"] {
            assert!(
                matches!(ListCursor::decode(text), Err(StoreError::Invalid(_))),
                "{text:?}"
            );
        }
    }
}
