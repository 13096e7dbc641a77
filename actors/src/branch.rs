//! `session.branch`: a new session holding a copy of the parent's
//! transcript up to `upto_seq`.
//!
//! The copy is prepared on a task of its own (reading the store does not
//! hold up any session), and written by the registry in one transaction
//! with the new session's row: a branch exists whole or not at all, even
//! when the disk fails half-way. On a cluster that transaction is a write
//! of the parent too (its fence is checked), so a branch is made on the
//! parent's owner: the live parent starts it there (`session/branch.rs`,
//! forwarded from a follower), a stored one is branched by whoever asks.
//!
//! What is copied is the transcript as it stood at `upto_seq`: the messages
//! of the history segment current then (after the latest compaction at or
//! before it). A compaction's summary becomes the branch's first
//! `message.system`, so the branch starts a fresh lineage (history version
//! 0) that reads exactly like the parent did.
//!
//! The cut never falls inside a turn (see `cut`): the branch ends before
//! any turn that had begun but not ended at `upto_seq`, and the reply says
//! where it actually ended.

use serde_json::{json, Value};
use tether_protocol::{now_ms, EventType, RpcError, SessionCreatedPayload, SessionId, TextPayload};
use tether_store::{EventRow, NewSession, SessionRow};

use crate::ctx::Ctx;
use crate::event::EventRecord;
use crate::registry::number_from_one;
use crate::registry::{CreatedSession, RegistryMsg};

mod cut;

use cut::{whole_turns_cut, Mark};

/// What is asked of a branch.
#[derive(Debug, Clone)]
pub(crate) struct BranchAsk {
    pub profile: String,
    pub upto_seq: Option<u64>,
    pub title: Option<String>,
}

/// Branches `parent` (whose committed head is `latest`) as asked: the
/// `session.branch` result, `{"session": …, "upto_seq": N}`, `upto_seq`
/// being where the copy actually ended (before any turn still unfinished
/// at the asked cut).
pub(crate) async fn branch(
    ctx: &Ctx,
    parent: &SessionRow,
    latest: u64,
    ask: BranchAsk,
) -> Result<Value, RpcError> {
    let max_title = ctx.config.max_title_bytes;
    if let Some(title) = &ask.title {
        crate::title::check(title, max_title)?;
    }
    let upto = upto_within(ask.upto_seq, latest)?;
    let (copied, upto) = segment_at(ctx, &parent.id, upto).await?;
    let title = match ask.title {
        Some(t) => t,
        None => {
            let taken = ctx.reader.branch_titles(&ask.profile, &parent.id).await?;
            next_branch_title(&parent.title, &taken, max_title)
        }
    };
    let (new, initial) = branch_of(parent, ask.profile, title, copied);
    let registry = ctx.registry()?;
    let CreatedSession { result, .. } = crate::peer::ask(
        &registry,
        |reply| RegistryMsg::CreateFrom {
            new: Box::new(new),
            initial,
            attach: None,
            reply,
        },
        ctx.config.call_timeout,
    )
    .await??;
    Ok(json!({ "session": result.session, "upto_seq": upto }))
}

/// The transcript events of the segment current at the cut, ready to be
/// renumbered into a new session, and the cut: `upto`, or earlier when a
/// turn was unfinished there.
async fn segment_at(
    ctx: &Ctx,
    session: &SessionId,
    upto: u64,
) -> Result<(Vec<EventRecord>, u64), RpcError> {
    let mut rows = ctx.reader.events_between(session, 0, upto).await?;
    let cut = whole_turns_cut(&marks(&rows), upto);
    rows.retain(|r| r.seq <= cut);
    let start = rows
        .iter()
        .rposition(|r| r.kind == EventType::SessionCompacted.as_str())
        .unwrap_or(0);
    let mut out = Vec::new();
    for row in &rows[start..] {
        let Some(kind) = EventType::parse(&row.kind) else {
            continue;
        };
        let mut rec = match kind {
            // A turn's `error` too, so the branch's transcript says
            // why a turn failed as the parent's does.
            EventType::Error if row.turn_id.is_none() => continue,
            k if k.feeds_transcript() && k != EventType::SessionCompacted => {
                EventRecord::from_row(row).ok_or_else(|| {
                    RpcError::new(
                        tether_protocol::codes::STORAGE_UNAVAILABLE,
                        "a stored event is unreadable",
                    )
                })?
            }
            EventType::SessionCompacted => {
                let summary = serde_json::from_str::<serde_json::Value>(&row.payload)
                    .ok()
                    .and_then(|v| v["summary"].as_str().map(str::to_string))
                    .unwrap_or_default();
                EventRecord::new(
                    EventType::MessageSystem,
                    &TextPayload { text: summary },
                    None,
                    row.ts_ms,
                )
            }
            _ => continue,
        };
        rec.seq = None;
        out.push(rec);
    }
    Ok((out, cut))
}

