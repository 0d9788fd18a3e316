//! A latency objective in the binary, on TensorFlow: a request (REST) or call
//! (gRPC) that waited unread in its socket past the objective is refused when
//! read, though its queue is idle. The other bounds: `mock/overload.rs`.

use crate::common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::repo_path;

/// The refusals of half_plus_three's requests as late, as `/metrics` prints them.
const LATE_REFUSALS: &str =
    r#"tfserve_rejected_total{model="half_plus_three",reason="late",signature="serving_default",version="1"}"#;

/// half_plus_three on TensorFlow under a 1 s latency objective that refuses late requests.
fn half_plus_three_with_a_second_objective() -> common::process::Server {
    let model = repo_path("models/half_plus_three");
    common::process::start(&[
        "--port=0",
        "--rest_api_port=0",
        "--host=127.0.0.1",
        "--model_name=half_plus_three",
        "--model_base_path",
        model.to_str().unwrap(),
        "--enable_batching",
        "--batching_target_latency_ms=1000",
        "--batching_late_action=reject",
    ])
}

/// Stops the server (SIGSTOP), returning once every thread has stopped
/// (the process's state says so).
fn stop(pid: libc::pid_t) {
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let stat = format!("/proc/{pid}/stat");
    while !std::fs::read_to_string(&stat).unwrap().contains(") T ") {
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn resume(pid: libc::pid_t) {
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
}

/// The unread wait a late refusal's message names ("read N ms after it arrived").
fn waited_ms(message: &str) -> Option<f64> {
    let rest = message.split(", read ").nth(1)?;
    rest.split(" ms after it arrived").next()?.parse().ok()
}

/// The server is stopped (SIGSTOP) while a request arrives and for longer
/// than the objective: read once it resumes, the request is refused, though
/// its queue is idle, and the next one is answered. The binary, on TensorFlow.
#[test]
fn a_request_that_waited_unread_past_the_objective_is_refused_when_read() {
    let server = half_plus_three_with_a_second_objective();
    let addr = server.url.trim_start_matches("http://");
    let body = r#"{"instances": [1.0]}"#;
    let request = format!(
        "POST /v1/models/half_plus_three:predict HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let status = |socket: &mut TcpStream| {
        let mut answer = vec![0u8; 4096];
        let read = std::io::Read::read(socket, &mut answer).unwrap();
        String::from_utf8_lossy(&answer[..read]).to_string()
    };
    let pid = server.child.id() as libc::pid_t;
    let mut refused = 0;
    // The kernel stamps arrivals from a moment after the first connection
    // asks (deferred work): a request in that moment waits unmeasured.
    for _ in 0..3 {
        let mut socket = TcpStream::connect(addr).unwrap();
        socket.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        socket.write_all(request.as_bytes()).unwrap();
        let answer = status(&mut socket);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        std::thread::sleep(Duration::from_millis(100));
        stop(pid);
        socket.write_all(request.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        resume(pid);
        let answer = status(&mut socket);
        if answer.starts_with("HTTP/1.1 503") {
            let waited = waited_ms(&answer).unwrap_or_else(|| panic!("{answer}"));
            assert!(waited >= 1500.0, "{answer}");
            assert!(answer.contains("latency objective of 1000.0 ms (p99)"), "{answer}");
            refused += 1;
            break;
        }
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    assert_eq!(refused, 1);
    let client = common::client();
    let answer = client
        .post(format!("{}/v1/models/half_plus_three:predict", server.url))
        .body(body)
        .send()
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(common::metric(&server.url, LATE_REFUSALS), 1.0);
}

/// The same over gRPC (whose Predict names its model in the body): refused
/// `UNAVAILABLE` once read, and the next call on the connection answered.
#[test]
fn a_grpc_call_that_waited_unread_past_the_objective_is_refused_when_read() {
    let server = half_plus_three_with_a_second_objective();
    let addr: std::net::SocketAddr = server.grpc.parse().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut client = runtime.block_on(common::grpc::prediction(addr));
    let pid = server.child.id() as libc::pid_t;
    let mut refused = 0;
    // As over REST: the first moment of stamping may go unmeasured.
    for _ in 0..3 {
        let answer = runtime.block_on(client.predict(common::grpc::predict_x("half_plus_three", 1.0)));
        assert!(answer.is_ok(), "{answer:?}");
        std::thread::sleep(Duration::from_millis(100));
        stop(pid);
        let mut stopped = client.clone();
        let call = runtime.spawn(async move { stopped.predict(common::grpc::predict_x("half_plus_three", 1.0)).await });
        std::thread::sleep(Duration::from_millis(1500));
        resume(pid);
        match runtime.block_on(call).unwrap() {
            Ok(_) => continue,
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                let waited = waited_ms(status.message()).unwrap_or_else(|| panic!("{status:?}"));
                // The call was sent from another thread a moment after the stop began.
                assert!(waited >= 1000.0, "{status:?}");
                assert!(
                    status.message().contains("latency objective of 1000.0 ms (p99)"),
                    "{status:?}"
                );
                refused += 1;
                break;
            }
        }
    }
    assert_eq!(refused, 1);
    let answer = runtime.block_on(client.predict(common::grpc::predict_x("half_plus_three", 1.0)));
    assert!(answer.is_ok(), "{answer:?}");
    assert_eq!(common::metric(&server.url, LATE_REFUSALS), 1.0);
}
