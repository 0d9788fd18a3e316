//! One HTTP/2 connection of the gRPC listener: the frames read and written,
//! header blocks (`hpack`), both sides' flow control, stream states,
//! keepalive pings, and going away (a GOAWAY naming the highest id and a
//! PING, then, once the PING comes back, one naming the last stream taken:
//! calls already on the wire are answered, later ones are refused unrun).
//! A stream's call runs inside this task, so the answers a batch finishes
//! together leave in one write.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use futures_util::future::{AbortHandle, Abortable};
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::codegen::http::{self, HeaderMap, HeaderName, HeaderValue, Method, Request};
use tonic::metadata::MetadataMap;
use tonic::transport::server::TcpConnectInfo;
use tonic::Status;

use super::calls::{self, Event, Finished, Flow, Inbox, RecvBody, Shared};
use super::frame::{self, flag, kind, setting, Head, Reason};
use super::hpack;
use crate::dialects::tfs_grpc::PredictionApi;
use crate::grpc::transport::{ConnectionOptions, Services};
use crate::proto::tensorflow::serving::{PredictRequest, PredictResponse};

/// Each stream's receive window, and the connection's.
const WINDOW: u32 = 1 << 20;
/// The header list a request may carry (names, values and 32 bytes each).
const MAX_HEADER_LIST: usize = 16 << 10;
/// Encoded header bytes buffered across CONTINUATION frames.
const MAX_HEADER_BLOCK: usize = 64 << 10;
/// The concurrent streams a client may open unless told otherwise.
const DEFAULT_MAX_STREAMS: u32 = 200;
/// How long the first GOAWAY's PING may take before the final GOAWAY.
const GOAWAY_PING_WAIT: Duration = Duration::from_secs(1);
const GOAWAY_PING: [u8; 8] = *b"goaway\0\0";
const KEEPALIVE_PING: [u8; 8] = *b"keepaliv";
const ENHANCE_YOUR_CALM: Reason = Reason(0xb);
/// Streams the client may reset within a second before it is sent away:
/// resetting calls as fast as they are opened (CVE-2023-44487) would run
/// models for answers nobody reads.
const RESETS_PER_SECOND: u32 = 200;
/// Stream errors this side may answer on one connection (hyper's bound).
const MAX_LOCAL_RESETS: u32 = 1024;
/// How long the server's drain lets calls still open finish (a health
/// `Watch` never does) when no connection grace period is set.
const DRAIN_GRACE: Duration = Duration::from_secs(30);
const PREDICT_PATH: &str = "/tensorflow.serving.PredictionService/Predict";
const GRPC: &[u8] = b"application/grpc";

type Call = Pin<Box<dyn Future<Output = (u32, Option<Finished>)> + Send>>;

/// Serves one connection until it closes, sending GOAWAY when `shutdown`
/// turns true or the connection reaches its age.
pub async fn serve<IO>(
    io: IO,
    services: Services,
    peer: Option<TcpConnectInfo>,
    options: Arc<ConnectionOptions>,
    mut shutdown: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut connection = Connection::new(io, services, peer, options);
    if let Err(error) = connection.run(&mut shutdown).await {
        log::debug!("gRPC connection: {error}");
    }
}

struct Stream {
    recv: Recv,
    /// What the peer may still send on this stream.
    recv_window: i64,
    /// Received bytes not yet returned to the peer as window.
    unacked: usize,
    /// Bytes already returned as window before a relayed body read them.
    precredited: usize,
    /// Relayed body bytes charged to the connection's window and not yet
    /// returned: returned as they are read, or when the stream goes.
    uncredited: usize,
    remote_closed: bool,
    send_window: i64,
    out: VecDeque<Out>,
    queued: bool,
    headers_sent: bool,
    flow: Option<Arc<Flow>>,
    abort: Option<AbortHandle>,
}

enum Recv {
    /// A Predict collecting its message (or a call not yet relayed).
    Message(Box<RequestHead>, BytesMut),
    Relayed(Arc<Mutex<Inbox>>),
    /// The whole message is with the call.
    Done,
}

enum Out {
    Block(Vec<u8>, bool),
    Data(Bytes, bool),
    Reset(Reason),
}

#[derive(PartialEq, Eq)]
enum Away {
    Open,
    /// The first GOAWAY is out; the final one follows its PING.
    Draining(Instant),
    Final,
}

/// What woke the connection.
enum Wake {
    Read(std::io::Result<usize>),
    Calls,
    Timer,
    Shutdown(bool),
}

struct Connection<IO> {
    io: IO,
    rbuf: BytesMut,
    wbuf: Vec<u8>,
    services: Services,
    peer: Option<TcpConnectInfo>,
    /// Predict served from its decoded message; `None` under `--enable_auth`,
    /// where every call goes through the services' check.
    predict: Option<Arc<PredictionApi>>,
    options: Arc<ConnectionOptions>,
    decoder: hpack::Decoder,
    table_cleared: bool,
    preface_read: bool,
    streams: HashMap<u32, Stream>,
    ready: Vec<u32>,
    calls: FuturesUnordered<Call>,
    done: Vec<(u32, Option<Finished>)>,
    shared: Arc<Shared>,
    last_stream: u32,
    continuation: Option<(u32, bool, Vec<u8>)>,
    send_window: i64,
    recv_window: i64,
    unacked: usize,
    peer_initial_window: i64,
    peer_max_frame: usize,
    max_streams: u32,
    away: Away,
    peer_away: bool,
    failed: bool,
    /// Closing once what is written is flushed.
    closing: bool,
    /// Streams the client reset in the current second, and when it began.
    peer_resets: u32,
    resets_since: Instant,
    local_resets: u32,
    /// Frames read since the keepalive timer last fired.
    active: bool,
    keepalive_at: Option<Instant>,
    ping_deadline: Option<Instant>,
    age_at: Option<Instant>,
    grace_at: Option<Instant>,
}

