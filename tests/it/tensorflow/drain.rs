//! SIGTERM under load: the binary drains (not ready, still serving, each
//! answer asking its client to close), then exits 0 having lost no request.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::drain::Tally;
use common::process::{start_local, Server};
use common::repo_path;

fn get(server: &Server, path: &str) -> (u16, String) {
    let response = reqwest::blocking::get(format!("{}{path}", server.url)).unwrap();
    (response.status().as_u16(), response.text().unwrap_or_default())
}

/// How long the server drains: the window in which the test sees it not ready
/// yet serving, long enough for a loaded machine's client to look.
const DRAIN: Duration = Duration::from_secs(3);

#[test]
fn sigterm_drains_without_losing_a_request() {
    const CLIENTS: usize = 16;
    let base_path = repo_path("models/half_plus_three");
    let mut server = start_local(&[
        &format!("--drain_timeout={}", DRAIN.as_secs_f64()),
        &format!("--model_base_path={}", base_path.display()),
    ]);
    let url = format!("{}/v1/models/default:predict", server.url);
    let tally = Arc::new(Tally::default());
    let closing = Arc::new(AtomicUsize::new(0));
    // When each reset was seen.
    let reset = Arc::new(Mutex::new(Vec::new()));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (url, tally, closing, reset) = (url.clone(), tally.clone(), closing.clone(), reset.clone());
            std::thread::spawn(move || {
                let client = reqwest::blocking::Client::new();
                while tally.running() {
                    match client.post(&url).body(r#"{"instances": [1.0]}"#).send() {
                        Ok(response) if response.status() == 200 => {
                            if response.headers().get("connection").is_some_and(|v| v == "close") {
                                closing.fetch_add(1, Ordering::SeqCst);
                            }
                            tally.answered();
                        }
                        Err(error) if error.is_connect() => {
                            tally.refused();
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        Ok(response) => tally.lost(format!("status {}", response.status())),
                        Err(error) if is_reset(&error) => reset.lock().unwrap().push(Instant::now()),
                        Err(error) => tally.lost(format!("{error:?}")),
                    }
                }
            })
        })
        .collect();
    // The clients are under way before the server is told to stop.
    common::wait_for("a hundred calls answered", || tally.answered_count() > 100);
    let terminated = Instant::now();
    server.sigterm();
    // Draining: not ready (from the moment the signal is handled), yet still serving.
    common::wait_for("readiness to turn 503", || get(&server, "/v1/health/ready").0 == 503);
    assert_eq!(get(&server, "/v1/health/live").0, 200);
    let status = server.exit_within(Duration::from_secs(20));
    assert!(status.success(), "exit status {status}");
    tally.finish(clients);
    assert!(
        closing.load(Ordering::SeqCst) > 0,
        "no response asked to close its connection"
    );
    // A connection the kernel queued in the instant between the pause and the
    // listener's refusal is reset, its request never read: TCP cannot refuse
    // it. So resets come only when the listener closes, after the drain,
    // and at most one per client (its next connection is refused); a
    // connection closed under a request the server had accepted shows as a
    // lost request above instead.
    let reset = reset.lock().unwrap();
    assert!(reset.len() <= CLIENTS, "{} connections reset", reset.len());
    let early = reset
        .iter()
        .map(|at| at.duration_since(terminated))
        .filter(|after| *after < DRAIN - Duration::from_millis(100))
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
