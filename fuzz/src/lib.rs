//! The invariants the fuzz targets check, kept out of the `fuzz_target!`
//! bodies so both targets share them and so they read as plain Rust.
//!
//! A violated invariant panics; libFuzzer reports the panic as a crash and
//! saves the input under `fuzz/artifacts/<target>/`.

pub mod dup_keys;
pub mod frame;
pub mod host;
pub mod json_eq;