impl<IO> Connection<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    fn new(io: IO, services: Services, peer: Option<TcpConnectInfo>, options: Arc<ConnectionOptions>) -> Self {
        let now = Instant::now();
        let predict = services.predict.clone().filter(|_| services.state.auth.is_none());
        Connection {
            io,
            rbuf: BytesMut::with_capacity(frame::DEFAULT_MAX_FRAME + frame::HEAD),
            wbuf: Vec::with_capacity(4096),
            services,
            peer,
            predict,
            decoder: hpack::Decoder::default(),
            table_cleared: false,
            preface_read: false,
            streams: HashMap::new(),
            ready: Vec::new(),
            calls: FuturesUnordered::new(),
            done: Vec::new(),
            shared: Arc::new(Shared::default()),
            last_stream: 0,
            continuation: None,
            send_window: frame::DEFAULT_WINDOW,
            recv_window: i64::from(WINDOW),
            unacked: 0,
            peer_initial_window: frame::DEFAULT_WINDOW,
            peer_max_frame: frame::DEFAULT_MAX_FRAME,
            max_streams: options.max_concurrent_streams.unwrap_or(DEFAULT_MAX_STREAMS),
            away: Away::Open,
            peer_away: false,
            failed: false,
            closing: false,
            peer_resets: 0,
            resets_since: now,
            local_resets: 0,
            active: false,
            keepalive_at: options.keepalive.map(|every| now + every),
            ping_deadline: None,
            age_at: options.max_age.map(|age| now + age),
            grace_at: None,
            options,
        }
    }

    async fn run(&mut self, shutdown: &mut watch::Receiver<bool>) -> std::io::Result<()> {
        frame::settings(
            &mut self.wbuf,
            &[
                (setting::MAX_CONCURRENT_STREAMS, self.max_streams),
                (setting::INITIAL_WINDOW_SIZE, WINDOW),
                (setting::MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST as u32),
            ],
        );
        frame::window_update(&mut self.wbuf, 0, WINDOW - frame::DEFAULT_WINDOW as u32);
        let sleep = tokio::time::sleep(Duration::from_secs(3600));
        let mut sleep = std::pin::pin!(sleep);
        let mut armed: Option<Instant> = None;
        // One future for the whole connection: it registers its interest once.
        let stop = async { shutdown.wait_for(|closing| *closing).await.is_ok() };
        let mut stop = std::pin::pin!(stop);
        loop {
            self.flush().await?;
            if self.finished() {
                let _ = self.io.shutdown().await;
                return Ok(());
            }
            let deadline = self.next_deadline();
            if deadline != armed {
                if let Some(at) = deadline {
                    sleep.as_mut().reset(at);
                }
                armed = deadline;
            }
            if self.rbuf.capacity() - self.rbuf.len() < 4096 {
                self.rbuf.reserve(frame::DEFAULT_MAX_FRAME + frame::HEAD);
            }
            let watching = self.away == Away::Open;
            let wake = {
                let Connection {
                    io,
                    rbuf,
                    calls,
                    done,
                    shared,
                    ..
                } = self;
                // Reading last, so a client that keeps the socket busy
                // cannot keep timers and the drain from being seen.
                tokio::select! {
                    biased;
                    () = poll_calls(calls, done, shared) => Wake::Calls,
                    () = &mut sleep, if armed.is_some() => Wake::Timer,
                    stopping = &mut stop, if watching => Wake::Shutdown(stopping),
                    read = io.read_buf(rbuf) => Wake::Read(read),
                }
            };
            match wake {
                Wake::Read(Ok(0)) => return Ok(()),
                Wake::Read(Err(error)) => return Err(error),
                Wake::Read(Ok(_)) => {
                    self.active = true;
                    if let Err(reason) = self.frames() {
                        self.fail(reason);
                    }
                }
                Wake::Calls => {}
                Wake::Timer => {
                    armed = None;
                    if !self.on_timer() {
                        return Ok(());
                    }
                }
                Wake::Shutdown(true) => {
                    self.go_away();
                    let grace = self.options.grace.unwrap_or(DRAIN_GRACE);
                    self.grace_at = Some(Instant::now() + grace);
                }
                Wake::Shutdown(false) => return Ok(()),
            }
            self.progress();
        }
    }

    fn finished(&self) -> bool {
        self.failed || self.closing || ((self.away == Away::Final || self.peer_away) && self.streams.is_empty())
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        // Usually the socket takes it all at once; a client that stops
        // reading gets the keepalive timeout to start again.
        let mut written = 0;
        while written < self.wbuf.len() {
            match self.io.write(&self.wbuf[written..]).now_or_never() {
                Some(Ok(0)) => return Err(std::io::ErrorKind::WriteZero.into()),
                Some(Ok(n)) => written += n,
                Some(Err(error)) => return Err(error),
                None => break,
            }
        }
        let stall = self.options.keepalive_timeout;
        let rest = async {
            self.io.write_all(&self.wbuf[written..]).await?;
            self.io.flush().await
        };
        match tokio::time::timeout(stall, rest).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the client stopped reading",
                ))
            }
        }
        self.wbuf.clear();
        if self.wbuf.capacity() > 1 << 20 {
            self.wbuf.shrink_to(64 << 10);
        }
        Ok(())
    }

    /// Relayed calls' events, finished calls, window returned for bodies
    /// read, then every frame the windows let out.
    fn progress(&mut self) {
        if self.shared.signal.swap(false, Ordering::AcqRel) {
            let events = std::mem::take(&mut *self.shared.events.lock().unwrap_or_else(|e| e.into_inner()));
            for (id, event) in events {
                self.relayed(id, event);
            }
            self.credit_consumed();
        }
        for (id, finished) in std::mem::take(&mut self.done) {
            self.finished_call(id, finished);
        }
        self.send();
    }

    fn next_deadline(&self) -> Option<Instant> {
        let draining = match self.away {
            Away::Draining(at) => Some(at),
            _ => None,
        };
        let age = self.age_at.filter(|_| self.away == Away::Open);
        [self.keepalive_at, self.ping_deadline, draining, age, self.grace_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// Returns false when the connection is to close now.
    fn on_timer(&mut self) -> bool {
        let now = Instant::now();
        if self.ping_deadline.is_some_and(|at| at <= now) {
            log::debug!("gRPC connection closed: a keepalive ping went unanswered");
            return false;
        }
        if self.grace_at.is_some_and(|at| at <= now) {
            log::debug!("gRPC connection closed at the end of its grace period");
            if self.away != Away::Final {
                self.final_go_away();
            }
            for id in self.streams.keys().copied().collect::<Vec<_>>() {
                self.remove(id);
                frame::rst_stream(&mut self.wbuf, id, Reason::CANCEL);
            }
            self.closing = true;
            return true;
        }
        if let (Some(at), Some(every)) = (self.keepalive_at, self.options.keepalive) {
            if at <= now {
                if !self.active && self.ping_deadline.is_none() {
                    frame::ping(&mut self.wbuf, false, KEEPALIVE_PING);
                    self.ping_deadline = Some(now + self.options.keepalive_timeout);
                }
                self.active = false;
                self.keepalive_at = Some(now + every);
            }
        }
        if matches!(self.away, Away::Draining(at) if at <= now) {
            self.final_go_away();
        }
        if self.away == Away::Open && self.age_at.is_some_and(|at| at <= now) {
            self.go_away();
            self.grace_at = self.options.grace.map(|grace| now + grace);
        }
        true
    }

    fn go_away(&mut self) {
        if self.away == Away::Open {
            frame::goaway(&mut self.wbuf, frame::MAX_STREAM_ID, Reason::NO_ERROR, b"");
            frame::ping(&mut self.wbuf, false, GOAWAY_PING);
            self.away = Away::Draining(Instant::now() + GOAWAY_PING_WAIT);
        }
    }

    fn final_go_away(&mut self) {
        frame::goaway(&mut self.wbuf, self.last_stream, Reason::NO_ERROR, b"");
        self.away = Away::Final;
    }

    /// A connection error: GOAWAY with its reason, then the connection closes.
    fn fail(&mut self, reason: Reason) {
        log::debug!("gRPC connection error {reason:?}");
        frame::goaway(&mut self.wbuf, self.last_stream, reason, b"");
        self.failed = true;
    }

    // ---- reading ----

    fn frames(&mut self) -> Result<(), Reason> {
        if !self.preface_read {
            if self.rbuf.len() < frame::PREFACE.len() {
                return if frame::PREFACE.starts_with(&self.rbuf) {
                    Ok(())
                } else {
                    Err(Reason::PROTOCOL_ERROR)
                };
            }
            if &self.rbuf[..frame::PREFACE.len()] != frame::PREFACE {
                return Err(Reason::PROTOCOL_ERROR);
            }
            self.rbuf.advance(frame::PREFACE.len());
            self.preface_read = true;
        }
        while self.rbuf.len() >= frame::HEAD && !self.failed {
            let Ok(bytes) = <&[u8; frame::HEAD]>::try_from(&self.rbuf[..frame::HEAD]) else {
                return Err(Reason::INTERNAL_ERROR);
            };
            let head = Head::parse(bytes);
            if head.len > frame::DEFAULT_MAX_FRAME {
                return Err(Reason::FRAME_SIZE_ERROR);
            }
            if self.rbuf.len() < frame::HEAD + head.len {
                break;
            }
            self.rbuf.advance(frame::HEAD);
            let payload = self.rbuf.split_to(head.len).freeze();
            self.frame(head, payload)?;
        }
        Ok(())
    }

    fn frame(&mut self, head: Head, payload: Bytes) -> Result<(), Reason> {
        if let Some((stream, ..)) = &self.continuation {
            if head.kind != kind::CONTINUATION || head.stream != *stream {
                return Err(Reason::PROTOCOL_ERROR);
            }
        }
        match head.kind {
            kind::DATA => self.data(&head, payload),
            kind::HEADERS => self.headers(&head, payload),
            kind::CONTINUATION => self.continuation(&head, &payload),
            kind::PRIORITY => {
                if head.stream == 0 {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                if head.len != 5 && self.streams.contains_key(&head.stream) {
                    self.reset(head.stream, Reason::FRAME_SIZE_ERROR);
                }
                Ok(())
            }
            kind::RST_STREAM => {
                if head.stream == 0 || head.stream > self.last_stream {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                if head.len != 4 {
                    return Err(Reason::FRAME_SIZE_ERROR);
                }
                if self.remove(head.stream) {
                    self.count_peer_reset()?;
                }
                Ok(())
            }
            kind::SETTINGS => self.settings(&head, &payload),
            kind::PUSH_PROMISE => Err(Reason::PROTOCOL_ERROR),
            kind::PING => {
                if head.stream != 0 {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                let Ok(opaque) = <[u8; 8]>::try_from(&payload[..]) else {
                    return Err(Reason::FRAME_SIZE_ERROR);
                };
                if !head.has(flag::ACK) {
                    frame::ping(&mut self.wbuf, true, opaque);
                } else if opaque == KEEPALIVE_PING {
                    self.ping_deadline = None;
                } else if opaque == GOAWAY_PING && matches!(self.away, Away::Draining(_)) {
                    self.final_go_away();
                }
                Ok(())
            }
            kind::GOAWAY => {
                if head.stream != 0 {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                if head.len < 8 {
                    return Err(Reason::FRAME_SIZE_ERROR);
                }
                self.peer_away = true;
                Ok(())
            }
            kind::WINDOW_UPDATE => self.window_update(&head, &payload),
            // Unknown frames are ignored (RFC 9113 §4.1).
            _ => Ok(()),
        }
    }

    fn settings(&mut self, head: &Head, payload: &[u8]) -> Result<(), Reason> {
        if head.stream != 0 {
            return Err(Reason::PROTOCOL_ERROR);
        }
        if head.has(flag::ACK) {
            return if head.len == 0 {
                Ok(())
            } else {
                Err(Reason::FRAME_SIZE_ERROR)
            };
        }
        if head.len % 6 != 0 {
            return Err(Reason::FRAME_SIZE_ERROR);
        }
        for entry in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([entry[0], entry[1]]);
            let value = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
            match id {
                setting::INITIAL_WINDOW_SIZE => {
                    let value = i64::from(value);
                    if value > frame::MAX_WINDOW {
                        return Err(Reason::FLOW_CONTROL_ERROR);
                    }
                    let delta = value - self.peer_initial_window;
                    self.peer_initial_window = value;
                    for (id, stream) in self.streams.iter_mut() {
                        stream.send_window += delta;
                        if stream.send_window > frame::MAX_WINDOW {
                            return Err(Reason::FLOW_CONTROL_ERROR);
                        }
                        if !stream.out.is_empty() && !stream.queued {
                            stream.queued = true;
                            self.ready.push(*id);
                        }
                    }
                }
                setting::MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_MAX_FRAME as u32..=(1 << 24) - 1).contains(&value) {
                        return Err(Reason::PROTOCOL_ERROR);
                    }
                    self.peer_max_frame = value as usize;
                }
                setting::ENABLE_PUSH if value > 1 => return Err(Reason::PROTOCOL_ERROR),
                // The header table is never used (`hpack::NO_TABLE`); nothing is pushed.
                setting::HEADER_TABLE_SIZE | setting::MAX_CONCURRENT_STREAMS | setting::MAX_HEADER_LIST_SIZE => {}
                _ => {}
            }
        }
        frame::settings_ack(&mut self.wbuf);
        Ok(())
    }

    fn window_update(&mut self, head: &Head, payload: &[u8]) -> Result<(), Reason> {
        let Ok(bytes) = <[u8; 4]>::try_from(payload) else {
            return Err(Reason::FRAME_SIZE_ERROR);
        };
        let increment = i64::from(u32::from_be_bytes(bytes) & 0x7fff_ffff);
        if head.stream == 0 {
            if increment == 0 {
                return Err(Reason::PROTOCOL_ERROR);
            }
            self.send_window += increment;
            if self.send_window > frame::MAX_WINDOW {
                return Err(Reason::FLOW_CONTROL_ERROR);
            }
            // Every stream waiting on the connection's window may go on.
            for (id, stream) in self.streams.iter_mut() {
                if !stream.out.is_empty() && !stream.queued {
                    stream.queued = true;
                    self.ready.push(*id);
                }
            }
            return Ok(());
        }
        let Some(stream) = self.streams.get_mut(&head.stream) else {
            return if head.stream > self.last_stream {
                Err(Reason::PROTOCOL_ERROR)
            } else {
                Ok(())
            };
        };
        if increment == 0 {
            self.reset(head.stream, Reason::PROTOCOL_ERROR);
            return Ok(());
        }
        stream.send_window += increment;
        if stream.send_window > frame::MAX_WINDOW {
            self.reset(head.stream, Reason::FLOW_CONTROL_ERROR);
            return Ok(());
        }
        if !stream.out.is_empty() && !stream.queued {
            stream.queued = true;
            self.ready.push(head.stream);
        }
        Ok(())
    }

    fn data(&mut self, head: &Head, payload: Bytes) -> Result<(), Reason> {
        if head.stream == 0 {
            return Err(Reason::PROTOCOL_ERROR);
        }
        let len = head.len as i64;
        if len > self.recv_window {
            return Err(Reason::FLOW_CONTROL_ERROR);
        }
        self.recv_window -= len;
        let range = frame::unpadded(head, &payload)?;
        let padding = head.len - range.len();
        let id = head.stream;
        let limit = self.services.receive_limit;
        let Some(stream) = self.streams.get_mut(&id) else {
            if id > self.last_stream {
                return Err(Reason::PROTOCOL_ERROR);
            }
            // A stream already closed here: its bytes still count against
            // the connection's window, so they are returned.
            self.credit(head.len);
            return Ok(());
        };
        if stream.remote_closed {
            self.credit(head.len);
            self.reset(id, Reason::STREAM_CLOSED);
            return Ok(());
        }
        if len > stream.recv_window {
            self.credit(head.len);
            self.reset(id, Reason::FLOW_CONTROL_ERROR);
            return Ok(());
        }
        stream.recv_window -= len;
        let end = head.has(flag::END_STREAM);
        let data = payload.slice(range);
        let mut credit = padding;
        let mut relay = false;
        match &mut stream.recv {
            Recv::Message(_, body) => {
                body.extend_from_slice(&data);
                credit += data.len();
                relay = !end && !predict_fits(body, limit);
            }
            Recv::Relayed(inbox) => match inbox.lock() {
                Ok(mut inbox) if !inbox.dropped => {
                    stream.uncredited += data.len();
                    inbox.push(data);
                }
                // Nobody reads this body any more.
                _ => credit += data.len(),
            },
            Recv::Done => credit += data.len(),
        }
        if credit > 0 {
            self.credit_stream(id, credit);
            self.credit(credit);
        }
        if relay {
            self.start_relay(id, false);
        }
        if end {
            self.end_of_body(id);
        }
        Ok(())
    }

    fn headers(&mut self, head: &Head, payload: Bytes) -> Result<(), Reason> {
        if head.stream == 0 {
            return Err(Reason::PROTOCOL_ERROR);
        }
        let mut range = frame::unpadded(head, &payload)?;
        if head.has(flag::PRIORITY) {
            if range.len() < 5 {
                return Err(Reason::PROTOCOL_ERROR);
            }
            range.start += 5;
        }
        let block = payload.slice(range);
        let end_stream = head.has(flag::END_STREAM);
        if head.has(flag::END_HEADERS) {
            self.header_block(head.stream, end_stream, &block)
        } else {
            if block.len() > MAX_HEADER_BLOCK {
                return Err(ENHANCE_YOUR_CALM);
            }
            self.continuation = Some((head.stream, end_stream, block.to_vec()));
            Ok(())
        }
    }

    fn continuation(&mut self, head: &Head, payload: &[u8]) -> Result<(), Reason> {
        let Some((id, end_stream, mut block)) = self.continuation.take() else {
            return Err(Reason::PROTOCOL_ERROR);
        };
        if block.len() + payload.len() > MAX_HEADER_BLOCK {
            return Err(ENHANCE_YOUR_CALM);
        }
        block.extend_from_slice(payload);
        if head.has(flag::END_HEADERS) {
            self.header_block(id, end_stream, &Bytes::from(block))
        } else {
            self.continuation = Some((id, end_stream, block));
            Ok(())
        }
    }

    fn header_block(&mut self, id: u32, end_stream: bool, block: &Bytes) -> Result<(), Reason> {
        // Decoded whatever becomes of the stream, to keep the table in step.
        let fields = decode(&mut self.decoder, block)?;
        if id % 2 == 0 {
            return Err(Reason::PROTOCOL_ERROR);
        }
        if let Some(stream) = self.streams.get(&id) {
            // Trailers: they end the request.
            if stream.remote_closed {
                self.reset(id, Reason::STREAM_CLOSED);
            } else if !end_stream {
                self.reset(id, Reason::PROTOCOL_ERROR);
            } else {
                self.end_of_body(id);
            }
            return Ok(());
        }
        if id <= self.last_stream {
            // A stream this side has closed; whatever it was is over.
            return Ok(());
        }
        if self.away == Away::Final {
            // Past the last stream the final GOAWAY named: refused unrun.
            frame::rst_stream(&mut self.wbuf, id, Reason::REFUSED_STREAM);
            return Ok(());
        }
        self.last_stream = id;
        if self.streams.len() >= self.max_streams as usize {
            frame::rst_stream(&mut self.wbuf, id, Reason::REFUSED_STREAM);
            return Ok(());
        }
        let request = match fields {
            Fields::Request(request) => request,
            Fields::Malformed => {
                frame::rst_stream(&mut self.wbuf, id, Reason::PROTOCOL_ERROR);
                return Ok(());
            }
            Fields::TooLarge(size) => {
                self.open(id, Recv::Done, end_stream);
                let status = Status::resource_exhausted(format!(
                    "the request's header list of {size} bytes is over the limit of {MAX_HEADER_LIST} bytes"
                ));
                self.trailers_only(id, &status);
                return Ok(());
            }
        };
        let take = self.predict.is_some() && request.is_predict();
        self.open(id, Recv::Message(request, BytesMut::new()), end_stream);
        if !take {
            self.start_relay(id, end_stream);
        } else if end_stream {
            self.end_of_body(id);
        }
        Ok(())
    }

    fn open(&mut self, id: u32, recv: Recv, end_stream: bool) {
        self.streams.insert(
            id,
            Stream {
                recv,
                recv_window: i64::from(WINDOW),
                unacked: 0,
                precredited: 0,
                uncredited: 0,
                remote_closed: end_stream,
                send_window: self.peer_initial_window,
                out: VecDeque::new(),
                queued: false,
                headers_sent: false,
                flow: None,
                abort: None,
            },
        );
    }

    /// The request ended (END_STREAM on DATA or on trailers).
    fn end_of_body(&mut self, id: u32) {
        let limit = self.services.receive_limit;
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        stream.remote_closed = true;
        let message = match &mut stream.recv {
            Recv::Relayed(inbox) => {
                if let Ok(mut inbox) = inbox.lock() {
                    inbox.end();
                }
                return;
            }
            Recv::Done => return,
            Recv::Message(_, body) => decodable(body, limit).and_then(|message| PredictRequest::decode(message).ok()),
        };
        let (Some(message), Some(api)) = (message, self.predict.clone()) else {
            // Not one whole message: tonic answers it.
            self.start_relay(id, true);
            return;
        };
        let Recv::Message(head, _) = std::mem::replace(&mut stream.recv, Recv::Done) else {
            return;
        };
        // A stream the client resets stops its call, as tonic's would.
        let (abort, registration) = AbortHandle::new_pair();
        stream.abort = Some(abort);
        let mut extensions = tonic::Extensions::new();
        if let Some(peer) = &self.peer {
            extensions.insert(peer.clone());
        }
        let request = tonic::Request::from_parts(MetadataMap::from_headers(head.headers), extensions, message);
        let call = Abortable::new(calls::predict(api, request), registration)
            .map(|result| result.unwrap_or(Finished::Stopped));
        self.calls.push(Box::pin(caught(id, call)));
    }

    /// Hands a stream collected as a Predict, or just opened, to the tonic
    /// services, with what has arrived so far as the start of its body.
    fn start_relay(&mut self, id: u32, ended: bool) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        let Recv::Message(head, body) = std::mem::replace(&mut stream.recv, Recv::Done) else {
            return;
        };
        let Some(parts) = head.into_parts() else {
            self.reset(id, Reason::PROTOCOL_ERROR);
            return;
        };
        let mut inbox = Inbox::default();
        stream.precredited = body.len();
        inbox.push(body.freeze());
        if ended {
            inbox.end();
        }
        let inbox = Arc::new(Mutex::new(inbox));
        let mut request = Request::from_parts(parts, RecvBody::new(inbox.clone(), self.shared.clone()));
        if let Some(peer) = &self.peer {
            request.extensions_mut().insert(peer.clone());
        }
        let flow = Arc::new(Flow::default());
        let (abort, registration) = AbortHandle::new_pair();
        stream.recv = Recv::Relayed(inbox);
        stream.flow = Some(flow.clone());
        stream.abort = Some(abort);
        let response = self.services.route(request);
        let call = calls::relay(id, response, self.shared.clone(), flow);
        let call = Abortable::new(call, registration).map(|result| result.unwrap_or(Finished::Stopped));
        self.calls.push(Box::pin(caught(id, call)));
    }

    /// Returns `bytes` of the connection's window once half of it is used.
    fn credit(&mut self, bytes: usize) {
        self.unacked += bytes;
        if self.unacked >= WINDOW as usize / 2 {
            frame::window_update(&mut self.wbuf, 0, self.unacked as u32);
            self.recv_window += self.unacked as i64;
            self.unacked = 0;
        }
    }

    fn credit_stream(&mut self, id: u32, bytes: usize) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        stream.unacked += bytes;
        if stream.unacked >= WINDOW as usize / 2 && !stream.remote_closed {
            frame::window_update(&mut self.wbuf, id, stream.unacked as u32);
            stream.recv_window += stream.unacked as i64;
            stream.unacked = 0;
        }
    }

    /// Window for what relayed calls have read of their bodies.
    fn credit_consumed(&mut self) {
        let mut credits = Vec::new();
        for (id, stream) in self.streams.iter_mut() {
            let Recv::Relayed(inbox) = &stream.recv else {
                continue;
            };
            let consumed = inbox
                .lock()
                .map(|mut inbox| std::mem::take(&mut inbox.consumed))
                .unwrap_or(0);
            let already = consumed.min(stream.precredited);
            stream.precredited -= already;
            if consumed > already {
                let owed = (consumed - already).min(stream.uncredited);
                stream.uncredited -= owed;
                credits.push((*id, owed));
            }
        }
        for (id, bytes) in credits {
            self.credit_stream(id, bytes);
            self.credit(bytes);
        }
    }

    // ---- answering ----

    fn relayed(&mut self, id: u32, event: Event) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        match event {
            Event::Head(parts, end) => {
                let mut block = Vec::with_capacity(128);
                hpack::status(&mut block, parts.status.as_u16());
                encode_fields(&mut block, &parts.headers);
                stream.headers_sent = true;
                stream.out.push_back(Out::Block(block, end));
            }
            Event::Data(data) => stream.out.push_back(Out::Data(data, false)),
            Event::Trailers(trailers) => {
                let mut block = Vec::with_capacity(64);
                encode_fields(&mut block, &trailers);
                stream.out.push_back(Out::Block(block, true));
            }
            Event::End => stream.out.push_back(Out::Data(Bytes::new(), true)),
            Event::Failed => stream.out.push_back(Out::Reset(Reason::INTERNAL_ERROR)),
        }
        if !stream.queued {
            stream.queued = true;
            self.ready.push(id);
        }
    }

    fn finished_call(&mut self, id: u32, finished: Option<Finished>) {
        match finished {
            Some(Finished::Predict(Ok(response))) => self.predict_answer(id, response),
            Some(Finished::Predict(Err(status))) => self.trailers_only(id, &status),
            Some(Finished::Relayed | Finished::Stopped) => {}
            None => {
                log::error!("a gRPC call on stream {id} panicked");
                match self.streams.get(&id) {
                    Some(stream) if stream.headers_sent => self.reset(id, Reason::INTERNAL_ERROR),
                    Some(_) => self.trailers_only(id, &Status::internal("the call failed unexpectedly")),
                    None => {}
                }
            }
        }
    }

    fn predict_answer(&mut self, id: u32, response: tonic::Response<PredictResponse>) {
        let (metadata, message, _) = response.into_parts();
        let len = message.encoded_len();
        let limit = self.services.send_limit;
        if len > limit {
            let status = Status::out_of_range(format!(
                "Error, encoded message length too large: found {len} bytes, the limit is: {limit} bytes"
            ));
            return self.trailers_only(id, &status);
        }
        let mut body = Vec::with_capacity(5 + len);
        body.push(0);
        body.extend_from_slice(&(len as u32).to_be_bytes());
        if message.encode(&mut body).is_err() {
            return self.trailers_only(id, &Status::internal("the response could not be encoded"));
        }
        let mut block = Vec::with_capacity(96);
        block.push(hpack::STATUS_OK);
        hpack::field(&mut block, b"content-type", GRPC, false);
        for (name, value) in metadata.into_headers().iter() {
            if !RESERVED.contains(&name.as_str()) {
                hpack::field(
                    &mut block,
                    name.as_str().as_bytes(),
                    value.as_bytes(),
                    value.is_sensitive(),
                );
            }
        }
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        stream.headers_sent = true;
        stream.out.push_back(Out::Block(block, false));
        stream.out.push_back(Out::Data(Bytes::from(body), false));
        stream.out.push_back(Out::Block(GRPC_OK_TRAILERS.to_vec(), true));
        if !stream.queued {
            stream.queued = true;
            self.ready.push(id);
        }
    }

    /// A call's whole answer in one HEADERS frame: its status, no message.
    fn trailers_only(&mut self, id: u32, status: &Status) {
        let mut fields = HeaderMap::new();
        // A message no header can carry is replaced by tonic with its own status.
        if let Some(status) = status.add_header(&mut fields).err() {
            fields.clear();
            let _ = status.add_header(&mut fields);
        }
        let mut block = Vec::with_capacity(128);
        block.push(hpack::STATUS_OK);
        hpack::field(&mut block, b"content-type", GRPC, false);
        encode_fields(&mut block, &fields);
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        stream.headers_sent = true;
        stream.out.push_back(Out::Block(block, true));
        if !stream.queued {
            stream.queued = true;
            self.ready.push(id);
        }
    }

    /// A stream error: RST_STREAM, and its call stopped. A client causing
    /// many is sent away.
    fn reset(&mut self, id: u32, reason: Reason) {
        self.remove(id);
        frame::rst_stream(&mut self.wbuf, id, reason);
        self.local_resets += 1;
        if self.local_resets > MAX_LOCAL_RESETS {
            self.fail(ENHANCE_YOUR_CALM);
        }
    }

    /// Removes a stream and stops its call; what its unread body held of the
    /// connection's window is returned. False when there was no such stream.
    fn remove(&mut self, id: u32) -> bool {
        let Some(mut stream) = self.streams.remove(&id) else {
            return false;
        };
        if let Some(abort) = stream.abort.take() {
            abort.abort();
        }
        if let Recv::Relayed(inbox) = &stream.recv {
            if let Ok(mut inbox) = inbox.lock() {
                inbox.reset();
            }
        }
        if stream.uncredited > 0 {
            self.credit(stream.uncredited);
        }
        true
    }

    /// A stream the client reset while its call ran.
    fn count_peer_reset(&mut self) -> Result<(), Reason> {
        let now = Instant::now();
        if now.duration_since(self.resets_since) >= Duration::from_secs(1) {
            self.resets_since = now;
            self.peer_resets = 0;
        }
        self.peer_resets += 1;
        if self.peer_resets > RESETS_PER_SECOND {
            return Err(ENHANCE_YOUR_CALM);
        }
        Ok(())
    }

    /// Writes what each stream with something to send may send now.
    fn send(&mut self) {
        let mut index = 0;
        while index < self.ready.len() {
            let id = self.ready[index];
            let Some(stream) = self.streams.get_mut(&id) else {
                self.ready.swap_remove(index);
                continue;
            };
            let mut closed = false;
            while let Some(out) = stream.out.front_mut() {
                match out {
                    Out::Block(block, end) => {
                        if !self.table_cleared {
                            block.insert(0, hpack::NO_TABLE);
                            self.table_cleared = true;
                        }
                        frame::header_block(&mut self.wbuf, id, block, *end, self.peer_max_frame);
                        closed = *end;
                    }
                    Out::Reset(reason) => {
                        frame::rst_stream(&mut self.wbuf, id, *reason);
                        closed = true;
                        stream.remote_closed = true;
                    }
                    Out::Data(data, end) => {
                        let allowed = stream.send_window.min(self.send_window).max(0) as usize;
                        let n = data.len().min(allowed).min(self.peer_max_frame);
                        if n == 0 && !data.is_empty() {
                            break;
                        }
                        let last = n == data.len();
                        frame::data(&mut self.wbuf, id, &data[..n], last && *end);
                        stream.send_window -= n as i64;
                        self.send_window -= n as i64;
                        if let Some(flow) = &stream.flow {
                            flow.written(n);
                        }
                        closed = last && *end;
                        if !last {
                            data.advance(n);
                            continue;
                        }
                    }
                }
                stream.out.pop_front();
                if closed {
                    break;
                }
            }
            if closed {
                if !stream.remote_closed {
                    // Answered before the request ended: the rest is not wanted.
                    frame::rst_stream(&mut self.wbuf, id, Reason::NO_ERROR);
                }
                self.remove(id);
                self.ready.swap_remove(index);
            } else if stream.out.is_empty() {
                stream.queued = false;
                self.ready.swap_remove(index);
            } else {
                index += 1;
            }
        }
    }
}

