//! The NBD handshake (a policy byte: TLS mode, listing, default export; then client flags and options) on
//! arbitrary bytes must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    blockwell_server::nbd::proto::fuzz_negotiation(data);
});
