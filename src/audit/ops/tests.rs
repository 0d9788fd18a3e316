//! The op table on single nodes: by name, by attribute, and one array per op.

use std::collections::HashMap;

use super::*;

fn none(_: &str) -> Option<String> {
    None
}

/// Attributes where `name` is `value` and nothing else is set.
fn attr(name: &'static str, value: &'static str) -> impl Fn(&str) -> Option<String> {
    move |asked: &str| (asked == name).then(|| value.to_owned())
}

#[test]
fn ops_classed_by_name() {
    assert_eq!(class_of("ReadFile", &none), Some(Access::FilesRead));
    assert_eq!(class_of("RestoreV2", &none), Some(Access::FilesRead));
    assert_eq!(class_of("SaveV2", &none), Some(Access::FilesWrite));
    assert_eq!(class_of("DataServiceDatasetV4", &none), Some(Access::Network));
    assert_eq!(class_of("ScalarSummary", &none), None);
    assert_eq!(class_of("MatMul", &none), None);
}

#[test]
fn print_v2_writes_only_to_a_file_stream() {
    assert_eq!(class_of("PrintV2", &attr("output_stream", "stderr")), None);
    assert_eq!(class_of("PrintV2", &attr("output_stream", "log(info)")), None);
    let file = attr("output_stream", "file:///tmp/x");
    assert_eq!(class_of("PrintV2", &file), Some(Access::FilesWrite));
    assert_eq!(class_of("PrintV2", &none), None);
}

#[test]
fn debug_ops_by_their_urls() {
    let file = attr("debug_urls", "file:///tmp/dump");
    assert_eq!(class_of("DebugIdentity", &file), Some(Access::FilesWrite));
    let both = attr("debug_urls", "file:///tmp/dump,grpc://localhost:6064");
    assert_eq!(class_of("DebugNanCount", &both), Some(Access::Network));
    let callback = attr("debug_urls", "memcbk://watch");
    assert_eq!(class_of("DebugIdentityV3", &callback), None);
    assert_eq!(class_of("DebugIdentityV2", &none), None);
}

#[test]
fn proto_ops_and_sampler_by_their_source() {
    let local = attr("descriptor_source", "local://");
    assert_eq!(class_of("DecodeProtoV2", &local), None);
    let bytes = attr("descriptor_source", "bytes://\n\x01");
    assert_eq!(class_of("DecodeProtoV2", &bytes), None);
    let file = attr("descriptor_source", "/models/descriptors.pb");
    assert_eq!(class_of("EncodeProto", &file), Some(Access::FilesRead));
    let sampler = "FixedUnigramCandidateSampler";
    let vocab = attr("vocab_file", "/models/vocab.txt");
    assert_eq!(class_of(sampler, &vocab), Some(Access::FilesRead));
    assert_eq!(class_of(sampler, &none), None);
}

#[test]
fn every_op_in_one_array() {
    let arrays = [
        ("FILES_READ", FILES_READ),
        ("FILES_WRITE", FILES_WRITE),
        ("NETWORK", NETWORK),
        ("BY_ATTRIBUTE", BY_ATTRIBUTE),
        ("REVIEWED_LOCAL", REVIEWED_LOCAL),
    ];
    let mut seen = HashMap::new();
    for (array, ops) in arrays {
        for op in ops {
            if let Some(other) = seen.insert(*op, array) {
                panic!("{op} is in both {other} and {array}");
            }
        }
    }
}

#[test]
fn every_attribute_decided_op_has_a_rule() {
    let everything = |_: &str| Some("file:///x,grpc://x".to_owned());
    for op in BY_ATTRIBUTE {
        assert!(class_of(op, &everything).is_some(), "{op}: no rule");
    }
}
