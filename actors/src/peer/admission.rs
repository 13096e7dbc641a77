//! The one admission check: for (token, what is asked, session), may this
//! act? Every request of every transport passes here before it runs: the
//! frames of a WebSocket, `POST /rpc`, the SSE route's resume, the
//! front-end routes' calls (they speak through a peer too), and a chat's
//! first request, which creates its session under a chosen id without a
//! method of its own ([`admit_new_session`]).
//!
//! What is decided here and nowhere else: the token's expiry (the instant
//! [`TokenGrant::ends_at`], the same one that refuses it at the door and
//! closes a live connection), its scope (the `sessions` claim), and which
//! kind of request a method is ([`reach_of`]: an exhaustive match, so a new
//! method does not compile until someone decides what it reaches).
//! Revocation is the gateway's verifier's: a peer whose token was checked
//! under an older configuration is checked again before its next request
//! (`PeerState::admit_request`). Limits are the ledger's
//! (`registry/ledger.rs`), asked by the peer's `admit` and the transports
//! at the door; a refusal there counts nothing.

use tether_protocol::{Request, RpcError, SessionWrite};

use super::token::TokenGrant;

/// What a request reaches, as far as a token's scope is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach<'a> {
    /// Nothing of any session (ping, hello, refresh).
    Nothing,
    /// One session, by id.
    Session(&'a str),
    /// One session, and a new session made from it (a branch).
    NewFrom(&'a str),
    /// A new session.
    NewSession,
    /// The profile's list: every row is then checked on its own.
    Listing,
    /// Profile-wide (stats, handoffs by id or target): names sessions the
    /// token may not reach.
    Profile,
}

/// What `req` reaches. Exhaustive on purpose: a method added to the table
/// (`protocol/src/methods/mod.rs`) must be given its reach here.
pub fn reach_of(req: &Request) -> Reach<'_> {
    match req {
        Request::Ping | Request::GatewayHello(_) | Request::RefreshToken(_) => Reach::Nothing,
        Request::SessionCreate(_) => Reach::NewSession,
        Request::SessionResume(p) => Reach::Session(p.session_id.as_str()),
        Request::SessionDetach(p) => Reach::Session(p.session_id.as_str()),
        Request::SessionList(_) => Reach::Listing,
        Request::EventsSince(p) => Reach::Session(p.session_id.as_str()),
        Request::EventsStats => Reach::Profile,
        Request::SessionPresence(p) => Reach::Session(p.session_id.as_str()),
        Request::HandoffClaim(_) | Request::HandoffComplete(_) | Request::HandoffFail(_) => {
            Reach::Profile
        }
        Request::HandoffState(p) => Reach::Session(p.session_id.as_str()),
        Request::Write(w) => write_reach(w),
    }
}

fn write_reach(w: &SessionWrite) -> Reach<'_> {
    match w {
        SessionWrite::SessionBranch(p) => Reach::NewFrom(p.session_id.as_str()),
        SessionWrite::SessionClose(_)
        | SessionWrite::PromptSubmit(_)
        | SessionWrite::SessionInterrupt(_)
        | SessionWrite::SessionCompress(_)
        | SessionWrite::HandoffRequest(_)
        | SessionWrite::SessionRename(_)
        | SessionWrite::SessionDelete(_) => Reach::Session(w.session_id().as_str()),
    }
}

/// Why a request was refused here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The token's end has passed (the connection is closed with 4401).
    Expired,
    /// Outside the token's sessions: answered as a session that is not
    /// there (4001), so a token learns nothing of the others.
    OutOfScope,
}

impl Refused {
    pub fn to_rpc(self) -> RpcError {
        match self {
            Refused::Expired => RpcError::token_refused(),
            Refused::OutOfScope => RpcError::session_not_found(),
        }
    }
}

/// May a caller with `grant` (none: a static-free, open gateway or a
/// static token without claims) do what `reach` says, at `now_ms`
/// (milliseconds since the Unix epoch)?
pub fn decide(grant: Option<&TokenGrant>, reach: Reach<'_>, now_ms: u64) -> Result<(), Refused> {
    let Some(grant) = grant else { return Ok(()) };
    if grant.ends_at_ms().is_some_and(|end| now_ms >= end) {
        return Err(Refused::Expired);
    }
    let scoped = grant.verified.sessions.is_some();
    match reach {
        Reach::Nothing | Reach::Listing => Ok(()),
        Reach::Session(id) if grant.may_reach(id) => Ok(()),
        // A token for a few sessions makes no new one: it could not reach
        // it, and a shared link must not fill the owner's profile.
        Reach::NewFrom(_) | Reach::NewSession | Reach::Profile if scoped => {
            Err(Refused::OutOfScope)
        }
        Reach::NewFrom(id) if grant.may_reach(id) => Ok(()),
        Reach::NewSession | Reach::Profile => Ok(()),
        Reach::Session(_) | Reach::NewFrom(_) => Err(Refused::OutOfScope),
    }
}

