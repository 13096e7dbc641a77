//! `session.events.since` and the store reads behind every replay.
//!
//! The ring answers when it reaches back far enough; otherwise the store
//! does, on a task, so a long replay never stalls the session. Every read is
//! cut at the session's committed seq at the time of the request, so an
//! event committed meanwhile is delivered live, never twice.
//!
//! A `last_seen` above that seq is lost history (PROTOCOL 1.4): the client
//! saw events the store no longer has, so the answer is `truncated` with no
//! events, never an empty "nothing missed". The one exception is a cluster
//! follower, which may not have read yet what its client saw through the
//! owner: it asks the store.

use std::sync::Arc;

use ractor::RpcReplyPort;
use serde_json::value::RawValue;
use tether_protocol::{RpcError, SessionId, SinceParams, SinceResult};
use tether_store::StoreRead;

use super::SessionState;
use crate::event::EventRecord;
use crate::ring::Coverage;

/// Reads stored events `after < seq <= upto`, at most `limit`, as params
/// objects. Also says whether more remain below `upto`.
pub(crate) async fn read_range(
    reader: &dyn StoreRead,
    session_id: &SessionId,
    after: u64,
    upto: u64,
    limit: u32,
) -> Result<(Vec<Arc<RawValue>>, bool), RpcError> {
    if after >= upto {
        return Ok((Vec::new(), false));
    }
    let want = limit.min((upto - after).min(u32::MAX as u64) as u32);
    let rows = reader.events_since(session_id, after, want).await?;
    let mut events = Vec::with_capacity(rows.len());
    let mut last = after;
    for row in rows.iter().filter(|r| r.seq <= upto) {
        let rec = EventRecord::from_row(row).ok_or_else(|| {
            RpcError::new(
                tether_protocol::codes::STORAGE_UNAVAILABLE,
                format!("stored event {} is malformed", row.seq),
            )
        })?;
        last = row.seq;
        events.push(rec.params_of(session_id));
    }
    Ok((events, last < upto))
}

/// Answers `session.events.since` for a session that is not live.
pub(crate) async fn since_from_store(
    reader: &dyn StoreRead,
    session_id: &SessionId,
    latest_seq: u64,
    retained_from_seq: u64,
    epoch: &str,
    params: &SinceParams,
) -> Result<SinceResult, RpcError> {
    if params.last_seen > latest_seq {
        return Ok(lost_history(latest_seq, epoch));
    }
    let (events, has_more) = read_range(
        reader,
        session_id,
        params.last_seen,
        latest_seq,
        params.limit,
    )
    .await?;
    Ok(SinceResult {
        events,
        latest_seq,
        truncated: params.last_seen.saturating_add(1) < retained_from_seq,
        has_more,
        epoch: epoch.to_string(),
    })
}

/// The answer to a `last_seen` above `latest_seq`: what came after it is
/// gone from this store's history.
fn lost_history(latest_seq: u64, epoch: &str) -> SinceResult {
    SinceResult {
        events: Vec::new(),
        latest_seq,
        truncated: true,
        has_more: false,
        epoch: epoch.to_string(),
    }
}

pub(super) fn since(
    state: &SessionState,
    params: SinceParams,
    reply: RpcReplyPort<Result<SinceResult, RpcError>>,
) {
    let h = state.commit.committed_seq();
    let after = params.last_seen;
    if after > h && state.following() {
        since_ahead_of_follower(state, params, reply);
        return;
    }
    if after > h {
        let _ = reply.send(Ok(lost_history(h, &state.ctx.epoch)));
        return;
    }
    if state.ring.coverage(after, h) == Coverage::Full {
        let entries = state.ring.range(after, h, params.limit as usize);
        let has_more = entries.last().is_some_and(|e| e.seq < h);
        let _ = reply.send(Ok(SinceResult {
            events: entries.into_iter().map(|e| e.params).collect(),
            latest_seq: h,
            truncated: after.saturating_add(1) < state.retained_from_seq,
            has_more,
            epoch: state.ctx.epoch.to_string(),
        }));
        return;
    }
    let reader = state.ctx.reader.clone();
    let id = state.id.clone();
    let retained = state.retained_from_seq;
    let epoch = state.ctx.epoch.clone();
    tokio::spawn(async move {
        let result = since_from_store(reader.as_ref(), &id, h, retained, &epoch, &params).await;
        let _ = reply.send(result);
    });
}

/// A follower asked from beyond what it has read: the store's row says how
/// far the session really is, and the answer is read from the store.
fn since_ahead_of_follower(
    state: &SessionState,
    params: SinceParams,
    reply: RpcReplyPort<Result<SinceResult, RpcError>>,
) {
    let reader = state.ctx.reader.clone();
    let id = state.id.clone();
    let profile = state.profile.clone();
    let retained = state.retained_from_seq;
    let epoch = state.ctx.epoch.clone();
    let h = state.commit.committed_seq();
    tokio::spawn(async move {
        let result = async {
            let latest = reader
                .get_session(&profile, &id)
                .await?
                .map_or(h, |row| row.latest_seq.max(h));
            since_from_store(reader.as_ref(), &id, latest, retained, &epoch, &params).await
        }
        .await;
        let _ = reply.send(result);
    });
}
