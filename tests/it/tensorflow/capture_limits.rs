//! Capture when its sinks fail or fill up: a slow receiver loses records and
//! counts them, never a request; a dead receiver and an unwritable directory
//! are told in a few log lines and shutdown stays bounded; retention keeps a
//! JSON Lines tree within its size, oldest files first.

use crate::common;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::capture::{consumers, sigterm_and_wait, sink};
use common::process::serve_model;
use common::{repo_path, temp_dir};

#[test]
fn a_slow_sink_loses_records_and_counts_them_but_never_a_request() {
    let dir = temp_dir("capture-slow");
    // A receiver that takes 2 s per event, behind a queue of two.
    let sink = sink(&dir.join("events.jsonl"), 2.0);
    let server = serve_model(
        "half",
        &repo_path("models/half_plus_three"),
        &[
            &format!("--capture_cloudevents_url={}", sink.url),
            "--capture_queue_size=2",
        ],
    );
    let client = common::client();
    for i in 0..40 {
        let answer: Value = client
            .post(format!("{}/v1/models/half:predict", server.url))
            .body(format!(r#"{{"instances": [{i}.0]}}"#))
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(answer, json!({"predictions": [f64::from(i) / 2.0 + 3.0]}));
    }
    let dropped = common::metric_sum(&server.url, "tfserve_capture_dropped_total{", &[]);
    // 80 events: the receiver takes one every 2 s and the queues hold a few,
    // so at least 70 are lost, counted once per event or (dropped before the
    // writer) once per record of two events.
    assert!(dropped >= 35.0, "{dropped}");
    drop(server);
    drop(sink);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_dead_sink_and_a_failing_disk_are_told_in_a_few_lines_and_shutdown_is_bounded() {
    let dir = temp_dir("capture-dead");
    // Nothing listens on the port of a dropped listener: every post is refused.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}/", dead.local_addr().unwrap());
    drop(dead);
    // A directory under a regular file can never be made: every line fails.
    std::fs::write(dir.join("file"), b"").unwrap();
    let mut server = serve_model(
        "half",
        &repo_path("models/half_plus_three"),
        &[
            &format!("--capture_cloudevents_url={dead_url}"),
            &format!("--capture_jsonl_dir={}", dir.join("file/jsonl").display()),
            "--capture_flush_seconds=1",
            "--drain_timeout=0",
        ],
    );
    let client = common::client();
    for i in 0..60 {
        let answer = client
            .post(format!("{}/v1/models/half:predict", server.url))
            .body(format!(r#"{{"instances": [{i}.0]}}"#))
            .send()
            .unwrap();
        assert_eq!(answer.status(), 200);
    }
    // Every line failed, each counted (the writer takes what queued every few ms).
    let failed_lines = || {
        common::metric_sum(
            &server.url,
            "tfserve_capture_dropped_total{",
            &[r#"reason="write_failed""#, r#"sink="jsonl""#],
        )
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while failed_lines() < 60.0 {
        assert!(
            Instant::now() < deadline,
            "{} lines counted as failed, not 60",
            failed_lines()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let stopping = Instant::now();
    sigterm_and_wait(&mut server);
    // 120 events at half a second each (three refused tries) would take a
    // minute: shutdown gives up on them a second after it starts waiting.
    let took = stopping.elapsed();
    assert!(took < Duration::from_secs(12), "shutdown took {took:?}");
    server.wait_for_line("shut down cleanly");
    let log = server.log.lock().unwrap().join("\n");
    let lines = |needle: &str| log.lines().filter(|l| l.contains(needle)).count();
    assert!((1..=2).contains(&lines("cannot write to the jsonl sink")), "{log}");
    assert!((1..=2).contains(&lines("not delivered")), "{log}");
    // Every event is accounted for: tried and lost, or given up on unsent.
    let number_before = |line: &str, words: &str| -> u64 {
        line.split(words)
            .next()
            .and_then(|l| l.split(' ').next_back()?.parse().ok())
            .unwrap_or(0)
    };
    let undelivered: u64 = log
        .lines()
        .filter(|l| l.contains("not delivered"))
        .map(|l| number_before(l, " record"))
        .sum();
    let given_up: u64 = log
        .lines()
        .filter_map(|l| l.split("gave up on ").nth(1)?.split(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(undelivered + given_up, 120, "{log}");
    assert!(lines("gave up on") <= 1, "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn retention_keeps_a_capture_tree_within_its_size_removing_the_oldest_files() {
    let dir = temp_dir("capture-retention");
    let jsonl = dir.join("capture");
    let mut server = serve_model(
        "half",
        &repo_path("models/half_plus_three"),
        &[
            &format!("--capture_jsonl_dir={}", jsonl.display()),
            "--capture_rotate_mb=1",
            "--capture_retention_mb=2",
        ],
    );
    // 10,000 CSV rows in, 10,000 predictions out: ~100 KB a record, ~6 MB in all.
    let body = "1.0\n".repeat(10_000);
    let client = common::client();
    let requests = 60;
    for i in 0..requests {
        let response = client
            .post(format!("{}/invocations", server.url))
            .header("content-type", "text/csv")
            .header("x-request-id", format!("retained-{i}"))
            .body(body.clone())
            .send()
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    let removed = || common::metric(&server.url, r#"tfserve_capture_files_removed_total{sink="jsonl"}"#);
    // The writer works behind the requests: wait for it to reach the last files.
    let deadline = Instant::now() + Duration::from_secs(30);
    while removed() < 3.0 {
        assert!(Instant::now() < deadline, "{} files removed", removed());
        std::thread::sleep(Duration::from_millis(50));
    }
    sigterm_and_wait(&mut server);
    let mut bytes = 0;
    let mut stack = vec![jsonl.clone()];
    while let Some(path) = stack.pop() {
        for entry in std::fs::read_dir(&path).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            } else {
                bytes += entry.metadata().unwrap().len();
            }
        }
    }
    // Closed files fit 2 MB with the open one counted; the open one may then
    // have grown to its 1 MB rotation size (and one record past it).
    assert!(bytes <= 3 << 20, "{bytes} bytes left");
    let read = consumers(&["jsonl", &jsonl.display().to_string()]);
    let ids: Vec<&str> = read["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    // The oldest went, the newest stayed, in order.
    assert!(!ids.is_empty() && ids.len() < requests, "{ids:?}");
    assert!(!ids.contains(&"retained-0"), "{ids:?}");
    assert_eq!(
        ids.last(),
        Some(&format!("retained-{}", requests - 1).as_str()),
        "{ids:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
