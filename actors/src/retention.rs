//! Retention: the background sweep that bounds what the store keeps.
//!
//! Rules, each off unless configured, with per-profile overrides
//! ([`RetentionConfig`]):
//!
//! - **closed sessions** are erased once they have been closed for
//!   `closed_after` (as `session.delete` erases them);
//! - **parked sessions** idle for `parked_after` are closed, like a
//!   `session.close` (their turns ended, `session.closed` written; a parked
//!   session has no peer to tell), and later erased by the rule above;
//! - **events** of a session that lives on are trimmed: those older than
//!   `events_after`, or beyond the last `max_events`, but never its current
//!   history segment (the latest `session.compacted` and everything after
//!   it), so its transcript stays whole and `messages` are unchanged. A
//!   session never compacted is never trimmed. Its `retained_from_seq`
//!   moves past what went, and a client asking for older events gets
//!   `truncated` (PROTOCOL 1.4).
//!
//! The sweep runs every `interval`, in bounded batches: at most `batch`
//! sessions per rule and profile scope, each erase or trim a series of
//! short transactions on the store's erase connection (`tether_store`'s
//! `erase.rs`), so the writer never waits long. Of several nodes on one
//! database one sweeps at a time: a sweep first takes the store's retention
//! lease (an advisory lock on PostgreSQL) and skips its turn without it.
//! A sweep ends by giving freed space back (SQLite's incremental vacuum).
//! Every sweep, with or without rules, first finishes the erases a crash
//! cut short, since their ids stay taken until then.

mod delete;

use std::collections::HashMap;
use std::time::Duration;

use tether_protocol::{now_ms, SessionId, SessionStatus};
use tether_store::{Scope, StoreError};
use tracing::{debug, info, warn};

use crate::ctx::Ctx;
use crate::peer::ask;
use crate::registry::RegistryMsg;
use crate::session::{SessionMsg, ERASE_BATCH};

pub(crate) use delete::{delete_session, unlink_live};

/// One set of retention rules; `None` leaves that rule off.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionRules {
    /// Erase a session closed this long ago.
    pub closed_after: Option<Duration>,
    /// Close a parked session idle this long.
    pub parked_after: Option<Duration>,
    /// Trim events older than this (never the current segment).
    pub events_after: Option<Duration>,
    /// Trim all but this many of a session's latest events (never the
    /// current segment).
    pub max_events: Option<u64>,
}

impl RetentionRules {
    /// `self`, with each rule it leaves unset taken from `default`.
    pub fn over(&self, default: &RetentionRules) -> RetentionRules {
        RetentionRules {
            closed_after: self.closed_after.or(default.closed_after),
            parked_after: self.parked_after.or(default.parked_after),
            events_after: self.events_after.or(default.events_after),
            max_events: self.max_events.or(default.max_events),
        }
    }

    fn any(&self) -> bool {
        *self != RetentionRules::default()
    }
}

/// Retention for the whole gateway: the default rules, each profile's
/// overrides, and how often and how much a sweep does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionConfig {
    /// The rules of every profile without overrides.
    pub default: RetentionRules,
    /// A profile's rules; a rule it leaves unset is the default's.
    pub profiles: HashMap<String, RetentionRules>,
    /// Time between two sweeps.
    pub interval: Duration,
    /// Sessions per rule and scope in one sweep.
    pub batch: u32,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            default: RetentionRules::default(),
            profiles: HashMap::new(),
            interval: Duration::from_secs(60),
            batch: 200,
        }
    }
}

impl RetentionConfig {
    /// Whether any rule is on anywhere.
    pub fn enabled(&self) -> bool {
        self.default.any() || self.profiles.values().any(RetentionRules::any)
    }

    /// Each scope with the rules that apply in it: every profile with
    /// overrides on its own, then every other profile under the default.
    fn scopes(&self) -> (Vec<(String, RetentionRules)>, Vec<String>) {
        let mut own: Vec<(String, RetentionRules)> = self
            .profiles
            .iter()
            .map(|(p, r)| (p.clone(), r.over(&self.default)))
            .collect();
        own.sort_by(|a, b| a.0.cmp(&b.0));
        let names = own.iter().map(|(p, _)| p.clone()).collect();
        (own, names)
    }
}

