//! The known HTTP/2 attacks against the gRPC port of the real binary, each on
//! a connection of its own while a well-behaved client makes Predict calls
//! beside it: every attacker is closed (or refused) within a stated number
//! of frames or seconds, the server's CPU per attacker frame and its memory
//! stay within stated bounds, and every one of the good client's calls
//! succeeds. Nothing here asserts a latency.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::grpc::predict_x;
use common::h2raw::{self, RawConnection};
use common::process::{start, Server};
use common::repo_path;
use tfserve::proto::tensorflow::serving::prediction_service_client::PredictionServiceClient;

fn server(extra: &[&str]) -> Server {
    let base = repo_path("models/half_plus_three");
    let mut args = vec![
        "--port=0".to_string(),
        "--rest_api_port=0".to_string(),
        "--model_name=half".to_string(),
        format!("--model_base_path={}", base.display()),
    ];
    args.extend(extra.iter().map(|arg| arg.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    start(&args)
}

fn grpc_addr(server: &Server) -> String {
    server.grpc.replace("0.0.0.0", "127.0.0.1")
}

/// A client calling Predict about 100 times a second on its own connection
/// until stopped: 50 calls before the attack starts, then the rest. `stop`
/// asserts that every call succeeded and prints both phases' latencies.
struct GoodClient {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(Vec<Duration>, Vec<Duration>, Vec<String>)>,
}

impl GoodClient {
    fn start(addr: &str) -> GoodClient {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let url = format!("http://{addr}");
        let (connected, ready) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let mut client = PredictionServiceClient::connect(url).await.unwrap();
                let (mut before, mut during, mut failures) = (Vec::new(), Vec::new(), Vec::new());
                let mut connected = Some(connected);
                while !stopping.load(Ordering::Relaxed) {
                    let start = Instant::now();
                    match client.predict(predict_x("half", 2.0)).await {
                        Ok(answer) => {
                            let y = &answer.into_inner().outputs["y"].float_val;
                            if y != &[4.0] {
                                failures.push(format!("wrong answer {y:?}"));
                            }
                        }
                        Err(status) => failures.push(status.to_string()),
                    }
                    if connected.is_some() {
                        before.push(start.elapsed());
                        if before.len() == 50 {
                            let _ = connected.take().map(|c| c.send(()));
                        }
                    } else {
                        during.push(start.elapsed());
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                (before, during, failures)
            })
        });
        ready
            .recv_timeout(Duration::from_secs(60))
            .expect("the good client calls");
        GoodClient { stop, thread }
    }

    fn stop(self, attack: &str) {
        self.stop.store(true, Ordering::Relaxed);
        let (before, during, failures) = self.thread.join().unwrap();
        let calls = before.len() + during.len();
        assert!(
            failures.is_empty(),
            "{} of {calls} good calls failed: {failures:?}",
            failures.len()
        );
        let quantiles = |mut times: Vec<Duration>| {
            times.sort();
            let at = |q: f64| times.get(((times.len() as f64 * q) as usize).min(times.len().saturating_sub(1)));
            format!(
                "p50 {:?} p99 {:?} ({} calls)",
                at(0.5).copied().unwrap_or_default(),
                at(0.99).copied().unwrap_or_default(),
                times.len()
            )
        };
        eprintln!(
            "{attack}: good client before {}, during {}",
            quantiles(before),
            quantiles(during)
        );
    }
}

/// The server process's CPU time (user and system) so far.
fn cpu_time(server: &Server) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", server.child.id())).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf reads a constant of the system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_micros(ticks * 1_000_000 / per_second)
}

