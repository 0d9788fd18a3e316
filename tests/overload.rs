//! The bound on requests in flight: past `max_in_flight_requests`, POSTs
//! answer 503 with `Retry-After` at once while probes keep answering.

mod common;

use std::io::Write;
use std::net::TcpStream;

use common::{repo_path, spawn_server};
use tfserve::settings::Settings;

#[test]
fn requests_past_the_limit_get_503_and_probes_still_answer() {
    let addr = spawn_server({
        let mut settings = Settings::default();
        settings.http.host = "127.0.0.1".into();
        settings.http.rest_api_port = Some(0);
        settings.models.model_base_path = Some(repo_path("models/half_plus_three"));
        settings.models.model_name = "half_plus_three".into();
        settings.http.max_in_flight_requests = 1;
        settings
    });
    let url = format!("http://{addr}/v1/models/half_plus_three:predict");
    let body = r#"{"instances": [1.0]}"#;
    let client = common::client();
    // A request whose body never finishes arriving holds the only slot. If it
    // lost the race for the slot to a probe request (and was refused), stall another.
    let stall = || {
        let mut socket = TcpStream::connect(addr).unwrap();
        write!(
            socket,
            "POST /v1/models/half_plus_three:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{"
        )
        .unwrap();
        socket.flush().unwrap();
        socket.set_nonblocking(true).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        socket
    };
    let answered = |socket: &TcpStream| socket.peek(&mut [0u8; 1]).is_ok();
    let mut stalled = stall();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let refused = loop {
        let response = client.post(&url).body(body).send().unwrap();
        if response.status().as_u16() == 503 {
            break response;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the stalled request never took the slot"
        );
        if answered(&stalled) {
            stalled = stall();
        }
    };
    assert_eq!(refused.headers()["retry-after"], "1");
    let error: serde_json::Value = refused.json().unwrap();
    let message = error["error"].as_str().unwrap();
    assert!(
        message.contains("max_in_flight_requests") && message.contains('1'),
        "{message}"
    );
    let live = client.get(format!("http://{addr}/v1/health/live")).send().unwrap();
    assert_eq!(live.status().as_u16(), 200);
    drop(stalled);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let response = client.post(&url).body(body).send().unwrap();
        if response.status().as_u16() == 200 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the slot was never given back");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn bodies_past_the_byte_budget_get_503_before_being_read() {
    let addr = spawn_server({
        let mut settings = Settings::default();
        settings.http.host = "127.0.0.1".into();
        settings.http.rest_api_port = Some(0);
        settings.models.model_base_path = Some(repo_path("models/half_plus_three"));
        settings.models.model_name = "half_plus_three".into();
        settings.http.max_request_bytes = 10 << 20;
        settings.http.max_in_flight_bytes = 3 << 20;
        settings
    });
    let url = format!("http://{addr}/v1/models/half_plus_three:predict");
    // An upload of 2 MiB under way holds 2 MiB of the 3 MiB budget.
    let upload = |length: usize| {
        let mut socket = TcpStream::connect(addr).unwrap();
        write!(
            socket,
            "POST /v1/models/half_plus_three:predict HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n{{\"instances\": ["
        )
        .unwrap();
        socket.flush().unwrap();
        socket
    };
    let first = upload(2 << 20);
    std::thread::sleep(std::time::Duration::from_millis(200));
    // A small request still fits; a second 2 MiB upload does not, and is refused at once.
    let small = common::client()
        .post(&url)
        .body(r#"{"instances": [1.0]}"#)
        .send()
        .unwrap();
    assert_eq!(small.status(), 200);
    let started = std::time::Instant::now();
    let mut second = upload(2 << 20);
    second
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut answer = vec![0u8; 4096];
    let read = std::io::Read::read(&mut second, &mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]).to_string();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("retry-after"), "{answer}");
    assert!(
        answer.contains("max_in_flight_bytes") && answer.contains(&(3u64 << 20).to_string()),
        "{answer}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    // The first upload goes away: its bytes come back to the budget.
    drop(first);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let body = format!("{{\"instances\": [1.0]{}}}", " ".repeat(2 << 20));
        let status = common::client().post(&url).body(body).send().unwrap().status();
        if status == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the budget never came back ({status})"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
