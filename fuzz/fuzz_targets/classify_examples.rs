//! TF Serving classify/regress bodies: serialized `tf.Example`s or a typed error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tfserve::codec::example::ExamplesRequest;

fuzz_target!(|body: &[u8]| {
    let body = tfserve::codec::nonfinite::quote_bare_tokens(body);
    if let Ok(request) = ExamplesRequest::parse(&body) {
        let _ = request.serialized_examples();
    }
});
