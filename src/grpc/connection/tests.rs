//! The connection against the `h2` crate's client (and raw bytes where a
//! client would not send them) over an in-memory pipe, on the mock runtime
//! (model `m`: `y = x + version`, version 2 by default): a Predict's answer as gRPC frames it,
//! errors, windows and the pending-answer budget, resets, and the timers.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::ConnectionOptions;
use crate::codec::tensor_proto::{to_proto, to_tensor};
use crate::grpc::channel_args::ChannelArguments;
use crate::grpc::services::Services;
use crate::proto::tensorflow::serving::{ModelSpec, PredictRequest, PredictResponse};
use crate::server::testing::mock_state;
use crate::tensor::{Tensor, TensorData};

const PREDICT: &str = "/tensorflow.serving.PredictionService/Predict";

struct TempRoot(std::path::PathBuf);

impl Drop for TempRoot {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// A connection served over an in-memory pipe.
struct Served {
    client: Option<DuplexStream>,
    drain: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    _root: TempRoot,
}

fn serve(name: &str, options: ConnectionOptions) -> Served {
    let (state, root) = mock_state(name);
    let health = crate::grpc::health::HealthService::new();
    let services: Services = crate::grpc::services(&state, &health, 4 << 20, &ChannelArguments::default()).unwrap();
    let (client, server) = tokio::io::duplex(1 << 20);
    let (drain, shutdown) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(super::serve(server, services, None, Arc::new(options), shutdown, None));
    Served {
        client: Some(client),
        drain,
        task,
        _root: TempRoot(root),
    }
}

type Sender = h2::client::SendRequest<Bytes>;

/// An `h2` client on the pipe, its connection driven in the background.
async fn client(served: &mut Served, builder: h2::client::Builder) -> (Sender, tokio::task::JoinHandle<()>) {
    let io = served.client.take().expect("one client per connection");
    let (sender, connection) = builder.handshake(io).await.unwrap();
    let driven = tokio::spawn(async move {
        let _ = connection.await;
    });
    (sender, driven)
}

fn message(values: Vec<f32>) -> Bytes {
    let x = Tensor::new(vec![values.len()], TensorData::Float(values));
    let request = PredictRequest {
        model_spec: Some(ModelSpec {
            name: "m".into(),
            ..Default::default()
        }),
        inputs: [("x".to_string(), to_proto(&x))].into(),
        ..Default::default()
    };
    let encoded = request.encode_to_vec();
    let mut framed = vec![0];
    framed.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
    framed.extend_from_slice(&encoded);
    Bytes::from(framed)
}

fn request(path: &str) -> http::Request<()> {
    http::Request::builder()
        .method("POST")
        .uri(format!("http://in-process{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-request-id", "call-1")
        .body(())
        .unwrap()
}

/// Sends one call with `body`, in `parts` DATA frames.
async fn call(sender: &mut Sender, path: &str, body: Bytes, parts: usize) -> (http::response::Parts, h2::RecvStream) {
    let mut ready = sender.clone().ready().await.unwrap();
    let (response, mut send) = ready.send_request(request(path), false).unwrap();
    let step = body.len().div_ceil(parts.max(1)).max(1);
    let mut rest = body;
    while rest.len() > step {
        send.send_data(rest.split_to(step), false).unwrap();
    }
    send.send_data(rest, true).unwrap();
    let (parts, body) = response.await.unwrap().into_parts();
    (parts, body)
}

async fn read_all(body: &mut h2::RecvStream) -> Vec<u8> {
    let mut all = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        all.extend_from_slice(&chunk);
    }
    all
}

fn answer_values(body: &[u8]) -> Vec<f32> {
    let response = PredictResponse::decode(&body[5..]).unwrap();
    match to_tensor(&response.outputs["y"], "y").unwrap().data {
        TensorData::Float(values) => values,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_predict_is_answered_with_headers_a_message_and_trailers() {
    let mut served = serve("h2c-predict", ConnectionOptions::new(None, None, None));
    let (mut sender, _driven) = client(&mut served, h2::client::Builder::new()).await;
    for parts in [1, 3] {
        let (head, mut body) = call(&mut sender, PREDICT, message(vec![1.0, 2.0]), parts).await;
        assert_eq!(head.status, 200);
        assert_eq!(head.headers["content-type"], "application/grpc");
        assert_eq!(head.headers["x-request-id"], "call-1");
        assert_eq!(answer_values(&read_all(&mut body).await), [3.0, 4.0]);
        let trailers = body.trailers().await.unwrap().unwrap();
        assert_eq!(trailers["grpc-status"], "0");
    }
}

#[tokio::test]
async fn an_error_is_one_trailers_only_answer() {
    let mut served = serve("h2c-error", ConnectionOptions::new(None, None, None));
    let (mut sender, _driven) = client(&mut served, h2::client::Builder::new()).await;
    let unknown = PredictRequest {
        model_spec: Some(ModelSpec {
            name: "nope".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let encoded = unknown.encode_to_vec();
    let mut framed = vec![0];
    framed.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
    framed.extend_from_slice(&encoded);
    let (head, body) = call(&mut sender, PREDICT, Bytes::from(framed), 1).await;
    assert!(body.is_end_stream(), "no message, no trailers");
    assert_eq!(head.headers["grpc-status"], "5", "{head:?}");
    assert!(
        head.headers["grpc-message"].to_str().unwrap().contains("nope"),
        "{head:?}"
    );
    // A body that is not one message goes to tonic, which says why.
    let (head, _) = call(&mut sender, PREDICT, Bytes::from_static(&[0, 0, 0, 0, 9, 1]), 1).await;
    assert_eq!(head.headers["grpc-status"], "13", "{head:?}");
}

#[tokio::test]
async fn an_answer_waits_for_the_clients_window_and_the_budget_bounds_what_waits() {
    let mut options = ConnectionOptions::new(None, None, None);
    options.max_pending_answer_bytes = 1000;
    let mut served = serve("h2c-window", options);
    let mut builder = h2::client::Builder::new();
    builder.initial_window_size(10);
    let (mut sender, _driven) = client(&mut served, builder).await;
    // 100 floats: an answer of about 450 bytes, of which 10 leave.
    let (head, mut first) = call(&mut sender, PREDICT, message(vec![1.0; 100]), 1).await;
    assert_eq!(head.status, 200);
    let (_, mut second) = call(&mut sender, PREDICT, message(vec![2.0; 100]), 1).await;
    // Over the budget while the two wait: refused, whole, in its headers.
    let (refused, _) = call(&mut sender, PREDICT, message(vec![3.0; 100]), 1).await;
    assert_eq!(refused.headers["grpc-status"], "8", "{refused:?}");
    let why = refused.headers["grpc-message"].to_str().unwrap();
    assert!(why.contains("grpc_max_pending_answer_bytes=1000"), "{why}");
    let chunk = first.data().await.unwrap().unwrap();
    assert_eq!(chunk.len(), 10, "no more than the window");
    // Reading opens the window; both answers arrive whole.
    let mut body = chunk.to_vec();
    let _ = first.flow_control().release_capacity(10);
    body.extend(read_all(&mut first).await);
    assert_eq!(answer_values(&body), vec![3.0; 100]);
    assert_eq!(answer_values(&read_all(&mut second).await), vec![4.0; 100]);
}

#[tokio::test]
async fn a_reset_call_leaves_the_connection_serving() {
    let mut served = serve("h2c-reset", ConnectionOptions::new(None, None, None));
    let (mut sender, _driven) = client(&mut served, h2::client::Builder::new()).await;
    let mut ready = sender.clone().ready().await.unwrap();
    let (_response, mut send) = ready.send_request(request(PREDICT), false).unwrap();
    send.send_data(Bytes::from_static(&[0, 0, 0]), false).unwrap();
    send.send_reset(h2::Reason::CANCEL);
    let (head, mut body) = call(&mut sender, PREDICT, message(vec![5.0]), 1).await;
    assert_eq!(head.status, 200);
    assert_eq!(answer_values(&read_all(&mut body).await), [7.0]);
}

#[tokio::test]
async fn an_idle_connection_is_sent_away() {
    let mut options = ConnectionOptions::new(None, None, None);
    options.idle_timeout = Some(Duration::from_millis(200));
    let mut served = serve("h2c-idle", options);
    let (mut sender, driven) = client(&mut served, h2::client::Builder::new()).await;
    let (_, mut body) = call(&mut sender, PREDICT, message(vec![1.0]), 1).await;
    read_all(&mut body).await;
    // Within twice the timeout of the last call, and the client sees it end.
    tokio::time::timeout(Duration::from_secs(10), served.task)
        .await
        .expect("the idle connection was closed")
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), driven)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_client_that_sends_no_preface_is_closed() {
    let mut options = ConnectionOptions::new(None, None, None);
    options.handshake_timeout = Duration::from_millis(200);
    let mut served = serve("h2c-preface", options);
    let mut io = served.client.take().unwrap();
    tokio::time::timeout(Duration::from_secs(10), &mut served.task)
        .await
        .expect("closed without a preface")
        .unwrap();
    let mut sink = [0u8; 256];
    // What the server wrote (its SETTINGS), then the end.
    while io.read(&mut sink).await.unwrap_or(0) > 0 {}

    // Not HTTP/2 at all: closed at once.
    let mut served = serve("h2c-http1", ConnectionOptions::new(None, None, None));
    let mut io = served.client.take().unwrap();
    io.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), served.task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn the_drain_answers_calls_in_flight_then_closes_after_its_grace() {
    let mut options = ConnectionOptions::new(None, None, None);
    options.drain_grace = Duration::from_millis(300);
    let mut served = serve("h2c-drain", options);
    let (mut sender, _driven) = client(&mut served, h2::client::Builder::new()).await;
    // A call whose body never ends, and one that is answered.
    let mut ready = sender.clone().ready().await.unwrap();
    let (open, _keep) = ready.send_request(request(PREDICT), false).unwrap();
    let (_, mut body) = call(&mut sender, PREDICT, message(vec![1.0]), 1).await;
    served.drain.send(true).unwrap();
    assert_eq!(answer_values(&read_all(&mut body).await), [3.0]);
    tokio::time::timeout(Duration::from_secs(10), served.task)
        .await
        .expect("closed at the end of the grace")
        .unwrap();
    assert!(open.await.is_err(), "the open call was ended with the connection");
}

/// Random bytes after a valid preface, 200 connections' worth: every
/// connection ends when the client goes, whatever it sent, and none panics.
#[tokio::test]
async fn random_frames_never_panic_a_connection() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..200 {
        let mut served = serve(&format!("h2c-random-{round}"), ConnectionOptions::new(None, None, None));
        let mut io = served.client.take().unwrap();
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00".to_vec();
        for _ in 0..(next() % 8) {
            let len = (next() % 64) as usize;
            let kind = (next() % 11) as u8;
            bytes.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
            bytes.push(kind);
            bytes.push(next() as u8);
            bytes.extend_from_slice(&((next() % 8) as u32).to_be_bytes());
            bytes.extend((0..len).map(|_| next() as u8));
        }
        let _ = io.write_all(&bytes).await;
        drop(io);
        tokio::time::timeout(Duration::from_secs(10), served.task)
            .await
            .expect("the connection ends when its client goes")
            .expect("no panic");
    }
}

#[tokio::test]
async fn a_panicking_call_answers_internal_naming_its_request_id_and_is_counted() {
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let server = tokio::spawn(async move {
        let mut connection = h2::server::handshake(server_io).await.unwrap();
        let (request, respond) = connection.accept().await.unwrap().unwrap();
        let given = request.headers().get("x-request-id").cloned();
        let ended = super::calls::contained(respond, given, request.uri().path(), async |_: &mut _| {
            if request.method() == http::Method::POST {
                panic!("a bug in a call");
            }
            super::context::Ended::Answered
        })
        .await;
        // The answer leaves once the connection is polled again.
        let _ = tokio::time::timeout(Duration::from_millis(200), connection.accept()).await;
        ended
    });
    let (mut sender, connection) = h2::client::handshake(client_io).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let before = crate::metrics::METRICS.panics.with_label_values(&["request"]).get();
    let (response, _) = sender.send_request(request(PREDICT), true).unwrap();
    let head = response.await.unwrap();
    assert_eq!(head.headers()["grpc-status"], "13", "INTERNAL");
    assert_eq!(head.headers()["x-request-id"], "call-1");
    let message = head.headers()["grpc-message"].to_str().unwrap();
    assert!(message.contains("call-1") && message.contains("a%20bug"), "{message}");
    assert_eq!(server.await.unwrap(), super::context::Ended::Answered);
    assert!(crate::metrics::METRICS.panics.with_label_values(&["request"]).get() > before);
}
