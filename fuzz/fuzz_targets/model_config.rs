//! Model config files (TF Serving's text format and JSON, STFS's list) and
//! batching parameters files.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = tfserve::model_config::parse(text);
    let _ = tfserve::textproto::parse(text);
    let _ = tfserve::batcher::BatchParams::from_textproto(text);
});
