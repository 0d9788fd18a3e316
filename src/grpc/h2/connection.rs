//! One HTTP/2 connection of the gRPC listener: the frames read and written,
//! header blocks (`hpack`), both sides' flow control, stream states,
//! keepalive pings, and going away (a GOAWAY naming the highest id and a
//! PING, then, once the PING comes back, one naming the last stream taken:
//! calls already on the wire are answered, later ones are refused unrun).
//! A stream's call runs inside this task, so the answers a batch finishes
//! together leave in one write.

use std::borrow::Cow;
use std::collections::VecDeque;
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
use rustc_hash::FxHashMap;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::codegen::http::{HeaderMap, Request};
use tonic::transport::server::TcpConnectInfo;
use tonic::Status;

use super::calls::{self, Event, Finished, Flow, Inbox, RecvBody, Shared};
use super::frame::{self, flag, kind, setting, Head, Reason};
use super::hpack;
use super::request::{decodable, decode, predict_fits, Fields, RequestHead, MAX_HEADER_LIST};

mod answering;
mod reading;
use crate::call::grpc::REQUEST_ID;
use crate::dialects::tfs_grpc::{PredictAnswer, PredictionApi};
use crate::grpc::transport::{ConnectionOptions, Services};
use crate::proto::tensorflow::serving::PredictRequest;

/// Each stream's receive window, and the connection's.
const WINDOW: u32 = 1 << 20;
/// Encoded header bytes buffered across CONTINUATION frames.
const MAX_HEADER_BLOCK: usize = 64 << 10;
/// The concurrent streams a client may open unless told otherwise.
const DEFAULT_MAX_STREAMS: u32 = 200;
/// How long the first GOAWAY's PING may take before the final GOAWAY.
const GOAWAY_PING_WAIT: Duration = Duration::from_secs(1);
const GOAWAY_PING: [u8; 8] = *b"goaway\0\0";
const KEEPALIVE_PING: [u8; 8] = *b"keepaliv";
const ENHANCE_YOUR_CALM: Reason = Reason(0xb);
/// How long a closing connection keeps reading what its client still sends.
const LINGER: Duration = Duration::from_secs(1);
/// Streams the client may reset within a second before it is sent away:
/// resetting calls as fast as they are opened (CVE-2023-44487) would run
/// models for answers nobody reads.
const RESETS_PER_SECOND: u32 = 200;
/// Stream errors this side may answer on one connection (hyper's bound).
const MAX_LOCAL_RESETS: u32 = 1024;
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
    Message(Arc<RequestHead>, BytesMut),
    Relayed(Arc<Mutex<Inbox>>),
    /// The whole message is with the call.
    Done,
}

enum Out {
    Block(Cow<'static, [u8]>, bool),
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
    /// The last header block that decoded to a request without changing the
    /// table, and its head: a client repeating a call's headers sends the
    /// same bytes, which then decode to the same head without decoding.
    last_block: Vec<u8>,
    last_head: Option<Arc<RequestHead>>,
    table_cleared: bool,
    preface_read: bool,
    /// By stream id, hashed with `FxHash`: SipHash cost more per call than the rest of the
    /// stream bookkeeping, and the map holds at most the streams the connection allows,
    /// so ids a client picks to collide cannot make it slow.
    streams: FxHashMap<u32, Stream>,
    ready: Vec<u32>,
    calls: FuturesUnordered<Call>,
    done: Vec<(u32, Option<Finished>)>,
    shared: Arc<Shared>,
    /// The last stream taken: what the final GOAWAY names.
    last_stream: u32,
    /// The highest stream id the client has used, taken or refused: frames
    /// on ids above it are on idle streams.
    highest_stream: u32,
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
    /// Streams opened since that second began.
    opened: u32,
    resets_since: Instant,
    /// The server's drain has begun.
    stopped: bool,
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
            last_block: Vec::new(),
            last_head: None,
            table_cleared: false,
            preface_read: false,
            streams: FxHashMap::default(),
            ready: Vec::new(),
            calls: FuturesUnordered::new(),
            done: Vec::new(),
            shared: Arc::new(Shared::default()),
            last_stream: 0,
            highest_stream: 0,
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
            opened: 0,
            resets_since: now,
            stopped: false,
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
                let stall = self.options.keepalive_timeout;
                let _ = tokio::time::timeout(stall, self.io.shutdown()).await;
                // What the client still sends is read and dropped until it
                // closes too (for up to a second): closing with unread bytes
                // would reset the connection, and the reset can overtake the
                // GOAWAY and the answers just written.
                let mut sink = [0u8; 4096];
                let drained = async { while matches!(self.io.read(&mut sink).await, Ok(n) if n > 0) {} };
                let _ = tokio::time::timeout(LINGER, drained).await;
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
            let watching = !self.stopped;
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
                    self.stopped = true;
                    self.go_away();
                    // A connection already past its age keeps the earlier end.
                    let drained = Instant::now().checked_add(self.options.drain_grace);
                    self.grace_at = match (self.grace_at, drained) {
                        (Some(at), Some(drained)) => Some(at.min(drained)),
                        (at, drained) => at.or(drained),
                    };
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
        // Usually the socket takes it all at once, without a timer; a client
        // that stops reading gets the keepalive timeout, from its last
        // progress, to start again.
        let stalled = || std::io::Error::new(std::io::ErrorKind::TimedOut, "the client stopped reading");
        let stall = self.options.keepalive_timeout;
        let mut written = 0;
        while written < self.wbuf.len() {
            let wrote = match self.io.write(&self.wbuf[written..]).now_or_never() {
                Some(wrote) => wrote,
                None => match tokio::time::timeout(stall, self.io.write(&self.wbuf[written..])).await {
                    Ok(wrote) => wrote,
                    Err(_) => return Err(stalled()),
                },
            };
            match wrote? {
                0 => return Err(std::io::ErrorKind::WriteZero.into()),
                n => written += n,
            }
        }
        if self.io.flush().now_or_never().is_none() {
            match tokio::time::timeout(stall, self.io.flush()).await {
                Ok(flushed) => flushed?,
                Err(_) => return Err(stalled()),
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
            self.grace_at = self.options.grace.and_then(|grace| now.checked_add(grace));
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

    fn reset(&mut self, id: u32, reason: Reason) {
        self.remove(id);
        frame::rst_stream(&mut self.wbuf, id, reason);
        self.count_local_reset();
    }

    fn count_local_reset(&mut self) {
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
            self.opened = 0;
        }
        self.peer_resets += 1;
        // A client cancelling some calls on their deadlines is not this:
        // only one resetting most of what it opens, and many of them.
        if self.peer_resets > RESETS_PER_SECOND && self.peer_resets.saturating_mul(2) > self.opened {
            return Err(ENHANCE_YOUR_CALM);
        }
        Ok(())
    }

    /// A stream opened, for the reset rate above: counted without a clock
    /// read, the window moves when a reset comes.
    fn count_opened(&mut self) {
        self.opened = self.opened.saturating_add(1);
    }
}

/// A call whose panic answers its stream instead of ending the connection.
/// Combinators rather than an `async fn`, which would hold the call a
/// second time and copy it into place on its first poll.
fn caught(id: u32, call: impl Future<Output = Finished> + Send + 'static) -> Call {
    Box::pin(
        AssertUnwindSafe(call)
            .catch_unwind()
            .map(move |result| (id, result.ok())),
    )
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