/// A session created without a method (a front-end chat's first request):
/// the same decision as `session.create`.
pub fn admit_new_session(grant: Option<&TokenGrant>) -> Result<(), RpcError> {
    decide(grant, Reach::NewSession, super::token::unix_now_ms()).map_err(Refused::to_rpc)
}

/// Whether a caller with `grant` may reach session `id` at all (a route
/// that names a session before it asks anything: the front-end routes).
pub fn admit_session(grant: Option<&TokenGrant>, id: &str) -> Result<(), RpcError> {
    decide(grant, Reach::Session(id), super::token::unix_now_ms()).map_err(Refused::to_rpc)
}

impl super::PeerState {
    /// The admission of one request of this connection: its token checked
    /// again if the configuration was reloaded since (closing the
    /// connection, 4403, if it is no longer accepted), then [`decide`]d.
    /// An expired token closes the connection (4401) as its timer would.
    pub(super) async fn admit_request(&mut self, req: &Request) -> Result<(), RpcError> {
        if let Some(grant) = self.token.clone() {
            let generation = grant.checker.generation();
            if generation != grant.checked_under {
                match grant.checker.check(&grant.presented).await {
                    Some(v) if v.profile == self.identity.profile => {
                        self.identity.limits = super::token::own_limits(&grant.presented, &v);
                        if let Some(g) = self.token.as_mut() {
                            g.verified = v;
                            g.checked_under = generation;
                        }
                        // The handler re-arms the timers of the new generation.
                        self.token_generation += 1;
                    }
                    _ => {
                        self.close_for_token(super::token::CLOSE_TOKEN_REVOKED);
                        return Err(RpcError::token_refused());
                    }
                }
            }
        }
        decide(
            self.token.as_ref(),
            reach_of(req),
            super::token::unix_now_ms(),
        )
        .map_err(|why| {
            if why == Refused::Expired {
                self.close_for_token(super::token::CLOSE_TOKEN_EXPIRED);
            }
            why.to_rpc()
        })?;
        self.token_ceilings(req)
    }

    /// The ceilings a token's `limits` claim sets for its own work: a new
    /// session, or a prompt, is refused (4290) while the profile already
    /// holds as many as the claim allows. Nothing is counted here; the
    /// profile's own limits count the work that goes on.
    fn token_ceilings(&self, req: &Request) -> Result<(), RpcError> {
        use crate::registry::ledger::Limit;
        let Some(own) = &self.identity.limits else {
            return Ok(());
        };
        let l = &own.limits;
        let ceilings = match req {
            Request::SessionCreate(_) | Request::Write(SessionWrite::SessionBranch(_)) => {
                vec![(Limit::LiveSessions, l.live_sessions)]
            }
            Request::Write(SessionWrite::PromptSubmit(_)) => vec![
                (Limit::RunningTurns, l.running_turns),
                (Limit::QueuedTurns, l.queued_turns),
            ],
            _ => Vec::new(),
        };
        for (limit, max) in ceilings {
            if let Some(max) = max {
                self.ctx
                    .profiles
                    .token_ceiling(&self.identity.profile, limit, max)
                    .map_err(|reached| reached.to_rpc())?;
            }
        }
        Ok(())
    }

    /// Closes a connection whose token ended (4401) or was revoked (4403);
    /// a `POST /rpc` request has no connection to close, only its answer.
    fn close_for_token(&self, code: u16) {
        if !self.identity.can_attach {
            return;
        }
        let reason = if code == super::token::CLOSE_TOKEN_EXPIRED {
            "token expired"
        } else {
            "token revoked"
        };
        tracing::info!(peer_id = %self.peer_id, profile = %self.identity.profile, code, "token no longer admits requests; closing");
        self.outbox.close(code, reason);
    }
}

#[cfg(test)]
mod tests;
