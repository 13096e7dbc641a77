//! A batch of [`WriteOp`]s as ONE statement: planned in Rust, checked and written by the server.
//!
//! Why one statement: every statement is a round trip to the server, and a batch of fifty
//! appends written row by row would pay a hundred of them. Instead the writer
//!
//! 1. plans the batch against what it knows of each session's `latest_seq` (it is the only
//!    writer of sessions and events, see `connect/lock.rs`), op by op in batch order, with the same
//!    rules as the SQLite writer (`crate::rules`): an op it refuses gets its error here and
//!    leaves no trace, the others go on;
//! 2. folds what is left into one row per session (a new session's row already carries the
//!    appends made to it later in the batch, since a statement does not see its own inserts)
//!    and every event into arrays;
//! 3. sends one autocommit statement of data-modifying CTEs over `UNNEST`ed arrays: profiles,
//!    new sessions, session updates and events. Each update re-checks the `latest_seq` it was
//!    planned on, and the statement ends by calling `tether_expect_sessions`, which raises (and
//!    so aborts the whole statement) unless every update matched. Either all of it commits or
//!    none of it does: the batch is atomic, and a stale plan costs a retry, never a partial
//!    write.
//!
//! The statement text never changes, so it is prepared once per connection; it and its
//! parameters are `batch/statement.rs`.

mod statement;

use std::collections::{HashMap, HashSet};

use tether_protocol::{SessionId, SessionStatus};

use crate::columns::{json_text, to_i64};
use crate::rules;
use crate::{EventRow, NewSession, SessionPatch, StoreError, WriteOp};

type OpResult = Result<(), StoreError>;

/// What the writer knows of sessions: `Some(latest_seq)` for a row that exists, `None` for one
/// that does not. True until the writer itself writes again (the statement re-checks it).
pub(crate) type Known = HashMap<SessionId, Option<u64>>;

/// A session created by the batch: its row as it stands after the batch's later ops.
struct NewRow<'a> {
    session: &'a NewSession,
    title: &'a str,
    status: &'static str,
    history_version: i64,
    turn_marker: Option<String>,
    updated_at_ms: i64,
    latest_seq: i64,
    message_count: i64,
}

/// An existing session's changes: every field is the last value the batch gives it.
struct Update<'a> {
    id: &'a str,
    expected: i64,
    new_seq: i64,
    status: Option<&'static str>,
    title: Option<&'a str>,
    message_count: Option<i64>,
    history_version: Option<i64>,
    marker_set: bool,
    marker: Option<String>,
    updated_at_ms: Option<i64>,
}

/// Where a session of the batch stands while it is being planned.
#[derive(Clone, Copy)]
enum Slot {
    New(usize),
    Existing(usize),
}

/// A patch's values, converted (and so checked) before anything is merged.
struct Values<'a> {
    status: Option<&'static str>,
    title: Option<&'a str>,
    message_count: Option<i64>,
    history_version: Option<i64>,
    marker: Option<Option<String>>,
    updated_at_ms: Option<i64>,
}

impl<'a> Values<'a> {
    fn of(patch: &'a SessionPatch) -> Result<Self, StoreError> {
        Ok(Values {
            status: patch.status.map(|s| s.as_str()),
            title: patch.title.as_deref(),
            message_count: patch
                .message_count
                .map(|n| to_i64(n, "message_count"))
                .transpose()?,
            history_version: patch
                .history_version
                .map(|n| to_i64(n, "history_version"))
                .transpose()?,
            marker: patch.turn_marker.as_ref().map(json_text),
            updated_at_ms: patch.updated_at_ms,
        })
    }
}

/// What planning a batch in cluster mode consults (`Plan::new`): the fences held for its
/// sessions, and the sessions already refused in an earlier round of the same batch.
pub(crate) struct Guard<'g> {
    pub held: &'g HashMap<SessionId, u64>,
    pub refused: &'g HashMap<SessionId, StoreError>,
}

/// A batch, planned.
pub(crate) struct Plan<'a> {
    /// Per op: `Some(Err)` refused while planning; `None` in the statement, Ok once it commits.
    pub results: Vec<Option<OpResult>>,
    slots: HashMap<&'a str, Slot>,
    profiles: Vec<(&'a str, i64)>,
    inserts: Vec<NewRow<'a>>,
    updates: Vec<Update<'a>>,
    events: Vec<(&'a str, &'a EventRow)>,
    /// Per op: the session it writes (for results that depend on the session).
    op_sessions: Vec<&'a str>,
    /// Cluster mode: the fence each session of the statement is written under (a branch's
    /// parent included); the transaction checks them all first. `None`: a single gateway.
    fences: Option<HashMap<&'a str, u64>>,
    /// Cluster mode: sessions from which on (in batch order) every op is refused, because one
    /// of their forwards was refused at that op.
    cut: HashSet<&'a str>,
}

