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

fn token(key: &str, limits: ProfileLimits) -> TokenLimits {
    TokenLimits {
        key: Arc::from(key),
        limits: Arc::new(limits),
    }
}

#[test]
fn a_tokens_limits_are_its_own_and_never_the_profiles() {
    let l = ledger(ProfileLimits {
        connections: Some(5),
        live_sessions: Some(1),
        ..Default::default()
    });
    let one = token(
        "t1",
        ProfileLimits {
            connections: Some(1),
            requests_per_s: Some(2),
            ..Default::default()
        },
    );
    let _c = l.open_connection("a", Some(&one)).expect("first");
    // The token's second is refused; the profile's other tokens are not.
    let refused = l.open_connection("a", Some(&one)).expect_err("second");
    assert_eq!((refused.limit, refused.max), (Limit::Connections, 1));
    let others: Vec<_> = (0..4)
        .map(|_| l.open_connection("a", None).expect("the profile's 5"))
        .collect();
    assert_eq!(l.open_connection("a", None).expect_err("sixth").max, 5);
    drop(others);
    // A token refused at 0 installs nothing.
    let zero = token(
        "t0",
        ProfileLimits {
            connections: Some(0),
            ..Default::default()
        },
    );
    assert!(l.open_connection("a", Some(&zero)).is_err());
    let _d = l
        .open_connection("a", None)
        .expect("plain tokens unaffected");
    // Its rate is its own: no other token's request is refused.
    let now = Instant::now();
    l.take_request("a", Some(&one), now).expect("1");
    l.take_request("a", Some(&one), now).expect("2");
    let slow = l.take_request("a", Some(&one), now).expect_err("3");
    assert_eq!(slow.limit, Limit::RequestsPerS);
    assert!(slow.retry_after.is_some_and(|d| d > Duration::ZERO));
    for _ in 0..100 {
        l.take_request("a", None, now)
            .expect("the profile has no rate");
    }
    // A ceiling is checked against the profile's count, nothing counted.
    let _s = l.new_session("a").expect("one");
    assert_eq!(
        l.token_ceiling("a", Limit::LiveSessions, 1)
            .expect_err("at 1")
            .limit,
        Limit::LiveSessions
    );
    l.token_ceiling("a", Limit::LiveSessions, 2)
        .expect("under 2");
}

#[test]
fn a_request_refused_by_the_profile_costs_the_token_nothing() {
    let l = ledger(ProfileLimits {
        requests_per_s: Some(1),
        ..Default::default()
    });
    let t = token(
        "t",
        ProfileLimits {
            requests_per_s: Some(1),
            ..Default::default()
        },
    );
    let now = Instant::now();
    l.take_request("a", None, now).expect("the profile's one");
    assert!(l.take_request("a", Some(&t), now).is_err());
    // The token's own bucket is still full for another profile's... its own.
    l.take_request("b", Some(&t), now)
        .expect("the token's bucket was not taken");
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
