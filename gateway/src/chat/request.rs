//! What every front-end route checks before it does anything: the
//! caller's profile, the per-(profile, address) rate limit, the chat id,
//! and, for a POST, its JSON body within the same bounds as `POST /rpc`.

use std::net::{IpAddr, SocketAddr};

use axum::body::Body;
use axum::extract::{ConnectInfo, FromRequestParts, Query};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use serde::de::DeserializeOwned;

use super::error::Refusal;
use super::id::ChatId;
use crate::auth::Caller;
use crate::http::{read_limited, status_text, ReadError};
use crate::server::AppState;

/// Who asks, for which chat: the caller with its profile settled.
pub struct Asked {
    pub caller: Caller,
    pub chat: ChatId,
}

impl Asked {
    pub fn profile(&self) -> &str {
        &self.caller.profile
    }

    /// The session the chat names in the caller's profile.
    pub fn session_id(&self) -> tether_protocol::SessionId {
        self.chat.session_id(&self.caller.profile)
    }
}

/// The caller's profile (a token's, else `?profile=`, else `default`) and
/// the rate limit; the refusal otherwise (404 for a profile the token does
/// not allow, exactly as an unknown chat; 429).
fn admit(
    app: &AppState,
    caller: Caller,
    remote: IpAddr,
    profile: Option<String>,
) -> Result<Caller, Refusal> {
    let caller = match profile {
        Some(p) if caller.fixed && p != caller.profile => {
            return Err(status_text(StatusCode::NOT_FOUND, "no such chat").into())
        }
        Some(p) => Caller {
            profile: p,
            ..caller
        },
        None => caller,
    };
    // Each request and each stream open draws from the same bucket as
    // `POST /rpc` and the SSE route.
    if let Err(retry_after) = app.client_buckets.take(&caller.profile, remote) {
        return Err(crate::http::rate_limited(retry_after).into());
    }
    Ok(caller)
}

/// A caller [`admit`]ted, as a route's argument: the token's caller (or the
/// anonymous one), its `?profile=`, the client's address and the rate limit,
/// read from the request once for every front-end route.
pub struct Admitted(pub Caller);

impl FromRequestParts<AppState> for Admitted {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, Refusal> {
        let remote = ConnectInfo::<SocketAddr>::from_request_parts(parts, app)
            .await
            .map_err(|r| Refusal::from(r.into_response()))?;
        let Query(q) = Query::<ProfileQuery>::from_request_parts(parts, app)
            .await
            .map_err(|r| Refusal::from(r.into_response()))?;
        let token = parts.extensions.get::<Caller>().cloned();
        let caller = crate::auth::caller_of(token.map(axum::Extension));
        admit(app, caller, remote.ip(), q.profile).map(Admitted)
    }
}

impl Admitted {
    /// The chat `chat_id` names for this caller, or 400.
    pub fn chat(self, chat_id: &str) -> Result<Asked, Refusal> {
        let chat = ChatId::parse(chat_id)
            .map_err(|e| Refusal::from(status_text(StatusCode::BAD_REQUEST, &e.to_string())))?;
        // The admission of every front-end request: a chat outside the
        // token's sessions is 404, exactly as one that does not exist.
        let session = chat.session_id(&self.0.profile);
        if tether_actors::admit_session(self.0.grant.as_ref(), session.as_str()).is_err() {
            return Err(status_text(StatusCode::NOT_FOUND, "no such chat").into());
        }
        Ok(Asked {
            caller: self.0,
            chat,
        })
    }
}

/// `?profile=NAME`, the profile of a gateway without tokens.
#[derive(Debug, Default, serde::Deserialize)]
pub struct ProfileQuery {
    pub profile: Option<String>,
}

/// A JSON body of type `T`: `application/json`, at most `max_frame_bytes`,
/// arriving within `--handshake-timeout-s`; else 415, 413, 408 or 400.
pub async fn json_body<T: DeserializeOwned>(
    app: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, Refusal> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|ct| ct.split(';').next().unwrap_or("").trim())
        .is_some_and(|ct| ct.eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(status_text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        )
        .into());
    }
    let max = app.ctx.config.max_frame_bytes;
    let too_large = || {
        status_text(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("body over max_frame_bytes ({max})"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large().into());
    }
    let limit = app.ctx.config.request_read_timeout;
    let bytes = match tokio::time::timeout(limit, read_limited(body, max)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(ReadError::TooLarge)) => return Err(too_large().into()),
        Ok(Err(ReadError::Broken)) => {
            return Err(status_text(StatusCode::BAD_REQUEST, "cannot read body").into())
        }
        Err(_) => {
            let mut resp = status_text(
                StatusCode::REQUEST_TIMEOUT,
                &format!("the body did not arrive within {} s", limit.as_secs()),
            );
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return Err(resp.into());
        }
    };
    serde_json::from_slice(&bytes).map_err(|e| {
        status_text(
            StatusCode::BAD_REQUEST,
            &format!("the body is not a valid request: {e}"),
        )
        .into()
    })
}
