//! Sampling, policies and the writer thread end to end, into a temporary directory.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::tensor::TensorData;

fn settings(dir: &std::path::Path) -> CaptureSettings {
    CaptureSettings {
        capture_jsonl_dir: Some(dir.join("jsonl")),
        ..CaptureSettings::default()
    }
}

#[test]
fn sampling_draws_near_the_rate() {
    let hits = (0..20_000).filter(|_| sampled(0.25)).count();
    assert!((4_000..6_000).contains(&hits), "{hits}");
    assert!((0..100).all(|_| sampled(1.0)));
    assert!((0..100).all(|_| !sampled(0.0)));
}

#[test]
fn per_model_sections_override_the_flags() {
    let mut settings = CaptureSettings {
        capture_jsonl_dir: Some("/all".into()),
        capture_sampling_rate: 0.5,
        ..CaptureSettings::default()
    };
    settings.model_capture = BTreeMap::from([
        (
            "one".to_string(),
            ModelCapture {
                sampling_rate: Some(1.0),
                tfrecord_prefix: Some("/logs/one".into()),
                ..ModelCapture::default()
            },
        ),
        (
            "quiet".to_string(),
            ModelCapture {
                enabled: Some(false),
                ..ModelCapture::default()
            },
        ),
    ]);
    let policies = settings.policies();
    let one = policies.policy("one").unwrap();
    assert_eq!(
        (one.rate, one.jsonl_dir.as_deref()),
        (1.0, Some(std::path::Path::new("/all")))
    );
    assert_eq!(one.tfrecord_prefix.as_deref(), Some("/logs/one"));
    assert!(policies.policy("quiet").is_none());
    assert_eq!(policies.policy("other").unwrap().rate, 0.5);
    // One section alone turns capture on for its model only.
    let mut one_model = CaptureSettings::default();
    one_model.model_capture.insert(
        "m".into(),
        ModelCapture {
            jsonl_dir: Some("/m".into()),
            ..ModelCapture::default()
        },
    );
    assert!(one_model.any_sink());
    let policies = one_model.policies();
    assert_eq!(policies.policy("m").unwrap().rate, 1.0);
    assert!(policies.policy("n").is_none());
    assert!(!CaptureSettings::default().any_sink());
}

#[test]
fn settings_out_of_range_are_named() {
    let mut settings = CaptureSettings {
        capture_sampling_rate: 1.5,
        ..CaptureSettings::default()
    };
    assert_eq!(settings.invalid().unwrap().0, "capture_sampling_rate");
    settings.capture_sampling_rate = 1.0;
    settings.capture_cloudevents_url = Some("sink:8080".into());
    let (name, value, reason) = settings.invalid().unwrap();
    assert_eq!(
        (name.as_str(), value.as_str()),
        ("capture_cloudevents_url", "sink:8080")
    );
    assert!(reason.contains("http://"));
}

#[test]
fn off_means_no_draft() {
    let capture = Capture::disabled();
    assert!(capture.sample(&"m".into(), 1, "serving_default", None).is_none());
}

fn record(capture: &Capture, id: &str) -> Box<Record> {
    let mut draft = capture.sample(&"half".into(), 7, "serving_default", None).unwrap();
    draft.inputs = vec![("x".into(), Tensor::new(vec![1], TensorData::Float(vec![1.0])))];
    draft.outputs = vec![("y".into(), Tensor::new(vec![1], TensorData::Float(vec![3.5])))];
    let mut record = Record::new(draft, Some(id.into()));
    record.protocol = "grpc";
    record
}

#[test]
fn records_reach_the_json_lines_and_tfrecord_files_and_flush_waits_for_them() {
    let dir = std::env::temp_dir().join(format!("tfserve-capture-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let settings = CaptureSettings {
        capture_tfrecord_prefix: Some(dir.join("logs/half").display().to_string()),
        ..settings(&dir)
    };
    let capture = Capture::start(settings, false).unwrap();
    let mut rest = record(&capture, "rest-1");
    rest.protocol = "rest";
    rest.request = Some(Payload {
        content_type: "text/csv".into(),
        body: Bytes::from_static(b"1.0"),
    });
    rest.response = Some(Payload {
        content_type: "application/json".into(),
        body: Bytes::from_static(b"{\"predictions\": [3.5]}"),
    });
    capture.submit(rest);
    capture.submit(record(&capture, "grpc-1"));
    assert!(capture.flush(std::time::Duration::from_secs(10)));

    let mut lines = Vec::new();
    let mut stack = vec![dir.join("jsonl/half")];
    while let Some(path) = stack.pop() {
        for entry in std::fs::read_dir(&path).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let text = std::fs::read_to_string(&path).unwrap();
                lines.extend(
                    text.lines()
                        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()),
                );
            }
        }
    }
    assert_eq!(lines.len(), 2);
    let input = |i: usize| lines[i]["captureData"]["endpointInput"].clone();
    assert_eq!(input(0)["encoding"], "CSV");
    assert_eq!(input(0)["data"], "1.0");
    // A gRPC request has no JSON body of its own: its tensors are written as TF Serving's.
    assert_eq!(lines[1]["eventMetadata"]["eventId"], "grpc-1");
    assert_eq!(input(1)["data"], "{\"inputs\":[1.0]}");
    assert_eq!(lines[1]["captureData"]["endpointOutput"]["data"], "{\"outputs\":[3.5]}");

    let logs: Vec<_> = std::fs::read_dir(dir.join("logs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let name = logs[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("half-") && name.ends_with(".tfrecord"), "{name}");
    let requests = crate::warmup::records::parse(&std::fs::read(&logs[0]).unwrap()).unwrap();
    assert_eq!(requests.len(), 2);
    drop(capture);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_full_queue_drops_records_and_counts_them() {
    // A writer that takes nothing: the queue's one place fills at once.
    let (sender, _stalled) = std::sync::mpsc::sync_channel(1);
    let capture = Capture {
        policies: settings(std::path::Path::new("/unused")).policies(),
        metadata_headers: Vec::new(),
        queue: Some(sender),
        writer: Mutex::new(None),
    };
    let dropped = || METRICS.capture_dropped.with_label_values(&["queue", "full"]).get();
    let before = dropped();
    capture.submit(record(&capture, "1"));
    capture.submit(record(&capture, "2"));
    capture.submit(record(&capture, "3"));
    // Other tests may drop records too, never fewer.
    assert!(dropped() >= before + 2);
}

#[test]
fn a_model_logging_config_samples_on_its_own() {
    let capture = Capture::start(CaptureSettings::default(), true).unwrap();
    let logging = Arc::new(LoggingConfig {
        filename_prefix: "/tmp/x".into(),
        sampling_rate: 1.0,
    });
    let draft = capture.sample(&"m".into(), 1, "s", Some(&logging)).unwrap();
    assert!(draft.policy.is_none() && draft.logging.is_some());
    assert!(capture.sample(&"m".into(), 1, "s", None).is_none());
}
