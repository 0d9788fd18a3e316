//! What a hostile client cannot make the server hold: a form upload that
//! ends inside its boundary or stops arriving, a request that needs more
//! than the whole byte budget by itself, and a run that outlives its
//! request's timeout keeping its inputs' bytes counted until it ends. In
//! each case the server answers, gives the bytes back and serves the next
//! request.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::{repo_path, spawn_server, spawn_server_on, wait_for};
use tfserve::runtime::mock::MockLoader;

/// The byte budget of these servers.
const BUDGET: usize = 2 << 20;

fn server(body_timeout_ms: u64) -> SocketAddr {
    let mut settings = common::model_settings("half", repo_path("models/half_plus_three"));
    settings.http.max_in_flight_bytes = BUDGET;
    settings.http.client_body_timeout_ms = body_timeout_ms;
    spawn_server(settings)
}

/// Sends `request` on a new connection, left open.
fn send(addr: SocketAddr, request: &[u8]) -> TcpStream {
    let mut socket = TcpStream::connect(addr).unwrap();
    socket.write_all(request).unwrap();
    socket.flush().unwrap();
    socket
}

/// What the server wrote before closing the connection (or 20 s passed).
fn answer(socket: &mut TcpStream) -> String {
    socket.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// A form upload's request head, its body declared `length` bytes long.
fn form_head(length: usize) -> String {
    format!(
        "POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: multipart/form-data; boundary=XYZ\r\nContent-Length: {length}\r\n\r\n"
    )
}

const PART_HEAD: &str =
    "--XYZ\r\nContent-Disposition: form-data; name=\"image\"; filename=\"a.png\"\r\nContent-Type: image/png\r\n\r\n";

/// The status of a 300 kB predict (spaces after the JSON): under the budget
/// alone, past it beside 1.6 MB held by another request.
fn padded_predict(addr: SocketAddr) -> u16 {
    let body = format!("{{\"instances\": [1.0]{}}}", " ".repeat(300_000));
    let url = format!("http://{addr}/v1/models/half:predict");
    common::client().post(url).body(body).send().unwrap().status().as_u16()
}

#[test]
fn a_form_upload_ending_inside_its_boundary_is_answered_400() {
    let addr = server(60_000);
    // The whole declared body arrives, but the closing boundary is cut short.
    let mut body = PART_HEAD.as_bytes().to_vec();
    body.extend(std::iter::repeat_n(b'a', 600_000));
    body.extend_from_slice(b"\r\n--XY");
    let mut request = form_head(body.len()).into_bytes();
    request.extend_from_slice(&body);
    let mut socket = send(addr, &request);
    // Answered as soon as the body ends, not at the (minute-long) body timeout.
    let answer = answer(&mut socket);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
    assert!(answer.contains("image"), "names the form field: {answer:?}");
    // Its bytes are back: a request that needs most of the budget is served.
    assert_eq!(padded_predict(addr), 200);
}

/// A form upload whose body stops coming: 1.6 MB announced, the head of an
/// `image` part and a thousand of its bytes sent.
fn stalled_upload(addr: SocketAddr) -> TcpStream {
    let mut request = form_head(1_600_000).into_bytes();
    request.extend_from_slice(PART_HEAD.as_bytes());
    request.extend_from_slice(&[b'a'; 1000]);
    send(addr, &request)
}

#[test]
fn a_form_upload_that_stops_arriving_holds_its_declared_bytes_until_it_goes() {
    let addr = server(600_000);
    let stalled = stalled_upload(addr);
    // While it waits, its declared length is held: a request that needs the
    // rest of the budget is refused, for now.
    wait_for("the stalled upload to hold its declared bytes", || {
        padded_predict(addr) == 503
    });
    // Its client goes away: the bytes come back.
    drop(stalled);
    wait_for("the upload's bytes back in the budget", || padded_predict(addr) == 200);
}

#[test]
fn a_form_upload_that_stops_arriving_is_answered_408_and_gives_its_bytes_back() {
    let addr = server(2_000);
    let mut stalled = stalled_upload(addr);
    let answer = answer(&mut stalled);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(answer.contains("client_body_timeout_ms"), "{answer:?}");
    assert_eq!(padded_predict(addr), 200);
}

#[test]
fn a_request_needing_more_than_the_whole_budget_is_refused_413_even_alone() {
    let addr = server(60_000);
    // 300,000 empty strings: 1.2 MB of body, far more once each is a string.
    let body = format!("{{\"instances\": [{}\"\"]}}", "\"\",".repeat(299_999));
    let url = format!("http://{addr}/v1/models/half:predict");
    let response = common::client().post(&url).body(body).send().unwrap();
    assert_eq!(response.status().as_u16(), 413);
    let error: serde_json::Value = response.json().unwrap();
    let message = error["error"].as_str().unwrap();
    assert!(
        message.starts_with("request needs ")
            && message.contains("max_in_flight_bytes")
            && message.contains(&format!("the limit of {BUDGET} bytes")),
        "{message}"
    );
    assert_eq!(padded_predict(addr), 200);
}

#[test]
fn a_run_outliving_its_timeout_holds_its_inputs_bytes_until_it_ends() {
    // The mock loader's `run_ms`: each run of this model takes 10 s.
    let dir = common::temp_dir("outlived-run");
    std::fs::create_dir_all(dir.join("1")).unwrap();
    std::fs::write(dir.join("1/saved_model.pb"), b"").unwrap();
    std::fs::write(dir.join("1/run_ms"), "10000").unwrap();
    let mut settings = common::model_settings("slow", dir.clone());
    settings.http.max_in_flight_bytes = 4 << 20;
    settings.http.rest_api_timeout_in_ms = 200;
    let addr = spawn_server_on(settings, std::sync::Arc::new(MockLoader::default()));
    let url = format!("http://{addr}/v1/models/slow:predict");
    // 300,000 floats: 600 kB of body, 1.2 MB once decoded, 3.6 MB reserved
    // (body and its decoding's upper bound) before decoding.
    let body = format!("{{\"instances\": [{}1]}}", "1,".repeat(299_999));
    let post = || {
        let response = common::client().post(&url).body(body.clone()).send().unwrap();
        let status = response.status().as_u16();
        (status, response.text().unwrap())
    };
    let (status, text) = post();
    assert_eq!(status, 504, "{text}");
    assert!(text.contains("rest_api_timeout_in_ms"), "{text}");
    // The run goes on with the 1.2 MB of tensors, still counted: the same
    // request again would pass the budget beside them.
    let (status, text) = post();
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("max_in_flight_bytes"), "{text}");
    // Once the run ends, the bytes are back and the same request is admitted
    // (to time out in its turn).
    wait_for("the outlived run's bytes back in the budget", || post().0 == 504);
}
