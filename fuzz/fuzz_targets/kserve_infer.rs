//! The Open Inference Protocol's REST infer body: JSON `data`, and the binary
//! tensor extension (the first two bytes choose the JSON header's length).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tfserve::dialects::kserve::rest::decode_infer_body(data, None);
    if let [a, b, body @ ..] = data {
        let header = usize::from(u16::from_le_bytes([*a, *b])) % (body.len() + 2);
        let _ = tfserve::dialects::kserve::rest::decode_infer_body(body, Some(header));
    }
});