/// Whether the message collected so far can still be a Predict served
/// from its decoded message: one uncompressed message within the limit.
/// A compressed one, an over-long one or a second one goes to tonic,
/// which answers them as it always has.
fn predict_fits(body: &[u8], limit: usize) -> bool {
    if body.len() < 5 {
        return true;
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    body[0] == 0 && len <= limit && body.len() <= 5 + len
}

/// The message of a body holding exactly one uncompressed gRPC message.
fn decodable(body: &[u8], limit: usize) -> Option<&[u8]> {
    let (prefix, message) = body.split_at_checked(5)?;
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    (prefix[0] == 0 && message.len() == len && len <= limit).then_some(message)
}

/// `grpc-status: 0`.
const GRPC_OK_TRAILERS: &[u8] = b"\x00\x0bgrpc-status\x010";

/// What tonic leaves out of a response's metadata.
const RESERVED: [&str; 5] = ["te", "content-type", "grpc-message", "grpc-message-type", "grpc-status"];

fn encode_fields(block: &mut Vec<u8>, fields: &HeaderMap) {
    for (name, value) in fields {
        hpack::field(block, name.as_str().as_bytes(), value.as_bytes(), value.is_sensitive());
    }
}

enum Fields {
    Request(Box<RequestHead>),
    Malformed,
    TooLarge(usize),
}

/// A request's header block, decoded.
struct RequestHead {
    method: Bytes,
    scheme: Option<Bytes>,
    authority: Option<Bytes>,
    path: Bytes,
    headers: HeaderMap,
    /// A message compressed with `grpc-encoding`: tonic decompresses it,
    /// and answers in the same coding when the client accepts it.
    compressed: bool,
}

impl RequestHead {
    /// An uncompressed Predict: answered uncompressed, as TF Serving
    /// answers, whatever `grpc-accept-encoding` allows.
    fn is_predict(&self) -> bool {
        &self.method[..] == b"POST" && &self.path[..] == PREDICT_PATH.as_bytes() && !self.compressed
    }

    fn into_parts(self) -> Option<http::request::Parts> {
        let method = Method::from_bytes(&self.method).ok()?;
        let path = http::uri::PathAndQuery::from_maybe_shared(self.path).ok()?;
        let mut uri = http::Uri::builder();
        if let (Some(scheme), Some(authority)) = (self.scheme, self.authority) {
            let authority = http::uri::Authority::from_maybe_shared(authority).ok()?;
            uri = uri.scheme(&scheme[..]).authority(authority);
        }
        let uri = uri.path_and_query(path).build().ok()?;
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .version(http::Version::HTTP_2)
            .body(())
            .ok()?;
        let (mut parts, ()) = request.into_parts();
        parts.headers = self.headers;
        Some(parts)
    }
}

/// A header block as a request's head.
fn decode(decoder: &mut hpack::Decoder, block: &Bytes) -> Result<Fields, Reason> {
    let mut method = None;
    let mut scheme = None;
    let mut authority = None;
    let mut path = None;
    let mut headers = HeaderMap::new();
    let mut size = 0;
    let mut malformed = false;
    let mut compressed = false;
    decoder
        .decode(block, |name, value| {
            size += name.len() + value.len() + 32;
            if size > MAX_HEADER_LIST || malformed {
                return;
            }
            if let Some(pseudo) = name.strip_prefix(b":") {
                let slot = match pseudo {
                    b"method" => &mut method,
                    b"scheme" => &mut scheme,
                    b"authority" => &mut authority,
                    b"path" => &mut path,
                    _ => {
                        malformed = true;
                        return;
                    }
                };
                if !headers.is_empty() || slot.is_some() {
                    malformed = true;
                }
                *slot = Some(value);
                return;
            }
            if name == b"grpc-encoding" {
                compressed |= &value[..] != b"identity";
            }
            match (HeaderName::from_bytes(name), HeaderValue::from_maybe_shared(value)) {
                (Ok(name), Ok(value)) => {
                    headers.append(name, value);
                }
                _ => malformed = true,
            }
        })
        .map_err(|_| Reason::COMPRESSION_ERROR)?;
    if size > MAX_HEADER_LIST {
        return Ok(Fields::TooLarge(size));
    }
    match (method, path, malformed) {
        (Some(method), Some(path), false) => Ok(Fields::Request(Box::new(RequestHead {
            method,
            scheme,
            authority,
            path,
            headers,
            compressed,
        }))),
        _ => Ok(Fields::Malformed),
    }
}

/// A call whose panic answers its stream instead of ending the connection.
async fn caught(id: u32, call: impl Future<Output = Finished>) -> (u32, Option<Finished>) {
    (id, AssertUnwindSafe(call).catch_unwind().await.ok())
}

/// Ready once a call has finished or a relayed call has sent something.
async fn poll_calls(calls: &mut FuturesUnordered<Call>, done: &mut Vec<(u32, Option<Finished>)>, shared: &Shared) {
    std::future::poll_fn(|cx| {
        while let Poll::Ready(Some(finished)) = calls.poll_next_unpin(cx) {
            done.push(finished);
        }
        if !done.is_empty() || shared.signal.load(Ordering::Acquire) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}
