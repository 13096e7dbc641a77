//! Property tests of the two decoders that read untrusted text: the client
//! frame decoder (`parse_frame`, PROTOCOL Part 1) and the compute-host line
//! decoder (`parse_host_line`, Part 2).
//!
//! They run on stable in `cargo test`, with a modest case count, as the CI
//! counterpart of the `cargo fuzz` targets in `fuzz/` (docs/FUZZING.md): the
//! fuzzers search much longer but need a nightly-style build; these pin the
//! same invariants on every run:
//!
//! - nothing panics, whatever the input (bytes, unicode, JSON-ish text,
//!   deep nesting, huge numbers, truncated and mutated valid frames);
//! - every outcome is a typed request or an error of the right JSON-RPC
//!   class (-32700 / -32600 for a whole frame, -32600 / -32601 / -32602 for a
//!   member, -32602 always naming `data.field`);
//! - for request-shaped frames the exact outcome matches an independent
//!   oracle built on `Request::from_parts` (the `Value` path), so the text
//!   path and the value path cannot drift apart;
//! - every valid typed request, and every host frame, round-trips through
//!   its encoding.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use tether_protocol::codes;
use tether_protocol::*;

/// Enough cases to cover the generators' shapes on every CI run while keeping
/// the whole file to a few seconds on a loaded 2-core machine.
const CASES: u32 = 384;

/// `PROPTEST_CASES=100000 cargo test -p tether-protocol --test prop_frames`
/// runs a longer soak (the default config reads that variable).
fn config() -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = CASES;
    }
    config
}

// ---------------------------------------------------------------------------
// Generators: JSON values and JSON-ish text
// ---------------------------------------------------------------------------

/// Every params field name of every method, so generated objects hit real
/// fields (and their type checks) rather than only unknown, ignored ones.
const FIELDS: &[&str] = &[
    "title",
    "profile",
    "close_on_disconnect",
    "attach",
    "messages",
    "engine",
    "follow_profile_config",
    "session_id",
    "last_seen",
    "omit_messages",
    "limit",
    "cursor",
    "include_closed",
    "upto_seq",
    "text",
    "focus",
    "target",
    "handoff_id",
    "error",
    "only_if_pending",
    "role",
];

/// Floats whose shortest decimal form serde_json reads back exactly with its
/// default (non-`float_roundtrip`) parser: mantissas below 2^53 with a small
/// decimal exponent take the exact fast path. Arbitrary f64s do not
/// round-trip without serde_json's `float_roundtrip` feature (e.g.
/// 9.519867919534898e-213 reads back one ULP off; docs/FUZZING.md).
fn simple_f64() -> impl Strategy<Value = f64> {
    (any::<i32>(), 0u32..6).prop_map(|(m, e)| f64::from(m) / 10f64.powi(e as i32))
}

/// A JSON value built from `simple_f64` floats, so it round-trips exactly.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        simple_f64().prop_map(|f| json!(f)),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(Value::Array),
            btree_map(any::<String>(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn json_object() -> impl Strategy<Value = Map<String, Value>> {
    btree_map(any::<String>(), json_value(), 0..4).prop_map(|m| m.into_iter().collect())
}

/// A value for a params field: mostly the types and boundaries the params
/// structs check (page-size limits, seeds with good and bad roles), plus
/// anything at all.
fn field_value() -> impl Strategy<Value = Value> {
    let seed = (
        prop_oneof![
            Just(json!("user")),
            Just(json!("assistant")),
            Just(json!("system")),
            Just(json!("tool")),
            Just(json!(5)),
            Just(Value::Null),
        ],
        prop_oneof![any::<String>().prop_map(Value::String), Just(json!(1))],
        any::<bool>(),
    )
        .prop_map(|(role, text, with_text)| {
            let mut m = Map::new();
            m.insert("role".into(), role);
            if with_text {
                m.insert("text".into(), text);
            }
            Value::Object(m)
        });
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(50),
            Just(500),
            Just(501),
            Just(10_000),
            Just(10_001),
            Just(u64::from(u32::MAX) + 1),
            Just(u64::MAX),
        ]
        .prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        simple_f64().prop_map(|f| json!(f)),
        "s_[0-9A-Z]{0,26}".prop_map(Value::String),
        any::<String>().prop_map(Value::String),
        vec(seed, 0..3).prop_map(Value::Array),
        json_value(),
    ]
}

/// A params object over the real field names (and an occasional unknown one).
fn params_object() -> impl Strategy<Value = Value> {
    let name = prop_oneof![
        4 => proptest::sample::select(FIELDS).prop_map(str::to_owned),
        1 => any::<String>(),
    ];
    btree_map(name, field_value(), 0..6).prop_map(|m| Value::Object(m.into_iter().collect()))
}

/// Number literals serde_json must reject, overflow, or keep only as text.
fn number_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        // Debug/LowerExp of any f64, including NaN and inf (junk to JSON).
        any::<f64>().prop_map(|f| format!("{f:?}")),
        any::<f64>().prop_map(|f| format!("{f:e}")),
        "-?[1-9][0-9]{19,400}",
        "-?[0-9]{1,3}(\\.[0-9]{1,30})?[eE][+-]?[0-9]{1,6}",
        proptest::sample::select(vec![
            "1e400",
            "-1e400",
            "1e-400",
            "-0",
            "-0.0",
            "0e0",
            "01",
            "1.",
            ".5",
            "+1",
            "-",
            "1e",
            "1e+",
            "0x10",
            "NaN",
            "Infinity",
            "-Infinity",
            "1_000",
        ])
        .prop_map(str::to_owned),
    ]
}

