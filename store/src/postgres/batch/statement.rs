//! The batch statement and its parameters: data-modifying CTEs over `UNNEST`ed arrays, one
//! array per column, bound in `$`-number order from a [`Plan`].

use tether_protocol::SessionId;

use crate::columns::{json_text, to_i64};

use super::{NewRow, Plan, Update};

type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// The batch statement, with the events' columns and parameters as the two variants need them.
/// Parameter numbers are fixed; [`Plan::query`] binds them in order.
macro_rules! batch_statement {
    ($event_columns:literal, $event_fence:literal) => {
        concat!(
            "WITH \
new_profiles AS ( \
    INSERT INTO profiles (name, created_at_ms) \
    SELECT * FROM UNNEST($1::text[], $2::bigint[]) \
    ON CONFLICT (name) DO NOTHING), \
new_sessions AS ( \
    INSERT INTO sessions (id, profile, title, status, parent_session_id, kind, history_version, \
        close_on_disconnect, engine_pin, follow_profile_config, turn_marker, created_at_ms, \
        updated_at_ms, latest_seq, message_count, retained_from_seq) \
    SELECT n.*, 1 FROM UNNEST($3::text[], $4::text[], $5::text[], $6::text[], $7::text[], \
        $8::text[], $9::bigint[], $10::bool[], $11::text[], $12::bool[], $13::text[], \
        $14::bigint[], $15::bigint[], $16::bigint[], $17::bigint[]) AS n), \
changed AS ( \
    UPDATE sessions s SET \
        status = COALESCE(u.status, s.status), \
        title = COALESCE(u.title, s.title), \
        message_count = COALESCE(u.message_count, s.message_count), \
        history_version = COALESCE(u.history_version, s.history_version), \
        turn_marker = CASE WHEN u.marker_set THEN u.marker ELSE s.turn_marker END, \
        updated_at_ms = COALESCE(u.updated_at_ms, s.updated_at_ms), \
        latest_seq = u.new_seq \
    FROM UNNEST($18::text[], $19::bigint[], $20::bigint[], $21::text[], $22::text[], \
        $23::bigint[], $24::bigint[], $25::bool[], $26::text[], $27::bigint[]) \
        AS u(id, expected, new_seq, status, title, message_count, history_version, \
             marker_set, marker, updated_at_ms) \
    WHERE s.id = u.id AND s.latest_seq = u.expected \
    RETURNING 1), \
new_events AS ( \
    INSERT INTO events (session_id, seq, type, payload, turn_id, trace_id, ts_ms", $event_columns, ") \
    SELECT * FROM UNNEST($28::text[], $29::bigint[], $30::text[], $31::text[], $32::text[], \
        $33::text[], $34::bigint[]", $event_fence, ")) \
SELECT tether_expect_sessions((SELECT count(*) FROM changed), $35)"
        )
    };
}

/// The batch statement of a single gateway.
const STATEMENT: &str = batch_statement!("", "");

/// The batch statement of a cluster node's writer: each event also stores the fence its batch
/// was written under (`$36`), inside the transaction that checked it (`postgres/fencing.rs`).
const STATEMENT_FENCED: &str = batch_statement!(", fence", ", $36::bigint[]");

impl<'a> Plan<'a> {
    /// The statement with this plan's arrays bound: profiles ($1–2), new sessions ($3–17),
    /// session updates ($18–27), events ($28–34), the update count ($35) and, for a cluster
    /// node, each event's fence ($36).
    pub(crate) fn query(&self) -> PgQuery<'_> {
        let statement = match self.fences {
            None => STATEMENT,
            Some(_) => STATEMENT_FENCED,
        };
        let query = sqlx::query(statement)
            .bind(self.profiles.iter().map(|p| p.0).collect::<Vec<_>>())
            .bind(self.profiles.iter().map(|p| p.1).collect::<Vec<_>>());
        let query = bind_inserts(query, &self.inserts);
        let query = bind_updates(query, &self.updates);
        let query = self.bind_events(query).bind(self.updates.len() as i64);
        match &self.fences {
            None => query,
            Some(fences) => query.bind(
                self.events
                    .iter()
                    .map(|e| {
                        fences
                            .get(e.0)
                            .map_or(0, |f| to_i64(*f, "fence").unwrap_or(0))
                    })
                    .collect::<Vec<i64>>(),
            ),
        }
    }

    /// $28–34: the events, one array per column.
    fn bind_events<'q>(&'q self, query: PgQuery<'q>) -> PgQuery<'q> {
        let evs = &self.events;
        query
            .bind(evs.iter().map(|e| e.0).collect::<Vec<_>>())
            // Planning checked every seq into i64 already.
            .bind(evs.iter().map(|e| e.1.seq as i64).collect::<Vec<_>>())
            .bind(evs.iter().map(|e| e.1.kind.as_str()).collect::<Vec<_>>())
            .bind(evs.iter().map(|e| e.1.payload.as_str()).collect::<Vec<_>>())
            .bind(
                evs.iter()
                    .map(|e| e.1.turn_id.as_deref())
                    .collect::<Vec<_>>(),
            )
            .bind(
                evs.iter()
                    .map(|e| e.1.trace_id.as_deref())
                    .collect::<Vec<_>>(),
            )
            .bind(evs.iter().map(|e| e.1.ts_ms).collect::<Vec<_>>())
    }
}