/// What a session's row tells after the statement: it ran or it did not.
#[derive(Debug, Clone)]
pub(crate) struct Evidence {
    pub session_id: SessionId,
    /// `latest_seq` before the batch (`None`: the batch creates the session).
    pub before: Option<u64>,
    /// `latest_seq` once the batch committed.
    pub after: u64,
    /// Cluster mode: the fence the batch was written under.
    pub fence: Option<u64>,
}

impl<'a> Plan<'a> {
    /// The sessions `ops` touch that `known` says nothing about, and every session they
    /// create: the writer reads them first. A create is always read afresh, because what
    /// `known` remembers of its id may be an earlier life that was erased since (on the
    /// erase's own connection, which this writer does not see), or one still being erased.
    pub(crate) fn unknown(ops: &[WriteOp], known: &Known) -> Vec<String> {
        let mut ids: Vec<String> = ops
            .iter()
            .filter(|op| {
                matches!(op, WriteOp::CreateSession { .. }) || !known.contains_key(session_of(op))
            })
            .map(session_of)
            .map(|id| id.as_str().to_owned())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Plans `ops` against `known`, which must cover every session they touch. With a
    /// `guard` (cluster mode) an op is planned only if this node holds a fence for every
    /// session it writes and none of them was refused already; the others fail at once.
    /// `erasing` holds the ids, among those just read, whose previous life is still being
    /// erased: a create of one is refused ([`StoreError::Erasing`]).
    pub(crate) fn new(
        ops: &'a [WriteOp],
        known: &Known,
        erasing: &HashSet<SessionId>,
        guard: Option<&Guard<'_>>,
    ) -> Plan<'a> {
        let mut plan = Plan {
            results: Vec::with_capacity(ops.len()),
            slots: HashMap::new(),
            profiles: Vec::new(),
            inserts: Vec::new(),
            updates: Vec::new(),
            events: Vec::new(),
            op_sessions: Vec::with_capacity(ops.len()),
            fences: guard.map(|_| HashMap::new()),
            cut: HashSet::new(),
        };
        for op in ops {
            plan.op_sessions.push(session_of(op).as_str());
            if let Some(guard) = guard {
                if let Err(e) = plan.guard(op, guard) {
                    plan.results.push(Some(Err(e)));
                    continue;
                }
            }
            let outcome = match op {
                WriteOp::CreateSession { session, events } => {
                    plan.create(session, events, known, erasing)
                }
                WriteOp::Append {
                    session_id,
                    events,
                    patch,
                } => plan.append(session_id, events, patch, known),
                WriteOp::Patch { session_id, patch } => plan.append(session_id, &[], patch, known),
            };
            plan.results.push(outcome.err().map(Err));
        }
        plan
    }

    /// Cluster mode: checks that every session `op` writes is held and not refused, and
    /// records their fences.
    fn guard(&mut self, op: &'a WriteOp, guard: &Guard<'_>) -> Result<(), StoreError> {
        let parent = match op {
            WriteOp::CreateSession { session, .. } => session.parent_session_id.as_ref(),
            _ => None,
        };
        let own = session_of(op);
        let mut fences = Vec::with_capacity(2);
        for id in std::iter::once(own).chain(parent) {
            match guard.refused.get(id) {
                // A refused forward cuts its session's ops from the op that was to accept it
                // on; the ones before it are unaffected, and a parent's forward is not the
                // branch's business.
                Some(e @ StoreError::ForwardRefused { seq, .. })
                    if id == own && (self.cut.contains(id.as_str()) || reaches(op, *seq)) =>
                {
                    self.cut.insert(id.as_str());
                    return Err(e.clone());
                }
                Some(StoreError::ForwardRefused { .. }) => {}
                Some(e) => return Err(e.clone()),
                None => {}
            }
            match guard.held.get(id) {
                Some(fence) => fences.push((id.as_str(), *fence)),
                None => {
                    return Err(StoreError::NotOwner {
                        session_id: id.clone(),
                        fence: 0,
                    })
                }
            }
        }
        if let Some(map) = self.fences.as_mut() {
            map.extend(fences);
        }
        Ok(())
    }