/// The server process's resident memory, in bytes.
fn rss(server: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

#[test]
fn a_flood_of_empty_continuation_frames_is_cut_off() {
    let server = server(&[]);
    let addr = grpc_addr(&server);
    let good = GoodClient::start(&addr);
    let mut attacker = RawConnection::open(&addr, &[]);
    let mut opening = Vec::new();
    let block = h2raw::request_block(h2raw::PREDICT);
    h2raw::frame(&mut opening, h2raw::HEADERS, 0, 1, &block[..10]);
    assert!(attacker.send(&opening));
    let mut batch = Vec::new();
    for _ in 0..1000 {
        h2raw::frame(&mut batch, h2raw::CONTINUATION, 0, 1, &[]);
    }
    // Most of what is written waits in socket buffers: the bound is loose
    // on purpose, and a server taking them all (10^9 in 30 s) fails it.
    let mut sent = 0;
    while sent < 1_000_000 && attacker.send(&batch) && !attacker.closed() {
        sent += 1000;
    }
    assert!(
        attacker.wait_closed(Duration::from_secs(10)),
        "still open after {sent} empty CONTINUATION frames"
    );
    assert!(sent < 1_000_000, "{sent} frames taken");
    good.stop("continuation flood");
}

#[test]
fn settings_churn_costs_no_work_per_open_stream() {
    let server = server(&[]);
    let addr = grpc_addr(&server);
    let good = GoodClient::start(&addr);
    let mut attacker = RawConnection::open(&addr, &[]);
    assert!(attacker.send(&h2raw::held_calls(100)));
    const FRAMES: usize = 200;
    let mut churn = Vec::new();
    for n in 0..FRAMES {
        let entries: Vec<(u16, u32)> = (0..2730)
            .map(|i| (h2raw::INITIAL_WINDOW_SIZE, 65_535 + ((n + i) % 2) as u32))
            .collect();
        h2raw::settings(&mut churn, &entries);
    }
    let before = cpu_time(&server);
    assert!(attacker.send(&churn));
    let start = Instant::now();
    // Each SETTINGS acknowledged (and the client's first): all applied.
    while attacker.seen.lock().unwrap().settings_acks < FRAMES + 1 && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let used = cpu_time(&server) - before;
    let acks = attacker.seen.lock().unwrap().settings_acks;
    // Either the server took every frame, at a bounded cost, or it sent the client away.
    if !attacker.closed() {
        assert_eq!(acks, FRAMES + 1, "every SETTINGS acknowledged");
        let per_frame = used / FRAMES as u32;
        eprintln!("settings churn: {per_frame:?} of server CPU per frame of 2,730 entries, 100 streams open");
        assert!(
            per_frame < Duration::from_millis(2),
            "{per_frame:?} of CPU per SETTINGS frame: work per open stream per entry"
        );
    }
    good.stop("settings churn");
}

#[test]
fn a_client_resetting_calls_as_fast_as_it_opens_them_is_sent_away() {
    let server = server(&[]);
    let addr = grpc_addr(&server);
    let good = GoodClient::start(&addr);
    let mut attacker = RawConnection::open(&addr, &[]);
    let block = h2raw::request_block(h2raw::PREDICT);
    let mut out = Vec::new();
    for n in 0..1000u32 {
        let id = 2 * n + 1;
        h2raw::frame(&mut out, h2raw::HEADERS, h2raw::END_HEADERS, id, &block);
        h2raw::frame(&mut out, h2raw::RST_STREAM, 0, id, &8u32.to_be_bytes());
    }
    attacker.send(&out);
    assert!(
        attacker.wait_closed(Duration::from_secs(10)),
        "the connection stayed open after 1,000 opened and reset calls"
    );
    assert_eq!(attacker.seen.lock().unwrap().goaway, Some(h2raw::ENHANCE_YOUR_CALM));
    good.stop("rapid reset");
}

#[test]
fn streams_over_the_limit_are_refused() {
    let server = server(&["--grpc_channel_arguments=grpc.max_concurrent_streams=20"]);
    let addr = grpc_addr(&server);
    let good = GoodClient::start(&addr);
    let mut attacker = RawConnection::open(&addr, &[]);
    assert!(attacker.send(&h2raw::held_calls(25)));
    let start = Instant::now();
    while attacker.seen.lock().unwrap().resets.len() < 5 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let resets = attacker.seen.lock().unwrap().resets.clone();
    let refused: Vec<u32> = resets
        .iter()
        .filter(|(_, code)| *code == h2raw::REFUSED_STREAM)
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(refused, [41, 43, 45, 47, 49], "{resets:?}");
    good.stop("too many streams");
}

#[test]
fn silent_and_idle_connections_are_closed() {
    let server = server(&[
        "--grpc_max_connection_idle_seconds=1",
        "--grpc_channel_arguments=grpc.server_handshake_timeout_ms=1000",
    ]);
    let addr = grpc_addr(&server);
    let good = GoodClient::start(&addr);
    let silent: Vec<_> = (0..20).map(|_| RawConnection::bare(&addr)).collect();
    let idle: Vec<_> = (0..20).map(|_| RawConnection::open(&addr, &[])).collect();
    // The handshake timeout, and twice the idle timeout plus the GOAWAY's linger.
    for connection in silent.iter().chain(&idle) {
        assert!(
            connection.wait_closed(Duration::from_secs(10)),
            "a connection outlived its timeout"
        );
    }
    assert!(
        idle.iter().all(|c| c.seen.lock().unwrap().goaway == Some(0)),
        "idle ones get GOAWAY NO_ERROR"
    );
    good.stop("silent and idle connections");
}

#[test]
fn connections_over_the_cap_are_closed_as_they_come() {
    let server = server(&["--grpc_max_connections=20"]);
    let addr = grpc_addr(&server);
    // The good client holds one of the 20.
    let good = GoodClient::start(&addr);
    let attackers: Vec<_> = (0..30).map(|_| RawConnection::open(&addr, &[])).collect();
    std::thread::sleep(Duration::from_secs(2));
    let closed = attackers.iter().filter(|c| c.closed()).count();
    assert_eq!(closed, 11, "30 more connections with 19 places left");
    drop(attackers);
    good.stop("connections over the cap");
}

#[test]
fn answers_a_client_never_reads_are_bounded() {
    const BUDGET: usize = 4 << 20;
    let server = server(&[&format!("--grpc_max_pending_answer_bytes={BUDGET}")]);
    let addr = grpc_addr(&server);
    let good = GoodClient::start(&addr);
    let mut before = 0;
    // Two connections that open no window, 60 calls each of 800 KB answers,
    // one after another: 96 MB of answers if they were all held.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (held, refused, during) = runtime.block_on(async {
        let x: Vec<f32> = vec![1.0; 200_000];
        let mut request = predict_x("half", 0.0);
        let tensor = request.inputs.get_mut("x").unwrap();
        tensor.float_val = x;
        tensor.tensor_shape.as_mut().unwrap().dim[0].size = 200_000;
        let encoded = prost::Message::encode_to_vec(&request);
        let mut message = vec![0];
        message.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
        message.extend_from_slice(&encoded);
        let message = bytes::Bytes::from(message);
        let (mut keep, mut senders) = (Vec::new(), Vec::new());
        let (mut held, mut refused) = (0, 0);
        for _ in 0..2 {
            let io = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let (sender, connection) = h2::client::Builder::new()
                .initial_window_size(0)
                .handshake::<_, bytes::Bytes>(io)
                .await
                .unwrap();
            tokio::spawn(async move {
                let _ = connection.await;
            });
            for _ in 0..60 {
                let mut ready = sender.clone().ready().await.unwrap();
                let request = http::Request::post(format!("http://{addr}{}", h2raw::PREDICT))
                    .header("content-type", "application/grpc")
                    .header("te", "trailers")
                    .body(())
                    .unwrap();
                let (response, mut body) = ready.send_request(request, false).unwrap();
                body.send_data(message.clone(), true).unwrap();
                let response = tokio::time::timeout(Duration::from_secs(30), response)
                    .await
                    .expect("a head for every call")
                    .unwrap();
                match response
                    .headers()
                    .get("grpc-status")
                    .map(|s| s.to_str().unwrap().to_string())
                {
                    None => held += 1,
                    Some(code) if code == "8" => refused += 1,
                    Some(other) => panic!("grpc-status {other}"),
                }
                keep.push((response, body));
                if before == 0 {
                    // TensorFlow's arenas have grown to this request's size by now.
                    before = rss(&server);
                }
            }
            senders.push(sender);
        }
        let during = rss(&server);
        (held, refused, during)
    });
    let grown = during.saturating_sub(before);
    eprintln!(
        "zero-window readers: {held} answers held, {refused} refused; RSS {} MB -> {} MB",
        before >> 20,
        during >> 20
    );
    assert!(refused > 0 && held < 20, "{held} held, {refused} refused");
    assert!(grown < 80 << 20, "RSS grew {} MB while the answers waited", grown >> 20);
    drop(runtime);
    good.stop("zero-window readers");
}
