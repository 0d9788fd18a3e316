//! TF Serving predict bodies (row and columnar, every dtype): a tensor per
//! input or a typed error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use tfserve::codec::nonfinite::quote_bare_tokens;
use tfserve::codec::PredictEnvelope;
use tfserve::signature::SignatureSpec;

fuzz_target!(|body: &[u8]| {
    static SIGNATURES: OnceLock<Vec<SignatureSpec>> = OnceLock::new();
    let signatures = SIGNATURES.get_or_init(tfserve_fuzz::signatures);
    let body = quote_bare_tokens(body);
    let Ok(envelope) = PredictEnvelope::parse(&body) else {
        return;
    };
    for signature in signatures {
        if let Ok(tensors) = envelope.decode(signature) {
            assert_eq!(tensors.len(), signature.inputs.len());
            for tensor in tensors {
                assert_eq!(tensor.shape.iter().product::<usize>(), tensor.data.len());
            }
        }
    }
});