/// The turn marks of stored rows, for the cut.
fn marks(rows: &[EventRow]) -> Vec<(u64, Mark<'_>)> {
    rows.iter()
        .map(|r| {
            let mark = match (r.kind.as_str(), r.turn_id.as_deref()) {
                (k, Some(turn)) if k == EventType::MessageUser.as_str() => Mark::Start(turn),
                (k, Some(turn)) if k == EventType::MessageComplete.as_str() => Mark::End(turn),
                _ => Mark::Other,
            };
            (r.seq, mark)
        })
        .collect()
}

/// `"TITLE (branch N)"` with N one more than the highest taken, within
/// `max` bytes: a parent title too long for the suffix is shortened (the
/// number is what tells branches apart, so it is kept whole).
fn next_branch_title(parent: &str, taken: &[String], max: usize) -> String {
    let highest = taken
        .iter()
        .filter_map(|t| {
            let (head, n) = t.strip_suffix(')')?.rsplit_once(" (branch ")?;
            // The parent's title, or its prefix in a title that was
            // shortened to the bound (at most 3 bytes short of it: a cut
            // falls on a character boundary).
            let ours = head == parent || (parent.starts_with(head) && t.len() + 3 >= max);
            ours.then(|| n.parse::<u64>().ok()).flatten()
        })
        .max()
        .unwrap_or(0);
    let suffix = format!(" (branch {})", highest + 1);
    let room = max.saturating_sub(suffix.len());
    let title = format!("{}{suffix}", crate::title::prefix_within(parent, room));
    // A bound shorter than the suffix itself: shorten the whole.
    crate::title::prefix_within(&title, max).to_owned()
}

/// `upto_seq` as asked (the head by default), within `1..=latest`.
fn upto_within(asked: Option<u64>, latest: u64) -> Result<u64, RpcError> {
    match asked {
        None => Ok(latest),
        Some(n) if n >= 1 && n <= latest => Ok(n),
        Some(n) => Err(RpcError::invalid_params(
            "upto_seq",
            format!("must be between 1 and the session's latest_seq ({latest}), got {n}"),
        )),
    }
}

/// The new session's row and first events: its `session.created`, then
/// the copied transcript, numbered from 1.
fn branch_of(
    parent: &SessionRow,
    profile: String,
    title: String,
    copied: Vec<EventRecord>,
) -> (NewSession, Vec<EventRecord>) {
    let now = now_ms();
    let mut initial = Vec::with_capacity(copied.len() + 1);
    initial.push(EventRecord::new(
        EventType::SessionCreated,
        &SessionCreatedPayload {
            title: title.clone(),
            profile: profile.clone(),
            parent_session_id: Some(parent.id.clone()),
        },
        None,
        now,
    ));
    initial.extend(copied);
    let message_count = number_from_one(&mut initial);
    let new = NewSession {
        id: SessionId::new(),
        profile,
        title,
        parent_session_id: Some(parent.id.clone()),
        kind: parent.kind.clone(),
        close_on_disconnect: false,
        engine_pin: parent.engine_pin.clone(),
        follow_profile_config: parent.follow_profile_config,
        created_at_ms: now,
        message_count,
    };
    (new, initial)
}

#[cfg(test)]
mod tests {
    use super::next_branch_title;

    #[test]
    fn branch_titles_take_the_next_free_number() {
        assert_eq!(next_branch_title("Plan", &[], 1024), "Plan (branch 1)");
        let taken = vec![
            "Plan (branch 1)".to_string(),
            "Plan (branch 3)".to_string(),
            "renamed".to_string(),
            "Plan (branch x)".to_string(),
            "P (branch 9)".to_string(),
        ];
        assert_eq!(next_branch_title("Plan", &taken, 1024), "Plan (branch 4)");
    }

    #[test]
    fn branch_titles_fit_the_bound_and_keep_counting() {
        let parent = "é".repeat(10); // 20 bytes
        let first = next_branch_title(&parent, &[], 24);
        assert!(first.len() <= 24, "{first}");
        assert!(first.ends_with(" (branch 1)"), "{first}");
        assert!(parent.starts_with(first.strip_suffix(" (branch 1)").unwrap()));
        let second = next_branch_title(&parent, &[first], 24);
        assert!(second.ends_with(" (branch 2)"), "{second}");
        // A bound below the suffix still gives a title within it.
        assert!(next_branch_title(&parent, &[], 5).len() <= 5);
    }
}
