//! Field deserializers shared by the params structs.
//!
//! The contract says a `null` for an optional field means "absent". serde's
//! `#[serde(default)]` only covers a *missing* field; for a field that has a
//! non-`Option` type (`attach: bool`, `limit: u32`, …) a `null` would be a
//! type error. These helpers read an `Option<T>` and fall back to the
//! field's default, so missing and `null` behave the same.

use serde::{Deserialize, Deserializer};

/// `null` → `T::default()`.
pub(crate) fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// `true`, for `#[serde(default = ...)]`.
pub(crate) fn yes() -> bool {
    true
}

/// `null` → `true`.
pub(crate) fn null_true<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<bool>::deserialize(d)?.unwrap_or(true))
}

/// Default page size of `session.list`.
pub(crate) const LIST_LIMIT_DEFAULT: u32 = 50;
/// Largest page size of `session.list`.
pub(crate) const LIST_LIMIT_MAX: u32 = 500;
/// Default page size of `session.events.since`.
pub(crate) const SINCE_LIMIT_DEFAULT: u32 = 1000;
/// Largest page size of `session.events.since`.
pub(crate) const SINCE_LIMIT_MAX: u32 = 10_000;

pub(crate) fn list_limit() -> u32 {
    LIST_LIMIT_DEFAULT
}

pub(crate) fn null_list_limit<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    Ok(Option::<u32>::deserialize(d)?.unwrap_or(LIST_LIMIT_DEFAULT))
}

pub(crate) fn since_limit() -> u32 {
    SINCE_LIMIT_DEFAULT
}

pub(crate) fn null_since_limit<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    Ok(Option::<u32>::deserialize(d)?.unwrap_or(SINCE_LIMIT_DEFAULT))
}
