//! The fair share of host slots: which waiting turn gets a slot that
//! frees up.
//!
//! With `--host-max-turns` set, a host runs at most that many turns at
//! once; a turn that finds every slot full waits here. Were the waiting
//! turns one queue in arrival order, a profile that queued a hundred turns
//! would hold every slot until all of them ran, and another profile's
//! single turn would wait behind the hundred. Instead a freed slot goes to
//! the profile with the fewest turns running now (a profile with none
//! first), and among those to the one that was granted a slot longest ago:
//! round-robin across the profiles that wait, each profile's own turns in
//! the order they came. So one profile's backlog delays another profile's
//! turn by one slot's turn at most.
//!
//! Pure bookkeeping, no time and no actors: the supervisor says when a
//! turn started and ended, and asks for the next one when a slot has room.
//! A profile is kept only while it has a turn running or waiting, so the
//! table is bounded by the work the gateway holds, not by how many
//! profiles ever came.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// One profile's share: its running turns and its waiting ones, in order.
struct Share<T> {
    running: u32,
    waiting: VecDeque<T>,
    /// When it last got a slot, as a count of grants (0: never).
    last_grant: u64,
}

impl<T> Share<T> {
    fn new() -> Self {
        Share {
            running: 0,
            waiting: VecDeque::new(),
            last_grant: 0,
        }
    }

    fn idle(&self) -> bool {
        self.running == 0 && self.waiting.is_empty()
    }
}

/// Turns waiting for a slot, per profile, and the running count of every
/// profile that has work.
pub(super) struct FairShare<T> {
    shares: HashMap<Arc<str>, Share<T>>,
    grants: u64,
    waiting: usize,
}

impl<T> Default for FairShare<T> {
    fn default() -> Self {
        FairShare {
            shares: HashMap::new(),
            grants: 0,
            waiting: 0,
        }
    }
}

impl<T> FairShare<T> {
    /// Turns waiting, over every profile.
    pub(super) fn waiting(&self) -> usize {
        self.waiting
    }

    /// A turn of `profile` got a slot.
    pub(super) fn started(&mut self, profile: &Arc<str>) {
        self.grants += 1;
        let grant = self.grants;
        let share = self
            .shares
            .entry(profile.clone())
            .or_insert_with(Share::new);
        share.running += 1;
        share.last_grant = grant;
    }

    /// A turn of `profile` left its slot (ended, failed, abandoned).
    pub(super) fn ended(&mut self, profile: &str) {
        if let Some(share) = self.shares.get_mut(profile) {
            share.running = share.running.saturating_sub(1);
            if share.idle() {
                self.shares.remove(profile);
            }
        }
    }

    /// A turn of `profile` waits for a slot, behind the profile's others.
    pub(super) fn push(&mut self, profile: Arc<str>, turn: T) {
        self.shares
            .entry(profile)
            .or_insert_with(Share::new)
            .waiting
            .push_back(turn);
        self.waiting += 1;
    }

    /// The waiting turn that gets the slot that has room now, and its
    /// profile: the first of the profile with the fewest running turns,
    /// the one granted a slot longest ago among equals. It counts as
    /// waiting no longer; [`started`](Self::started) counts it running.
    ///
    /// A scan over the profiles that have work: a handful in practice, and
    /// at most one per live session.
    pub(super) fn next(&mut self) -> Option<(Arc<str>, T)> {
        let profile = self
            .shares
            .iter()
            .filter(|(_, s)| !s.waiting.is_empty())
            .min_by_key(|(_, s)| (s.running, s.last_grant))
            .map(|(p, _)| p.clone())?;
        let share = self.shares.get_mut(&profile)?;
        let turn = share.waiting.pop_front()?;
        self.waiting -= 1;
        if share.idle() {
            self.shares.remove(&profile);
        }
        Some((profile, turn))
    }

