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
//! What a profile may hold is the configured default and its own table
//! over it ([`LimitTable::of`]). A token's `limits` claim never changes
//! that: it is the token's own ([`TokenLimits`]). Its `connections` and
//! `requests_per_s` are counted for the token alone (its connections, its
//! requests, under the profile's as well), and its other limits are
//! ceilings the token's own requests meet before the profile's
//! ([`ProfileLedger::token_ceiling`]). A refused connection or request
//! counts nowhere. A profile or token with nothing counted (and its
//! request bucket full again) is removed, so the table is as large as the
//! set of profiles and tokens that have work, not of those that ever came.
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
}

/// The limits a token's claim sets for that token's own work, and the key
/// its counts are kept under (the token itself: every connection of one
/// token shares them).
#[derive(Debug, Clone)]
pub struct TokenLimits {
    pub key: Arc<str>,
    pub limits: Arc<ProfileLimits>,
}

/// One token's own counts.
#[derive(Debug, Default)]
struct TokenEntry {
    connections: u32,
    rate: Option<TokenBucket>,
}

impl TokenEntry {
    fn removable(&self, now: Instant) -> bool {
        self.connections == 0 && self.rate.as_ref().is_none_or(|b| b.full_by(now))
    }
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
    by_token: HashMap<Arc<str>, TokenEntry>,
    next_sweep: usize,
    next_token_sweep: usize,
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
                by_token: HashMap::new(),
                next_sweep: FIRST_SWEEP,
                next_token_sweep: FIRST_SWEEP,
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

    /// What `profile` may hold now (a token's claims aside).
    pub fn limits_of(&self, profile: &str) -> ProfileLimits {
        self.table().of(profile)
    }

    /// A connection of `profile` opens (a WebSocket, an SSE or front-end
    /// stream); it counts until the hold is dropped, for the profile and,
    /// when its token sets `connections`, for the token. Refused by
    /// either, it counts for neither.
    pub fn open_connection(
        self: &Arc<Self>,
        profile: &str,
        token: Option<&TokenLimits>,
    ) -> Result<Hold, LimitReached> {
        let own = token.filter(|t| t.limits.connections.is_some());
        if let Some(t) = own {
            let max = t.limits.connections.unwrap_or(u32::MAX);
            let now = Instant::now();
            let mut entries = self.lock();
            let held = entries.by_token.get(&t.key).map_or(0, |e| e.connections);
            if held >= max {
                return Err(LimitReached {
                    limit: Limit::Connections,
                    max,
                    retry_after: None,
                });
            }
            // The profile's place is taken under the same lock, so two
            // connections of one token cannot both take its last place.
            self.add_locked(&mut entries, profile, Limit::Connections, false, now)?;
            entries.token_entry(&t.key, now).connections += 1;
            let mut hold = Hold::new(self, profile, Limit::Connections);
            hold.token = Some(t.key.clone());
            return Ok(hold);
        }
        self.add(profile, Limit::Connections, false)?;
        Ok(Hold::new(self, profile, Limit::Connections))
    }

    /// Whether a request of a token whose claim sets `max` of `limit` may
    /// go on: refused while the profile already holds that many (a claim
    /// only lowers what the profile may hold, for its own token's work).
    pub fn token_ceiling(&self, profile: &str, limit: Limit, max: u32) -> Result<(), LimitReached> {
        let mut entries = self.lock();
        let held = entries
            .by_profile
            .get_mut(profile)
            .and_then(|e| e.count(limit).map(|c| *c))
            .unwrap_or(0);
        if held >= max {
            return Err(LimitReached {
                limit,
                max,
                retry_after: None,
            });
        }
        Ok(())
    }

    /// A session of `profile` is about to be created: it counts from now
    /// until the hold is dropped (the create failed, or the session left
    /// the registry).
    pub fn new_session(self: &Arc<Self>, profile: &str) -> Result<Hold, LimitReached> {
        self.add(profile, Limit::LiveSessions, false)?;
        Ok(Hold::new(self, profile, Limit::LiveSessions))
    }

    /// A stored session of `profile` is brought live: it was accepted
    /// before, so it counts whatever the limit says.
    pub fn live_session(self: &Arc<Self>, profile: &str) -> Hold {
        let _ = self.add(profile, Limit::LiveSessions, true);
        Hold::new(self, profile, Limit::LiveSessions)
    }

