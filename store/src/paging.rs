//! How a read's answer is cut, whatever the dialect: the pages of `list_sessions_within` and the
//! arguments of `events_since` ([`StoreRead`](crate::StoreRead) says what a caller may rely on).
//!
//! Plain Rust fed rows, so that both readers cut pages at the same row and point their cursors
//! at the same place; a dialect only binds the query (its LIMIT is [`ListPage::fetch`]) and
//! hands the page the query's row stream ([`ListPage::fill`]).

use futures::{Stream, TryStreamExt};

use crate::cursor::{list_cursor_after, ListCursor};
use crate::{SessionRow, StoreError};

/// One page of `list_sessions_within`, filled row by row as the query streams.
#[derive(Debug)]
pub(crate) struct ListPage {
    limit: u32,
    max_bytes: usize,
    sessions: Vec<SessionRow>,
    /// Titles and ids of `sessions`, the measure `max_bytes` bounds.
    bytes: usize,
    /// A row was cut: another page exists.
    more: bool,
}

impl ListPage {
    /// Checks a listing's arguments: an empty page is refused (a caller could never get past
    /// it), and a cursor must be one a page gave out. Returns the page to fill and where the
    /// query starts (`None`: at the newest session).
    pub(crate) fn start(
        cursor: Option<&str>,
        limit: u32,
        max_bytes: usize,
    ) -> Result<(ListPage, Option<ListCursor>), StoreError> {
        if limit == 0 {
            return Err(StoreError::Invalid("list limit must be at least 1".into()));
        }
        let after = cursor.map(ListCursor::decode).transpose()?;
        let page = ListPage {
            limit,
            max_bytes,
            sessions: Vec::new(),
            bytes: 0,
            more: false,
        };
        Ok((page, after))
    }

    /// The query's LIMIT: one row more than the page holds tells whether another page exists.
    pub(crate) fn fetch(&self) -> i64 {
        i64::from(self.limit) + 1
    }

    /// Offers the query's next row. It is decoded only if it belongs on this page: `Ok(false)`
    /// means the page was cut before it (full, or past `max_bytes`) and the caller stops
    /// reading, so rows with huge titles (written before titles were bounded) never sit in
    /// memory beyond the one that passed the bound.
    pub(crate) fn take(
        &mut self,
        decode: impl FnOnce() -> Result<SessionRow, StoreError>,
    ) -> Result<bool, StoreError> {
        if self.sessions.len() == self.limit as usize || self.bytes > self.max_bytes {
            self.more = true;
            return Ok(false);
        }
        let session = decode()?;
        let size = session.title.len() + session.id.as_str().len();
        self.bytes = self.bytes.saturating_add(size);
        self.sessions.push(session);
        Ok(true)
    }

    /// Reads the query's rows into the page, decoding each with `decode`, until the page says
    /// stop ([`ListPage::take`]); the page and its next cursor ([`ListPage::finish`]).
    pub(crate) async fn fill<R>(
        mut self,
        mut rows: impl Stream<Item = Result<R, sqlx::Error>> + Unpin,
        map_err: impl Fn(sqlx::Error) -> StoreError,
        decode: impl Fn(&R) -> Result<SessionRow, StoreError>,
    ) -> Result<(Vec<SessionRow>, Option<String>), StoreError> {
        while let Some(row) = rows.try_next().await.map_err(&map_err)? {
            if !self.take(|| decode(&row))? {
                break;
            }
        }
        Ok(self.finish())
    }

    /// The page and its next cursor: `Some` only if a row was cut, and then right after the
    /// page's last row, so that paging visits every session exactly once.
    pub(crate) fn finish(self) -> (Vec<SessionRow>, Option<String>) {
        let next = match self.sessions.last() {
            Some(last) if self.more => Some(list_cursor_after(last)),
            _ => None,
        };
        (self.sessions, next)
    }
}