    /// Takes out the first waiting turn `is` picks (a turn its session gave
    /// up on).
    pub(super) fn remove(&mut self, is: impl Fn(&T) -> bool) -> Option<T> {
        let (profile, at) = self
            .shares
            .iter()
            .find_map(|(p, s)| s.waiting.iter().position(&is).map(|at| (p.clone(), at)))?;
        let share = self.shares.get_mut(&profile)?;
        let turn = share.waiting.remove(at)?;
        self.waiting -= 1;
        if share.idle() {
            self.shares.remove(&profile);
        }
        Some(turn)
    }

    /// Every waiting turn, taken out (no slot will come for them).
    pub(super) fn drain(&mut self) -> Vec<T> {
        let mut out = Vec::with_capacity(self.waiting);
        for share in self.shares.values_mut() {
            out.extend(share.waiting.drain(..));
        }
        self.shares.retain(|_, s| !s.idle());
        self.waiting = 0;
        out
    }

    /// Profiles with work (running or waiting): what the table holds.
    #[cfg(test)]
    fn profiles(&self) -> usize {
        self.shares.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &str) -> Arc<str> {
        Arc::from(name)
    }

    /// Two slots: `a` takes both and queues 100 more; `b` then queues one.
    /// The first slot freed goes to `b`.
    #[test]
    fn a_single_turn_waits_for_one_slot_not_for_a_backlog() {
        let mut fair = FairShare::default();
        fair.started(&p("a"));
        fair.started(&p("a"));
        for i in 0..100 {
            fair.push(p("a"), i);
        }
        fair.push(p("b"), 1000);
        fair.ended("a");
        let (profile, turn) = fair.next().expect("a waiting turn");
        assert_eq!((&*profile, turn), ("b", 1000));
        fair.started(&profile);
        // Then `a` again, in its own order.
        fair.ended("a");
        let (profile, turn) = fair.next().expect("a waiting turn");
        assert_eq!((&*profile, turn), ("a", 0));
    }

    #[test]
    fn profiles_with_as_many_running_take_turns() {
        let mut fair = FairShare::default();
        for i in 0..3 {
            fair.push(p("a"), i);
            fair.push(p("b"), 10 + i);
            fair.push(p("c"), 20 + i);
        }
        let mut order = Vec::new();
        // One slot: each grant runs and ends before the next.
        while let Some((profile, turn)) = fair.next() {
            fair.started(&profile);
            order.push(turn);
            fair.ended(&profile);
        }
        // The first pick among three that never ran is any of them; after
        // that each comes back only once the other two had a slot.
        let profile_of = |t: i32| t / 10;
        for window in order.windows(3) {
            let mut ps: Vec<_> = window.iter().map(|&t| profile_of(t)).collect();
            ps.sort();
            assert_eq!(ps, [0, 1, 2], "{order:?}");
        }
        assert_eq!(fair.waiting(), 0);
        assert_eq!(fair.profiles(), 0, "nothing kept for profiles with no work");
    }

    #[test]
    fn a_removed_or_drained_turn_leaves_nothing_behind() {
        let mut fair = FairShare::default();
        fair.push(p("a"), 1);
        fair.push(p("a"), 2);
        fair.push(p("b"), 3);
        assert_eq!(fair.remove(|&t| t == 2), Some(2));
        assert_eq!(fair.remove(|&t| t == 2), None);
        assert_eq!(fair.remove(|&t| t == 3), Some(3));
        assert_eq!(fair.profiles(), 1);
        fair.started(&p("c"));
        let mut drained = fair.drain();
        drained.sort();
        assert_eq!(drained, [1]);
        assert_eq!(fair.waiting(), 0);
        // `c` still runs one.
        assert_eq!(fair.profiles(), 1);
        fair.ended("c");
        assert_eq!(fair.profiles(), 0);
        // An end nobody started (a turn routed before a restart) is no-op.
        fair.ended("zzz");
        assert_eq!(fair.profiles(), 0);
    }
}