/// String literals, valid and not: escapes (lone surrogates, bad `\x`),
/// raw control characters, any unicode.
fn string_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>().prop_map(|s| Value::String(s).to_string()),
        "\"(\\\\u[0-9a-fA-F]{4}|\\\\[nrt\"\\\\/bfx]|[^\"\\\\]){0,12}\"",
        "\"[\\x00-\\x1f\u{7f}\u{2028}\u{fffd}\u{10ffff}]{0,4}\"",
        proptest::sample::select(FIELDS).prop_map(|f| format!("\"{f}\"")),
        proptest::sample::select(METHODS).prop_map(|m| format!("\"{m}\"")),
    ]
}

/// JSON-ish text: mostly well-formed trees with hostile leaves, sometimes
/// junk tokens, so both the syntax check and the validation behind it run.
fn json_text() -> BoxedStrategy<String> {
    let leaf = prop_oneof![
        3 => proptest::sample::select(vec!["null", "true", "false"]).prop_map(str::to_owned),
        3 => number_text(),
        3 => string_text(),
        1 => proptest::sample::select(vec![
            "nul", "tru", "'x'", "", "}", "]", ",", ":", "\u{0}", "[", "{", "\"",
        ])
        .prop_map(str::to_owned),
    ];
    leaf.prop_recursive(6, 48, 5, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(|items| format!("[{}]", items.join(","))),
            vec((string_text(), inner), 0..5).prop_map(|members| {
                let body: Vec<String> = members.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                format!("{{{}}}", body.join(","))
            }),
        ]
    })
    .boxed()
}

/// `[`/`{` nested `depth` times, closed or not.
fn deep_text() -> impl Strategy<Value = String> {
    (1usize..400, any::<bool>(), any::<bool>()).prop_map(|(depth, arrays, close)| {
        let (open, shut) = if arrays { ("[", "]") } else { ("{\"a\":", "}") };
        let mut s = open.repeat(depth);
        s.push('1');
        if close {
            s.push_str(&shut.repeat(depth));
        }
        s
    })
}

/// One random edit of a string, on char boundaries so it stays UTF-8.
#[derive(Debug, Clone)]
enum Edit {
    Delete(usize),
    Insert(usize, char),
    Replace(usize, char),
    /// Copy a slice of the text over to another place (repeats structure).
    Splice(usize, usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let ch = prop_oneof![
        proptest::sample::select(vec![
            '{', '}', '[', ']', '"', '\\', ',', ':', '0', '-', 'e', ' ', '\n', '\u{0}',
        ]),
        any::<char>(),
    ];
    prop_oneof![
        any::<usize>().prop_map(Edit::Delete),
        (any::<usize>(), ch.clone()).prop_map(|(i, c)| Edit::Insert(i, c)),
        (any::<usize>(), ch).prop_map(|(i, c)| Edit::Replace(i, c)),
        (any::<usize>(), any::<usize>(), any::<usize>())
            .prop_map(|(a, b, c)| Edit::Splice(a, b, c)),
    ]
}

fn apply_edits(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for e in edits {
        let n = chars.len();
        match *e {
            Edit::Delete(i) if n > 0 => {
                chars.remove(i % n);
            }
            Edit::Insert(i, c) => chars.insert(i % (n + 1), c),
            Edit::Replace(i, c) if n > 0 => chars[i % n] = c,
            Edit::Splice(a, len, to) if n > 0 => {
                let start = a % n;
                let end = (start + len % 16).min(n);
                let piece: Vec<char> = chars[start..end].to_vec();
                let at = to % (n + 1);
                chars.splice(at..at, piece);
            }
            _ => {}
        }
    }
    chars.into_iter().collect()
}

// ---------------------------------------------------------------------------
// Generators: typed requests
// ---------------------------------------------------------------------------

fn text() -> impl Strategy<Value = String> {
    any::<String>()
}

fn opt_text() -> impl Strategy<Value = Option<String>> {
    option::of(any::<String>())
}

fn session_id() -> impl Strategy<Value = SessionId> {
    prop_oneof!["s_[0-9A-Z]{26}", any::<String>()].prop_map(SessionId::from)
}

fn handoff_id() -> impl Strategy<Value = HandoffId> {
    prop_oneof!["h_[0-9A-Z]{26}", any::<String>()].prop_map(HandoffId::from)
}

fn seed_message() -> impl Strategy<Value = SeedMessage> {
    (proptest::sample::select(SeedRole::ALL), text())
        .prop_map(|(role, text)| SeedMessage { role, text })
}

/// Every valid request (limits in range; any strings, any ids).
fn request() -> impl Strategy<Value = Request> {
    let create = (
        opt_text(),
        opt_text(),
        any::<bool>(),
        any::<bool>(),
        vec(seed_message(), 0..4),
        option::of(json_object()),
        any::<bool>(),
    )
        .prop_map(|(title, profile, cod, attach, messages, engine, follow)| {
            Request::SessionCreate(CreateParams {
                title,
                profile,
                close_on_disconnect: cod,
                attach,
                messages,
                engine,
                follow_profile_config: follow,
                delivery: None,
            })
        });
    let resume = (
        session_id(),
        opt_text(),
        option::of(any::<u64>()),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(session_id, profile, last_seen, omit_messages, attach)| {
            Request::SessionResume(ResumeParams {
                session_id,
                profile,
                last_seen,
                omit_messages,
                attach,
                delivery: None,
            })
        });
    let detach = (session_id(), opt_text()).prop_map(|(session_id, profile)| {
        Request::SessionDetach(DetachParams {
            session_id,
            profile,
        })
    });
    let list = (opt_text(), 1u32..=500, opt_text(), any::<bool>()).prop_map(
        |(profile, limit, cursor, include_closed)| {
            Request::SessionList(ListParams {
                profile,
                limit,
                cursor,
                include_closed,
            })
        },
    );
    let close = (session_id(), opt_text()).prop_map(|(session_id, profile)| {
        Request::Write(SessionWrite::SessionClose(CloseParams {
            session_id,
            profile,
        }))
    });
    let branch = (
        session_id(),
        opt_text(),
        option::of(any::<u64>()),
        opt_text(),
    )
        .prop_map(|(session_id, profile, upto_seq, title)| {
            Request::Write(SessionWrite::SessionBranch(BranchParams {
                session_id,
                profile,
                upto_seq,
                title,
            }))
        });
    let submit = (session_id(), opt_text(), text(), opt_text()).prop_map(
        |(session_id, profile, text, replaces)| {
            Request::Write(SessionWrite::PromptSubmit(SubmitParams {
                session_id,
                profile,
                text,
                replaces: replaces.map(Into::into),
                multitask: None,
                drop_queued: false,
                dedupe_key: None,
            }))
        },
    );
    let interrupt = (session_id(), opt_text()).prop_map(|(session_id, profile)| {
        Request::Write(SessionWrite::SessionInterrupt(InterruptParams {
            session_id,
            profile,
        }))
    });
    let compress =
        (session_id(), opt_text(), opt_text()).prop_map(|(session_id, profile, focus)| {
            Request::Write(SessionWrite::SessionCompress(CompressParams {
                session_id,
                profile,
                focus,
            }))
        });
    let since = (session_id(), opt_text(), any::<u64>(), 1u32..=10_000).prop_map(
        |(session_id, profile, last_seen, limit)| {
            Request::EventsSince(SinceParams {
                session_id,
                profile,
                last_seen,
                limit,
            })
        },
    );
    let h_request = (session_id(), opt_text(), text()).prop_map(|(session_id, profile, target)| {
        Request::Write(SessionWrite::HandoffRequest(HandoffRequestParams {
            session_id,
            profile,
            target,
        }))
    });
    let h_claim = (opt_text(), text()).prop_map(|(profile, target)| {
        Request::HandoffClaim(HandoffClaimParams { profile, target })
    });
    let h_complete = (opt_text(), handoff_id()).prop_map(|(profile, handoff_id)| {
        Request::HandoffComplete(HandoffCompleteParams {
            profile,
            handoff_id,
        })
    });
    let h_fail = (opt_text(), handoff_id(), text(), any::<bool>()).prop_map(
        |(profile, handoff_id, error, only_if_pending)| {
            Request::HandoffFail(HandoffFailParams {
                profile,
                handoff_id,
                error,
                only_if_pending,
            })
        },
    );
    let h_state = (session_id(), opt_text()).prop_map(|(session_id, profile)| {
        Request::HandoffState(HandoffStateParams {
            session_id,
            profile,
        })
    });
    prop_oneof![
        Just(Request::Ping),
        Just(Request::EventsStats),
        create,
        resume,
        detach,
        list,
        close,
        branch,
        submit,
        interrupt,
        compress,
        since,
        h_request,
        h_claim,
        h_complete,
        h_fail,
        h_state,
    ]
}

/// The params object a client would send for `req` (`None`: no params).
fn params_of(req: &Request) -> Option<Value> {
    req.params().expect("params serialize")
}

/// A request id as a client may send it (`None`: a notification).
fn call_id() -> impl Strategy<Value = Option<Value>> {
    option::of(prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        simple_f64().prop_map(|f| json!(f)),
    ])
}

