//! SageMaker Data Capture's JSON Lines: one line per exchange
//! (`captureData.endpointInput`/`endpointOutput`, `eventMetadata`,
//! `eventVersion`), in files under `DIR/MODEL/yyyy/mm/dd/hh/`, the layout
//! Model Monitor jobs read.

use base64::Engine;
use serde_json::json;

use super::time::Utc;
use super::Payload;

/// How Data Capture stores a body: as text when its content type is JSON or
/// CSV (and it is UTF-8), else base64.
fn encoding(payload: &Payload) -> (&'static str, String) {
    let media = payload
        .content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let text = std::str::from_utf8(&payload.body).ok();
    let kind = if media == "application/json" || media.ends_with("+json") {
        "JSON"
    } else if media == "text/csv" {
        "CSV"
    } else {
        "BASE64"
    };
    match (kind, text) {
        ("JSON" | "CSV", Some(text)) => (kind, text.to_string()),
        _ => (
            "BASE64",
            base64::engine::general_purpose::STANDARD.encode(&payload.body),
        ),
    }
}

fn side(payload: &Payload, mode: &str) -> serde_json::Value {
    let (encoding, data) = encoding(payload);
    json!({
        "observedContentType": payload.content_type,
        "mode": mode,
        "data": data,
        "encoding": encoding,
    })
}

/// One capture line, newline included.
pub fn line(event_id: &str, time: &Utc, request: Option<&Payload>, response: Option<&Payload>) -> Vec<u8> {
    let mut capture = serde_json::Map::new();
    if let Some(request) = request {
        capture.insert("endpointInput".into(), side(request, "INPUT"));
    }
    if let Some(response) = response {
        capture.insert("endpointOutput".into(), side(response, "OUTPUT"));
    }
    let line = json!({
        "captureData": capture,
        "eventMetadata": {"eventId": event_id, "inferenceTime": time.rfc3339()},
        "eventVersion": "0",
    });
    let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// A new file's path: the hour's directory, then `mm-ss-mmm-<random>.jsonl`
/// as Data Capture names them.
pub fn file_name(dir: &std::path::Path, model: &str, time: &Utc, unique: &str) -> std::path::PathBuf {
    dir.join(model).join(time.hour_path()).join(format!(
        "{:02}-{:02}-{:03}-{unique}.jsonl",
        time.minute, time.second, time.millis
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn payload(content_type: &str, body: &[u8]) -> Payload {
        Payload {
            content_type: content_type.into(),
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
    fn files_lie_in_the_hour_directory_of_their_model() {
        let time = Utc::of(std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_795_515_330_042));
        let path = file_name(std::path::Path::new("/cap"), "half", &time, "ab12");
        assert_eq!(
            path,
            std::path::Path::new("/cap/half/2026/11/24/10/15-30-042-ab12.jsonl")
        );
    }
}