/// Starts the sweep. With no rule on it only finishes the erases a crash
/// cut short: until their events are gone their ids stay taken (a new
/// session may not share an id with a life still being erased), so that
/// runs on every gateway, first right after start-up. It ends when the
/// gateway drains.
pub(crate) fn spawn(ctx: Ctx) {
    let config = ctx.config.retention.clone();
    if config.enabled() {
        info!(interval_s = config.interval.as_secs_f64(), "retention on");
    }
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(config.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if ctx.lifecycle.draining() {
                break;
            }
            if !ctx.lifecycle.recovered() {
                continue;
            }
            if !config.enabled() {
                // No rule: only the erases a crash cut short, and nothing
                // else (no vacuum, no checkpoint) when there are none.
                match finish_cut(&ctx, config.batch).await {
                    Ok(0) => {}
                    Ok(removed) => info!(events_removed = removed, "finished cut erases"),
                    Err(e) => {
                        warn!(error = %e, "finishing cut erases failed; next sweep tries again")
                    }
                }
                continue;
            }
            match sweep_led(&ctx, &config).await {
                Ok(Some(swept)) if swept.any() => info!(
                    erased = swept.erased,
                    closed = swept.closed,
                    trimmed_events = swept.trimmed,
                    pages_returned = swept.pages,
                    "retention sweep"
                ),
                Ok(Some(_)) => debug!("retention sweep: nothing to do"),
                Ok(None) => debug!("retention sweep left to another node"),
                Err(e) => warn!(error = %e, "retention sweep failed; next one tries again"),
            }
        }
    });
}

/// What one sweep did.
#[derive(Debug, Default)]
struct Swept {
    erased: u64,
    closed: u64,
    trimmed: u64,
    pages: u64,
}

impl Swept {
    fn any(&self) -> bool {
        self.erased + self.closed + self.trimmed + self.pages > 0
    }
}

/// One sweep under the retention lease; `None` if another node holds it.
/// Taking and giving back the lease are logged (debug, with the node's id
/// on a cluster), so an operator can see which node swept when, and that
/// two never overlap.
async fn sweep_led(ctx: &Ctx, config: &RetentionConfig) -> Result<Option<Swept>, StoreError> {
    if !ctx.eraser.try_lead().await? {
        return Ok(None);
    }
    let node_id = ctx.cluster.as_ref().map(|c| c.node_id().to_string());
    debug!(node_id, "retention lease taken");
    let swept = sweep(ctx, config).await;
    match ctx.eraser.release_lead().await {
        Ok(()) => debug!(node_id, "retention lease released"),
        Err(e) => warn!(node_id, error = %e, "releasing the retention lease"),
    }
    swept.map(Some)
}

/// At most this many reclaim steps (of [`RECLAIM_PAGES`]) per sweep.
const RECLAIM_STEPS: u32 = 64;
/// Pages a reclaim step gives back (16 MiB of 4 KiB pages).
const RECLAIM_PAGES: u32 = 4096;

/// Finishes the erases a crash cut short, at most `steps` batches; the
/// events removed. Until they are done their ids stay taken.
async fn finish_cut(ctx: &Ctx, steps: u32) -> Result<u64, StoreError> {
    let mut total = 0;
    for _ in 0..steps {
        let removed = ctx.eraser.finish_erasing(ERASE_BATCH).await?;
        if removed == 0 {
            break;
        }
        total += removed;
    }
    Ok(total)
}

async fn sweep(ctx: &Ctx, config: &RetentionConfig) -> Result<Swept, StoreError> {
    let mut swept = Swept::default();
    // Erases a crash cut short, first: they only hold space.
    finish_cut(ctx, config.batch).await?;
    let (own, names) = config.scopes();
    for (profile, rules) in &own {
        sweep_scope(ctx, config, Scope::Profile(profile), rules, &mut swept).await?;
    }
    sweep_scope(
        ctx,
        config,
        Scope::AllBut(&names),
        &config.default,
        &mut swept,
    )
    .await?;
    for _ in 0..RECLAIM_STEPS {
        let pages = ctx.eraser.reclaim(RECLAIM_PAGES).await?;
        swept.pages += pages;
        if pages < u64::from(RECLAIM_PAGES) {
            break;
        }
    }
    Ok(swept)
}

