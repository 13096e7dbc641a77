//! What each profile holds of this gateway right now, against what it may
//! hold ([`ProfileLimits`]): connections, live sessions, running and
//! queued turns, and its requests per second.
//!
//! One shared table rather than an actor: the transports ask it before
//! they answer an upgrade (a 429 must come before the 101), every request
//! takes a token from it, and sessions move their turn counts as turns
//! start and end; none of them may wait on a mailbox for that. Each check
//! and its count are one step under the lock, so two requests racing for
//! a profile's last place cannot both get it.
//!
//! What a profile may hold is the configured default, its own table over
//! it, and the limits a token carried over both ([`LimitTable::of`]): the
//! newest token of the profile that carried any, while the profile has
//! anything here. A profile with nothing counted (and its request bucket
//! full again) is removed, so the table is as large as the set of
//! profiles that have work, not of those that ever came.
//!
//! Counted on this node only: on a cluster each node keeps its own
//! table (docs/PROTOCOL.md, "Profile limits").

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use tether_protocol::RpcError;

use crate::profile_limits::{LimitTable, ProfileLimits};
use crate::rate::TokenBucket;

/// Sweep entries that only wait for their bucket to fill once the table
/// has this many (and then at twice what the last sweep left).
const FIRST_SWEEP: usize = 64;

/// The limits of a profile, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    LiveSessions,
    RunningTurns,
    QueuedTurns,
    RequestsPerS,
    Connections,
}

impl Limit {
    /// Its name in `data.limit` and in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Limit::LiveSessions => "live_sessions",
            Limit::RunningTurns => "running_turns",
            Limit::QueuedTurns => "queued_turns",
            Limit::RequestsPerS => "requests_per_s",
            Limit::Connections => "connections",
        }
    }

    fn of(self, limits: &ProfileLimits) -> Option<u32> {
        match self {
            Limit::LiveSessions => limits.live_sessions,
            Limit::RunningTurns => limits.running_turns,
            Limit::QueuedTurns => limits.queued_turns,
            Limit::RequestsPerS => limits.requests_per_s,
            Limit::Connections => limits.connections,
        }
    }
}

/// A refusal: the profile holds as much as `limit` allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("profile limit reached: {} (at most {max})", limit.name())]
pub struct LimitReached {
    pub limit: Limit,
    pub max: u32,
    /// Where waiting alone helps (the request rate): how long.
    pub retry_after: Option<Duration>,
}

impl LimitReached {
    /// The JSON-RPC error a request gets (4290).
    pub fn to_rpc(&self) -> RpcError {
        let retry = self.retry_after.map(|d| d.as_millis().max(1) as u64);
        RpcError::profile_limit(self.limit.name(), self.max, retry)
    }
}

/// One profile's counts.
#[derive(Debug, Default)]
struct Entry {
    connections: u32,
    live_sessions: u32,
    running_turns: u32,
    queued_turns: u32,
    /// Its requests per second, once it has a rate limit.
    rate: Option<TokenBucket>,
    /// The limits the newest token that carried any set.
    token: Option<Arc<ProfileLimits>>,
}

impl Entry {
    /// The count a limit holds; `None` for the rate, which is a bucket.
    fn count(&mut self, limit: Limit) -> Option<&mut u32> {
        match limit {
            Limit::LiveSessions => Some(&mut self.live_sessions),
            Limit::RunningTurns => Some(&mut self.running_turns),
            Limit::QueuedTurns => Some(&mut self.queued_turns),
            Limit::Connections => Some(&mut self.connections),
            Limit::RequestsPerS => None,
        }
    }

    fn removable(&self, now: Instant) -> bool {
        self.connections == 0
            && self.live_sessions == 0
            && self.running_turns == 0
            && self.queued_turns == 0
            && self.rate.as_ref().is_none_or(|b| b.full_by(now))
    }
}

#[derive(Debug, Default)]
struct Entries {
    by_profile: HashMap<String, Entry>,
    next_sweep: usize,
}

