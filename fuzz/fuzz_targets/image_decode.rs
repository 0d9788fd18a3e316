//! Image uploads: encoded bytes become the input tensor each image signature
//! takes (bytes, pixels of any size, resized pixels), within the decoded-size budget.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use tfserve::imaging::{batch_tensor, feed_for, image_input, ImageFile, ImagePolicy};
use tfserve::signature::SignatureSpec;

fuzz_target!(|bytes: &[u8]| {
    static SIGNATURES: OnceLock<Vec<SignatureSpec>> = OnceLock::new();
    let signatures = SIGNATURES.get_or_init(tfserve_fuzz::image_signatures);
    for signature in signatures {
        let Ok(input) = image_input(signature) else {
            continue;
        };
        let policy = ImagePolicy {
            resize: true,
            ..ImagePolicy::default()
        };
        let Ok(feed) = feed_for(signature, input, policy) else {
            continue;
        };
        let file = ImageFile {
            name: "upload".into(),
            bytes: bytes.to_vec().into(),
        };
        let _ = batch_tensor(&[file], feed);
    }
});
