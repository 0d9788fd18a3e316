//! Slow and idle clients: a client trickling its headers or its body is cut
//! off with 408 after its timeout, idle keep-alive connections are closed,
//! and a normal client is answered at once throughout.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{repo_path, spawn_server};

fn server() -> SocketAddr {
    let mut settings = common::model_settings("half", repo_path("models/half_plus_three"));
    settings.http.client_request_timeout_ms = 1_000;
    settings.http.client_body_timeout_ms = 1_000;
    settings.http.keep_alive_seconds = 1;
    spawn_server(settings)
}

/// Reads until the server closes the connection (or 10 s pass); what it sent.
fn read_to_close(stream: &mut TcpStream) -> String {
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

fn normal_request_is_quick(addr: SocketAddr) {
    let started = Instant::now();
    let response = common::client()
        .post(format!("http://{addr}/v1/models/half:predict"))
        .body(r#"{"instances": [1.0]}"#)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn trickled_headers_are_cut_off() {
    let addr = server();
    let mut slow = TcpStream::connect(addr).unwrap();
    let started = Instant::now();
    slow.write_all(b"POST /v1/models/half:predict HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    // One header byte every 200 ms, never finishing the head.
    let trickle = std::thread::spawn({
        let mut slow = slow.try_clone().unwrap();
        move || {
            for byte in b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
                if slow.write_all(&[*byte]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    });
    normal_request_is_quick(addr);
    let answer = read_to_close(&mut slow);
    let elapsed = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(elapsed < Duration::from_secs(4), "closed after {elapsed:?}");
    let _ = trickle.join();
}

#[test]
fn trickled_bodies_are_answered_408() {
    let addr = server();
    let mut slow = TcpStream::connect(addr).unwrap();
    let started = Instant::now();
    slow.write_all(
        b"POST /v1/models/half:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"instances\": [",
    )
    .unwrap();
    normal_request_is_quick(addr);
    let answer = read_to_close(&mut slow);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(answer.contains("client_body_timeout_ms"), "{answer:?}");
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
}

/// Sends `request` on a fresh connection; asserts it is answered, then
/// closed once idle for the keep-alive (1 s), not before.
fn closed_after_keep_alive(request: &[u8]) {
    let addr = server();
    let mut idle = TcpStream::connect(addr).unwrap();
    idle.write_all(request).unwrap();
    let started = Instant::now();
    let answer = read_to_close(&mut idle);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(800) && elapsed < Duration::from_secs(4),
        "closed after {elapsed:?}"
    );
}

#[test]
fn idle_keep_alive_connections_are_closed() {
    closed_after_keep_alive(b"GET /v1/models/half HTTP/1.1\r\nHost: x\r\n\r\n");
}

#[test]
fn idle_connections_are_closed_after_a_prediction_too() {
    closed_after_keep_alive(
        b"POST /v1/models/half:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n{\"instances\": [1.0]}",
    );
}