/// The per-profile counts of one gateway, and the limits they are held to.
#[derive(Debug)]
pub struct ProfileLedger {
    table: RwLock<LimitTable>,
    entries: Mutex<Entries>,
    /// Whether any profile may have a request rate (configured, or brought
    /// by a token): until then a request takes no lock here.
    rated: AtomicBool,
}

impl Default for ProfileLedger {
    fn default() -> Self {
        Self::new(LimitTable::default())
    }
}

impl ProfileLedger {
    pub fn new(table: LimitTable) -> Self {
        let rated = rate_in(&table.default) || table.profiles.values().any(rate_in);
        ProfileLedger {
            table: RwLock::new(table),
            entries: Mutex::new(Entries {
                by_profile: HashMap::new(),
                next_sweep: FIRST_SWEEP,
            }),
            rated: AtomicBool::new(rated),
        }
    }

    /// The configured limits change (a reload): what each profile holds is
    /// kept, and only new work is checked against the new limits, so a
    /// lowered limit takes nothing away that was granted. Request buckets
    /// start over at the new rate, full.
    pub fn set_table(&self, table: LimitTable) {
        let rated = rate_in(&table.default) || table.profiles.values().any(rate_in);
        *self.table.write().unwrap_or_else(|p| p.into_inner()) = table;
        // A token may have brought a rate too: once rated, always checked.
        self.rated.fetch_or(rated, Ordering::Relaxed);
        for entry in self.lock().by_profile.values_mut() {
            entry.rate = None;
        }
    }

    /// What `profile` may hold now.
    pub fn limits_of(&self, profile: &str) -> ProfileLimits {
        let token = self
            .lock()
            .by_profile
            .get(profile)
            .and_then(|e| e.token.clone());
        self.table().of(profile, token.as_deref())
    }

    /// A connection of `profile` opens (a WebSocket, an SSE stream); it
    /// counts until the hold is dropped. `token`: the limits its token
    /// carries, which apply to the profile from now on.
    pub fn open_connection(
        self: &Arc<Self>,
        profile: &str,
        token: Option<&Arc<ProfileLimits>>,
    ) -> Result<Hold, LimitReached> {
        self.note_token(token);
        self.add(profile, Limit::Connections, token, false)?;
        Ok(Hold::new(self, profile, Limit::Connections))
    }

    /// A session of `profile` is about to be created: it counts from now
    /// until the hold is dropped (the create failed, or the session left
    /// the registry).
    pub fn new_session(self: &Arc<Self>, profile: &str) -> Result<Hold, LimitReached> {
        self.add(profile, Limit::LiveSessions, None, false)?;
        Ok(Hold::new(self, profile, Limit::LiveSessions))
    }

    /// A stored session of `profile` is brought live: it was accepted
    /// before, so it counts whatever the limit says.
    pub fn live_session(self: &Arc<Self>, profile: &str) -> Hold {
        let _ = self.add(profile, Limit::LiveSessions, None, true);
        Hold::new(self, profile, Limit::LiveSessions)
    }

    /// One request of `profile` (a frame member, over any transport).
    pub fn take_request(
        &self,
        profile: &str,
        token: Option<&Arc<ProfileLimits>>,
        now: Instant,
    ) -> Result<(), LimitReached> {
        self.note_token(token);
        if !self.rated.load(Ordering::Relaxed) {
            return Ok(());
        }
        let table = self.table();
        let mut entries = self.lock();
        let entry = entries.entry(profile, now);
        if let Some(token) = token {
            entry.token = Some(token.clone());
        }
        let Some(max) = table.of(profile, entry.token.as_deref()).requests_per_s else {
            entry.rate = None;
            let removable = entry.removable(now);
            drop(table);
            if removable {
                entries.by_profile.remove(profile);
            }
            return Ok(());
        };
        let bucket = entry
            .rate
            .get_or_insert_with(|| TokenBucket::new(max, max, now));
        bucket.take(now).map_err(|wait| LimitReached {
            limit: Limit::RequestsPerS,
            max,
            retry_after: Some(wait),
        })
    }