    /// Cluster mode: the sessions to lock and their fences, in id order (two transactions
    /// locking overlapping sets in one order cannot deadlock).
    pub(crate) fn guarded(&self) -> Vec<(&'a str, u64)> {
        let mut all: Vec<(&'a str, u64)> = self
            .fences
            .iter()
            .flatten()
            .map(|(id, f)| (*id, *f))
            .collect();
        all.sort_unstable();
        all
    }

    /// The sessions the statement parks (their status becomes `parked`).
    pub(crate) fn parking(&self) -> Vec<&'a str> {
        let parked = SessionStatus::Parked.as_str();
        let created = self
            .inserts
            .iter()
            .filter(|r| r.status == parked)
            .map(|r| r.session.id.as_str());
        let updated = self
            .updates
            .iter()
            .filter(|u| u.status == Some(parked))
            .map(|u| u.id);
        created.chain(updated).collect()
    }

    /// (session, seq) of every event of the statement.
    pub(crate) fn event_keys(&self) -> impl Iterator<Item = (&'a str, u64)> + '_ {
        self.events.iter().map(|(id, e)| (*id, e.seq))
    }

    /// True in cluster mode.
    pub(crate) fn is_fenced(&self) -> bool {
        self.fences.is_some()
    }

    /// The final results when the transaction refused to write: an op whose session (or
    /// parent) is in `refused` gets that error, every other op of the statement `other`.
    pub(crate) fn failed_by(
        self,
        refused: &HashMap<SessionId, StoreError>,
        other: &StoreError,
    ) -> Vec<OpResult> {
        self.results
            .into_iter()
            .zip(self.op_sessions)
            .map(|(r, id)| {
                r.unwrap_or_else(|| {
                    Err(refused
                        .get(&SessionId::from(id))
                        .cloned()
                        .unwrap_or_else(|| other.clone()))
                })
            })
            .collect()
    }

    /// True when nothing is left to write (every op was refused, or there were none).
    pub(crate) fn is_empty(&self) -> bool {
        self.inserts.is_empty() && self.updates.is_empty()
    }

    /// The final results once the statement committed.
    pub(crate) fn committed(self) -> Vec<OpResult> {
        self.results
            .into_iter()
            .map(|r| r.unwrap_or(Ok(())))
            .collect()
    }

    /// The final results when the statement failed with `err`: every op in it gets the error.
    pub(crate) fn failed(self, err: &StoreError) -> Vec<OpResult> {
        self.results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(err.clone())))
            .collect()
    }

    /// What `known` becomes once the statement committed.
    pub(crate) fn learn(&self, known: &mut Known) {
        for row in &self.inserts {
            known.insert(row.session.id.clone(), u64::try_from(row.latest_seq).ok());
        }
        for u in &self.updates {
            known.insert(
                SessionId::from(u.id.to_owned()),
                u64::try_from(u.new_seq).ok(),
            );
        }
    }

    /// The sessions of the statement, for `known` to forget when their state is in doubt.
    pub(crate) fn sessions(&self) -> Vec<SessionId> {
        self.slots
            .keys()
            .map(|id| SessionId::from((*id).to_owned()))
            .collect()
    }

    /// The rows that tell whether the statement committed: every created session, and every
    /// existing one whose `latest_seq` moves. Empty for a batch of patches only (which is
    /// idempotent, so it can simply be sent again).
    pub(crate) fn evidence(&self) -> Vec<Evidence> {
        let fence = |id: &str| self.fences.as_ref().and_then(|f| f.get(id).copied());
        let created = self.inserts.iter().map(|r| Evidence {
            session_id: r.session.id.clone(),
            before: None,
            after: u64::try_from(r.latest_seq).unwrap_or(0),
            fence: fence(r.session.id.as_str()),
        });
        let moved = self
            .updates
            .iter()
            .filter(|u| u.new_seq != u.expected)
            .map(|u| Evidence {
                session_id: SessionId::from(u.id.to_owned()),
                before: u64::try_from(u.expected).ok(),
                after: u64::try_from(u.new_seq).unwrap_or(0),
                fence: fence(u.id),
            });
        created.chain(moved).collect()
    }

    /// Where `id` stands: in the batch already, or as `known` says.
    fn latest(&self, id: &str, known: &Known) -> Option<u64> {
        match self.slots.get(id) {
            Some(Slot::New(i)) => u64::try_from(self.inserts[*i].latest_seq).ok(),
            Some(Slot::Existing(i)) => u64::try_from(self.updates[*i].new_seq).ok(),
            None => known
                .get(&SessionId::from(id.to_owned()))
                .copied()
                .flatten(),
        }
    }

    fn create(
        &mut self,
        session: &'a NewSession,
        events: &'a [EventRow],
        known: &Known,
        erasing: &HashSet<SessionId>,
    ) -> Result<(), StoreError> {
        rules::check_create(events)?;
        if erasing.contains(&session.id) {
            return Err(StoreError::Erasing(session.id.clone()));
        }
        let id = session.id.as_str();
        if self.slots.contains_key(id) || self.latest(id, known).is_some() {
            return Err(StoreError::Conflict(format!(
                "session id {id} already used"
            )));
        }
        let latest_seq = to_i64(events.last().map_or(0, |e| e.seq), "seq")?;
        let message_count = to_i64(session.message_count, "message_count")?;
        if !self.profiles.iter().any(|p| p.0 == session.profile) {
            self.profiles
                .push((session.profile.as_str(), session.created_at_ms));
        }
        self.slots.insert(id, Slot::New(self.inserts.len()));
        self.inserts.push(NewRow {
            session,
            title: &session.title,
            status: SessionStatus::Idle.as_str(),
            history_version: 0,
            turn_marker: None,
            updated_at_ms: session.created_at_ms,
            latest_seq,
            message_count,
        });
        self.events.extend(events.iter().map(|e| (id, e)));
        Ok(())
    }

    /// An Append (a Patch is an Append without events).
    fn append(
        &mut self,
        session_id: &'a SessionId,
        events: &'a [EventRow],
        patch: &'a SessionPatch,
        known: &Known,
    ) -> Result<(), StoreError> {
        let id = session_id.as_str();
        rules::check_contiguous(events)?;
        if events.first().is_some_and(|e| e.seq == 0) {
            return Err(StoreError::Invalid("seqs start at 1".into()));
        }
        let latest = self.latest(id, known);
        if events.is_empty() {
            if latest.is_none() {
                return Err(StoreError::Invalid(format!("no session {id}")));
            }
        } else {
            rules::check_append(session_id, latest, events)?;
        }
        let values = Values::of(patch)?;
        let new_seq = match events.last() {
            Some(last) => Some(to_i64(last.seq, "seq")?),
            None => None,
        };
        let slot = match self.slots.get(id) {
            Some(slot) => *slot,
            None => {
                let expected = to_i64(latest.unwrap_or(0), "seq")?;
                let slot = Slot::Existing(self.updates.len());
                self.updates.push(Update {
                    id,
                    expected,
                    new_seq: expected,
                    status: None,
                    title: None,
                    message_count: None,
                    history_version: None,
                    marker_set: false,
                    marker: None,
                    updated_at_ms: None,
                });
                self.slots.insert(id, slot);
                slot
            }
        };
        match slot {
            Slot::New(i) => {
                let row = &mut self.inserts[i];
                row.latest_seq = new_seq.unwrap_or(row.latest_seq);
                row.status = values.status.unwrap_or(row.status);
                row.title = values.title.unwrap_or(row.title);
                row.message_count = values.message_count.unwrap_or(row.message_count);
                row.history_version = values.history_version.unwrap_or(row.history_version);
                if let Some(marker) = values.marker {
                    row.turn_marker = marker;
                }
                row.updated_at_ms = values.updated_at_ms.unwrap_or(row.updated_at_ms);
            }
            Slot::Existing(i) => {
                let u = &mut self.updates[i];
                u.new_seq = new_seq.unwrap_or(u.new_seq);
                u.status = values.status.or(u.status);
                u.title = values.title.or(u.title);
                u.message_count = values.message_count.or(u.message_count);
                u.history_version = values.history_version.or(u.history_version);
                if let Some(marker) = values.marker {
                    u.marker_set = true;
                    u.marker = marker;
                }
                u.updated_at_ms = values.updated_at_ms.or(u.updated_at_ms);
            }
        }
        self.events.extend(events.iter().map(|e| (id, e)));
        Ok(())
    }
}

/// True when `op` writes the event `seq` or a later one of its session.
fn reaches(op: &WriteOp, seq: u64) -> bool {
    let events = match op {
        WriteOp::CreateSession { events, .. } | WriteOp::Append { events, .. } => events,
        WriteOp::Patch { .. } => return false,
    };
    events.last().is_some_and(|last| last.seq >= seq)
}

pub(crate) fn session_of(op: &WriteOp) -> &SessionId {
    match op {
        WriteOp::CreateSession { session, .. } => &session.id,
        WriteOp::Append { session_id, .. } | WriteOp::Patch { session_id, .. } => session_id,
    }
}
