//! SIGTERM under load: the binary drains (not ready, still serving, each
//! answer asking its client to close), then exits 0 having lost no request.

#![cfg(feature = "tensorflow")]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::process::{start, Server};
use common::repo_path;

fn get(server: &Server, path: &str) -> (u16, String) {
    let response = reqwest::blocking::get(format!("{}{path}", server.url)).unwrap();
    (response.status().as_u16(), response.text().unwrap_or_default())
}

#[test]
fn sigterm_drains_without_losing_a_request() {
    const CLIENTS: usize = 16;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let base_path = repo_path("models/half_plus_three");
    let mut server = start(&[
        "--rest_api_port=0",
        "--host=127.0.0.1",
        "--drain_timeout=1.5",
        "--model_base_path",
        base_path.to_str().unwrap(),
    ]);
    let url = format!("{}/v1/models/default:predict", server.url);
    let done = Arc::new(AtomicBool::new(false));
    let (answered, refused, closing) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let lost = Arc::new(std::sync::Mutex::new(Vec::new()));
    // When each reset was seen.
    let reset = Arc::new(std::sync::Mutex::new(Vec::new()));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (url, done, answered, refused, closing, lost, reset) = (
                url.clone(),
                done.clone(),
                answered.clone(),
                refused.clone(),
                closing.clone(),
                lost.clone(),
                reset.clone(),
            );
            std::thread::spawn(move || {
                let client = reqwest::blocking::Client::new();
                while !done.load(Ordering::SeqCst) {
                    match client.post(&url).body(r#"{"instances": [1.0]}"#).send() {
                        Ok(response) if response.status() == 200 => {
                            if response.headers().get("connection").is_some_and(|v| v == "close") {
                                closing.fetch_add(1, Ordering::SeqCst);
                            }
                            answered.fetch_add(1, Ordering::SeqCst);
                        }
                        // Refused before being accepted: the listener has closed.
                        Err(error) if error.is_connect() => {
                            refused.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        Ok(response) => lost.lock().unwrap().push(format!("status {}", response.status())),
                        Err(error) if is_reset(&error) => reset.lock().unwrap().push(Instant::now()),
                        Err(error) => lost.lock().unwrap().push(format!("{error:?}")),
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    let pid = server.child.id().to_string();
    let terminated = Instant::now();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    std::thread::sleep(Duration::from_millis(300));
    // Draining: not ready, yet still serving.
    assert_eq!(get(&server, "/v1/health/ready").0, 503);
    assert_eq!(get(&server, "/v1/health/live").0, 200);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "server did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(200));
    done.store(true, Ordering::SeqCst);
    for client in clients {
        client.join().unwrap();
    }
    assert!(status.success(), "exit status {status}");
    let lost = lost.lock().unwrap();
    assert!(
        lost.is_empty(),
        "{} requests lost: {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    assert!(answered.load(Ordering::SeqCst) > 100);
    assert!(
        closing.load(Ordering::SeqCst) > 0,
        "no response asked to close its connection"
    );
    assert!(refused.load(Ordering::SeqCst) > 0);
    // A connection the kernel queued in the instant between the pause and the
    // listener's refusal is reset, its request never read: TCP cannot refuse
    // it. So resets come only when the listener closes, after the drain's
    // 1.5 s, and at most one per client (its next connection is refused); a
    // connection closed under a request the server had accepted shows as a
    // lost request above instead.
    let reset = reset.lock().unwrap();
    assert!(reset.len() <= CLIENTS, "{} connections reset", reset.len());
    let early = reset
        .iter()
        .map(|at| at.duration_since(terminated))
        .filter(|after| *after < Duration::from_millis(1400))
        .collect::<Vec<_>>();
    assert!(
        early.is_empty(),
        "connections reset while draining, after SIGTERM: {early:?}"
    );
}

/// Whether a client error is a TCP reset (the peer's RST), anywhere in its chain.
fn is_reset(error: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        if cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset)
        {
            return true;
        }
        source = cause.source();
    }
    false
}