/// How a client may spell the params of a request without changing its
/// meaning: as serialized, with `null` for absent fields (the contract says
/// null means absent), and with fields from a newer protocol (ignored).
#[derive(Debug, Clone)]
struct Spelling {
    nulls_for: Vec<&'static str>,
    future_field: Option<Value>,
    /// For methods without params: send `{}` / `null` rather than nothing.
    empty: Option<Value>,
}

fn spelling() -> impl Strategy<Value = Spelling> {
    (
        proptest::sample::subsequence(FIELDS, 0..4),
        option::of(json_value()),
        option::of(prop_oneof![Just(json!({})), Just(Value::Null)]),
    )
        .prop_map(|(nulls_for, future_field, empty)| Spelling {
            nulls_for,
            future_field,
            empty,
        })
}

fn spell(req: &Request, s: &Spelling) -> Option<Value> {
    let Some(Value::Object(mut m)) = params_of(req) else {
        return s.empty.clone();
    };
    for f in &s.nulls_for {
        m.entry(*f).or_insert(Value::Null);
    }
    if let Some(v) = &s.future_field {
        m.insert("x_future_field".into(), v.clone());
    }
    Some(Value::Object(m))
}

fn frame_value(id: &Option<Value>, method: &str, params: Option<Value>) -> Value {
    let mut m = Map::new();
    m.insert("jsonrpc".into(), json!("2.0"));
    if let Some(id) = id {
        m.insert("id".into(), id.clone());
    }
    m.insert("method".into(), json!(method));
    if let Some(p) = params {
        m.insert("params".into(), p);
    }
    Value::Object(m)
}

// ---------------------------------------------------------------------------
// Generators: request-shaped frames with an independent oracle
// ---------------------------------------------------------------------------

/// What a member's parts are, as the oracle sees them.
#[derive(Debug, Clone)]
enum IdPart {
    Absent,
    Valid(Value),
    /// Not a string/number/null, or an integer beyond 64 bits.
    Invalid,
}

#[derive(Debug, Clone)]
enum MethodPart {
    Missing,
    NotString,
    Name(String),
}

#[derive(Debug, Clone)]
enum ParamsPart {
    /// Absent or `null`: counts as `{}`.
    Empty,
    NotObject,
    Object(Value),
}

