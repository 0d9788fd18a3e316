//! `--max_in_flight_bytes` bounds what requests hold at their peak: their
//! bodies and the tensors decoded from them. Large JSON bodies at once, the
//! server's peak resident set read from `/proc` (`VmHWM`); requests past the
//! budget answer 503 and the server goes on serving.

use crate::common;

use std::sync::Arc;

use common::process::serve_model;
use common::repo_path;

/// The budget the server runs with.
const LIMIT: u64 = 100 << 20;
/// What the peak may pass the idle resident set by beyond the budget: a
/// running batch's own copies (TensorFlow's aligned input, its outputs)
/// and the allocators' slack, measured at up to SLACK_MEASURED here.
const SLACK: u64 = 96 << 20;

fn status_bytes(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

#[test]
fn large_bodies_at_once_stay_within_the_budget_at_their_peak() {
    let model = repo_path("models/first_token");
    let server = serve_model(
        "ft",
        &model,
        &[
            &format!("--max_in_flight_bytes={LIMIT}"),
            "--max_request_bytes=33554432",
        ],
    );
    let url = format!("{}/v1/models/ft:predict", server.url);
    let client = common::patient_client();
    let post = |body: String| {
        let answer = client.post(&url).body(body).send().unwrap();
        (answer.status().as_u16(), answer.text().unwrap())
    };
    assert_eq!(post(r#"{"instances": [[7, 8]]}"#.into()).0, 200);
    let idle = status_bytes(server.child.id(), "VmRSS:");
    // 16 MiB of "0," is 8 Mi int64s: 64 MiB once decoded, four times the body.
    let width = 8 << 20;
    let body = Arc::new(format!(r#"{{"instances": [[{}0]]}}"#, "0,".repeat(width - 1)));
    let answers: Vec<(u16, String)> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..6).map(|_| scope.spawn(|| post(body.to_string()))).collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let expected = format!(r#"{{"predictions": [{{"first": 0, "width": {width}}}]}}"#);
    for (status, text) in &answers {
        match status {
            200 => assert_eq!(text.replace(char::is_whitespace, ""), expected.replace(' ', "")),
            503 => assert!(text.contains("max_in_flight_bytes"), "{text}"),
            other => panic!("{other}: {text}"),
        }
    }
    let peak = status_bytes(server.child.id(), "VmHWM:");
    let over = peak.saturating_sub(idle);
    eprintln!(
        "idle {} MiB, peak {} MiB (+{} MiB; budget {} MiB); answers {:?}",
        idle >> 20,
        peak >> 20,
        over >> 20,
        LIMIT >> 20,
        answers.iter().map(|a| a.0).collect::<Vec<_>>()
    );
    assert!(over <= LIMIT + SLACK, "peak {} MiB over idle", over >> 20);
    // Alone, the same body is answered: nothing was lost.
    assert_eq!(post(body.to_string()).0, 200);
}
