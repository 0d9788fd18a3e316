//! The connection against frames written by hand over an in-memory pipe, on
//! the mock runtime (model `m`: `y = x + version`): what a client sees of
//! settings, pings, flow control, resets, limits and connection errors.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::frame::{self, flag, kind, setting, Head, Reason};
use super::hpack;
use crate::codec::tensor_proto::{to_proto, to_tensor};
use crate::grpc::channel_args::ChannelArguments;
use crate::grpc::transport::{ConnectionOptions, Services};
use crate::proto::tensorflow::serving::{ModelSpec, PredictRequest, PredictResponse};
use crate::server::testing::mock_state;
use crate::tensor::{Tensor, TensorData};

const PREDICT: &str = "/tensorflow.serving.PredictionService/Predict";

/// A client speaking frames by hand.
struct Peer {
    io: DuplexStream,
    read: Vec<u8>,
    decoder: hpack::Decoder,
    served: tokio::task::JoinHandle<()>,
    /// The server's drain: `true` starts it.
    drain: tokio::sync::watch::Sender<bool>,
    _root: TempRoot,
}

struct TempRoot(std::path::PathBuf);

impl Drop for TempRoot {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// A frame as read: its header, its payload, and its fields for HEADERS.
struct Read {
    head: Head,
    payload: Vec<u8>,
    fields: Vec<(String, String)>,
}

impl Read {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// The mock model's services, and the directory they load from.
fn mock_services(name: &str) -> (Services, TempRoot) {
    let (state, root) = mock_state(name);
    let health = crate::grpc::health::HealthService::new();
    let services = crate::grpc::services(&state, &health, 4 << 20, &ChannelArguments::default()).unwrap();
    (services, TempRoot(root))
}

/// A connection served over an in-memory pipe: the client's end, the
/// drain's switch and the serving task.
fn serve_pipe(
    services: Services,
    options: ConnectionOptions,
) -> (
    DuplexStream,
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let (client, server) = tokio::io::duplex(1 << 20);
    let (drain, shutdown) = tokio::sync::watch::channel(false);
    let served = tokio::spawn(super::serve(server, services, None, Arc::new(options), shutdown));
    (client, drain, served)
}

impl Peer {
    /// A connection nothing has been sent on yet.
    fn open(name: &str, options: ConnectionOptions) -> Peer {
        let (services, root) = mock_services(name);
        let (io, drain, served) = serve_pipe(services, options);
        Peer {
            io,
            read: Vec::new(),
            decoder: hpack::Decoder::default(),
            served,
            drain,
            _root: root,
        }
    }

    /// Connects with the preface and `settings`, and reads the server's
    /// settings and connection window.
    async fn connect(name: &str, options: ConnectionOptions, settings: &[(u16, u32)]) -> Peer {
        let mut peer = Peer::open(name, options);
        let mut hello = frame::PREFACE.to_vec();
        frame::settings(&mut hello, settings);
        peer.send(&hello).await;
        let first = peer.next().await.expect("the server's settings");
        assert_eq!((first.head.kind, first.head.flags), (kind::SETTINGS, 0));
        let window = peer.next().await.expect("the connection's window");
        assert_eq!((window.head.kind, window.head.stream), (kind::WINDOW_UPDATE, 0));
        let ack = peer.next().await.expect("our settings acknowledged");
        assert_eq!((ack.head.kind, ack.head.flags), (kind::SETTINGS, flag::ACK));
        peer
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.io.write_all(bytes).await.unwrap();
    }

