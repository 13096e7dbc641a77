//! The client methods of PROTOCOL 1.4: the typed [`Request`], its params and
//! results, and the validation that turns a method name plus a params object
//! into a `Request` or a -32601/-32602 error.
//!
//! Validation happens here, once, so the actors only ever see well-formed
//! requests, and every peer (WebSocket, stdio, HTTP) reports a bad field the
//! same way: `data.field` holds its path, e.g. `messages[1].role`.
//!
//! Every method is one row of the table below (`methods!`), which generates
//! [`METHODS`], [`Request`], [`SessionWrite`], their `method` and `params`
//! and the decoder, so a name cannot be listed without being decodable (or
//! the other way round). Adding a method: a row here, its params type
//! (implementing `Params`) beside the others in this directory, and then
//! its handler, which the compiler asks for: for a row under `writes:` (a
//! request that changes one session) a `Write` of the actors' session
//! (`actors/src/session/write.rs`), which a cluster forwards and runs on
//! the owner with no more code; for any other row, its arm in the actors'
//! dispatcher (`actors/src/peer/dispatch.rs`). Then docs/PROTOCOL.md and a
//! test.

mod de;
mod handoff;
mod misc;
mod nul;
mod presence;
mod results;
mod session;
mod token;

pub use handoff::*;
pub use misc::*;
pub use presence::*;
pub use results::*;
pub use session::*;
pub use token::*;

use serde::de::{DeserializeOwned, Deserializer};
use serde_json::Value;

use crate::error::RpcError;
use crate::ids::SessionId;

/// The params of a method: decoded by serde, then checked for what serde
/// cannot express (a range). Most have nothing to check.
pub(crate) trait Params: DeserializeOwned {
    /// Checks the decoded params; an error is a -32602 naming the field.
    fn validate(&self) -> Result<(), RpcError> {
        Ok(())
    }
}

/// One handler for every [`SessionWrite`]: `H: HandleWrite<P>` for the
/// params type `P` of each, so that a crate that runs the writes implements
/// it once (generically) and [`SessionWrite::dispatch`] calls it with the
/// typed params. A write without a handler is then a compile error where
/// `dispatch` is called.
pub trait HandleWrite<P> {
    type Output;
    fn handle(self, params: P) -> Self::Output;
}

