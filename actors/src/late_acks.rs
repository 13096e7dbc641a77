//! The control-request table of the `HostSupervisor`: waiters and late
//! handlers, keyed by `request_id`.
//!
//! A control request first has a *waiter* (the caller's reply handle and a
//! deadline). If the host answers before the deadline the answer goes to the
//! waiter; at the deadline the waiter is answered `Pending` and the request
//! moves to the *late* part of the table, where a one-shot handler waits for
//! the answer until its TTL runs out. A `request_id` is consumed exactly once,
//! by whichever of the two holds it when the answer comes; since both live
//! in this one table, owned by one actor, there is no race to guard.
//!
//! The table is pure (time is passed in, no actors, no I/O) and generic over
//! what a waiter (`W`) and a late handler (`H`) are, so its rules are unit
//! tested without sleeping and without a running system.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Who gets the answer to a `request_id` (see [`LateAcks::take`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Taken<W, H> {
    /// Still within its wait: answer the caller.
    Waiter(W),
    /// Past its wait, within its TTL: the late handler gets it.
    Late(H),
    /// The late handler's TTL ran out (it was still in the table): drop the
    /// answer, and say so in the log.
    Expired,
    /// Nobody holds this id (never seen, already answered, or expired and
    /// swept): drop the answer.
    Unknown,
}

/// Everything of one host slot (or of all slots) that must now be failed.
#[derive(Debug)]
pub struct Failed<W, H> {
    pub waiters: Vec<(String, W)>,
    pub late: Vec<(String, H)>,
}

impl<W, H> Failed<W, H> {
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty() && self.late.is_empty()
    }
}

struct Waiting<W> {
    waiter: W,
    deadline: Instant,
    slot: u32,
}

struct Late<H> {
    handler: H,
    expires: Instant,
    slot: u32,
    /// Insertion order, for evicting the oldest.
    serial: u64,
}

/// Waiters and late handlers of control requests.
pub struct LateAcks<W, H> {
    ttl: Duration,
    cap: usize,
    waiters: HashMap<String, Waiting<W>>,
    late: HashMap<String, Late<H>>,
    /// Late handlers by insertion order (serial → request_id).
    order: BTreeMap<u64, String>,
    next_serial: u64,
}

impl<W, H> LateAcks<W, H> {
    /// A table whose late handlers live `ttl` each and number at most `cap`.
    pub fn new(ttl: Duration, cap: usize) -> Self {
        Self {
            ttl,
            cap,
            waiters: HashMap::new(),
            late: HashMap::new(),
            order: BTreeMap::new(),
            next_serial: 0,
        }
    }

