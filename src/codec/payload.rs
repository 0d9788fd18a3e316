//! What a SageMaker request body holds, read as the container's nginx layer
//! reads it: a TF Serving request passed through, JSON instances (JSON Lines,
//! a list, or one value), CSV lines, or an image. Nothing here is rewritten
//! into TF Serving JSON text: instances decode straight into tensors.

use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::signature::SignatureSpec;
use crate::status::{Code, HasCode};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConvertError {
    #[error("Unsupported Media Type: {0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    Invalid(String),
}

impl HasCode for ConvertError {
    fn code(&self) -> Code {
        match self {
            ConvertError::UnsupportedMediaType(_) => Code::UnsupportedMediaType,
            ConvertError::Invalid(_) => Code::InvalidArgument,
        }
    }
}

/// The media type without parameters (`text/csv; charset=utf-8` → `text/csv`).
pub fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Whether a signature's only input holds one scalar per instance (shape `[-1]`).
pub fn takes_scalar_instances(signature: &SignatureSpec) -> bool {
    matches!(signature.inputs.as_slice(), [input] if input.shape.as_ref().is_some_and(|s| s.len() == 1))
}

pub fn is_image(media_type: &str) -> bool {
    media_type.starts_with("image/") || media_type == "application/x-image"
}

/// A body in one of the container's media types.
#[derive(Debug, PartialEq)]
pub enum Payload<'a> {
    /// A TF Serving request (`instances`, `inputs` or `examples` at the top):
    /// passed through unchanged.
    Tfs(&'a [u8]),
    /// Instances for the default signature.
    Instances(Instances<'a>),
}

/// Instances in one of the forms the container accepts.
#[derive(Debug, PartialEq)]
pub enum Instances<'a> {
    /// A JSON list whose elements are the instances (`[[...], ...]`).
    List(&'a str),
    /// JSON values that are one instance each: JSON Lines (any whitespace
    /// between values), or a lone value that is not a list of lists. None, for
    /// an empty body: TF Serving's answer to no instances.
    Values(Vec<&'a str>),
    /// `text/csv` lines.
    Csv(&'a [u8]),
}

/// Reads a (non-image) body by its media type.
pub fn read_payload<'a>(media_type: &str, body: &'a [u8]) -> Result<Payload<'a>, ConvertError> {
    match media_type {
        "application/json" | "application/jsonlines" | "application/jsons" | "application/x-jsonlines" => {
            read_json(body)
        }
        "text/csv" => Ok(Payload::Instances(Instances::Csv(body))),
        "" => Err(ConvertError::UnsupportedMediaType("Unknown".into())),
        other => Err(ConvertError::UnsupportedMediaType(other.into())),
    }
}

fn read_json(body: &[u8]) -> Result<Payload<'_>, ConvertError> {
    let text = std::str::from_utf8(body).map_err(|e| ConvertError::Invalid(format!("the body is not UTF-8: {e}")))?;
    // Consecutive JSON values, however they are spaced: the container's JSON
    // Lines, and pretty-printed values, which a split on newlines would break.
    let values = serde_json::Deserializer::from_str(text)
        .into_iter::<&RawValue>()
        .map(|value| value.map(RawValue::get))
        .collect::<Result<Vec<&str>, _>>()
        .map_err(|e| ConvertError::Invalid(format!("JSON Parse error: {e}")))?;
    match values.as_slice() {
        [value] if is_tfs_request(value) => Ok(Payload::Tfs(text.trim().as_bytes())),
        [value] if is_list_of_lists(value) => Ok(Payload::Instances(Instances::List(value))),
        _ => Ok(Payload::Instances(Instances::Values(values))),
    }
}

/// Whether a JSON object has TF Serving's `instances`, `inputs` or `examples`
/// at its top level (the container tests for them anywhere in the text; a
/// key nested inside an instance does not make a TF Serving request).
fn is_tfs_request(value: &str) -> bool {
    fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
        IgnoredAny::deserialize(deserializer).map(|_| true)
    }
    #[derive(Deserialize)]
    struct TopLevel {
        #[serde(default, deserialize_with = "present")]
        instances: bool,
        #[serde(default, deserialize_with = "present")]
        inputs: bool,
        #[serde(default, deserialize_with = "present")]
        examples: bool,
    }
    value.starts_with('{')
        && serde_json::from_str::<TopLevel>(value).is_ok_and(|keys| keys.instances || keys.inputs || keys.examples)
}

