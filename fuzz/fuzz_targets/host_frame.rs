//! Compute-host line decoder: any bytes, split into lines as the host
//! reader does, each decoded as `FromHost` (gateway side) and `ToHost`
//! (host side) (invariants in `src/host.rs`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The gateway's reader rejects a non-UTF-8 line before decoding it.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for line in text.split_inclusive('\n') {
        if !line.trim().is_empty() {
            tether_fuzz::host::check_line(line);
        }
    }
});
