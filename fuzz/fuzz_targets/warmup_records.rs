//! Warm-up files: TFRecord framing and the PredictionLog protobufs in them.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tfserve::warmup::records::tfrecords(data);
    let _ = tfserve::warmup::records::parse(data);
});