    /// The next frame, or `None` once the server has closed the connection.
    async fn next(&mut self) -> Option<Read> {
        loop {
            if self.read.len() >= frame::HEAD {
                let head = Head::parse(self.read[..frame::HEAD].try_into().unwrap());
                if self.read.len() >= frame::HEAD + head.len {
                    let payload = self.read[frame::HEAD..frame::HEAD + head.len].to_vec();
                    self.read.drain(..frame::HEAD + head.len);
                    let mut fields = Vec::new();
                    if head.kind == kind::HEADERS {
                        self.decoder
                            .decode(&Bytes::from(payload.clone()), |name, value| {
                                fields.push((
                                    String::from_utf8_lossy(name).into_owned(),
                                    String::from_utf8_lossy(&value).into_owned(),
                                ))
                            })
                            .unwrap();
                    }
                    return Some(Read { head, payload, fields });
                }
            }
            let mut chunk = [0u8; 16 << 10];
            let read = tokio::time::timeout(Duration::from_secs(10), self.io.read(&mut chunk))
                .await
                .expect("the server answers within 10 s")
                .unwrap_or(0);
            if read == 0 {
                return None;
            }
            self.read.extend_from_slice(&chunk[..read]);
        }
    }

    /// The next frame of a kind other than WINDOW_UPDATE and SETTINGS acks.
    async fn next_answer(&mut self) -> Option<Read> {
        loop {
            let read = self.next().await?;
            if read.head.kind != kind::WINDOW_UPDATE && read.head.kind != kind::SETTINGS {
                return Some(read);
            }
        }
    }
}

fn request_block(path: &str) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "in-process"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        hpack::field(&mut block, name.as_bytes(), value.as_bytes(), false);
    }
    block
}

fn headers(stream: u32, block: &[u8], end_stream: bool) -> Vec<u8> {
    let mut out = Vec::new();
    frame::header_block(&mut out, stream, block, end_stream, frame::DEFAULT_MAX_FRAME);
    out
}

fn message(values: Vec<f32>) -> Vec<u8> {
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
    let mut body = vec![0];
    body.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
    body.extend_from_slice(&encoded);
    body
}

/// HEADERS and one DATA with END_STREAM: a whole unary call.
fn call(stream: u32, values: Vec<f32>) -> Vec<u8> {
    let mut out = headers(stream, &request_block(PREDICT), false);
    frame::data(&mut out, stream, &message(values), true);
    out
}

fn answer_values(payload: &[u8]) -> Vec<f32> {
    assert_eq!(payload[0], 0, "uncompressed");
    let len = u32::from_be_bytes(payload[1..5].try_into().unwrap()) as usize;
    let response = PredictResponse::decode(&payload[5..5 + len]).unwrap();
    match to_tensor(&response.outputs["y"], "y").unwrap().data {
        TensorData::Float(values) => values,
        other => panic!("floats expected, got {other:?}"),
    }
}

#[tokio::test]
async fn a_predict_is_answered_with_headers_a_message_and_trailers() {
    let mut peer = Peer::connect("h2-predict", ConnectionOptions::new(None, None, None), &[]).await;
    peer.send(&call(1, vec![1.0, 2.0])).await;
    let mut ping = Vec::new();
    frame::ping(&mut ping, false, *b"12345678");
    peer.send(&ping).await;

    let mut seen = Vec::new();
    while seen.len() < 4 {
        seen.push(peer.next_answer().await.expect("frames"));
    }
    let pong = seen.iter().find(|r| r.head.kind == kind::PING).expect("a PING ack");
    assert_eq!((pong.head.flags, &pong.payload[..]), (flag::ACK, &b"12345678"[..]));
    let stream: Vec<&Read> = seen.iter().filter(|r| r.head.stream == 1).collect();
    assert_eq!(stream[0].head.kind, kind::HEADERS);
    assert_eq!(stream[0].field(":status"), Some("200"));
    assert_eq!(stream[0].field("content-type"), Some("application/grpc"));
    assert!(stream[0].field("x-request-id").is_some_and(|id| !id.is_empty()));
    assert_eq!(stream[1].head.kind, kind::DATA);
    assert_eq!(answer_values(&stream[1].payload), [3.0, 4.0]);
    assert_eq!(stream[2].head.kind, kind::HEADERS);
    assert!(stream[2].head.has(flag::END_STREAM));
    assert_eq!(stream[2].field("grpc-status"), Some("0"));
}

