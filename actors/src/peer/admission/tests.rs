use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tether_protocol::{Request, METHODS};

use super::*;
use crate::peer::token::{CheckFuture, TokenCheck, Verified};

struct Nobody;

impl TokenCheck for Nobody {
    fn check<'a>(&'a self, _token: &'a str) -> CheckFuture<'a> {
        Box::pin(async { None })
    }
}

fn grant(sessions: Option<&[&str]>, exp: Option<u64>, leeway_s: u64) -> TokenGrant {
    TokenGrant {
        presented: Arc::from("t"),
        verified: Verified {
            profile: "p".into(),
            expires_at: exp,
            sessions: sessions
                .map(|s| Arc::new(s.iter().map(|x| x.to_string()).collect::<HashSet<_>>())),
            limits: None,
        },
        checker: Arc::new(Nobody),
        warn_before: Duration::ZERO,
        leeway: Duration::from_secs(leeway_s),
        checked_under: 0,
    }
}

/// Every method, with params naming session `id`.
fn every_request(id: &str) -> Vec<Request> {
    METHODS
        .iter()
        .map(|m| {
            let params = json!({
                "session_id": id, "text": "x", "target": "t", "handoff_id": "h_1",
                "error": "e", "token": "a.b.c", "title": "t", "last_seen": 0,
            });
            Request::from_parts(m, params).unwrap_or_else(|e| panic!("{m}: {e:?}"))
        })
        .collect()
}

#[test]
fn a_scoped_token_reaches_only_its_sessions_through_every_method() {
    let g = grant(Some(&["s_1"]), None, 0);
    for req in every_request("s_2") {
        let reach = reach_of(&req);
        let got = decide(Some(&g), reach, 0);
        match reach {
            Reach::Nothing | Reach::Listing => assert_eq!(got, Ok(()), "{}", req.method()),
            _ => assert_eq!(got, Err(Refused::OutOfScope), "{}", req.method()),
        }
    }
    for req in every_request("s_1") {
        let reach = reach_of(&req);
        let got = decide(Some(&g), reach, 0);
        match reach {
            Reach::NewFrom(_) | Reach::NewSession | Reach::Profile => {
                assert_eq!(got, Err(Refused::OutOfScope), "{}", req.method())
            }
            _ => assert_eq!(got, Ok(()), "{}", req.method()),
        }
    }
    // Without a scope, everything of the profile.
    let open = grant(None, None, 0);
    for req in every_request("s_2") {
        assert_eq!(decide(Some(&open), reach_of(&req), 0), Ok(()));
    }
    assert_eq!(decide(None, Reach::NewSession, 0), Ok(()));
}

#[test]
fn a_token_ends_at_exp_plus_the_leeway_for_every_method() {
    let g = grant(None, Some(100), 5);
    assert_eq!(g.ends_at_ms(), Some(105_000));
    for req in every_request("s_1") {
        let reach = reach_of(&req);
        assert_eq!(decide(Some(&g), reach, 104_999), Ok(()), "{}", req.method());
        assert_eq!(
            decide(Some(&g), reach, 105_000),
            Err(Refused::Expired),
            "{}",
            req.method()
        );
    }
    assert_eq!(grant(None, None, 5).ends_at_ms(), None);
}
