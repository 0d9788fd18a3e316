//! SageMaker `/invocations` bodies: the first byte picks the media type, the
//! rest is the body, read as the container reads it and decoded into tensors;
//! the custom attributes header too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use tfserve::codec::decode::{decode_csv, decode_instance_list, decode_instance_values};
use tfserve::codec::payload::{read_payload, takes_scalar_instances, Instances, Payload};
use tfserve::dialects::sagemaker::CustomAttributes;
use tfserve::signature::SignatureSpec;

const MEDIA: [&str; 4] = ["application/json", "application/jsonlines", "text/csv", "application/x-unknown"];

fuzz_target!(|data: &[u8]| {
    static SIGNATURES: OnceLock<Vec<SignatureSpec>> = OnceLock::new();
    let signatures = SIGNATURES.get_or_init(tfserve_fuzz::signatures);
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    if let Ok(text) = std::str::from_utf8(body) {
        let _ = CustomAttributes::parse(text);
    }
    let media = MEDIA[usize::from(selector) % MEDIA.len()];
    let body = tfserve::codec::nonfinite::quote_bare_tokens(body);
    let Ok(Payload::Instances(instances)) = read_payload(media, &body) else {
        return;
    };
    for signature in signatures {
        let _ = match &instances {
            Instances::List(list) => decode_instance_list(list, signature),
            Instances::Values(values) => decode_instance_values(values.iter().copied(), signature),
            Instances::Csv(csv) => decode_csv(csv, signature, takes_scalar_instances(signature)).map(|t| vec![t]),
        };
    }
});
