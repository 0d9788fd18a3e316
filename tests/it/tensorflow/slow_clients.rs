//! Ten thousand idle connections held against the binary while normal clients
//! are answered. Slow clients' timeouts: `mock/slow_clients.rs`.

use crate::common;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::repo_path;

/// The 99th percentile of `count` sequential predict calls on one keep-alive connection.
fn p99_ms(url: &str, count: usize) -> f64 {
    let client = common::client();
    let mut times: Vec<f64> = (0..count)
        .map(|_| {
            let started = Instant::now();
            let response = client.post(url).body(r#"{"instances": [1.0]}"#).send().unwrap();
            assert_eq!(response.status().as_u16(), 200);
            response.bytes().unwrap();
            started.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[count * 99 / 100]
}

#[test]
fn ten_thousand_idle_connections_are_held_while_normal_clients_are_answered() {
    // A process of its own: 10,000 sockets on each side would not fit one
    // process's descriptor limit.
    let server = common::process::start(&[
        "--host=127.0.0.1",
        "--rest_api_port=0",
        "--model_name=half",
        &format!("--model_base_path={}", repo_path("models/half_plus_three").display()),
        "--client_request_timeout_ms=120000",
    ]);
    let url = format!("{}/v1/models/half:predict", server.url);
    let addr: SocketAddr = server.url.trim_start_matches("http://").parse().unwrap();
    let before = p99_ms(&url, 400);
    let idle: Vec<TcpStream> = (0..10_000)
        .map(|i| TcpStream::connect(addr).unwrap_or_else(|e| panic!("connection {i}: {e}")))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let during = p99_ms(&url, 400);
    // Every call was answered (`p99_ms` checks each); the latencies are
    // printed for docs/reliability.md, not asserted: a busy machine moves them.
    eprintln!("p99 before: {before:.2} ms; with 10,000 idle connections: {during:.2} ms");
    // The idle connections are still held, not dropped to make room.
    let open = idle
        .iter()
        .step_by(100)
        .filter(|socket| {
            socket.set_nonblocking(true).unwrap();
            matches!(socket.peek(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        })
        .count();
    assert_eq!(open, 100);
}