#[tokio::test]
async fn an_error_is_one_trailers_only_answer() {
    let mut peer = Peer::connect("h2-error", ConnectionOptions::new(None, None, None), &[]).await;
    let mut out = headers(1, &request_block(PREDICT), false);
    let mut body = message(vec![1.0]);
    // The model's name, "m", made "q": no such model.
    let at = body.windows(3).position(|w| w == [0x0a, 0x01, b'm']).unwrap();
    body[at + 2] = b'q';
    frame::data(&mut out, 1, &body, true);
    peer.send(&out).await;
    let answer = peer.next_answer().await.unwrap();
    assert_eq!(answer.head.kind, kind::HEADERS);
    assert!(answer.head.has(flag::END_STREAM));
    assert_eq!(answer.field(":status"), Some("200"));
    assert_eq!(answer.field("grpc-status"), Some("5"), "{:?}", answer.fields);
    assert!(
        answer.field("grpc-message").is_some_and(|m| m.contains("q")),
        "{:?}",
        answer.fields
    );
}

#[tokio::test]
async fn a_call_split_over_frames_and_other_methods_are_answered() {
    let mut peer = Peer::connect("h2-split", ConnectionOptions::new(None, None, None), &[]).await;
    let body = message(vec![5.0]);
    let mut out = headers(1, &request_block(PREDICT), false);
    frame::data(&mut out, 1, &body[..3], false);
    frame::data(&mut out, 1, &body[3..], false);
    frame::data(&mut out, 1, &[], true);
    peer.send(&out).await;
    let head = peer.next_answer().await.unwrap();
    assert_eq!(head.field(":status"), Some("200"));
    let data = peer.next_answer().await.unwrap();
    assert_eq!(answer_values(&data.payload), [7.0]);
    let trailers = peer.next_answer().await.unwrap();
    assert_eq!(trailers.field("grpc-status"), Some("0"));

    // A method the connection hands to the tonic services.
    let mut out = headers(
        3,
        &request_block("/tensorflow.serving.PredictionService/NoSuchMethod"),
        false,
    );
    frame::data(&mut out, 3, &[0, 0, 0, 0, 0], true);
    peer.send(&out).await;
    let answer = peer.next_answer().await.unwrap();
    assert_eq!(answer.head.stream, 3);
    assert_eq!(answer.field("grpc-status"), Some("12"), "{:?}", answer.fields);
}

/// A call on `stream` whose header block is `request_block(PREDICT)`
/// followed by `extra`; the answer's request id.
async fn request_id_of(peer: &mut Peer, stream: u32, extra: &[u8]) -> String {
    let mut block = request_block(PREDICT);
    block.extend_from_slice(extra);
    let mut out = headers(stream, &block, false);
    frame::data(&mut out, stream, &message(vec![1.0]), true);
    peer.send(&out).await;
    let head = peer.next_answer().await.unwrap();
    assert_eq!((head.head.stream, head.field(":status")), (stream, Some("200")));
    let data = peer.next_answer().await.unwrap();
    assert_eq!(answer_values(&data.payload), [3.0]);
    let trailers = peer.next_answer().await.unwrap();
    assert_eq!(trailers.field("grpc-status"), Some("0"));
    head.field("x-request-id").unwrap().to_string()
}

#[tokio::test]
async fn a_repeated_header_block_is_taken_as_decoded_unless_the_table_changed() {
    let mut peer = Peer::connect("h2-repeat", ConnectionOptions::new(None, None, None), &[]).await;
    // `x-request-id` with incremental indexing: the table's entry 62 after it.
    let indexed = |id: &str| {
        let mut field = vec![0x40, 12];
        field.extend_from_slice(b"x-request-id");
        field.push(id.len() as u8);
        field.extend_from_slice(id.as_bytes());
        field
    };
    let mut plain = Vec::new();
    hpack::field(&mut plain, b"x-request-id", b"plain", false);
    assert_eq!(request_id_of(&mut peer, 1, &plain).await, "plain");
    // The same bytes again, taken without decoding.
    assert_eq!(request_id_of(&mut peer, 3, &plain).await, "plain");
    assert_eq!(request_id_of(&mut peer, 5, &indexed("one")).await, "one");
    // Entry 62 by index: "one", then the same bytes after the table changed.
    assert_eq!(request_id_of(&mut peer, 7, &[0xbe]).await, "one");
    assert_eq!(request_id_of(&mut peer, 9, &[0xbe]).await, "one");
    assert_eq!(request_id_of(&mut peer, 11, &indexed("two")).await, "two");
    assert_eq!(request_id_of(&mut peer, 13, &[0xbe]).await, "two");
    assert_eq!(request_id_of(&mut peer, 15, &[0xbe]).await, "two");
    // No id: each call gets a new one, though its head is reused.
    let first = request_id_of(&mut peer, 17, &[]).await;
    let second = request_id_of(&mut peer, 19, &[]).await;
    assert!(!first.is_empty() && first != second, "{first} {second}");
}

