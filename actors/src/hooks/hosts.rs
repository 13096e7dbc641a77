//! [`HostsUnderTest`]: the HostSupervisor on its own, against real `tether
//! host` processes, for `tests/host_supervisor.rs`.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::Value;
use tether_protocol::{ControlRequest, HostStat, TurnId, TurnStart};
use tokio::sync::mpsc;

use super::{answer, ControlOutcome, HookError, TurnUpdate};
use crate::config::HostConfig;
use crate::host_supervisor::{HostSupervisor, HostSupervisorArgs, HostSupervisorMsg};
use crate::session::SessionMsg;

/// What the host supervisor sent a [`HostsUnderTest`]'s stand-in session.
#[derive(Debug, Clone, PartialEq)]
pub enum ToSession {
    /// What happened to a turn (`SessionMsg::Turn`).
    Turn(TurnId, TurnUpdate),
    /// A control request's late answer (`SessionMsg::ControlLate`).
    ControlLate(String, Result<Value, String>),
}

/// A `HostSupervisor` on its own, with a stand-in session that passes on
/// what the supervisor tells it.
pub struct HostsUnderTest {
    supervisor: ActorRef<HostSupervisorMsg>,
    session: ActorRef<SessionMsg>,
    up: Arc<AtomicUsize>,
}

impl HostsUnderTest {
    /// Starts the supervisor (which starts its slots) and the stand-in.
    pub async fn start(
        config: HostConfig,
    ) -> Result<(Self, mpsc::UnboundedReceiver<ToSession>), HookError> {
        let up = Arc::new(AtomicUsize::new(0));
        let args = HostSupervisorArgs {
            config,
            up_slots: up.clone(),
            metrics: Default::default(),
            start: Default::default(),
        };
        let (supervisor, _) = Actor::spawn(None, HostSupervisor, args)
            .await
            .map_err(HookError::Spawn)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let (session, _) = Actor::spawn(None, SessionStandIn, tx)
            .await
            .map_err(HookError::Spawn)?;
        let hosts = Self {
            supervisor,
            session,
            up,
        };
        Ok((hosts, rx))
    }

    /// Slots that can take work now (the supervisor's `up_slots`).
    pub fn slots_up(&self) -> usize {
        self.up.load(Ordering::Relaxed)
    }

    /// Every slot's stats.
    pub async fn stats(&self, wait: Duration) -> Result<Vec<HostStat>, HookError> {
        let stats = self
            .supervisor
            .call(|reply| HostSupervisorMsg::Hosts { reply }, Some(wait));
        answer(stats.await, "the host supervisor")
    }

    /// Starts a turn for the stand-in session.
    pub fn start_turn(&self, start: TurnStart, preferred: Option<u32>) -> Result<(), HookError> {
        self.supervisor
            .cast(HostSupervisorMsg::StartTurn {
                start,
                preferred,
                session: self.session.clone(),
                // One stand-in session, so one profile.
                profile: std::sync::Arc::from("hooks"),
            })
            .map_err(|_| HookError::Gone("the host supervisor"))
    }

    /// A control request for the stand-in session: its outcome within
    /// `wait` (a late answer comes as [`ToSession::ControlLate`]). Owns
    /// what it needs, so several can run at once.
    pub fn control(
        &self,
        request: ControlRequest,
        wait: Duration,
        bound: Duration,
    ) -> impl Future<Output = Result<ControlOutcome, HookError>> + 'static {
        let supervisor = self.supervisor.clone();
        let late = self.session.clone();
        async move {
            let outcome = supervisor.call(
                |reply| HostSupervisorMsg::Control {
                    request,
                    preferred: None,
                    wait,
                    late,
                    reply,
                },
                Some(bound),
            );
            answer(outcome.await, "the host supervisor")
        }
    }

    /// The drain: every host told to shut down, answered once all are gone.
    pub async fn shutdown(&self, wait: Duration) -> Result<(), HookError> {
        let done = self
            .supervisor
            .call(|reply| HostSupervisorMsg::Shutdown { reply }, Some(wait));
        answer(done.await, "the host supervisor")
    }

    /// Stops the supervisor and waits until it has stopped (its hosts
    /// killed).
    pub async fn stop_and_wait(&self, wait: Duration) -> Result<(), HookError> {
        self.supervisor
            .stop_and_wait(None, Some(wait))
            .await
            .map_err(|_| HookError::Timeout("stopping the host supervisor"))
    }

    /// Stops the supervisor and the stand-in without waiting.
    pub fn stop(&self) {
        self.supervisor.stop(None);
        self.session.stop(None);
    }
}

/// The session a [`HostsUnderTest`] starts turns for.
struct SessionStandIn;

impl Actor for SessionStandIn {
    type Msg = SessionMsg;
    type State = mpsc::UnboundedSender<ToSession>;
    type Arguments = mpsc::UnboundedSender<ToSession>;

    async fn pre_start(
        &self,
        _myself: ActorRef<SessionMsg>,
        tx: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(tx)
    }

    async fn handle(
        &self,
        _myself: ActorRef<SessionMsg>,
        msg: SessionMsg,
        tx: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let seen = match msg {
            SessionMsg::Turn { turn_id, update } => ToSession::Turn(turn_id, update),
            SessionMsg::ControlLate { request_id, result } => {
                ToSession::ControlLate(request_id, result.map_err(|e| e.to_string()))
            }
            _ => return Ok(()),
        };
        let _ = tx.send(seen);
        Ok(())
    }
}
