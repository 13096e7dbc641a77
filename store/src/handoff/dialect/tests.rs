//! What a refused compare-and-set answers: the pure mappings, and the queue over a dialect
//! whose answers are scripted (the dialects' SQL is tested against real databases in
//! `store/tests/handoffs.rs`).

use std::sync::Mutex;

use super::*;

fn handoff(state: HandoffState) -> HandoffRow {
    HandoffRow {
        id: HandoffId::from("h_1".to_owned()),
        session_id: SessionId::from("s_1".to_owned()),
        profile: "p".into(),
        target: "phone".into(),
        state,
        error: None,
        created_at_ms: 1,
        updated_at_ms: 1,
    }
}

#[test]
fn a_unique_index_conflict_is_a_refusal() {
    assert_eq!(inserted(Ok(true)), Ok(true));
    assert_eq!(inserted(Ok(false)), Ok(false));
    assert_eq!(inserted(Err(StoreError::Conflict("dup".into()))), Ok(false));
    let full = StoreError::Full("disk".into());
    assert_eq!(inserted(Err(full.clone())), Err(full));
}

#[test]
fn a_refused_request_is_explained_by_its_session_first() {
    assert_eq!(refused_by_session(None), Some(RequestOutcome::NoSession));
    assert_eq!(
        refused_by_session(Some("closed")),
        Some(RequestOutcome::SessionClosed)
    );
    for open in ["idle", "running", "parked"] {
        assert_eq!(refused_by_session(Some(open)), None, "{open}");
    }
}

#[test]
fn a_refused_transition_reports_the_state_it_found() {
    assert_eq!(not_completed(None), CompleteOutcome::NotFound);
    assert_eq!(
        not_completed(Some(HandoffState::Pending)),
        CompleteOutcome::NotRunning(HandoffState::Pending)
    );
    assert_eq!(not_failed(None), FailOutcome::NotFound);
    assert_eq!(
        not_failed(Some(HandoffState::Completed)),
        FailOutcome::Unchanged(HandoffState::Completed)
    );
}

/// A dialect that answers what it is told and records what it was asked.
#[derive(Default)]
struct Scripted {
    insert: Option<Result<bool, StoreError>>,
    moved: Option<HandoffRow>,
    state: Option<HandoffState>,
    status: Option<String>,
    in_flight: Option<HandoffRow>,
    /// The error text `fail_if_allowed` was given.
    failed_with: Mutex<Option<String>>,
}

#[async_trait]
impl HandoffDialect for Scripted {
    async fn insert_if_allowed(&self, row: &HandoffRow) -> Result<bool, StoreError> {
        assert_eq!(row.state, HandoffState::Pending);
        assert_eq!(row.created_at_ms, row.updated_at_ms);
        self.insert.clone().unwrap_or(Ok(false))
    }

    async fn claim(&self, _: &str, _: &str, _: i64) -> Result<Option<HandoffRow>, StoreError> {
        Ok(self.moved.clone())
    }

    async fn complete_if_running(
        &self,
        _: &str,
        _: &HandoffId,
        _: i64,
    ) -> Result<Option<HandoffRow>, StoreError> {
        Ok(self.moved.clone())
    }

    async fn fail_if_allowed(
        &self,
        _: &str,
        _: &HandoffId,
        error: &str,
        _: i64,
        _: bool,
    ) -> Result<Option<HandoffRow>, StoreError> {
        *self.failed_with.lock().expect("not poisoned") = Some(error.to_owned());
        Ok(self.moved.clone())
    }

    async fn state_of(&self, _: &str, _: &HandoffId) -> Result<Option<HandoffState>, StoreError> {
        Ok(self.state)
    }

    async fn session_status(&self, _: &str, _: &SessionId) -> Result<Option<String>, StoreError> {
        Ok(self.status.clone())
    }

    async fn in_flight(&self, _: &str, _: &SessionId) -> Result<Option<HandoffRow>, StoreError> {
        Ok(self.in_flight.clone())
    }