#[tokio::test]
async fn a_reset_stream_leaves_the_connection_serving() {
    let mut peer = Peer::connect("h2-reset", ConnectionOptions::new(None, None, None), &[]).await;
    let mut out = headers(1, &request_block(PREDICT), false);
    frame::rst_stream(&mut out, 1, Reason::CANCEL);
    out.extend(call(3, vec![1.0]));
    peer.send(&out).await;
    let answer = peer.next_answer().await.unwrap();
    assert_eq!(answer.head.stream, 3, "nothing is sent on the reset stream");
    assert_eq!(answer.field(":status"), Some("200"));
}

#[tokio::test]
async fn streams_over_the_limit_are_refused() {
    let mut peer = Peer::connect("h2-limit", ConnectionOptions::new(None, None, Some(1)), &[]).await;
    let mut out = headers(1, &request_block(PREDICT), false);
    out.extend(headers(3, &request_block(PREDICT), false));
    peer.send(&out).await;
    let refused = peer.next_answer().await.unwrap();
    assert_eq!((refused.head.kind, refused.head.stream), (kind::RST_STREAM, 3));
    assert_eq!(refused.payload, Reason::REFUSED_STREAM.0.to_be_bytes());
    // The first stream still completes.
    let mut out = Vec::new();
    frame::data(&mut out, 1, &message(vec![1.0]), true);
    peer.send(&out).await;
    let answer = peer.next_answer().await.unwrap();
    assert_eq!((answer.head.stream, answer.field(":status")), (1, Some("200")));
}

#[tokio::test]
async fn an_answer_waits_for_the_clients_window() {
    let settings = [(setting::INITIAL_WINDOW_SIZE, 10)];
    let mut peer = Peer::connect("h2-window", ConnectionOptions::new(None, None, None), &settings).await;
    peer.send(&call(1, vec![1.0, 2.0, 3.0])).await;
    let head = peer.next_answer().await.unwrap();
    assert_eq!(head.head.kind, kind::HEADERS);
    let first = peer.next_answer().await.unwrap();
    assert_eq!((first.head.kind, first.payload.len()), (kind::DATA, 10));
    // Nothing more until the window opens.
    let mut out = Vec::new();
    frame::ping(&mut out, false, *b"waiting!");
    peer.send(&out).await;
    let pong = peer.next_answer().await.unwrap();
    assert_eq!(pong.head.kind, kind::PING, "no more DATA while the window is shut");
    let mut out = Vec::new();
    frame::window_update(&mut out, 1, 1 << 16);
    peer.send(&out).await;
    let rest = peer.next_answer().await.unwrap();
    assert_eq!(rest.head.kind, kind::DATA);
    let mut body = first.payload.clone();
    body.extend_from_slice(&rest.payload);
    assert_eq!(answer_values(&body), [3.0, 4.0, 5.0]);
    let trailers = peer.next_answer().await.unwrap();
    assert_eq!(trailers.field("grpc-status"), Some("0"));
}

