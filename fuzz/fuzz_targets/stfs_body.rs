//! Simple TensorFlow Serving `POST /` JSON bodies: `data` by numpy's
//! conversions, `base64_decode`, `model_version`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use tfserve::dialects::stfs::{version_selector, Request};
use tfserve::signature::SignatureSpec;

fuzz_target!(|body: &[u8]| {
    static SIGNATURES: OnceLock<Vec<SignatureSpec>> = OnceLock::new();
    let signatures = SIGNATURES.get_or_init(tfserve_fuzz::signatures);
    let body = tfserve::codec::nonfinite::quote_bare_tokens(body);
    let Ok(request) = Request::parse(&body) else {
        return;
    };
    let _ = version_selector(request.model_version.as_ref());
    for signature in signatures {
        let _ = request.inputs(signature);
    }
});