/// `[[` (whitespace allowed between): the container sends such a body as the
/// `instances` list itself rather than as one instance.
fn is_list_of_lists(value: &str) -> bool {
    value
        .strip_prefix('[')
        .is_some_and(|rest| rest.trim_start().starts_with('['))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(body: &str) -> Payload<'_> {
        read_payload("application/json", body.as_bytes()).unwrap()
    }

    #[test]
    fn tf_serving_requests_pass_through() {
        let body = r#"{"instances": [1.0]}"#;
        assert_eq!(json(body), Payload::Tfs(body.as_bytes()));
        assert_eq!(
            json(" {\"signature_name\": \"s\", \"inputs\": {\"x\": 1}}\n"),
            Payload::Tfs(br#"{"signature_name": "s", "inputs": {"x": 1}}"#)
        );
        assert_eq!(json(r#"{"examples": []}"#), Payload::Tfs(br#"{"examples": []}"#));
        // A key of that name inside an instance is the instance's own.
        assert_eq!(
            json(r#"{"x": {"inputs": 1}}"#),
            Payload::Instances(Instances::Values(vec![r#"{"x": {"inputs": 1}}"#]))
        );
    }

    #[test]
    fn json_instances_in_every_spacing() {
        assert_eq!(
            json("[1.0, 2.0, 5.0]"),
            Payload::Instances(Instances::Values(vec!["[1.0, 2.0, 5.0]"]))
        );
        assert_eq!(
            json("[[1.0], [2.0]]"),
            Payload::Instances(Instances::List("[[1.0], [2.0]]"))
        );
        assert_eq!(
            json("[ [1.0], [2.0]]"),
            Payload::Instances(Instances::List("[ [1.0], [2.0]]"))
        );
        assert_eq!(json("3.5"), Payload::Instances(Instances::Values(vec!["3.5"])));
        assert_eq!(
            json("[1.0, 2.0]\n[3.0, 4.0]\n"),
            Payload::Instances(Instances::Values(vec!["[1.0, 2.0]", "[3.0, 4.0]"]))
        );
        assert_eq!(
            json("{\"x\": [1]} {\"x\": [2]}"),
            Payload::Instances(Instances::Values(vec!["{\"x\": [1]}", "{\"x\": [2]}"]))
        );
        assert_eq!(
            json("{\n  \"x\": [1,\n 2]\n}\n"),
            Payload::Instances(Instances::Values(vec!["{\n  \"x\": [1,\n 2]\n}"]))
        );
        // Two TF Serving-looking lines are two instances, not a request.
        assert_eq!(
            json("{\"inputs\": [1]}\n{\"inputs\": [2]}"),
            Payload::Instances(Instances::Values(vec!["{\"inputs\": [1]}", "{\"inputs\": [2]}"]))
        );
    }

    #[test]
    fn bad_bodies_and_other_types_are_refused() {
        assert!(matches!(
            read_payload("application/json", b"[1, 2"),
            Err(ConvertError::Invalid(m)) if m.starts_with("JSON Parse error")
        ));
        assert_eq!(
            read_payload("application/jsonlines", b"  \n"),
            Ok(Payload::Instances(Instances::Values(vec![])))
        );
        assert_eq!(
            read_payload("application/xml", b"<a/>"),
            Err(ConvertError::UnsupportedMediaType("application/xml".into()))
        );
        assert_eq!(
            read_payload("", b"1"),
            Err(ConvertError::UnsupportedMediaType("Unknown".into()))
        );
        assert_eq!(
            read_payload("text/csv", b"1,2"),
            Ok(Payload::Instances(Instances::Csv(b"1,2")))
        );
        assert_eq!(media_type("text/csv; charset=utf-8"), "text/csv");
    }
}
