//! The bound on requests in flight: past `max_in_flight_requests`, POSTs
//! answer 503 with `Retry-After` at once while probes keep answering; past
//! the byte budget, bodies are refused before being read; and under a latency
//! objective, a request the queue would make late is refused at its head,
//! and so is one that waited unread in its socket past the objective (over
//! REST and over gRPC).

use crate::common;

use std::io::Write;
use std::net::TcpStream;

use common::{repo_path, spawn_server};

/// The refusals of half_plus_three's requests as late, as `/metrics` prints them.
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
        // 1 MiB of body, and as much again for what it could decode into.
        let body = format!("{{\"instances\": [1.0]{}}}", " ".repeat(1 << 20));
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

// The mock runtime's model, which the test slows and holds.
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