/// The `(after, limit)` binds of `events_since`, or `None` when the answer is empty without
/// asking: no stored seq exceeds i64::MAX, so "after" anything larger is simply nothing, and a
/// limit of 0 asks for nothing.
pub(crate) fn events_since_binds(after: u64, limit: u32) -> Option<(i64, i64)> {
    let after = i64::try_from(after).ok()?;
    (limit > 0).then(|| (after, i64::from(limit)))
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use tether_protocol::{SessionId, SessionStatus};

    use super::*;

    fn session(n: i64, title: &str) -> SessionRow {
        SessionRow {
            id: SessionId::from(format!("s_{n}")),
            profile: "p".into(),
            title: title.into(),
            status: SessionStatus::Idle,
            parent_session_id: None,
            kind: "chat".into(),
            history_version: 0,
            close_on_disconnect: false,
            engine_pin: None,
            follow_profile_config: true,
            turn_marker: None,
            created_at_ms: 1_000 - n,
            updated_at_ms: 1_000 - n,
            latest_seq: 0,
            message_count: 0,
            retained_from_seq: 1,
        }
    }

    /// Feeds `rows` to a page as a query would, stopping when the page says so.
    fn fill(mut page: ListPage, rows: Vec<SessionRow>) -> (Vec<SessionRow>, Option<String>) {
        for row in rows {
            if !page.take(|| Ok(row)).expect("a decoded row") {
                break;
            }
        }
        page.finish()
    }

    fn start(limit: u32, max_bytes: usize) -> ListPage {
        ListPage::start(None, limit, max_bytes)
            .expect("valid arguments")
            .0
    }

    #[test]
    fn arguments_are_checked() {
        assert!(matches!(
            ListPage::start(None, 0, usize::MAX),
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(
            ListPage::start(Some("nope"), 5, usize::MAX),
            Err(StoreError::Invalid(_))
        ));
        let (page, after) = ListPage::start(Some("c1.42.s_7"), 5, usize::MAX).expect("valid");
        assert_eq!(page.fetch(), 6);
        let after = after.expect("a cursor");
        assert_eq!((after.created_at_ms, after.id.as_str()), (42, "s_7"));
        assert_eq!(start(u32::MAX, 1).fetch(), i64::from(u32::MAX) + 1);
    }

    #[test]
    fn a_full_page_points_after_its_last_row() {
        let rows: Vec<_> = (1..=3).map(|n| session(n, "t")).collect();
        let (page, next) = fill(start(2, usize::MAX), rows.clone());
        assert_eq!(page, rows[..2]);
        assert_eq!(next, Some(list_cursor_after(&rows[1])));
    }

    #[test]
    fn the_last_page_has_no_cursor() {
        let rows: Vec<_> = (1..=2).map(|n| session(n, "t")).collect();
        assert_eq!(fill(start(2, usize::MAX), rows.clone()), (rows, None));
        assert_eq!(fill(start(2, usize::MAX), Vec::new()), (Vec::new(), None));
    }

    #[test]
    fn the_row_that_passes_max_bytes_ends_the_page() {
        // Each row weighs its title and its id ("s_n": 3 bytes): 10 + 3 = 13.
        let rows: Vec<_> = (1..=4).map(|n| session(n, "0123456789")).collect();
        let (page, next) = fill(start(10, 20), rows.clone());
        // 13 is within 20, so a second row is taken; 26 passes it, so the third is cut.
        assert_eq!(page, rows[..2]);
        assert_eq!(next, Some(list_cursor_after(&rows[1])));
        // A page holds at least one row, however large.
        let (page, next) = fill(start(10, 0), rows.clone());
        assert_eq!(page, rows[..1]);
        assert_eq!(next, Some(list_cursor_after(&rows[0])));
    }

    #[test]
    fn a_cut_row_is_not_decoded() {
        let mut page = start(1, usize::MAX);
        assert_eq!(page.take(|| Ok(session(1, "t"))), Ok(true));
        // The extra row only proves another page exists: a row that would not decode is no
        // reason to fail this page.
        let refused = page.take(|| Err(StoreError::Invalid("corrupt".into())));
        assert_eq!(refused, Ok(false));
        assert!(page.finish().1.is_some());
    }

    #[test]
    fn a_decode_error_fails_the_page() {
        let mut page = start(2, usize::MAX);
        let err = page.take(|| Err(StoreError::Invalid("corrupt".into())));
        assert!(matches!(err, Err(StoreError::Invalid(_))));
    }

    #[tokio::test]
    async fn a_page_stops_reading_where_it_is_cut() {
        let rows: Vec<_> = (1..=3).map(|n| session(n, "t")).collect();
        let pulled = std::cell::Cell::new(0);
        let stream = futures::stream::iter(rows.clone()).map(|row| {
            pulled.set(pulled.get() + 1);
            Ok(row)
        });
        let io = |e: sqlx::Error| StoreError::Io(e.to_string());
        let filled = start(1, usize::MAX)
            .fill(stream, io, |r| Ok(r.clone()))
            .await;
        let next = Some(list_cursor_after(&rows[0]));
        assert_eq!(filled, Ok((rows[..1].to_vec(), next)));
        // The row that proved another page exists was the last one read.
        assert_eq!(pulled.get(), 2);
    }

    #[tokio::test]
    async fn a_failed_read_fails_the_page() {
        let rows = vec![Ok(session(1, "t")), Err(sqlx::Error::PoolTimedOut)];
        let unavailable = |e: sqlx::Error| StoreError::Unavailable(e.to_string());
        let filled = start(5, usize::MAX)
            .fill(futures::stream::iter(rows), unavailable, |r| Ok(r.clone()))
            .await;
        assert!(matches!(filled, Err(StoreError::Unavailable(_))));
    }

    #[test]
    fn events_since_arguments() {
        assert_eq!(events_since_binds(0, 10), Some((0, 10)));
        assert_eq!(events_since_binds(i64::MAX as u64, 1), Some((i64::MAX, 1)));
        assert_eq!(events_since_binds(i64::MAX as u64 + 1, 10), None);
        assert_eq!(events_since_binds(u64::MAX, 10), None);
        assert_eq!(events_since_binds(5, 0), None);
    }
}
