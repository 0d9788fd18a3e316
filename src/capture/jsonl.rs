//! SageMaker Data Capture's JSON Lines: one line per exchange
//! (`captureData.endpointInput`/`endpointOutput`, `eventMetadata`,
//! `eventVersion`), in files under `DIR/ENDPOINT/VARIANT/yyyy/mm/dd/hh/`, the
//! layout Model Monitor jobs read.

use base64::Engine;

use std::borrow::Cow;

use bytes::Bytes;

use super::escape::string;
use super::time::Utc;
use super::{Payload, Record};
use crate::codec::encode::{predict_response, NamedOutput};
use crate::codec::RequestFormat;
use crate::tensor::Tensor;

/// How Data Capture stores a body: as text when its content type is JSON or
/// CSV (and it is UTF-8), else base64.
fn encoding(payload: &Payload) -> (&'static str, Option<&str>) {
    let kind = match payload.content_type.as_ref() {
        // The content types almost every record has, without parsing them.
        "application/json" | "application/json; charset=utf-8" => "JSON",
        "text/csv" | "text/csv; charset=utf-8" => "CSV",
        other => match declared_kind(other) {
            Some(kind) => kind,
            None => return ("BASE64", None),
        },
    };
    match std::str::from_utf8(&payload.body) {
        Ok(text) => (kind, Some(text)),
        Err(_) => ("BASE64", None),
    }
}

/// `JSON` for JSON media types (`+json` ones too), `CSV` for CSV, whatever
/// the parameters and case.
fn declared_kind(content_type: &str) -> Option<&'static str> {
    let media = content_type.split(';').next().unwrap_or_default().trim();
    if media.eq_ignore_ascii_case("application/json")
        || media.len() > 5 && media[media.len() - 5..].eq_ignore_ascii_case("+json")
    {
        Some("JSON")
    } else if media.eq_ignore_ascii_case("text/csv") {
        Some("CSV")
    } else {
        None
    }
}

/// A content type as a JSON string: ours (borrowed, from the list in
/// `capture::content_type` or a literal) need no escaping.
fn content_type_string(out: &mut Vec<u8>, payload: &Payload) {
    match &payload.content_type {
        Cow::Borrowed(clean) => {
            out.push(b'"');
            out.extend_from_slice(clean.as_bytes());
            out.push(b'"');
        }
        Cow::Owned(sent) => string(out, sent),
    }
}

fn side(out: &mut Vec<u8>, payload: &Payload, mode: &[u8]) {
    out.extend_from_slice(b"{\"observedContentType\":");
    content_type_string(out, payload);
    out.extend_from_slice(mode);
    let (encoding, text) = encoding(payload);
    match text {
        Some(text) => string(out, text),
        None => {
            out.push(b'"');
            let start = out.len();
            let encoded = base64::encoded_len(payload.body.len(), true).unwrap_or(0);
            out.resize(start + encoded, 0);
            let written = base64::engine::general_purpose::STANDARD
                .encode_slice(&payload.body, &mut out[start..])
                .unwrap_or(0);
            out.truncate(start + written);
            out.push(b'"');
        }
    }
    out.extend_from_slice(match encoding {
        "JSON" => b",\"encoding\":\"JSON\"}",
        "CSV" => b",\"encoding\":\"CSV\"}",
        _ => b",\"encoding\":\"BASE64\"}",
    });
}

/// A record's `eventMetadata`.
pub struct Event<'a> {
    pub id: &'a str,
    /// `X-Amzn-SageMaker-Inference-Id`: Data Capture's `inferenceId`.
    pub inference_id: Option<&'a str>,
    /// `X-Amzn-SageMaker-Custom-Attributes`, verbatim. AWS's documented record
    /// has no field for it; `customAttributes` is written only when a request
    /// sent the header, beside the documented fields that readers select.
    pub custom_attributes: Option<&'a str>,
    /// RFC 3339 in whole seconds (`Utc::rfc3339`).
    pub inference_time: &'a str,
}

/// Appends one capture line, newline included, written straight into `out`:
/// it runs once per captured request.
pub fn write_line(out: &mut Vec<u8>, event: &Event<'_>, request: Option<&Payload>, response: Option<&Payload>) {
    out.extend_from_slice(b"{\"captureData\":{");
    if let Some(request) = request {
        out.extend_from_slice(b"\"endpointInput\":");
        side(out, request, b",\"mode\":\"INPUT\",\"data\":");
    }
    if let Some(response) = response {
        out.extend_from_slice(match request {
            Some(_) => b",\"endpointOutput\":",
            None => &b",\"endpointOutput\":"[1..],
        });
        side(out, response, b",\"mode\":\"OUTPUT\",\"data\":");
    }
    out.extend_from_slice(b"},\"eventMetadata\":{\"eventId\":");
    string(out, event.id);
    if let Some(inference_id) = event.inference_id {
        out.extend_from_slice(b",\"inferenceId\":");
        string(out, inference_id);
    }
    if let Some(custom_attributes) = event.custom_attributes {
        out.extend_from_slice(b",\"customAttributes\":");
        string(out, custom_attributes);
    }
    out.extend_from_slice(b",\"inferenceTime\":\"");
    out.extend_from_slice(event.inference_time.as_bytes());
    out.extend_from_slice(b"\"},\"eventVersion\":\"0\"}\n");
}

