//! Transmission-phase request headers: arbitrary bytes, cut into 28-byte headers, must parse or be refused
//! without panicking, and a header that parses must encode back to the same bytes.
#![no_main]

use blockwell_server::nbd::proto::{encode_request, parse_request, REQUEST_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for chunk in data.chunks_exact(REQUEST_LEN) {
        let header: &[u8; REQUEST_LEN] = chunk.try_into().expect("28 bytes");
        if let Ok(r) = parse_request(header) {
            assert_eq!(&encode_request(&r), header, "parse/encode round trip");
        }
    }
});
