//! SageMaker request bodies (JSON, JSON Lines, CSV, images) as TF Serving
//! request bodies, following the container's conversions.

use crate::signature::SignatureSpec;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConvertError {
    #[error("Unsupported Media Type: {0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    Invalid(String),
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

/// Converts a non-image body into a TF Serving JSON body. `scalar_instances`:
/// the signature's single input takes one scalar per instance, so every CSV
/// field is an instance of its own.
pub fn to_tfs_json(media_type: &str, body: &[u8], scalar_instances: bool) -> Result<Vec<u8>, ConvertError> {
    let text = std::str::from_utf8(body).map_err(|e| ConvertError::Invalid(format!("the body is not UTF-8: {e}")))?;
    match media_type {
        "application/json" | "application/jsonlines" | "application/jsons" | "application/x-jsonlines" => {
            Ok(json(text))
        }
        "text/csv" => csv(text, scalar_instances),
        "" => Err(ConvertError::UnsupportedMediaType("Unknown".into())),
        other => Err(ConvertError::UnsupportedMediaType(other.into())),
    }
}

/// A TF Serving body passes through; JSON Lines become one instance per line;
/// any other JSON value is one instance (a nested list, several).
fn json(text: &str) -> Vec<u8> {
    let trimmed = text.trim();
    if is_tfs_request(trimmed) {
        return trimmed.as_bytes().to_vec();
    }
    let lines: Vec<&str> = trimmed.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if lines.len() > 1 {
        return format!("{{\"instances\": [{}]}}", lines.join(",")).into_bytes();
    }
    if trimmed.starts_with("[[") {
        return format!("{{\"instances\": {trimmed}}}").into_bytes();
    }
    format!("{{\"instances\": [{trimmed}]}}").into_bytes()
}

fn is_tfs_request(text: &str) -> bool {
    ["\"instances\"", "\"inputs\"", "\"examples\""].iter().any(|key| {
        text.match_indices(key)
            .any(|(i, _)| text[i + key.len()..].trim_start().starts_with(':'))
    })
}

/// One instance per line; a line with several fields is a list (or, for
/// scalar instances, several instances). Numbers stay numbers; other fields
/// become strings (quotes as in RFC 4180).
fn csv(text: &str, scalar_instances: bool) -> Result<Vec<u8>, ConvertError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(text.as_bytes());
    let mut instances = Vec::new();
    for (line, record) in reader.records().enumerate() {
        let record = record.map_err(|e| ConvertError::Invalid(format!("CSV line {}: {e}", line + 1)))?;
        let fields: Vec<String> = record.iter().map(csv_value).collect();
        if scalar_instances || fields.len() == 1 {
            instances.extend(fields);
        } else {
            instances.push(format!("[{}]", fields.join(",")));
        }
    }
    if instances.is_empty() {
        return Err(ConvertError::Invalid("the CSV body has no lines".into()));
    }
    Ok(format!("{{\"instances\": [{}]}}", instances.join(",")).into_bytes())
}

fn csv_value(field: &str) -> String {
    let trimmed = field.trim();
    if !trimmed.is_empty() && trimmed.parse::<f64>().is_ok_and(f64::is_finite) {
        trimmed.to_string()
    } else {
        serde_json::Value::String(field.to_string()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(media: &str, body: &str) -> String {
        String::from_utf8(to_tfs_json(media, body.as_bytes(), false).unwrap()).unwrap()
    }

    #[test]
    fn json_forms() {
        assert_eq!(
            text("application/json", r#"{"instances": [1.0]}"#),
            r#"{"instances": [1.0]}"#
        );
        assert_eq!(
            text("application/json", "[1.0, 2.0, 5.0]"),
            r#"{"instances": [[1.0, 2.0, 5.0]]}"#
        );
        assert_eq!(
            text("application/json", "[[1.0], [2.0]]"),
            r#"{"instances": [[1.0], [2.0]]}"#
        );
        assert_eq!(text("application/json", "3.5"), r#"{"instances": [3.5]}"#);
        assert_eq!(text("application/json", r#"{"x": 1}"#), r#"{"instances": [{"x": 1}]}"#);
        assert_eq!(
            text("application/jsonlines", "[1.0, 2.0]\n[3.0, 4.0]\n"),
            r#"{"instances": [[1.0, 2.0],[3.0, 4.0]]}"#
        );
    }

    #[test]
    fn csv_forms() {
        assert_eq!(text("text/csv", "1.0,2.0,5.0"), r#"{"instances": [[1.0,2.0,5.0]]}"#);
        assert_eq!(text("text/csv", "1.0\n2.0\n5.0\n"), r#"{"instances": [1.0,2.0,5.0]}"#);
        assert_eq!(text("text/csv", "a,\"b,c\",3"), r#"{"instances": [["a","b,c",3]]}"#);
        assert_eq!(
            to_tfs_json("text/csv", b"", false),
            Err(ConvertError::Invalid("the CSV body has no lines".into()))
        );
        let scalars = to_tfs_json("text/csv", b"1.0,2.0,5.0", true).unwrap();
        assert_eq!(String::from_utf8(scalars).unwrap(), r#"{"instances": [1.0,2.0,5.0]}"#);
    }

    #[test]
    fn other_types_are_unsupported() {
        assert_eq!(
            to_tfs_json("application/xml", b"<a/>", false),
            Err(ConvertError::UnsupportedMediaType("application/xml".into()))
        );
        assert_eq!(media_type("text/csv; charset=utf-8"), "text/csv");
    }
}