    /// Counts a turn of `profile` that is about to run (`running`) or to
    /// wait in its session's queue, unless the profile holds as many.
    pub fn new_turn(&self, profile: &str, running: bool) -> Result<(), LimitReached> {
        let limit = if running {
            Limit::RunningTurns
        } else {
            Limit::QueuedTurns
        };
        self.add(profile, limit, None, false)
    }

    /// Moves the turn counts of `profile` by what a session counted and
    /// holds no more, or holds now and had not counted (accepted turns
    /// always count).
    pub fn move_turns(&self, profile: &str, running: i64, queued: i64) {
        let now = Instant::now();
        let mut entries = self.lock();
        let entry = entries.entry(profile, now);
        shift(&mut entry.running_turns, running);
        shift(&mut entry.queued_turns, queued);
        if entry.removable(now) {
            entries.by_profile.remove(profile);
        }
    }

    /// Profiles with anything counted.
    pub fn profiles(&self) -> usize {
        self.lock().by_profile.len()
    }

    fn add(
        &self,
        profile: &str,
        limit: Limit,
        token: Option<&Arc<ProfileLimits>>,
        force: bool,
    ) -> Result<(), LimitReached> {
        let table = self.table();
        let now = Instant::now();
        let mut entries = self.lock();
        let entry = entries.entry(profile, now);
        if let Some(token) = token {
            entry.token = Some(token.clone());
        }
        let max = limit.of(&table.of(profile, entry.token.as_deref()));
        let Some(count) = entry.count(limit) else {
            return Ok(());
        };
        if let Some(max) = max {
            if *count >= max && !force {
                let removable = entry.removable(now);
                if removable {
                    entries.by_profile.remove(profile);
                }
                return Err(LimitReached {
                    limit,
                    max,
                    retry_after: None,
                });
            }
        }
        *count += 1;
        Ok(())
    }

    fn release(&self, profile: &str, limit: Limit) {
        let now = Instant::now();
        let mut entries = self.lock();
        if let Some(entry) = entries.by_profile.get_mut(profile) {
            if let Some(count) = entry.count(limit) {
                *count = count.saturating_sub(1);
            }
            if entry.removable(now) {
                entries.by_profile.remove(profile);
            }
        }
    }

    fn note_token(&self, token: Option<&Arc<ProfileLimits>>) {
        if token.is_some_and(|t| rate_in(t)) {
            self.rated.store(true, Ordering::Relaxed);
        }
    }

    fn table(&self) -> std::sync::RwLockReadGuard<'_, LimitTable> {
        // A poisoned lock only means a panic elsewhere mid-read; the table
        // itself is whole.
        self.table.read().unwrap_or_else(|e| e.into_inner())
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Entries {
    /// The entry of `profile`, made if need be; a new one may first sweep
    /// the entries left only for their buckets.
    fn entry(&mut self, profile: &str, now: Instant) -> &mut Entry {
        if !self.by_profile.contains_key(profile) && self.by_profile.len() >= self.next_sweep {
            self.by_profile.retain(|_, e| !e.removable(now));
            self.next_sweep = (self.by_profile.len() * 2).max(FIRST_SWEEP);
        }
        self.by_profile.entry(profile.to_owned()).or_default()
    }
}

fn rate_in(limits: &ProfileLimits) -> bool {
    limits.requests_per_s.is_some()
}

fn shift(count: &mut u32, by: i64) {
    let moved = i64::from(*count) + by;
    *count = u32::try_from(moved.max(0)).unwrap_or(u32::MAX);
}

/// One connection or live session counted for a profile, until dropped.
#[derive(Debug)]
pub struct Hold {
    ledger: Arc<ProfileLedger>,
    profile: Arc<str>,
    limit: Limit,
}

impl Hold {
    fn new(ledger: &Arc<ProfileLedger>, profile: &str, limit: Limit) -> Self {
        Hold {
            ledger: ledger.clone(),
            profile: Arc::from(profile),
            limit,
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.ledger.release(&self.profile, self.limit);
    }
}

/// The turns a session has counted for its profile: moved to what the
/// session holds after each of its messages, and given back when it stops
/// (however it stops).
#[derive(Debug)]
pub(crate) struct TurnCount {
    ledger: Arc<ProfileLedger>,
    profile: Arc<str>,
    running: u32,
    queued: u32,
}

impl TurnCount {
    pub(crate) fn new(ledger: &Arc<ProfileLedger>, profile: &str) -> Self {
        TurnCount {
            ledger: ledger.clone(),
            profile: Arc::from(profile),
            running: 0,
            queued: 0,
        }
    }