    async fn latest(&self, _: &str, _: &SessionId) -> Result<Option<HandoffRow>, StoreError> {
        Ok(self.in_flight.clone())
    }
}

async fn request(dialect: Scripted) -> Result<RequestOutcome, StoreError> {
    let session = SessionId::from("s_1".to_owned());
    Handoffs::over(dialect)
        .request("p", &session, "phone")
        .await
}

#[tokio::test]
async fn request_outcomes() {
    let inserted = Scripted {
        insert: Some(Ok(true)),
        ..Scripted::default()
    };
    let Ok(RequestOutcome::Requested(row)) = request(inserted).await else {
        panic!("an inserted request is Requested");
    };
    assert_eq!((row.profile.as_str(), row.target.as_str()), ("p", "phone"));

    assert_eq!(
        request(Scripted::default()).await,
        Ok(RequestOutcome::NoSession)
    );
    let closed = Scripted {
        status: Some("closed".into()),
        ..Scripted::default()
    };
    assert_eq!(request(closed).await, Ok(RequestOutcome::SessionClosed));
    // Lost a race to the unique index: the winner is the handoff in flight.
    let raced = Scripted {
        insert: Some(Err(StoreError::Conflict("dup".into()))),
        status: Some("idle".into()),
        in_flight: Some(handoff(HandoffState::Pending)),
        ..Scripted::default()
    };
    let winner = Some(handoff(HandoffState::Pending));
    assert_eq!(request(raced).await, Ok(RequestOutcome::InFlight(winner)));
    // The one in flight finished before it could be read.
    let finished = Scripted {
        status: Some("idle".into()),
        ..Scripted::default()
    };
    assert_eq!(request(finished).await, Ok(RequestOutcome::InFlight(None)));
    let broken = Scripted {
        insert: Some(Err(StoreError::Unavailable("down".into()))),
        ..Scripted::default()
    };
    assert!(matches!(
        request(broken).await,
        Err(StoreError::Unavailable(_))
    ));
}

#[tokio::test]
async fn complete_and_fail_outcomes() {
    let id = HandoffId::from("h_1".to_owned());
    let moved = Scripted {
        moved: Some(handoff(HandoffState::Completed)),
        ..Scripted::default()
    };
    assert_eq!(
        Handoffs::over(moved).complete("p", &id).await,
        Ok(CompleteOutcome::Completed(handoff(HandoffState::Completed)))
    );
    let refused = Scripted {
        state: Some(HandoffState::Failed),
        ..Scripted::default()
    };
    let queue = Handoffs::over(refused);
    assert_eq!(
        queue.complete("p", &id).await,
        Ok(CompleteOutcome::NotRunning(HandoffState::Failed))
    );
    assert_eq!(
        queue.fail("p", &id, "boom", false).await,
        Ok(FailOutcome::Unchanged(HandoffState::Failed))
    );
    let missing = Handoffs::over(Scripted::default());
    assert_eq!(
        missing.complete("p", &id).await,
        Ok(CompleteOutcome::NotFound)
    );
    assert_eq!(
        missing.fail("p", &id, "boom", true).await,
        Ok(FailOutcome::NotFound)
    );
}

#[tokio::test]
async fn a_failure_is_stored_truncated() {
    let id = HandoffId::from("h_1".to_owned());
    let queue = Handoffs::over(Scripted {
        moved: Some(handoff(HandoffState::Failed)),
        ..Scripted::default()
    });
    let long = "é".repeat(MAX_HANDOFF_ERROR_BYTES);
    let outcome = queue.fail("p", &id, &long, false).await;
    assert_eq!(
        outcome,
        Ok(FailOutcome::Failed(handoff(HandoffState::Failed)))
    );
    let stored = queue
        .dialect
        .failed_with
        .lock()
        .expect("not poisoned")
        .clone();
    assert_eq!(
        stored.as_deref(),
        Some(truncate_utf8(&long, MAX_HANDOFF_ERROR_BYTES))
    );
    assert!(stored.is_some_and(|s| s.len() <= MAX_HANDOFF_ERROR_BYTES));
}