/// Generates everything that lists the methods from one table of rows
/// `"wire.name" => Variant` (no params: whatever object is sent is ignored)
/// or `"wire.name" => Variant(ParamsType)`, in the order of PROTOCOL 1.4,
/// then, after `writes:`, the rows of the methods that change one session
/// ([`SessionWrite`]: each takes params with its `session_id` and `profile`).
macro_rules! methods {
    (@decode $d:ident $variant:ident) => {
        Request::$variant
    };
    (@decode $d:ident $variant:ident $params:ty) => {
        Request::$variant(decode::<$params, _>($d)?)
    };
    (
        $( $(#[$meta:meta])* $wire:literal => $variant:ident $( ($params:ty) )? ),+ ;
        writes:
        $( $(#[$wmeta:meta])* $wwire:literal => $wvariant:ident ($wparams:ty) ),+ $(,)?
    ) => {
        /// Every method name: those of [`Request`]'s own variants, then
        /// those of [`SessionWrite`].
        pub const METHODS: &[&str] = &[ $( $wire, )+ $( $wwire ),+ ];

        /// A validated client request.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Request {
            $( $(#[$meta])* $variant $( ($params) )?, )+
            /// A request that changes one session.
            Write(SessionWrite),
        }

        /// A request that changes one session. Its owner runs it (on a
        /// cluster, another node forwards it there: PROTOCOL Part 4,
        /// "Several gateways"), and it is answered once what it wrote is
        /// on disk.
        #[derive(Debug, Clone, PartialEq)]
        pub enum SessionWrite {
            $( $(#[$wmeta])* $wvariant($wparams) ),+
        }

        impl Request {
            /// The wire name of the method.
            pub fn method(&self) -> &'static str {
                match self {
                    $( Request::$variant { .. } => $wire, )+
                    Request::Write(w) => w.method(),
                }
            }

            /// The params object as a client sends it; `None` for a method
            /// that takes none.
            pub fn params(&self) -> Result<Option<Value>, serde_json::Error> {
                // The catch-all is for the methods without params; it would
                // be unreachable only if every method took some.
                #[allow(unreachable_patterns)]
                match self {
                    $( $( Request::$variant(p) => serde_json::to_value::<&$params>(p).map(Some), )? )+
                    Request::Write(w) => w.params().map(Some),
                    _ => Ok(None),
                }
            }
        }

        impl SessionWrite {
            /// The wire name of the method.
            pub fn method(&self) -> &'static str {
                match self {
                    $( SessionWrite::$wvariant(_) => $wwire ),+
                }
            }

            /// The params object as a client sends it.
            pub fn params(&self) -> Result<Value, serde_json::Error> {
                match self {
                    $( SessionWrite::$wvariant(p) => serde_json::to_value(p) ),+
                }
            }

            /// The session it changes.
            pub fn session_id(&self) -> &SessionId {
                match self {
                    $( SessionWrite::$wvariant(p) => &p.session_id ),+
                }
            }

            /// The profile it names, if any.
            pub fn profile(&self) -> Option<&str> {
                match self {
                    $( SessionWrite::$wvariant(p) => p.profile.as_deref() ),+
                }
            }

            /// Names `profile` (a request passed on keeps the scope it was
            /// checked in).
            pub fn set_profile(&mut self, profile: String) {
                match self {
                    $( SessionWrite::$wvariant(p) => p.profile = Some(profile) ),+
                }
            }

            /// Hands the typed params to `handler`.
            pub fn dispatch<H, O>(self, handler: H) -> O
            where
                $( H: HandleWrite<$wparams, Output = O>, )+
            {
                match self {
                    $( SessionWrite::$wvariant(p) => <H as HandleWrite<$wparams>>::handle(handler, p) ),+
                }
            }

            /// The write `method` with `params` (a JSON object; `null`
            /// counts as `{}`), validated as [`Request::from_parts`] does;
            /// -32601 for a method that is not a write.
            pub fn from_parts(method: &str, params: Value) -> Result<SessionWrite, RpcError> {
                match Request::from_parts(method, params)? {
                    Request::Write(w) => Ok(w),
                    other => Err(RpcError::method_not_found(other.method())),
                }
            }
        }

        $(
            impl From<$wparams> for SessionWrite {
                fn from(p: $wparams) -> Self {
                    SessionWrite::$wvariant(p)
                }
            }
        )+

        impl From<SessionWrite> for Request {
            fn from(w: SessionWrite) -> Self {
                Request::Write(w)
            }
        }

        /// Decodes the params of a known `method` from any JSON deserializer.
        fn build<'de, D>(method: &str, d: D) -> Result<Request, RpcError>
        where
            D: Deserializer<'de, Error = serde_json::Error>,
        {
            Ok(match method {
                $( $wire => methods!(@decode d $variant $($params)?), )+
                $( $wwire => Request::Write(SessionWrite::$wvariant(decode::<$wparams, _>(d)?)), )+
                other => return Err(RpcError::method_not_found(other)),
            })
        }
    };
}

methods! {
    "gateway.ping" => Ping,
    "session.create" => SessionCreate(CreateParams),
    "session.resume" => SessionResume(ResumeParams),
    "session.detach" => SessionDetach(DetachParams),
    "session.list" => SessionList(ListParams),
    "session.events.since" => EventsSince(SinceParams),
    "session.events.stats" => EventsStats,
    "gateway.hello" => GatewayHello(ClientInfo),
    "session.presence" => SessionPresence(PresenceParams),
    "handoff.claim" => HandoffClaim(HandoffClaimParams),
    "handoff.complete" => HandoffComplete(HandoffCompleteParams),
    "handoff.fail" => HandoffFail(HandoffFailParams),
    "handoff.state" => HandoffState(HandoffStateParams),
    "gateway.refresh_token" => RefreshToken(RefreshTokenParams);
    writes:
    "session.close" => SessionClose(CloseParams),
    "session.branch" => SessionBranch(BranchParams),
    "prompt.submit" => PromptSubmit(SubmitParams),
    "session.interrupt" => SessionInterrupt(InterruptParams),
    "session.compress" => SessionCompress(CompressParams),
    "handoff.request" => HandoffRequest(HandoffRequestParams),
    "session.rename" => SessionRename(RenameParams),
    "session.delete" => SessionDelete(DeleteParams),
}

impl Request {
    /// Validates `params` (a JSON object; `null` counts as `{}`) for
    /// `method`. Unknown method → -32601; params not an object, a wrong
    /// type, a missing field, a value out of range or a string holding a
    /// NUL → -32602 with `data.field` (an id holding a NUL names nothing:
    /// 4001, `nul.rs`).
    pub fn from_parts(method: &str, params: Value) -> Result<Request, RpcError> {
        if !is_known_method(method) {
            return Err(RpcError::method_not_found(method));
        }
        let params = match params {
            Value::Null => Value::Object(Default::default()),
            Value::Object(_) => params,
            _ => return Err(params_not_object()),
        };
        let nul = nul::holds_nul(&params);
        let request = build(method, params)?;
        if nul {
            nul::refuse_nul(&request)?;
        }
        Ok(request)
    }

    /// Like [`Request::from_parts`], but straight from the params' JSON text
    /// (which the caller has already checked to be syntactically valid).
    /// Decoding from text rather than a `Value` means a number that no
    /// `Value` can hold (`1e400`) is still reported against its field.
    pub(crate) fn from_raw_params(method: &str, params: &str) -> Result<Request, RpcError> {
        if !is_known_method(method) {
            return Err(RpcError::method_not_found(method));
        }
        let params = params.trim_start();
        let params = if params.starts_with("null") {
            "{}"
        } else if params.starts_with('{') {
            params
        } else {
            return Err(params_not_object());
        };
        let mut d = serde_json::Deserializer::from_str(params);
        let request = build(method, &mut d)?;
        if nul::may_hold_nul(params) {
            nul::refuse_nul(&request)?;
        }
        Ok(request)
    }
}

/// Whether `method` is one of [`METHODS`].
pub fn is_known_method(method: &str) -> bool {
    METHODS.contains(&method)
}

fn params_not_object() -> RpcError {
    RpcError::invalid_params("params", "params must be an object")
}

/// Deserializes `T`, tracking the path so an error names its field, then
/// validates it.
fn decode<'de, T, D>(d: D) -> Result<T, RpcError>
where
    T: Params,
    D: Deserializer<'de, Error = serde_json::Error>,
{
    let params: T = serde_path_to_error::deserialize(d).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let detail = without_position(&inner);
        let field = field_name(&path, &detail);
        RpcError::invalid_params(&field, detail)
    })?;
    params.validate()?;
    Ok(params)
}

/// serde_json's message without its " at line L column C" suffix (the
/// position is meaningless to a client once the frame has been split up).
fn without_position(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    if e.line() == 0 {
        return msg;
    }
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    match msg.strip_suffix(&suffix) {
        Some(m) => m.to_owned(),
        None => msg,
    }
}

/// The field to report. serde reports a missing field as an error of the
/// *containing* object (path `messages[0]`, message "missing field `text`"),
/// so the name is appended to that path: `messages[0].text`.
fn field_name(path: &str, detail: &str) -> String {
    let path = if path == "." { "" } else { path };
    let missing = detail
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(name, _)| name);
    match (missing, path.is_empty()) {
        (Some(name), true) => name.to_owned(),
        (Some(name), false) => format!("{path}.{name}"),
        (None, true) => "params".to_owned(),
        (None, false) => path.to_owned(),
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod validation_tests;
