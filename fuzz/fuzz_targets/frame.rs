//! Client frame decoder: any bytes, read as text the way a transport hands
//! a frame over, through `parse_frame`, param validation and the answers
//! (invariants in `src/frame.rs`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Transports pass text; lossy decoding lets the fuzzer's byte-level
    // mutations still reach the JSON decoder instead of being skipped.
    let text = String::from_utf8_lossy(data);
    tether_fuzz::frame::check(&text);
});