fn cutoff(age: Duration) -> i64 {
    now_ms().saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX))
}

async fn sweep_scope(
    ctx: &Ctx,
    config: &RetentionConfig,
    scope: Scope<'_>,
    rules: &RetentionRules,
    swept: &mut Swept,
) -> Result<(), StoreError> {
    let wait = ctx.config.call_timeout;
    if let Some(after) = rules.parked_after {
        let idle_before = cutoff(after);
        let idle = ctx
            .eraser
            .idle_since(scope, SessionStatus::Parked, idle_before, config.batch)
            .await?;
        for tether_store::Idle { profile, id, .. } in idle {
            match close_if_idle(ctx, &profile, &id, idle_before, wait).await {
                Ok(true) => swept.closed += 1,
                Ok(false) => debug!(session_id = %id, "retention: in use again; not closed"),
                Err(e) => debug!(session_id = %id, error = %e.message, "retention: not closed"),
            }
        }
    }
    if let Some(after) = rules.closed_after {
        let closed = ctx
            .eraser
            .idle_since(scope, SessionStatus::Closed, cutoff(after), config.batch)
            .await?;
        for tether_store::Idle { profile, id, life } in closed {
            match delete_session(ctx, &profile, &id, Some(life), wait).await {
                Ok(_) => swept.erased += 1,
                Err(e) => debug!(session_id = %id, error = %e.message, "retention: not erased"),
            }
        }
    }
    if rules.events_after.is_some() || rules.max_events.is_some() {
        let before = rules.events_after.map(cutoff);
        let candidates = ctx
            .eraser
            .trim_candidates(scope, rules.max_events, before, config.batch)
            .await?;
        for (profile, id) in candidates {
            let trimmed = ctx
                .eraser
                .trim(&id, rules.max_events, before, ERASE_BATCH)
                .await?;
            if let Some(t) = trimmed {
                swept.trimmed += t.removed;
                tell_trimmed(ctx, &profile, &id, t.retained_from_seq).await;
            }
        }
    }
    Ok(())
}

/// Closes a parked session as `session.close` does (brought live for it),
/// unless a client has used it since `idle_before_ms`: the session decides,
/// on its state when the request reaches it (`SessionMsg::CloseIfIdle`), so
/// a client that resumed it while the sweep ran keeps it. Whether it closed.
async fn close_if_idle(
    ctx: &Ctx,
    profile: &str,
    id: &SessionId,
    idle_before_ms: i64,
    wait: Duration,
) -> Result<bool, tether_protocol::RpcError> {
    let (tx, closed) = tokio::sync::oneshot::channel();
    let msg = SessionMsg::CloseIfIdle {
        idle_before_ms,
        reply: tx.into(),
    };
    delete::forward(ctx, profile, id, msg, wait).await?;
    match tokio::time::timeout(wait, closed).await {
        Ok(Ok(closed)) => Ok(closed),
        _ => Err(tether_protocol::RpcError::internal(
            "the session did not answer retention's close",
        )),
    }
}

/// A live session learns that its older events are gone, so its answers
/// say `truncated` for them. One that is not live reads its row when it is
/// brought live.
async fn tell_trimmed(ctx: &Ctx, profile: &str, id: &SessionId, retained_from_seq: u64) {
    let Ok(registry) = ctx.registry() else {
        return;
    };
    let msg = SessionMsg::Trimmed { retained_from_seq };
    let _ = ask(
        &registry,
        |reply| RegistryMsg::Forward {
            key: (profile.to_string(), id.clone()),
            load: false,
            msg,
            reply,
        },
        ctx.config.call_timeout,
    )
    .await;
}
