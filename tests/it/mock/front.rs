//! The HTTP front (`http::front`): TF Serving's inference calls answered on a
//! connection the front serves read exactly as actix-web's answers to the
//! same requests (on a connection handed to it), pipelined and split
//! requests, `Connection: close`, and connections handed over mid-stream.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::raw_http::{connect, post, read_answer};
use common::{repo_path, spawn_server};

fn server() -> SocketAddr {
    let settings = common::model_settings("half", repo_path("models/half_plus_three"));
    spawn_server(settings)
}

const STATUS: &str = "GET /v1/models/half HTTP/1.1\r\nHost: x\r\n\r\n";

#[test]
fn the_front_answers_as_actix_web_does() {
    let addr = server();
    let cases = [
        ("/v1/models/half:predict", r#"{"instances": [1.0, 2.0]}"#),
        ("/v1/models/half/versions/123:predict", r#"{"instances": [1.0]}"#),
        ("/v1/models/half/labels/stable:predict", r#"{"instances": [1.0]}"#),
        ("/v1/models/half:predict", r#"{"instances": [1.0"#),
        ("/v1/models/half:predict", r#"{"inputs": {"nope": [1.0]}}"#),
        ("/v1/models/absent:predict", r#"{"instances": [1.0]}"#),
        ("/v1/models/half:regress", r#"{"examples": [{"x": 1.0}]}"#),
        ("/v1/models/half:classify", r#"{"examples": [{"x": 1.0}]}"#),
        ("/V1/Models/half:PREDICT", r#"{"instances": [3.0]}"#),
    ];
    for (path, body) in cases {
        let request = post(path, body, "");
        // A fresh connection: the front answers.
        let mut front = connect(addr);
        front.get_mut().write_all(request.as_bytes()).unwrap();
        let from_front = read_answer(&mut front);
        // A connection whose first request the front leaves to actix-web,
        // which then answers every request on it.
        let mut handed = connect(addr);
        handed.get_mut().write_all(STATUS.as_bytes()).unwrap();
        assert!(read_answer(&mut handed).status.starts_with("HTTP/1.1 200"));
        handed.get_mut().write_all(request.as_bytes()).unwrap();
        let from_actix = read_answer(&mut handed);
        assert_eq!(from_front.status, from_actix.status, "{path} {body}");
        assert_eq!(from_front.body, from_actix.body, "{path} {body}");
        assert_eq!(
            from_front.comparable_headers(),
            from_actix.comparable_headers(),
            "{path} {body}"
        );
        assert_eq!(from_front.header("x-request-id"), Some("req-1"));
    }
}

#[test]
fn a_request_without_host_is_refused_as_actix_web_refuses_it() {
    let addr = server();
    let hostless = "POST /v1/models/half:predict HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n{\"instances\": [1.0]}";
    let mut front = connect(addr);
    front.get_mut().write_all(hostless.as_bytes()).unwrap();
    let from_front = read_answer(&mut front);
    assert!(from_front.status.starts_with("HTTP/1.1 400"), "{}", from_front.status);
    let mut handed = connect(addr);
    handed.get_mut().write_all(STATUS.as_bytes()).unwrap();
    assert!(read_answer(&mut handed).status.starts_with("HTTP/1.1 200"));
    handed.get_mut().write_all(hostless.as_bytes()).unwrap();
    let from_actix = read_answer(&mut handed);
    assert_eq!(from_front.status, from_actix.status);
    assert_eq!(from_front.body, from_actix.body);
}

/// An answer as compared: status line, body and the comparable headers.
type Compared = (String, String, Vec<(String, String)>);

/// Every answer on a connection until the server closes it.
fn answers_until_closed(connection: &mut BufReader<TcpStream>) -> Vec<Compared> {
    let mut answers = Vec::new();
    while !connection.fill_buf().map(|b| b.is_empty()).unwrap_or(true) {
        let answer = read_answer(connection);
        let headers = answer.comparable_headers();
        answers.push((answer.status, answer.body, headers));
    }
    answers
}

/// The answers as compared across the two sides, without `Connection`:
/// actix-web does not say `close` on a pipelined request's answer (below).
fn without_connection(answers: &[Compared]) -> Vec<Compared> {
    answers
        .iter()
        .map(|(status, body, headers)| {
            let headers = headers
                .iter()
                .filter(|(name, _)| name != "connection")
                .cloned()
                .collect();
            (status.clone(), body.clone(), headers)
        })
        .collect()
}

#[test]
fn pipelined_requests_with_a_close_and_split_writes_are_answered_as_actix_web_answers_them() {
    let addr = server();
    let mut burst = String::new();
    burst += &post("/v1/models/half:predict", r#"{"instances": [1.0]}"#, "");
    burst += &post(
        "/v1/models/half:predict",
        r#"{"instances": [2.0]}"#,
        "Connection: close\r\n",
    );
    burst += &post("/v1/models/half:predict", r#"{"instances": [3.0]}"#, "");
    for splits in [
        vec![],
        vec![7, 100, burst.len() - 3],
        (1..burst.len()).step_by(41).collect(),
    ] {
        let send = |connection: &mut BufReader<TcpStream>| {
            let mut at = 0;
            for &split in splits.iter().chain([&burst.len()]) {
                // The front may have closed its side already (after the
                // `close` request): what is left is not read, and that is fine.
                let _ = connection.get_mut().write_all(&burst.as_bytes()[at..split]);
                at = split;
                if !splits.is_empty() {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        };
        let mut front = connect(addr);
        send(&mut front);
        let from_front = answers_until_closed(&mut front);
        // RFC 9112 §9.6: the request saying `close` is the last one answered,
        // its answer says so, and the connection closes.
        assert_eq!(from_front.len(), 2, "split at {splits:?}: {from_front:?}");
        assert!(from_front[1].2.contains(&("connection".into(), "close".into())));
        let mut handed = connect(addr);
        handed.get_mut().write_all(STATUS.as_bytes()).unwrap();
        assert!(read_answer(&mut handed).status.starts_with("HTTP/1.1 200"));
        send(&mut handed);
        let mut from_actix = Vec::new();
        for _ in 0..2 {
            let answer = read_answer(&mut handed);
            let headers = answer.comparable_headers();
            from_actix.push((answer.status, answer.body, headers));
        }
        // actix-web answers alike, but on a pipelined connection it neither
        // says `close` nor stops there: it also answers the third request.
        assert_eq!(
            without_connection(&from_front),
            without_connection(&from_actix),
            "split at {splits:?}"
        );
    }
}

#[test]
fn pipelined_requests_are_answered_in_order_across_the_hand_over() {
    let addr = server();
    let mut connection = connect(addr);
    let mut burst = String::new();
    burst += &post("/v1/models/half:predict", r#"{"instances": [1.0]}"#, "");
    burst += &post("/v1/models/half:predict", r#"{"instances": [2.0]}"#, "");
    burst += STATUS;
    burst += &post("/v1/models/half:predict", r#"{"instances": [3.0]}"#, "");
    connection.get_mut().write_all(burst.as_bytes()).unwrap();
    let bodies: Vec<String> = (0..4).map(|_| read_answer(&mut connection).body).collect();
    assert_eq!(bodies[0], r#"{"predictions":[3.5]}"#);
    assert_eq!(bodies[1], r#"{"predictions":[4.0]}"#);
    assert!(bodies[2].contains("AVAILABLE"), "{}", bodies[2]);
    assert_eq!(bodies[3], r#"{"predictions":[4.5]}"#);
}

#[test]
fn a_request_split_across_writes_is_answered() {
    let addr = server();
    let mut connection = connect(addr);
    let request = post("/v1/models/half:predict", r#"{"instances": [1.0, 5.0]}"#, "");
    for part in [
        &request[..20],
        &request[20..request.len() - 10],
        &request[request.len() - 10..],
    ] {
        connection.get_mut().write_all(part.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let answer = read_answer(&mut connection);
    assert_eq!(answer.body, r#"{"predictions":[3.5,5.5]}"#);
    // And the connection serves the next request too.
    connection.get_mut().write_all(request.as_bytes()).unwrap();
    assert_eq!(read_answer(&mut connection).body, r#"{"predictions":[3.5,5.5]}"#);
}

#[test]
fn connection_close_is_honoured() {
    let addr = server();
    let mut connection = connect(addr);
    let request = post(
        "/v1/models/half:predict",
        r#"{"instances": [1.0]}"#,
        "Connection: close\r\n",
    );
    connection.get_mut().write_all(request.as_bytes()).unwrap();
    let answer = read_answer(&mut connection);
    assert!(answer.status.starts_with("HTTP/1.1 200"), "{}", answer.status);
    assert_eq!(answer.header("connection"), Some("close"));
    let mut rest = Vec::new();
    connection.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
}

#[test]
fn requests_the_front_leaves_are_served_by_actix_web() {
    let addr = server();
    // A chunked body, a gzip body and a query string: each actix-web's.
    let chunked = "POST /v1/models/half:predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n14\r\n{\"instances\": [1.0]}\r\n0\r\n\r\n";
    let mut connection = connect(addr);
    connection.get_mut().write_all(chunked.as_bytes()).unwrap();
    assert_eq!(read_answer(&mut connection).body, r#"{"predictions":[3.5]}"#);
    let mut gzipped = Vec::new();
    {
        let mut encoder = flate2::write::GzEncoder::new(&mut gzipped, flate2::Compression::default());
        encoder.write_all(br#"{"instances": [2.0]}"#).unwrap();
        encoder.finish().unwrap();
    }
    let mut request = format!(
        "POST /v1/models/half:predict HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
        gzipped.len()
    )
    .into_bytes();
    request.extend_from_slice(&gzipped);
    let mut connection = connect(addr);
    connection.get_mut().write_all(&request).unwrap();
    assert_eq!(read_answer(&mut connection).body, r#"{"predictions":[4.0]}"#);
    let mut connection = connect(addr);
    let query = post("/v1/models/half:predict?x=1", r#"{"instances": [3.0]}"#, "");
    connection.get_mut().write_all(query.as_bytes()).unwrap();
    assert_eq!(read_answer(&mut connection).body, r#"{"predictions":[4.5]}"#);
    // A body larger than the front reads itself.
    let values = vec!["1.0"; 20_000].join(",");
    let large = post(
        "/v1/models/half:predict",
        &format!(r#"{{"instances": [{values}]}}"#),
        "",
    );
    let mut connection = connect(addr);
    connection.get_mut().write_all(large.as_bytes()).unwrap();
    let answer = read_answer(&mut connection);
    assert!(answer.status.starts_with("HTTP/1.1 200"), "{}", answer.status);
    let predictions: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(predictions["predictions"].as_array().unwrap().len(), 20_000);
}

#[test]
fn a_refusal_before_the_body_is_read_reaches_its_client() {
    let addr = spawn_server({
        let mut settings = common::model_settings("half", repo_path("models/half_plus_three"));
        settings.http.max_in_flight_requests = 1;
        settings
    });
    let head = "POST /v1/models/half:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n";
    // A request whose body never finishes holds the only slot.
    let stall = || {
        let mut stalled = connect(addr);
        stalled.get_mut().write_all(format!("{head}{{").as_bytes()).unwrap();
        stalled
    };
    let mut stalled = stall();
    // Once it holds the slot, a whole request on another connection is
    // refused. A probe that the server took first held the slot instead and
    // the stalled request was refused (answered): it is sent again.
    common::wait_for("the stalled request to hold the only slot", || {
        if was_answered(stalled.get_ref()) {
            stalled = stall();
            return false;
        }
        let mut probe = connect(addr);
        let body = r#"{"instances": [1.0]}"#;
        let request = format!(
            "POST /v1/models/half:predict HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        probe.get_mut().write_all(request.as_bytes()).unwrap();
        read_answer(&mut probe).status.starts_with("HTTP/1.1 503") && !was_answered(stalled.get_ref())
    });
    // Another is refused as soon as its head arrives, and closed; the rest of
    // its body, sent after, is read and dropped rather than reset the connection.
    let mut refused = connect(addr);
    refused
        .get_mut()
        .write_all(format!("{head}{}", " ".repeat(1000)).as_bytes())
        .unwrap();
    let answer = read_answer(&mut refused);
    assert!(answer.status.starts_with("HTTP/1.1 503"), "{}", answer.status);
    assert_eq!(answer.header("connection"), Some("close"));
    assert!(answer.body.contains("max_in_flight_requests"), "{}", answer.body);
    refused.get_mut().write_all(" ".repeat(1000).as_bytes()).unwrap();
    refused.get_mut().shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    refused.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    drop(stalled);
}

/// Whether the server has answered on (or closed) a connection whose request
/// is still unfinished, without waiting.
fn was_answered(connection: &TcpStream) -> bool {
    connection.set_nonblocking(true).unwrap();
    let answered = !matches!(connection.peek(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    connection.set_nonblocking(false).unwrap();
    answered
}
