//! The bound on requests in flight: past `max_in_flight_requests`, POSTs
//! answer 503 with `Retry-After` at once while probes keep answering; past
//! the byte budget, bodies are refused before being read; and under a latency
//! objective, a request the queue would make late is refused at its head,
//! and so is one that waited unread in its socket past the objective (over
//! REST and over gRPC).

mod common;

use std::io::Write;
use std::net::TcpStream;
#[cfg(feature = "tensorflow")]
use std::time::Duration;

use common::{repo_path, spawn_server};

/// The refusals of half_plus_three's requests as late, as `/metrics` prints them.
#[cfg(any(feature = "tensorflow", feature = "mock"))]
const LATE_REFUSALS: &str =
    r#"tfserve_rejected_total{model="half_plus_three",reason="late",signature="serving_default",version="1"}"#;

#[test]
fn requests_past_the_limit_get_503_and_probes_still_answer() {
    let addr = spawn_server({
        let mut settings = common::local_settings();
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
        let mut settings = common::local_settings();
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

/// half_plus_three on TensorFlow under a 1 s latency objective that refuses late requests.
#[cfg(feature = "tensorflow")]
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
#[cfg(feature = "tensorflow")]
fn stop(pid: libc::pid_t) {
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let stat = format!("/proc/{pid}/stat");
    while !std::fs::read_to_string(&stat).unwrap().contains(") T ") {
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(feature = "tensorflow")]
fn resume(pid: libc::pid_t) {
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
}

/// The unread wait a late refusal's message names ("read N ms after it arrived").
#[cfg(feature = "tensorflow")]
fn waited_ms(message: &str) -> Option<f64> {
    let rest = message.split(", read ").nth(1)?;
    rest.split(" ms after it arrived").next()?.parse().ok()
}

/// The server is stopped (SIGSTOP) while a request arrives and for longer
/// than the objective: read once it resumes, the request is refused, though
/// its queue is idle, and the next one is answered. The binary, on TensorFlow.
#[cfg(feature = "tensorflow")]
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
#[cfg(feature = "tensorflow")]
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

// On the mock runtime, whose model the test slows and holds.
#[cfg(feature = "mock")]
mod late {
    use std::io::Write;
    use std::net::TcpStream;
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc, Mutex};
    use std::time::Duration;

    use super::common;
    use super::common::repo_path;
    use tfserve::runtime::mock::{float_signature, MockModel};
    use tfserve::runtime::{Loader, Model, RuntimeError, SessionConfig};

    /// half_plus_three whose every run takes 30 ms, and once `armed`, waits
    /// for the test to release it (telling it when a run has begun).
    struct SlowGated {
        armed: Arc<AtomicBool>,
        entered: Mutex<mpsc::Sender<()>>,
        release: Mutex<mpsc::Receiver<()>>,
    }

    struct SlowGatedLoader(Arc<SlowGated>);

    impl Loader for SlowGatedLoader {
        fn load(
            &self,
            _dir: &Path,
            _tags: &[String],
            _session: &SessionConfig,
        ) -> Result<Arc<dyn Model>, RuntimeError> {
            let gate = self.0.clone();
            let signature = float_signature("serving_default", &["x"], &["y"]);
            Ok(Arc::new(MockModel::new(vec![signature], move |_, inputs| {
                std::thread::sleep(Duration::from_millis(30));
                if gate.armed.load(Ordering::SeqCst) {
                    let _ = gate.entered.lock().unwrap().send(());
                    let _ = gate.release.lock().unwrap().recv();
                }
                Ok(inputs)
            })))
        }
    }

    #[test]
    fn a_request_the_queue_would_make_late_is_refused_before_its_body_is_read() {
        let (entered, runs) = mpsc::channel();
        let (go, release) = mpsc::channel();
        let gate = Arc::new(SlowGated {
            armed: Arc::new(AtomicBool::new(false)),
            entered: Mutex::new(entered),
            release: Mutex::new(release),
        });
        let mut settings = common::local_settings();
        settings.models.model_base_path = Some(repo_path("models/half_plus_three"));
        settings.models.model_name = "half_plus_three".into();
        settings.batching.enable_batching = true;
        settings.batching.max_batch_size = Some(2);
        settings.batching.num_batch_threads = Some(1);
        settings.batching.batching_target_latency_ms = Some(10.0);
        settings.batching.batching_late_action = Some(tfserve::batcher::objective::LateAction::Reject);
        let (sender, receiver) = mpsc::channel();
        let loader = SlowGatedLoader(gate.clone());
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let running = tfserve::start_with(&settings, Arc::new(loader)).expect("server starts");
                sender.send(running.addrs[0]).unwrap();
                let _ = running.server.await;
            })
        });
        let addr = receiver.recv().unwrap();
        let url = format!("http://{addr}/v1/models/half_plus_three:predict");
        let body = r#"{"instances": [1.0]}"#;
        // A run is measured (30 ms: past half the 10 ms objective; a size's
        // first run is not), then one is held running.
        let client = common::client();
        for _ in 0..2 {
            assert_eq!(client.post(&url).body(body).send().unwrap().status(), 200);
        }
        gate.armed.store(true, Ordering::SeqCst);
        let held = std::thread::spawn({
            let (client, url) = (client.clone(), url.clone());
            move || client.post(&url).body(body).send().unwrap().status().as_u16()
        });
        runs.recv_timeout(Duration::from_secs(30))
            .expect("the held request runs");
        // Behind it, a request would wait a run and take one: it is refused as
        // soon as its head arrives, its body never sent.
        let mut socket = TcpStream::connect(addr).unwrap();
        write!(
            socket,
            "POST /v1/models/half_plus_three:predict HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .unwrap();
        socket.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut answer = vec![0u8; 4096];
        let read = std::io::Read::read(&mut socket, &mut answer).unwrap();
        let answer = String::from_utf8_lossy(&answer[..read]).to_string();
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("latency objective of 10.0 ms (p99)"), "{answer}");
        gate.armed.store(false, Ordering::SeqCst);
        go.send(()).unwrap();
        assert_eq!(held.join().unwrap(), 200);
        assert_eq!(common::metric(&format!("http://{addr}"), super::LATE_REFUSALS), 1.0);
    }
}