#[tokio::test]
async fn connection_errors_are_sent_as_goaway_and_close() {
    // A frame over the size this side allows.
    let mut peer = Peer::connect("h2-frame-size", ConnectionOptions::new(None, None, None), &[]).await;
    let mut out = Vec::new();
    frame::head(&mut out, frame::DEFAULT_MAX_FRAME + 1, kind::DATA, 0, 1);
    out.resize(out.len() + frame::DEFAULT_MAX_FRAME + 1, 0);
    peer.send(&out).await;
    let goaway = peer.next_answer().await.unwrap();
    assert_eq!(goaway.head.kind, kind::GOAWAY);
    assert_eq!(goaway.payload[4..8], Reason::FRAME_SIZE_ERROR.0.to_be_bytes());
    assert!(peer.next().await.is_none(), "closed after GOAWAY");
    tokio::time::timeout(Duration::from_secs(10), &mut peer.served)
        .await
        .unwrap()
        .unwrap();

    // A header block that is not HPACK.
    let mut peer = Peer::connect("h2-hpack", ConnectionOptions::new(None, None, None), &[]).await;
    peer.send(&headers(1, &[0x80], true)).await;
    let goaway = peer.next_answer().await.unwrap();
    assert_eq!(goaway.payload[4..8], Reason::COMPRESSION_ERROR.0.to_be_bytes());

    // DATA on a stream never opened.
    let mut peer = Peer::connect("h2-idle", ConnectionOptions::new(None, None, None), &[]).await;
    let mut out = Vec::new();
    frame::data(&mut out, 5, b"x", true);
    peer.send(&out).await;
    let goaway = peer.next_answer().await.unwrap();
    assert_eq!(goaway.payload[4..8], Reason::PROTOCOL_ERROR.0.to_be_bytes());
}