    /// Requests waiting within their wait.
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.waiters.len()
    }

    /// Late handlers held.
    #[cfg(test)]
    pub fn late(&self) -> usize {
        self.late.len()
    }

    /// Whether `request_id` is held, as a waiter or a late handler.
    pub fn contains(&self, request_id: &str) -> bool {
        self.waiters.contains_key(request_id) || self.late.contains_key(request_id)
    }

    /// Registers a request sent to host `slot` whose caller waits until
    /// `deadline`. An id that is already held is refused (the waiter comes
    /// back): two requests under one id could not be told apart.
    pub fn insert_waiter(
        &mut self,
        request_id: String,
        waiter: W,
        slot: u32,
        deadline: Instant,
    ) -> Result<(), W> {
        if self.contains(&request_id) {
            return Err(waiter);
        }
        self.waiters.insert(
            request_id,
            Waiting {
                waiter,
                deadline,
                slot,
            },
        );
        Ok(())
    }

    /// Consumes `request_id` for an answer that came at `now`. The waiter
    /// has precedence (a waiter and a late handler never coexist for an id).
    pub fn take(&mut self, request_id: &str, now: Instant) -> Taken<W, H> {
        if let Some(w) = self.waiters.remove(request_id) {
            return Taken::Waiter(w.waiter);
        }
        match self.late.remove(request_id) {
            Some(late) => {
                self.order.remove(&late.serial);
                if now >= late.expires {
                    Taken::Expired
                } else {
                    Taken::Late(late.handler)
                }
            }
            None => Taken::Unknown,
        }
    }

    /// Moves every waiter whose deadline is at or before `now` to the late
    /// table. `to_late` answers the caller (`Pending`) and turns the waiter
    /// into its late handler. Returns the late handlers evicted to respect
    /// the cap, oldest first: each must get a synthetic error.
    pub fn time_out<F>(&mut self, now: Instant, mut to_late: F) -> Vec<(String, H)>
    where
        F: FnMut(&str, W) -> H,
    {
        let mut due: Vec<(String, Instant)> = self
            .waiters
            .iter()
            .filter(|(_, w)| w.deadline <= now)
            .map(|(id, w)| (id.clone(), w.deadline))
            .collect();
        // Oldest deadline first, so that eviction order follows timeout order.
        due.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        let mut evicted = Vec::new();
        for (id, _) in due {
            let Some(w) = self.waiters.remove(&id) else {
                continue;
            };
            let handler = to_late(&id, w.waiter);
            evicted.extend(self.insert_late(id, handler, w.slot, now));
        }
        evicted
    }

    /// Adds a late handler expiring `ttl` after `now`; returns the handlers
    /// evicted to stay within the cap (the oldest first; with a cap of 0 that
    /// is the new one itself).
    fn insert_late(
        &mut self,
        request_id: String,
        handler: H,
        slot: u32,
        now: Instant,
    ) -> Vec<(String, H)> {
        let serial = self.next_serial;
        self.next_serial += 1;
        self.order.insert(serial, request_id.clone());
        self.late.insert(
            request_id,
            Late {
                handler,
                expires: now + self.ttl,
                slot,
                serial,
            },
        );
        let mut evicted = Vec::new();
        while self.late.len() > self.cap {
            let Some((_, id)) = self.order.pop_first() else {
                break;
            };
            if let Some(late) = self.late.remove(&id) {
                evicted.push((id, late.handler));
            }
        }
        evicted
    }

    /// Removes the late handlers whose TTL ran out by `now`.
    pub fn expire(&mut self, now: Instant) -> Vec<(String, H)> {
        let expired: Vec<u64> = self
            .late
            .values()
            .filter(|l| l.expires <= now)
            .map(|l| l.serial)
            .collect();
        let mut out = Vec::with_capacity(expired.len());
        for serial in expired {
            if let Some(id) = self.order.remove(&serial) {
                if let Some(late) = self.late.remove(&id) {
                    out.push((id, late.handler));
                }
            }
        }
        out
    }

    /// Removes everything waiting for host `slot` (it died): its waiters and
    /// its late handlers, and nothing of the other slots.
    pub fn fail_slot(&mut self, slot: u32) -> Failed<W, H> {
        let waiter_ids: Vec<String> = self
            .waiters
            .iter()
            .filter(|(_, w)| w.slot == slot)
            .map(|(id, _)| id.clone())
            .collect();
        let late_ids: Vec<String> = self
            .late
            .iter()
            .filter(|(_, l)| l.slot == slot)
            .map(|(id, _)| id.clone())
            .collect();
        let waiters = waiter_ids
            .into_iter()
            .filter_map(|id| self.waiters.remove(&id).map(|w| (id, w.waiter)))
            .collect();
        let late = late_ids
            .into_iter()
            .filter_map(|id| {
                let l = self.late.remove(&id)?;
                self.order.remove(&l.serial);
                Some((id, l.handler))
            })
            .collect();
        Failed { waiters, late }
    }

    /// Removes everything (the supervisor is stopping).
    pub fn fail_all(&mut self) -> Failed<W, H> {
        self.order.clear();
        Failed {
            waiters: self.waiters.drain().map(|(id, w)| (id, w.waiter)).collect(),
            late: self.late.drain().map(|(id, l)| (id, l.handler)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(1800);

    /// A waiter is the caller's name; a late handler is `late:NAME`.
    type Table = LateAcks<&'static str, String>;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn to_late(answered: &mut Vec<String>) -> impl FnMut(&str, &'static str) -> String + '_ {
        move |id, w| {
            answered.push(format!("{id}:pending"));
            format!("late:{w}")
        }
    }

    #[test]
    fn ack_before_timeout_goes_to_the_waiter() {
        let t0 = Instant::now();
        let mut t = Table::new(TTL, 64);
        t.insert_waiter("r1".into(), "caller", 0, t0 + ms(50))
            .unwrap();
        // Not due yet: a timeout sweep leaves it alone.
        let mut pending = Vec::new();
        assert!(t.time_out(t0 + ms(49), to_late(&mut pending)).is_empty());
        assert!(pending.is_empty());
        assert_eq!(t.take("r1", t0 + ms(49)), Taken::Waiter("caller"));
        // Consumed: a second answer finds nobody, and the deadline does nothing.
        assert_eq!(t.take("r1", t0 + ms(49)), Taken::Unknown);
        assert!(t.time_out(t0 + ms(100), to_late(&mut pending)).is_empty());
        assert!(pending.is_empty());
        assert_eq!((t.waiting(), t.late()), (0, 0));
    }

    #[test]
    fn ack_after_timeout_goes_to_the_late_handler_exactly_once() {
        let t0 = Instant::now();
        let mut t = Table::new(TTL, 64);
        t.insert_waiter("r1".into(), "caller", 0, t0 + ms(50))
            .unwrap();
        let mut pending = Vec::new();
        assert!(t.time_out(t0 + ms(50), to_late(&mut pending)).is_empty());
        assert_eq!(pending, vec!["r1:pending".to_string()]);
        assert_eq!((t.waiting(), t.late()), (0, 1));
        assert_eq!(
            t.take("r1", t0 + ms(400)),
            Taken::Late("late:caller".into())
        );
        assert_eq!(t.take("r1", t0 + ms(401)), Taken::Unknown);
        assert_eq!((t.waiting(), t.late()), (0, 0));
    }

    #[test]
    fn ack_after_ttl_is_dropped_and_reported() {
        let t0 = Instant::now();
        let mut t = Table::new(Duration::from_secs(10), 64);
        t.insert_waiter("r1".into(), "a", 0, t0).unwrap();
        t.insert_waiter("r2".into(), "b", 0, t0).unwrap();
        let mut pending = Vec::new();
        t.time_out(t0, to_late(&mut pending));
        assert_eq!(pending.len(), 2);
        // r1: the answer comes after the TTL, before any sweep.
        assert_eq!(t.take("r1", t0 + Duration::from_secs(10)), Taken::Expired);
        // r2: swept by the periodic expiry first, then the answer comes.
        let expired = t.expire(t0 + Duration::from_secs(11));
        assert_eq!(expired, vec![("r2".to_string(), "late:b".to_string())]);
        assert_eq!(t.take("r2", t0 + Duration::from_secs(12)), Taken::Unknown);
        assert_eq!(t.late(), 0);
    }

    #[test]
    fn expire_keeps_handlers_within_their_ttl() {
        let t0 = Instant::now();
        let mut t = Table::new(Duration::from_secs(10), 64);
        t.insert_waiter("old".into(), "a", 0, t0).unwrap();
        t.insert_waiter("new".into(), "b", 0, t0 + ms(5000))
            .unwrap();
        let mut pending = Vec::new();
        t.time_out(t0, to_late(&mut pending));
        t.time_out(t0 + ms(5000), to_late(&mut pending));
        let expired = t.expire(t0 + Duration::from_secs(10));
        assert_eq!(expired, vec![("old".to_string(), "late:a".to_string())]);
        assert_eq!(
            t.take("new", t0 + Duration::from_secs(11)),
            Taken::Late("late:b".into())
        );
    }

    #[test]
    fn cap_evicts_the_oldest() {
        let t0 = Instant::now();
        let mut t = Table::new(TTL, 2);
        let mut pending = Vec::new();
        for (i, id) in ["r1", "r2", "r3"].into_iter().enumerate() {
            t.insert_waiter(id.into(), id, 0, t0 + ms(i as u64))
                .unwrap();
        }
        // r1 and r2 time out: within the cap.
        assert!(t.time_out(t0 + ms(1), to_late(&mut pending)).is_empty());
        // r3 times out: r1, the oldest, is evicted and reported.
        let evicted = t.time_out(t0 + ms(2), to_late(&mut pending));
        assert_eq!(evicted, vec![("r1".to_string(), "late:r1".to_string())]);
        assert_eq!(t.late(), 2);
        assert_eq!(t.take("r1", t0 + ms(3)), Taken::Unknown);
        assert_eq!(t.take("r2", t0 + ms(3)), Taken::Late("late:r2".into()));
        assert_eq!(t.take("r3", t0 + ms(3)), Taken::Late("late:r3".into()));
    }

    #[test]
    fn cap_eviction_in_one_sweep_follows_deadlines() {
        let t0 = Instant::now();
        let mut t = Table::new(TTL, 1);
        let mut pending = Vec::new();
        t.insert_waiter("b".into(), "b", 0, t0 + ms(2)).unwrap();
        t.insert_waiter("a".into(), "a", 0, t0 + ms(1)).unwrap();
        let evicted = t.time_out(t0 + ms(5), to_late(&mut pending));
        assert_eq!(evicted, vec![("a".to_string(), "late:a".to_string())]);
        assert_eq!(t.take("b", t0 + ms(6)), Taken::Late("late:b".into()));
    }

    #[test]
    fn zero_cap_evicts_at_once() {
        let t0 = Instant::now();
        let mut t = Table::new(TTL, 0);
        t.insert_waiter("r1".into(), "a", 0, t0).unwrap();
        let mut pending = Vec::new();
        let evicted = t.time_out(t0, to_late(&mut pending));
        assert_eq!(pending, vec!["r1:pending".to_string()]);
        assert_eq!(evicted, vec![("r1".to_string(), "late:a".to_string())]);
        assert_eq!(t.late(), 0);
    }

    #[test]
    fn crash_fails_the_slot_and_only_that_slot() {
        let t0 = Instant::now();
        let mut t = Table::new(TTL, 64);
        let mut pending = Vec::new();
        t.insert_waiter("late0".into(), "l0", 0, t0).unwrap();
        t.insert_waiter("late1".into(), "l1", 1, t0).unwrap();
        t.time_out(t0, to_late(&mut pending));
        t.insert_waiter("wait0".into(), "w0", 0, t0 + ms(100))
            .unwrap();
        t.insert_waiter("wait0b".into(), "w0b", 0, t0 + ms(100))
            .unwrap();
        t.insert_waiter("wait1".into(), "w1", 1, t0 + ms(100))
            .unwrap();

        let failed = t.fail_slot(0);
        let mut waiters = failed.waiters.clone();
        waiters.sort();
        assert_eq!(
            waiters,
            vec![("wait0".to_string(), "w0"), ("wait0b".to_string(), "w0b")]
        );
        assert_eq!(
            failed.late,
            vec![("late0".to_string(), "late:l0".to_string())]
        );
        // Each was consumed: answers for them now find nobody.
        assert_eq!(t.take("wait0", t0), Taken::Unknown);
        assert_eq!(t.take("late0", t0), Taken::Unknown);
        assert!(t.fail_slot(0).is_empty());
        // Slot 1 is untouched.
        assert_eq!(t.take("wait1", t0), Taken::Waiter("w1"));
        assert_eq!(t.take("late1", t0), Taken::Late("late:l1".into()));
    }

    #[test]
    fn fail_all_empties_the_table() {
        let t0 = Instant::now();
        let mut t = Table::new(TTL, 64);
        let mut pending = Vec::new();
        t.insert_waiter("a".into(), "a", 0, t0).unwrap();
        t.time_out(t0, to_late(&mut pending));
        t.insert_waiter("b".into(), "b", 1, t0 + ms(10)).unwrap();
        let failed = t.fail_all();
        assert_eq!(failed.waiters, vec![("b".to_string(), "b")]);
        assert_eq!(failed.late, vec![("a".to_string(), "late:a".to_string())]);
        assert_eq!((t.waiting(), t.late()), (0, 0));
        // Eviction bookkeeping was cleared too: a new handler is not evicted.
        t.insert_waiter("c".into(), "c", 0, t0).unwrap();
        assert!(t.time_out(t0, to_late(&mut pending)).is_empty());
    }

    #[test]
    fn duplicate_ids_are_refused() {
        let t0 = Instant::now();
        let mut t = Table::new(TTL, 64);
        t.insert_waiter("r1".into(), "a", 0, t0).unwrap();
        assert_eq!(t.insert_waiter("r1".into(), "b", 1, t0), Err("b"));
        let mut pending = Vec::new();
        t.time_out(t0, to_late(&mut pending));
        // Also while a late handler holds it.
        assert_eq!(t.insert_waiter("r1".into(), "c", 0, t0), Err("c"));
        assert_eq!(t.take("r1", t0), Taken::Late("late:a".into()));
        // Free again once consumed.
        assert!(t.insert_waiter("r1".into(), "d", 0, t0).is_ok());
    }
}