    /// Counts one more turn that is about to run or to queue, if the
    /// profile may have it; [`sync`](Self::sync) settles it after.
    pub(crate) fn reserve(&mut self, running: bool) -> Result<(), LimitReached> {
        self.ledger.new_turn(&self.profile, running)?;
        if running {
            self.running += 1;
        } else {
            self.queued += 1;
        }
        Ok(())
    }

    /// The session holds `running` and `queued` turns now.
    pub(crate) fn sync(&mut self, running: u32, queued: u32) {
        if (running, queued) == (self.running, self.queued) {
            return;
        }
        self.ledger.move_turns(
            &self.profile,
            i64::from(running) - i64::from(self.running),
            i64::from(queued) - i64::from(self.queued),
        );
        self.running = running;
        self.queued = queued;
    }
}

impl Drop for TurnCount {
    fn drop(&mut self) {
        self.sync(0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(default: ProfileLimits) -> Arc<ProfileLedger> {
        Arc::new(ProfileLedger::new(LimitTable {
            default,
            ..Default::default()
        }))
    }

    #[test]
    fn a_count_refuses_at_its_limit_and_frees_with_its_hold() {
        let l = ledger(ProfileLimits {
            connections: Some(2),
            ..Default::default()
        });
        let a1 = l.open_connection("a", None).expect("first");
        let _a2 = l.open_connection("a", None).expect("second");
        let refused = l.open_connection("a", None).expect_err("third");
        assert_eq!(refused.limit, Limit::Connections);
        assert_eq!(refused.max, 2);
        assert_eq!(refused.retry_after, None);
        // Another profile has its own count.
        let _b = l.open_connection("b", None).expect("b");
        drop(a1);
        let _a3 = l.open_connection("a", None).expect("a place again");
        let err = refused.to_rpc();
        assert_eq!(err.code, 4290);
        let data = err.data.expect("data");
        assert_eq!(data["limit"], "connections");
        assert_eq!(data["max"], 2);
        assert!(data.get("retry_after_ms").is_none());
    }

    #[test]
    fn new_limits_keep_what_is_held_and_check_only_new_work() {
        let l = ledger(ProfileLimits {
            connections: Some(3),
            ..Default::default()
        });
        let held: Vec<_> = (0..3)
            .map(|_| l.open_connection("a", None).expect("under 3"))
            .collect();
        l.set_table(LimitTable {
            default: ProfileLimits {
                connections: Some(1),
                requests_per_s: Some(1),
                ..Default::default()
            },
            ..Default::default()
        });
        // Nothing granted is taken away; nothing new until under the new limit.
        assert_eq!(l.open_connection("a", None).expect_err("over 1").max, 1);
        drop(held);
        let _one = l.open_connection("a", None).expect("under 1 again");
        // A rate set only by the new table is checked from now on.
        let now = Instant::now();
        l.take_request("a", None, now)
            .expect("the bucket starts full");
        let refused = l.take_request("a", None, now).expect_err("1/s");
        assert_eq!(refused.limit, Limit::RequestsPerS);
    }

    #[test]
    fn a_tokens_limits_override_the_profiles() {
        let mut table = LimitTable {
            default: ProfileLimits {
                live_sessions: Some(1),
                ..Default::default()
            },
            ..Default::default()
        };
        table.profiles.insert(
            "a".into(),
            ProfileLimits {
                connections: Some(5),
                ..Default::default()
            },
        );
        let l = Arc::new(ProfileLedger::new(table));
        let token = Arc::new(ProfileLimits {
            connections: Some(1),
            live_sessions: Some(3),
            requests_per_s: Some(2),
            ..Default::default()
        });
        let _c = l.open_connection("a", Some(&token)).expect("first");
        // The token's connections (1) replace the profile's (5).
        let refused = l.open_connection("a", None).expect_err("second");
        assert_eq!((refused.limit, refused.max), (Limit::Connections, 1));
        // Its live sessions (3) replace the default (1) while it is here.
        let held: Vec<_> = (0..3).map(|_| l.new_session("a").expect("room")).collect();
        assert_eq!(l.new_session("a").expect_err("full").max, 3);
        // And its rate applies, though none was configured.
        let now = Instant::now();
        l.take_request("a", None, now).expect("1");
        l.take_request("a", None, now).expect("2");
        let slow = l.take_request("a", None, now).expect_err("3");
        assert_eq!(slow.limit, Limit::RequestsPerS);
        assert!(slow.retry_after.is_some_and(|d| d > Duration::ZERO));
        assert!(slow.to_rpc().data.expect("data")["retry_after_ms"].as_u64() > Some(0));
        // Another profile has the configured limits only.
        let _b = l.new_session("b").expect("b's one");
        assert_eq!(l.new_session("b").expect_err("b's second").max, 1);
        drop(held);
    }

    #[test]
    fn accepted_work_counts_past_the_limit_and_nothing_stays_behind() {
        let l = ledger(ProfileLimits {
            live_sessions: Some(1),
            running_turns: Some(1),
            queued_turns: Some(1),
            ..Default::default()
        });
        let first = l.new_session("a").expect("room");
        // A stored session brought back counts even over the limit.
        let back = l.live_session("a");
        assert!(l.new_session("a").is_err());
        let mut s1 = TurnCount::new(&l, "a");
        let mut s2 = TurnCount::new(&l, "a");
        s1.reserve(true).expect("runs");
        s1.sync(1, 0);
        assert_eq!(
            s2.reserve(true).expect_err("second running").limit,
            Limit::RunningTurns
        );
        s2.reserve(false).expect("queues");
        assert_eq!(
            s1.reserve(false).expect_err("second queued").limit,
            Limit::QueuedTurns
        );
        // A reservation the session did not use is given back by its sync.
        s2.sync(0, 0);
        s1.reserve(false).expect("the queued place is free again");
        s1.sync(1, 1);
        drop(s1);
        drop(s2);
        drop(first);
        drop(back);
        assert_eq!(l.profiles(), 0, "a profile with nothing is forgotten");
    }

    #[test]
    fn profiles_that_only_used_their_rate_are_swept() {
        let l = ledger(ProfileLimits {
            requests_per_s: Some(1),
            ..Default::default()
        });
        let t0 = Instant::now();
        for i in 0..1024 {
            l.take_request(&format!("p{i}"), None, t0).expect("first");
        }
        // Buckets still filling are kept; a second later all are full and
        // the next new profile sweeps them.
        assert_eq!(l.profiles(), 1024);
        l.take_request("late", None, t0 + Duration::from_secs(2))
            .expect("ok");
        assert!(l.profiles() <= FIRST_SWEEP, "{}", l.profiles());
    }

    #[test]
    fn without_a_rate_a_request_takes_no_count() {
        let l = ledger(ProfileLimits::default());
        for _ in 0..10_000 {
            l.take_request("a", None, Instant::now()).expect("no rate");
        }
        assert_eq!(l.profiles(), 0);
    }
}