/// One request-shaped object: its members' texts (in generated order) and
/// what each part is.
#[derive(Debug, Clone)]
struct Shaped {
    members: Vec<(&'static str, String)>,
    id: IdPart,
    version_ok: bool,
    method: MethodPart,
    params: ParamsPart,
}

impl Shaped {
    fn text(&self) -> String {
        let body: Vec<String> = self
            .members
            .iter()
            .map(|(k, v)| format!("\"{k}\":{v}"))
            .collect();
        format!("{{{}}}", body.join(","))
    }
}

fn id_part() -> impl Strategy<Value = (Option<String>, IdPart)> {
    prop_oneof![
        2 => Just((None, IdPart::Absent)),
        1 => Just((Some("null".to_owned()), IdPart::Valid(Value::Null))),
        3 => any::<i64>().prop_map(|n| (Some(n.to_string()), IdPart::Valid(n.into()))),
        1 => any::<u64>().prop_map(|n| (Some(n.to_string()), IdPart::Valid(n.into()))),
        3 => any::<String>().prop_map(|s| {
            let v = Value::String(s);
            (Some(v.to_string()), IdPart::Valid(v))
        }),
        1 => Just((Some("1.5".to_owned()), IdPart::Valid(json!(1.5)))),
        1 => Just((Some("1e3".to_owned()), IdPart::Valid(json!(1000.0)))),
        1 => Just((Some("-0".to_owned()), IdPart::Valid(json!(-0.0)))),
        1 => Just((Some("1e400".to_owned()), IdPart::Invalid)),
        1 => "-?[1-9][0-9]{20,40}".prop_map(|s| (Some(s), IdPart::Invalid)),
        1 => proptest::sample::select(vec!["[1]", "{}", "true", "false", "[]", "{\"a\":1}"])
            .prop_map(|s| (Some(s.to_owned()), IdPart::Invalid)),
    ]
}

fn version_part() -> impl Strategy<Value = (Option<String>, bool)> {
    prop_oneof![
        10 => Just((Some(r#""2.0""#.to_owned()), true)),
        1 => Just((Some(r#""2\u002e0""#.to_owned()), true)),
        1 => Just((Some(r#""\u0032.0""#.to_owned()), true)),
        1 => proptest::sample::select(vec![
            r#""1.0""#, "2.0", "2", "null", r#""2.0 ""#, r#""2""#, "[\"2.0\"]",
        ])
        .prop_map(|s| (Some(s.to_owned()), false)),
        1 => Just((None, false)),
    ]
}

fn method_part() -> impl Strategy<Value = (Option<String>, MethodPart)> {
    prop_oneof![
        6 => proptest::sample::select(METHODS)
            .prop_map(|m| (Some(json!(m).to_string()), MethodPart::Name(m.to_owned()))),
        // The same names, escaped: they must decode to the known method.
        1 => proptest::sample::select(METHODS).prop_map(|m| {
            let escaped = m.replace('.', "\\u002e");
            (Some(format!("\"{escaped}\"")), MethodPart::Name(m.to_owned()))
        }),
        1 => any::<String>()
            .prop_map(|m| (Some(Value::String(m.clone()).to_string()), MethodPart::Name(m))),
        1 => proptest::sample::select(vec!["5", "null", "true", "[]", "{}"])
            .prop_map(|s| (Some(s.to_owned()), MethodPart::NotString)),
        1 => Just((None, MethodPart::Missing)),
    ]
}

fn params_part() -> impl Strategy<Value = (Option<String>, ParamsPart)> {
    prop_oneof![
        1 => Just((None, ParamsPart::Empty)),
        1 => Just((Some("null".to_owned()), ParamsPart::Empty)),
        1 => proptest::sample::select(vec!["[]", "[{}]", "\"x\"", "5", "true", "1e400"])
            .prop_map(|s| (Some(s.to_owned()), ParamsPart::NotObject)),
        8 => params_object().prop_map(|v| (Some(v.to_string()), ParamsPart::Object(v))),
    ]
}

fn shaped() -> impl Strategy<Value = Shaped> {
    (
        id_part(),
        version_part(),
        method_part(),
        params_part(),
        any::<u64>(),
    )
        .prop_map(
            |((id_t, id), (v_t, version_ok), (m_t, method), (p_t, params), order)| {
                let mut members: Vec<(&'static str, String)> = Vec::new();
                for (name, text) in [
                    ("id", id_t),
                    ("jsonrpc", v_t),
                    ("method", m_t),
                    ("params", p_t),
                ] {
                    if let Some(t) = text {
                        members.push((name, t));
                    }
                }
                // Member order must not matter.
                let n = members.len().max(1);
                members.rotate_left((order as usize) % n);
                if order & (1 << 40) != 0 {
                    members.reverse();
                }
                Shaped {
                    members,
                    id,
                    version_ok,
                    method,
                    params,
                }
            },
        )
}

/// The outcome the decoder must produce for `s`, derived only from the
/// parts and `Request::from_parts`: (id to answer with, Ok(request) or
/// Err((code, field))).
type Expected = (Option<Value>, Result<Request, (i64, Option<String>)>);

fn expected(s: &Shaped) -> Expected {
    let id = match &s.id {
        IdPart::Invalid => return (Some(Value::Null), Err((codes::INVALID_REQUEST, None))),
        IdPart::Absent => None,
        IdPart::Valid(v) => Some(v.clone()),
    };
    let answer_id = Some(id.clone().unwrap_or(Value::Null));
    if !s.version_ok {
        return (answer_id, Err((codes::INVALID_REQUEST, None)));
    }
    let method = match &s.method {
        MethodPart::Missing | MethodPart::NotString => {
            return (answer_id, Err((codes::INVALID_REQUEST, None)))
        }
        MethodPart::Name(m) => m,
    };
    let params = match &s.params {
        ParamsPart::Empty => Value::Null,
        ParamsPart::NotObject => json!([]),
        ParamsPart::Object(v) => v.clone(),
    };
    let outcome =
        Request::from_parts(method, params).map_err(|e| (e.code, e.field().map(str::to_owned)));
    (id, outcome)
}

fn check_item_against(item: &Item, (id, outcome): &Expected, text: &str) {
    match (item, outcome) {
        (Item::Call(call), Ok(req)) => {
            assert_eq!(&call.id, id, "id of {text}");
            assert_eq!(&call.request, req, "request of {text}");
        }
        (Item::Error { id: got_id, error }, Err((code, field))) => {
            assert_eq!(got_id, id, "answer id of {text}: {error:?}");
            assert_eq!(error.code, *code, "code of {text}: {error:?}");
            if *code == codes::INVALID_PARAMS {
                assert_eq!(
                    error.field(),
                    field.as_deref(),
                    "field of {text}: {error:?}"
                );
            }
        }
        _ => panic!("{text}\n decoded {item:?}\n expected {id:?} {outcome:?}"),
    }
}

// ---------------------------------------------------------------------------
// Invariants that hold for every input
// ---------------------------------------------------------------------------

/// The code classes and shapes every outcome must have, whatever the input.
fn check_any(text: &str) -> Incoming {
    let incoming = parse_frame(text);
    match &incoming {
        Incoming::Invalid(e) => {
            assert!(
                e.code == codes::PARSE_ERROR || e.code == codes::INVALID_REQUEST,
                "whole-frame error {e:?} for {text:?}"
            );
            // Anything serde accepts as JSON is never a parse error.
            if e.code == codes::PARSE_ERROR {
                assert!(
                    serde_json::from_str::<serde::de::IgnoredAny>(text).is_err(),
                    "valid JSON reported as a parse error: {text:?}"
                );
            }
        }
        Incoming::Single(item) => check_item(item, text),
        Incoming::Batch(items) => {
            assert!(!items.is_empty(), "empty batch accepted: {text:?}");
            for item in items {
                check_item(item, text);
            }
        }
    }
    incoming
}

fn check_item(item: &Item, text: &str) {
    match item {
        Item::Call(call) => {
            if let Some(id) = &call.id {
                assert!(
                    matches!(id, Value::Null | Value::String(_) | Value::Number(_)),
                    "id {id:?} accepted from {text:?}"
                );
            }
            check_call_reencodes(call, text);
        }
        Item::Error { id, error } => {
            match error.code {
                codes::INVALID_REQUEST => {
                    assert!(id.is_some(), "-32600 must be answered: {text:?}")
                }
                codes::METHOD_NOT_FOUND => {}
                codes::INVALID_PARAMS => assert!(
                    error.field().is_some(),
                    "-32602 without data.field: {error:?} from {text:?}"
                ),
                other => panic!("member error code {other} ({error:?}) from {text:?}"),
            }
            // An error is never answered with an id that is not a valid id.
            if let Some(id) = id {
                assert!(
                    matches!(id, Value::Null | Value::String(_) | Value::Number(_)),
                    "answer id {id:?} for {text:?}"
                );
            }
        }
    }
}

/// A decoded call, written back out as a client would, decodes to itself:
/// the typed request loses nothing the gateway acts on.
fn check_call_reencodes(call: &Call, text: &str) {
    let frame = frame_value(&call.id, call.request.method(), params_of(&call.request));
    match parse_frame(&frame.to_string()) {
        Incoming::Single(Item::Call(again)) => {
            assert_eq!(&again, call, "re-encoding changed the call from {text:?}")
        }
        other => panic!("re-encoded call {frame} from {text:?} decoded as {other:?}"),
    }
}

/// `data.field` of -32602 names something a client sent or must send: a
/// path of known field names (or `params` itself), never a serde internal.
fn check_field_is_path(e: &RpcError) {
    if let Some(field) = e.field() {
        assert!(!field.is_empty(), "{e:?}");
        assert!(!field.contains(" at line "), "{e:?}");
    }
}

// ---------------------------------------------------------------------------
// Client frames
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config())]

    /// (a) Any bytes, read as text the way a transport would (lossily).
    #[test]
    fn random_bytes_never_panic(bytes in vec(any::<u8>(), 0..512)) {
        check_any(&String::from_utf8_lossy(&bytes));
    }

    /// (a) Any unicode text.
    #[test]
    fn random_text_never_panics(text in any::<String>()) {
        check_any(&text);
    }

    /// (a) JSON-ish text: hostile numbers, strings and junk inside trees.
    #[test]
    fn json_ish_text_never_panics(text in json_text()) {
        check_any(&text);
    }

    /// (a) JSON-ish text as a batch.
    #[test]
    fn json_ish_batches_never_panic(items in vec(json_text(), 0..6)) {
        check_any(&format!("[{}]", items.join(",")));
    }

    /// (a) Deep nesting: never a stack overflow, and the limit is exact.
    #[test]
    fn deep_nesting_is_bounded(text in deep_text()) {
        let incoming = check_any(&text);
        // Depth counts every `[`/`{`; closed frames deeper than the limit
        // are rejected as a whole, shallower ones get past the depth check.
        let depth = text.bytes().filter(|b| *b == b'[' || *b == b'{').count();
        let too_deep = matches!(&incoming,
            Incoming::Invalid(e) if e.message.contains("nesting too deep"));
        prop_assert_eq!(too_deep, depth > MAX_JSON_DEPTH, "{}", text);
    }

    /// (a) Brackets inside strings (with escaped quotes) are not nesting.
    #[test]
    fn brackets_in_strings_are_not_nesting(n in 65usize..300, quote_every in 1usize..10) {
        let mut s = String::new();
        for i in 0..n {
            s.push(if i % 2 == 0 { '[' } else { '{' });
            if i % quote_every == 0 {
                s.push('"');
            }
        }
        let frame = frame_value(
            &Some(json!(1)),
            "prompt.submit",
            Some(json!({"session_id": s.clone(), "text": s.clone()})),
        );
        let incoming = check_any(&frame.to_string());
        prop_assert_eq!(
            incoming,
            Incoming::Single(Item::Call(Call {
                id: Some(json!(1)),
                request: Request::Write(SessionWrite::PromptSubmit(SubmitParams {
                    session_id: s.as_str().into(),
                    profile: None,
                    text: s,
                    replaces: None,
                    multitask: None,
                    drop_queued: false,
                    dedupe_key: None,
                })),
            }))
        );
    }

    /// (a) Every strict prefix of a valid frame is a -32700.
    #[test]
    fn truncated_frames_are_parse_errors(req in request(), id in call_id(), cut in any::<usize>()) {
        let text = frame_value(&id, req.method(), params_of(&req)).to_string();
        let chars: Vec<char> = text.chars().collect();
        let prefix: String = chars[..cut % chars.len()].iter().collect();
        match check_any(&prefix) {
            Incoming::Invalid(e) => prop_assert_eq!(e.code, codes::PARSE_ERROR, "{}", prefix),
            other => prop_assert!(false, "prefix {:?} decoded as {:?}", prefix, other),
        }
    }

    /// (a) Valid frames with random edits: whatever they decode to obeys
    /// the invariants (mutation reaches corners generators do not).
    #[test]
    fn mutated_frames_never_panic(
        req in request(),
        id in call_id(),
        edits in vec(edit(), 1..8),
    ) {
        let text = frame_value(&id, req.method(), params_of(&req)).to_string();
        check_any(&apply_edits(&text, &edits));
    }

    /// (a) Request-shaped frames decode exactly as the oracle says: the
    /// checks run in order (id, jsonrpc, method, known method, params
    /// object, fields) and the text path agrees with `Request::from_parts`.
    #[test]
    fn shaped_frames_match_oracle(s in shaped()) {
        let text = s.text();
        let want = expected(&s);
        match check_any(&text) {
            Incoming::Single(item) => {
                if let Item::Error { error, .. } = &item {
                    check_field_is_path(error);
                }
                check_item_against(&item, &want, &text);
            }
            other => prop_assert!(false, "{} decoded as {:?}", text, other),
        }
    }

    /// (a) The same in a batch: one answer per member, in order.
    #[test]
    fn shaped_batches_match_oracle(members in vec(shaped(), 1..5)) {
        let text = format!(
            "[{}]",
            members.iter().map(Shaped::text).collect::<Vec<_>>().join(",")
        );
        match check_any(&text) {
            Incoming::Batch(items) => {
                prop_assert_eq!(items.len(), members.len());
                for (item, s) in items.iter().zip(&members) {
                    check_item_against(item, &expected(s), &text);
                }
            }
            other => prop_assert!(false, "{} decoded as {:?}", text, other),
        }
    }

    /// (a) Numbers no `Value` can hold, in every params field: reported
    /// against the field (never a panic, never a parse error).
    #[test]
    fn huge_numbers_in_params(
        method in proptest::sample::select(METHODS),
        field in proptest::sample::select(FIELDS),
        number in prop_oneof![
            Just("1e400".to_owned()),
            Just("-1e400".to_owned()),
            "[1-9][0-9]{20,300}",
            "-[1-9][0-9]{20,300}",
        ],
    ) {
        let text = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"{method}","params":{{"{field}":{number}}}}}"#
        );
        match check_any(&text) {
            Incoming::Single(Item::Call(c)) => prop_assert_eq!(c.id, Some(json!(7))),
            Incoming::Single(Item::Error { id, error }) => {
                prop_assert_eq!(id, Some(json!(7)));
                prop_assert_eq!(error.code, codes::INVALID_PARAMS, "{:?}", error);
            }
            other => prop_assert!(false, "{} decoded as {:?}", text, other),
        }
    }

    /// (b) Every valid typed request encodes to a frame that decodes back to
    /// an equal request with the same id, however the params are spelled.
    #[test]
    fn valid_requests_round_trip(req in request(), id in call_id(), sp in spelling()) {
        let frame = frame_value(&id, req.method(), spell(&req, &sp));
        let text = frame.to_string();
        prop_assert_eq!(
            check_any(&text),
            Incoming::Single(Item::Call(Call { id: id.clone(), request: req.clone() }))
        );
        // The value path agrees with the text path.
        let params = spell(&req, &sp).unwrap_or(Value::Null);
        prop_assert_eq!(Request::from_parts(req.method(), params), Ok(req.clone()));
        // Pretty-printed (newlines, indentation) is the same frame.
        let pretty = serde_json::to_string_pretty(&frame).expect("pretty");
        prop_assert_eq!(
            check_any(&pretty),
            Incoming::Single(Item::Call(Call { id, request: req }))
        );
    }

    /// (b) A batch of valid requests decodes to the same calls, in order.
    #[test]
    fn valid_batches_round_trip(reqs in vec((request(), call_id()), 1..6)) {
        let frames: Vec<Value> = reqs
            .iter()
            .map(|(r, id)| frame_value(id, r.method(), params_of(r)))
            .collect();
        let text = Value::Array(frames).to_string();
        let want: Vec<Item> = reqs
            .into_iter()
            .map(|(request, id)| Item::Call(Call { id, request }))
            .collect();
        prop_assert_eq!(check_any(&text), Incoming::Batch(want));
    }

    /// (b) Out-of-range page sizes are -32602 naming `limit`.
    #[test]
    fn page_limits_are_checked(
        list in prop_oneof![Just(0u64), 501u64..=u64::from(u32::MAX)],
        since in prop_oneof![Just(0u64), 10_001u64..=u64::from(u32::MAX) + 5],
    ) {
        let e = Request::from_parts("session.list", json!({ "limit": list }))
            .expect_err("list limit out of range");
        prop_assert_eq!((e.code, e.field()), (codes::INVALID_PARAMS, Some("limit")));
        let e = Request::from_parts(
            "session.events.since",
            json!({ "session_id": "s_1", "last_seen": 0, "limit": since }),
        )
        .expect_err("since limit out of range");
        prop_assert_eq!((e.code, e.field()), (codes::INVALID_PARAMS, Some("limit")));
    }
}

// ---------------------------------------------------------------------------
// Host frames
// ---------------------------------------------------------------------------

const FROM_HOST_TYPES: &[&str] = &[
    "hello",
    "hb",
    "event",
    "turn.end",
    "turn.error",
    "control.ack",
    "control.error",
    "pong",
    "shutdown.ack",
    "error",
];

const TO_HOST_TYPES: &[&str] = &[
    "turn.start",
    "interrupt",
    "control",
    "ping",
    "shutdown",
    "error",
];

fn turn_id() -> impl Strategy<Value = TurnId> {
    prop_oneof!["t_[0-9A-Z]{26}", any::<String>()].prop_map(TurnId::from)
}

fn message() -> impl Strategy<Value = Message> {
    (
        any::<u64>(),
        proptest::sample::select(MessageRole::ALL),
        text(),
        option::of(turn_id()),
        text(),
        option::of(proptest::sample::select(CompleteStatus::ALL)),
        option::of(text()),
        option::of(text()),
    )
        .prop_map(
            |(seq, role, text, turn_id, ts, status, failure_reason, error)| Message {
                seq,
                role,
                text,
                turn_id,
                ts,
                status,
                failure_reason,
                error,
            },
        )
}

fn from_host() -> impl Strategy<Value = FromHost> {
    prop_oneof![
        (
            any::<u32>(),
            any::<u32>(),
            text(),
            text(),
            proptest::option::of(any::<u64>())
        )
            .prop_map(|(protocol, pid, engine, version, history_cache_bytes)| {
                FromHost::Hello {
                    protocol,
                    pid,
                    engine,
                    version,
                    history_cache_bytes,
                }
            }),
        (any::<u32>(), any::<u64>()).prop_map(|(active_turns, rss_kb)| FromHost::Hb {
            active_turns,
            rss_kb
        }),
        (turn_id(), text(), json_value()).prop_map(|(turn_id, kind, payload)| FromHost::Event {
            turn_id,
            event: HostEvent {
                kind,
                payload: payload.into(),
            },
        }),
        (
            turn_id(),
            proptest::sample::select(TurnEndStatus::ALL),
            text()
        )
            .prop_map(|(turn_id, status, text)| FromHost::TurnEnd {
                turn_id,
                status,
                text,
                usage: None,
            }),
        (turn_id(), text(), text()).prop_map(|(turn_id, reason, message)| FromHost::TurnError {
            turn_id,
            reason,
            message,
        }),
        (text(), json_value())
            .prop_map(|(request_id, result)| FromHost::ControlAck { request_id, result }),
        (text(), text()).prop_map(|(request_id, message)| FromHost::ControlError {
            request_id,
            message
        }),
        any::<u64>().prop_map(|nonce| FromHost::Pong { nonce }),
        Just(FromHost::ShutdownAck),
        text().prop_map(|message| FromHost::Error { message }),
    ]
}

fn to_host() -> impl Strategy<Value = ToHost> {
    prop_oneof![
        (
            turn_id(),
            session_id(),
            "[0-9a-f]{12}",
            proptest::option::of(any::<u64>()),
            vec(message(), 0..4),
            text(),
            json_object(),
        )
            .prop_map(
                |(turn_id, session_id, trace, base, history, prompt, config)| {
                    ToHost::TurnStart(TurnStart {
                        turn_id,
                        session_id,
                        trace_id: TraceId::from(trace),
                        history_base: base,
                        history: History::from_messages(&history),
                        prompt,
                        config,
                    })
                }
            ),
        turn_id().prop_map(|turn_id| ToHost::Interrupt { turn_id }),
        session_id().prop_map(|session_id| ToHost::HistoryDrop { session_id }),
        (
            text(),
            text(),
            session_id(),
            vec(message(), 0..4),
            json_value()
        )
            .prop_map(
                |(request_id, op, session_id, history, args)| ToHost::Control(ControlRequest {
                    request_id,
                    op,
                    session_id,
                    history,
                    args,
                })
            ),
        any::<u64>().prop_map(|nonce| ToHost::Ping { nonce }),
        Just(ToHost::Shutdown),
        text().prop_map(|message| ToHost::Error { message }),
    ]
}

/// A JSON-ish line that often carries a real frame type, so the decoder's
/// "known type, bad fields" vs "unknown type" split is exercised.
fn host_line() -> impl Strategy<Value = String> {
    let tag = prop_oneof![
        proptest::sample::select(FROM_HOST_TYPES).prop_map(|t| json!(t).to_string()),
        proptest::sample::select(TO_HOST_TYPES).prop_map(|t| json!(t).to_string()),
        string_text(),
        number_text(),
    ];
    let field = prop_oneof![
        proptest::sample::select(vec![
            "protocol",
            "pid",
            "engine",
            "version",
            "active_turns",
            "rss_kb",
            "turn_id",
            "event",
            "payload",
            "status",
            "text",
            "reason",
            "message",
            "request_id",
            "result",
            "nonce",
            "session_id",
            "trace_id",
            "history",
            "prompt",
            "config",
            "op",
            "args",
        ])
        .prop_map(|f| json!(f).to_string()),
        string_text(),
    ];
    prop_oneof![
        any::<String>(),
        json_text(),
        (tag, vec((field, json_text()), 0..6)).prop_map(|(tag, fields)| {
            let mut body = vec![format!("\"type\":{tag}")];
            body.extend(fields.into_iter().map(|(k, v)| format!("{k}:{v}")));
            format!("{{{}}}", body.join(","))
        }),
    ]
}

/// Decodes `line` as `T` and checks what any outcome must satisfy: a frame
/// that decodes re-encodes to itself; an unknown type is really unknown.
fn check_host_line<T>(line: &str, known: &[&str])
where
    T: serde::Serialize + HostLine + PartialEq + std::fmt::Debug,
{
    match parse_host_line::<T>(line) {
        Ok(frame) => {
            let again = encode_host_line(&frame);
            assert_eq!(again.matches('\n').count(), 1, "{again:?}");
            let back: T = parse_host_line(&again).expect("a re-encoded frame decodes");
            assert_eq!(back, frame, "re-encoding changed the frame from {line:?}");
        }
        Err(HostFrameError::UnknownType(t)) => {
            assert!(
                !known.contains(&t.as_str()),
                "known type {t} reported unknown: {line:?}"
            )
        }
        Err(HostFrameError::Json(_)) => {}
        Err(HostFrameError::TooDeep(limit)) => {
            assert!(T::MAX_DEPTH == Some(limit), "{line:?}")
        }
    }
}

/// [`check_host_line`] on each line a reader would cut `text` into: an
/// edit that put a newline inside a frame makes two lines, never one line
/// with a newline in it (a JSON payload's whitespace may then hold one,
/// which a re-encoding would keep).
fn check_read_lines<T>(text: &str, known: &[&str])
where
    T: serde::Serialize + HostLine + PartialEq + std::fmt::Debug,
{
    for line in text.split('\n') {
        check_host_line::<T>(line, known);
    }
}

proptest! {
    #![proptest_config(config())]

    /// (c) Any text, as either side's reader.
    #[test]
    fn random_host_lines_never_panic(line in any::<String>()) {
        check_host_line::<FromHost>(&line, FROM_HOST_TYPES);
        check_host_line::<ToHost>(&line, TO_HOST_TYPES);
    }

    /// (c) Any bytes, read lossily.
    #[test]
    fn random_host_bytes_never_panic(bytes in vec(any::<u8>(), 0..512)) {
        let line = String::from_utf8_lossy(&bytes);
        check_host_line::<FromHost>(&line, FROM_HOST_TYPES);
        check_host_line::<ToHost>(&line, TO_HOST_TYPES);
    }

    /// (c) Frame-shaped JSON-ish lines.
    #[test]
    fn json_ish_host_lines_never_panic(line in host_line()) {
        check_host_line::<FromHost>(&line, FROM_HOST_TYPES);
        check_host_line::<ToHost>(&line, TO_HOST_TYPES);
    }

    /// (c) Deeply nested lines (serde_json's own recursion limit applies:
    /// the host reader has no pre-scan).
    #[test]
    fn deep_host_lines_never_panic(inner in deep_text(), tag in proptest::sample::select(FROM_HOST_TYPES)) {
        let line = format!(r#"{{"type":"{tag}","payload":{inner},"result":{inner}}}"#);
        check_host_line::<FromHost>(&line, FROM_HOST_TYPES);
        check_host_line::<FromHost>(&inner, FROM_HOST_TYPES);
        check_host_line::<ToHost>(&inner, TO_HOST_TYPES);
    }

    /// (c) Every host → gateway frame round-trips as one line (also with
    /// CRLF), and every strict prefix of it is a JSON error.
    #[test]
    fn from_host_frames_round_trip(frame in from_host(), cut in any::<usize>(), edits in vec(edit(), 1..6)) {
        let line = encode_host_line(&frame);
        prop_assert!(line.ends_with('\n'));
        prop_assert_eq!(line.matches('\n').count(), 1);
        prop_assert_eq!(parse_host_line::<FromHost>(&line), Ok(frame.clone()));
        let crlf = format!("{}\r\n", line.trim_end_matches('\n'));
        prop_assert_eq!(parse_host_line::<FromHost>(&crlf), Ok(frame.clone()));
        let json = line.trim_end_matches('\n');
        let chars: Vec<char> = json.chars().collect();
        let prefix: String = chars[..cut % chars.len()].iter().collect();
        prop_assert!(
            matches!(parse_host_line::<FromHost>(&prefix), Err(HostFrameError::Json(_))),
            "prefix {:?}", prefix
        );
        check_read_lines::<FromHost>(&apply_edits(json, &edits), FROM_HOST_TYPES);
    }

    /// (c) Every gateway → host frame round-trips the same way.
    #[test]
    fn to_host_frames_round_trip(frame in to_host(), cut in any::<usize>(), edits in vec(edit(), 1..6)) {
        // What the gateway writes (a `turn.start` spliced) is serde's line.
        let line = frame.to_line();
        prop_assert_eq!(&line, &encode_host_line(&frame));
        prop_assert!(line.ends_with('\n'));
        prop_assert_eq!(line.matches('\n').count(), 1);
        prop_assert_eq!(parse_host_line::<ToHost>(&line), Ok(frame.clone()));
        let json = line.trim_end_matches('\n');
        let chars: Vec<char> = json.chars().collect();
        let prefix: String = chars[..cut % chars.len()].iter().collect();
        prop_assert!(
            matches!(parse_host_line::<ToHost>(&prefix), Err(HostFrameError::Json(_))),
            "prefix {:?}", prefix
        );
        check_read_lines::<ToHost>(&apply_edits(json, &edits), TO_HOST_TYPES);
    }

    /// (c) A frame of one direction is an unknown type to the other side's
    /// reader, unless both directions share the type (`error`).
    #[test]
    fn cross_direction_frames_are_unknown(frame in from_host()) {
        let line = encode_host_line(&frame);
        let tag = serde_json::from_str::<Value>(&line).expect("json")["type"]
            .as_str()
            .expect("type")
            .to_owned();
        match parse_host_line::<ToHost>(&line) {
            Err(HostFrameError::UnknownType(t)) => prop_assert_eq!(t, tag),
            Ok(ToHost::Error { .. }) => prop_assert_eq!(tag.as_str(), "error"),
            other => prop_assert!(false, "{} as ToHost: {:?}", line, other),
        }
    }
}