/// The request as the client sent it, or (gRPC) its tensors as TF Serving's
/// columnar JSON, `{"inputs": ...}`.
pub(super) fn request_payload(record: &Record) -> Option<Cow<'_, Payload>> {
    if let Some(request) = &record.request {
        return Some(Cow::Borrowed(request));
    }
    let json = tensors_json(&record.draft.inputs)?;
    let body = [&b"{\"inputs\""[..], &json["{\"outputs\"".len()..]].concat();
    Some(Cow::Owned(Payload {
        content_type: "application/json".into(),
        body: Bytes::from(body),
    }))
}

/// The response as sent, or (gRPC) its tensors as `{"outputs": ...}`.
pub(super) fn response_payload(record: &Record) -> Option<Cow<'_, Payload>> {
    if let Some(response) = &record.response {
        return Some(Cow::Borrowed(response));
    }
    Some(Cow::Owned(Payload {
        content_type: "application/json".into(),
        body: Bytes::from(tensors_json(&record.draft.outputs)?),
    }))
}

fn tensors_json(named: &[(String, Tensor)]) -> Option<Vec<u8>> {
    if named.is_empty() {
        return None;
    }
    let outputs: Vec<NamedOutput<'_>> = named.iter().map(|(key, tensor)| NamedOutput { key, tensor }).collect();
    predict_response(RequestFormat::Columnar, &outputs).ok()
}

#[cfg(test)]
fn line(event_id: &str, time: &Utc, request: Option<&Payload>, response: Option<&Payload>) -> Vec<u8> {
    let mut out = Vec::new();
    let event = Event {
        id: event_id,
        inference_id: None,
        custom_attributes: None,
        inference_time: &time.rfc3339(),
    };
    write_line(&mut out, &event, request, response);
    out
}

/// A new file's path: the endpoint's and variant's directories, the hour's,
/// then `mm-ss-mmm-<random>.jsonl` as Data Capture names them.
pub fn file_name(dir: &std::path::Path, endpoint: &str, variant: &str, time: &Utc, unique: &str) -> std::path::PathBuf {
    dir.join(endpoint).join(variant).join(time.hour_path()).join(format!(
        "{:02}-{:02}-{:03}-{unique}.jsonl",
        time.minute, time.second, time.millis
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use serde_json::json;

    fn payload(content_type: &str, body: &[u8]) -> Payload {
        Payload {
            content_type: content_type.to_string().into(),
            body: Bytes::copy_from_slice(body),
        }
    }

    #[test]
    fn bodies_keep_their_text_when_json_or_csv_and_go_base64_otherwise() {
        let time = Utc::of(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_515_330));
        let request = payload("text/csv; charset=utf-8", b"1,2\n3,4");
        let response = payload("application/json", br#"{"predictions": [3.5]}"#);
        let line = line("id-1", &time, Some(&request), Some(&response));
        assert_eq!(line.last(), Some(&b'\n'));
        let value: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            value,
            json!({
                "captureData": {
                    "endpointInput": {"observedContentType": "text/csv; charset=utf-8", "mode": "INPUT", "data": "1,2\n3,4", "encoding": "CSV"},
                    "endpointOutput": {"observedContentType": "application/json", "mode": "OUTPUT", "data": "{\"predictions\": [3.5]}", "encoding": "JSON"}
                },
                "eventMetadata": {"eventId": "id-1", "inferenceTime": "2026-11-24T10:15:30Z"},
                "eventVersion": "0"
            })
        );
        let image = payload("image/jpeg", &[0xff, 0xd8, 0xff]);
        let value: serde_json::Value = serde_json::from_slice(&super::line("i", &time, Some(&image), None)).unwrap();
        assert_eq!(value["captureData"]["endpointInput"]["encoding"], "BASE64");
        assert_eq!(value["captureData"]["endpointInput"]["data"], "/9j/");
        assert!(value["captureData"].get("endpointOutput").is_none());
        // JSON that is not UTF-8 cannot be stored as text.
        let latin = payload("application/json", &[b'"', 0xe9, b'"']);
        let value: serde_json::Value = serde_json::from_slice(&super::line("j", &time, Some(&latin), None)).unwrap();
        assert_eq!(value["captureData"]["endpointInput"]["encoding"], "BASE64");
    }

    #[test]
    fn files_lie_in_the_hour_directory_of_their_endpoint_and_variant() {
        let time = Utc::of(std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_795_515_330_042));
        let path = file_name(std::path::Path::new("/cap"), "half", "AllTraffic", &time, "ab12");
        assert_eq!(
            path,
            std::path::Path::new("/cap/half/AllTraffic/2026/11/24/10/15-30-042-ab12.jsonl")
        );
    }

    #[test]
    fn an_inference_id_and_custom_attributes_join_the_event_metadata() {
        let time = Utc::of(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_515_330));
        let inference_time = time.rfc3339();
        let mut out = Vec::new();
        let event = Event {
            id: "e-1",
            inference_id: Some("inf-\"7\""),
            custom_attributes: Some("trace=abc, tenant=7"),
            inference_time: &inference_time,
        };
        write_line(&mut out, &event, None, None);
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            value["eventMetadata"],
            json!({
                "eventId": "e-1",
                "inferenceId": "inf-\"7\"",
                "customAttributes": "trace=abc, tenant=7",
                "inferenceTime": "2026-11-24T10:15:30Z"
            })
        );
    }
}