/// $3–17: the sessions the batch creates, one array per column.
fn bind_inserts<'q>(query: PgQuery<'q>, ins: &'q [NewRow<'_>]) -> PgQuery<'q> {
    query
        .bind(
            ins.iter()
                .map(|r| r.session.id.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            ins.iter()
                .map(|r| r.session.profile.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(ins.iter().map(|r| r.title).collect::<Vec<_>>())
        .bind(ins.iter().map(|r| r.status).collect::<Vec<_>>())
        .bind(
            ins.iter()
                .map(|r| r.session.parent_session_id.as_ref().map(SessionId::as_str))
                .collect::<Vec<_>>(),
        )
        .bind(
            ins.iter()
                .map(|r| r.session.kind.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(ins.iter().map(|r| r.history_version).collect::<Vec<_>>())
        .bind(
            ins.iter()
                .map(|r| r.session.close_on_disconnect)
                .collect::<Vec<_>>(),
        )
        .bind(
            ins.iter()
                .map(|r| json_text(&r.session.engine_pin))
                .collect::<Vec<_>>(),
        )
        .bind(
            ins.iter()
                .map(|r| r.session.follow_profile_config)
                .collect::<Vec<_>>(),
        )
        .bind(
            ins.iter()
                .map(|r| r.turn_marker.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(
            ins.iter()
                .map(|r| r.session.created_at_ms)
                .collect::<Vec<_>>(),
        )
        .bind(ins.iter().map(|r| r.updated_at_ms).collect::<Vec<_>>())
        .bind(ins.iter().map(|r| r.latest_seq).collect::<Vec<_>>())
        .bind(ins.iter().map(|r| r.message_count).collect::<Vec<_>>())
}

/// $18–27: the existing sessions the batch changes, one array per column.
fn bind_updates<'q>(query: PgQuery<'q>, ups: &'q [Update<'_>]) -> PgQuery<'q> {
    query
        .bind(ups.iter().map(|u| u.id).collect::<Vec<_>>())
        .bind(ups.iter().map(|u| u.expected).collect::<Vec<_>>())
        .bind(ups.iter().map(|u| u.new_seq).collect::<Vec<_>>())
        .bind(ups.iter().map(|u| u.status).collect::<Vec<_>>())
        .bind(ups.iter().map(|u| u.title).collect::<Vec<_>>())
        .bind(ups.iter().map(|u| u.message_count).collect::<Vec<_>>())
        .bind(ups.iter().map(|u| u.history_version).collect::<Vec<_>>())
        .bind(ups.iter().map(|u| u.marker_set).collect::<Vec<_>>())
        .bind(ups.iter().map(|u| u.marker.as_deref()).collect::<Vec<_>>())
        .bind(ups.iter().map(|u| u.updated_at_ms).collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fenced_statement_is_the_single_gateways_plus_the_fence_column() {
        // The single gateway's statement is exactly what it was before clusters.
        assert!(!STATEMENT.contains("fence"));
        assert!(!STATEMENT.contains("$36"));
        assert!(STATEMENT.contains(
            "INSERT INTO events (session_id, seq, type, payload, turn_id, trace_id, ts_ms) "
        ));
        assert_eq!(
            STATEMENT_FENCED
                .replacen(", fence", "", 1)
                .replacen(", $36::bigint[]", "", 1),
            STATEMENT
        );
    }
}