#[tokio::test]
async fn a_client_that_is_not_http2_is_closed() {
    let (services, _root) = mock_services("h2-preface");
    let (mut client, _drain, served) = serve_pipe(services, ConnectionOptions::new(None, None, None));
    client.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn drain_sends_goaway_twice_and_answers_calls_already_sent() {
    let mut peer = Peer::open("h2-drain", ConnectionOptions::new(None, None, None));
    let mut hello = frame::PREFACE.to_vec();
    frame::settings(&mut hello, &[]);
    peer.send(&hello).await;
    peer.drain.send(true).unwrap();
    let mut first_goaway = None;
    while first_goaway.is_none() {
        let read = peer.next().await.unwrap();
        if read.head.kind == kind::GOAWAY {
            first_goaway = Some(read);
        }
    }
    let first = first_goaway.unwrap();
    assert_eq!(first.payload[..4], frame::MAX_STREAM_ID.to_be_bytes(), "more may come");
    let ping = peer.next_answer().await.unwrap();
    assert_eq!(ping.head.kind, kind::PING);
    // A call sent before the client saw the GOAWAY is still answered.
    peer.send(&call(1, vec![1.0])).await;
    let mut ack = Vec::new();
    frame::ping(&mut ack, true, ping.payload[..8].try_into().unwrap());
    // One sent after the final GOAWAY is refused, its DATA ignored.
    ack.extend(call(3, vec![1.0]));
    peer.send(&ack).await;
    let mut kinds = Vec::new();
    while let Some(read) = peer.next_answer().await {
        if read.head.kind == kind::GOAWAY {
            assert_eq!(read.payload[..4], 1u32.to_be_bytes(), "the last stream taken");
            assert_eq!(
                read.payload[4..8],
                Reason::NO_ERROR.0.to_be_bytes(),
                "no connection error"
            );
        }
        kinds.push((read.head.kind, read.head.stream));
    }
    assert!(kinds.contains(&(kind::GOAWAY, 0)), "{kinds:?}");
    assert!(kinds.contains(&(kind::DATA, 1)), "the call was answered: {kinds:?}");
    assert!(
        kinds.contains(&(kind::RST_STREAM, 3)),
        "the late call was refused: {kinds:?}"
    );
}

#[tokio::test]
async fn unread_bodies_of_answered_calls_return_the_connections_window() {
    let mut peer = Peer::connect("h2-credit", ConnectionOptions::new(None, None, None), &[]).await;
    // Ten 60 KB calls to a method tonic answers without reading its body.
    let mut out = Vec::new();
    for n in 0..10u32 {
        let id = 2 * n + 1;
        out.extend(headers(id, &request_block("/no.such.Service/Method"), false));
        for part in 0..4 {
            frame::data(&mut out, id, &[0u8; 15_000], part == 3);
        }
    }
    peer.send(&out).await;
    let mut returned = 0u64;
    while returned < 512 << 10 {
        let read = peer.next().await.expect("the connection stays open");
        if read.head.kind == kind::WINDOW_UPDATE && read.head.stream == 0 {
            returned += u64::from(u32::from_be_bytes(read.payload[..4].try_into().unwrap()));
        }
    }
}

#[tokio::test]
async fn a_client_resetting_calls_as_fast_as_it_opens_them_is_sent_away() {
    let mut peer = Peer::connect("h2-rapid-reset", ConnectionOptions::new(None, None, None), &[]).await;
    let mut out = Vec::new();
    for n in 0..300u32 {
        let id = 2 * n + 1;
        out.extend(call(id, vec![1.0]));
        frame::rst_stream(&mut out, id, Reason::CANCEL);
    }
    peer.send(&out).await;
    loop {
        let read = peer.next_answer().await.expect("a GOAWAY before the close");
        if read.head.kind == kind::GOAWAY {
            assert_eq!(read.payload[4..8], 0xbu32.to_be_bytes(), "ENHANCE_YOUR_CALM");
            break;
        }
    }
}

#[tokio::test]
async fn the_drain_closes_a_connection_whose_call_never_ends_after_its_grace() {
    let (services, _root) = mock_services("h2-drain-grace");
    let mut options = ConnectionOptions::new(None, None, None);
    options.drain_grace = Duration::from_millis(200);
    let (mut client, closing, served) = serve_pipe(services, options);
    let mut hello = frame::PREFACE.to_vec();
    frame::settings(&mut hello, &[]);
    // A call whose body never ends.
    hello.extend(headers(1, &request_block(PREDICT), false));
    client.write_all(&hello).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    closing.send(true).unwrap();
    // The client never answers the GOAWAY's PING: the grace ends it all.
    let drained = async {
        let mut sink = vec![0u8; 1 << 16];
        while client.read(&mut sink).await.unwrap_or(0) > 0 {}
    };
    tokio::time::timeout(Duration::from_secs(10), drained)
        .await
        .expect("closed after the grace");
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .unwrap()
        .unwrap();
}

/// Frames with random kinds, flags, streams and payloads, 300 connections'
/// worth: every connection ends cleanly when the client goes, whatever it
/// sent, and none panics.
#[tokio::test]
async fn random_frames_never_panic_a_connection() {
    let (services, _root) = mock_services("h2-random");
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..300 {
        let (mut client, _drain, served) = serve_pipe(services.clone(), ConnectionOptions::new(None, None, Some(8)));
        let mut bytes = frame::PREFACE.to_vec();
        frame::settings(&mut bytes, &[]);
        for _ in 0..(next() % 12) {
            let kind = (next() % 11) as u8;
            let flags = (next() % 64) as u8;
            let stream = (next() % 8) as u32;
            let len = (next() % 48) as usize;
            let mut payload: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if kind == kind::HEADERS && next() % 2 == 0 {
                payload = request_block(PREDICT);
            } else if kind == kind::DATA && next() % 2 == 0 {
                payload = message(vec![1.0]);
            }
            frame::head(&mut bytes, payload.len(), kind, flags, stream);
            bytes.extend_from_slice(&payload);
        }
        client.write_all(&bytes).await.unwrap();
        let mut sink = vec![0u8; 1 << 16];
        let _ = tokio::time::timeout(Duration::from_millis(20), client.read(&mut sink)).await;
        drop(client);
        tokio::time::timeout(Duration::from_secs(10), served)
            .await
            .expect("the connection ends when its client goes")
            .expect("no panic");
    }
}