    /// One request of `profile` (a frame member, over any transport): one
    /// of the profile's rate and, when its token sets `requests_per_s`,
    /// one of the token's own. Refused by either, it takes from neither.
    pub fn take_request(
        &self,
        profile: &str,
        token: Option<&TokenLimits>,
        now: Instant,
    ) -> Result<(), LimitReached> {
        let own = token.and_then(|t| Some((t, t.limits.requests_per_s?)));
        if own.is_none() && !self.rated.load(Ordering::Relaxed) {
            return Ok(());
        }
        let table = self.table();
        let mut entries = self.lock();
        if let Some((t, max)) = own {
            let entry = entries.token_entry(&t.key, now);
            let bucket = entry
                .rate
                .get_or_insert_with(|| TokenBucket::new(max, max, now));
            bucket.ready(now).map_err(|wait| LimitReached {
                limit: Limit::RequestsPerS,
                max,
                retry_after: Some(wait),
            })?;
        }
        let profile_max = table.of(profile).requests_per_s;
        if let Some(max) = profile_max {
            let entry = entries.entry(profile, now);
            let bucket = entry
                .rate
                .get_or_insert_with(|| TokenBucket::new(max, max, now));
            bucket.take(now).map_err(|wait| LimitReached {
                limit: Limit::RequestsPerS,
                max,
                retry_after: Some(wait),
            })?;
        }
        if let Some((t, _)) = own {
            if let Some(bucket) = entries
                .by_token
                .get_mut(&t.key)
                .and_then(|e| e.rate.as_mut())
            {
                // Ready above, under the same lock.
                let _ = bucket.take(now);
            }
        }
        if profile_max.is_none() {
            // No rate for the profile (any more): its bucket goes.
            drop(table);
            if let Some(entry) = entries.by_profile.get_mut(profile) {
                entry.rate = None;
                if entry.removable(now) {
                    entries.by_profile.remove(profile);
                }
            }
        }
        Ok(())
    }

    /// Counts a turn of `profile` that is about to run (`running`) or to
    /// wait in its session's queue, unless the profile holds as many.
    pub fn new_turn(&self, profile: &str, running: bool) -> Result<(), LimitReached> {
        let limit = if running {
            Limit::RunningTurns
        } else {
            Limit::QueuedTurns
        };
        self.add(profile, limit, false)
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

    fn add(&self, profile: &str, limit: Limit, force: bool) -> Result<(), LimitReached> {
        let now = Instant::now();
        let mut entries = self.lock();
        self.add_locked(&mut entries, profile, limit, force, now)
    }

    fn add_locked(
        &self,
        entries: &mut Entries,
        profile: &str,
        limit: Limit,
        force: bool,
        now: Instant,
    ) -> Result<(), LimitReached> {
        let table = self.table();
        let entry = entries.entry(profile, now);
        let max = limit.of(&table.of(profile));
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

    fn release(&self, profile: &str, limit: Limit, token: Option<&Arc<str>>) {
        let now = Instant::now();
        let mut entries = self.lock();
        if let Some(key) = token {
            if let Some(entry) = entries.by_token.get_mut(key) {
                entry.connections = entry.connections.saturating_sub(1);
                if entry.removable(now) {
                    entries.by_token.remove(key);
                }
            }
        }
        if let Some(entry) = entries.by_profile.get_mut(profile) {
            if let Some(count) = entry.count(limit) {
                *count = count.saturating_sub(1);
            }
            if entry.removable(now) {
                entries.by_profile.remove(profile);
            }
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

    /// The own counts of token `key`, made if need be, sweeping as
    /// [`entry`](Self::entry) does.
    fn token_entry(&mut self, key: &Arc<str>, now: Instant) -> &mut TokenEntry {
        if !self.by_token.contains_key(key) && self.by_token.len() >= self.next_token_sweep {
            self.by_token.retain(|_, e| !e.removable(now));
            self.next_token_sweep = (self.by_token.len() * 2).max(FIRST_SWEEP);
        }
        self.by_token.entry(key.clone()).or_default()
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
    /// The token whose own count it holds too.
    token: Option<Arc<str>>,
}

impl Hold {
    fn new(ledger: &Arc<ProfileLedger>, profile: &str, limit: Limit) -> Self {
        Hold {
            ledger: ledger.clone(),
            profile: Arc::from(profile),
            limit,
            token: None,
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.ledger
            .release(&self.profile, self.limit, self.token.as_ref());
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
mod tests;
