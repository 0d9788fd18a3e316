//! One gRPC connection, served by the `h2` crate's server connection (its
//! framing, HPACK, flow control, stream states and protocol limits), and
//! what the crate leaves to a server: the handshake and idle timeouts,
//! keepalive pings, the connection's age and the drain (GOAWAY, then a
//! grace period), and sending away a client that resets calls as fast as
//! it opens them. Calls run inside the connection's task (`calls`), so a
//! call costs no task of its own; the connection itself is a task of the
//! multi-threaded runtime, free to move to an idle thread.

mod calls;
mod context;
mod options;
mod relay;
mod writing;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use h2::Reason;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::transport::server::TcpConnectInfo;

use context::{CallContext, Ended};
pub use options::ConnectionOptions;

use crate::arrival::LastArrival;
use crate::call::grpc::Unread;
use crate::grpc::services::Services;

/// How long the first GOAWAY of a graceful close may wait for its PING
/// before the connection is closed anyway, when nothing is left to answer.
const GOAWAY_LINGER: Duration = Duration::from_secs(1);
/// Streams the client may reset within a second before it is sent away:
/// resetting calls as fast as they are opened (CVE-2023-44487) would run
/// models for answers nobody reads.
const RESETS_PER_SECOND: u32 = 200;

type Call = Pin<Box<dyn Future<Output = Ended> + Send>>;

/// Serves one connection until it closes: GOAWAY when `shutdown` turns true,
/// at the connection's age or after it idles, closed when the grace after
/// that ends.
pub async fn serve<IO>(
    io: IO,
    services: Services,
    peer: Option<TcpConnectInfo>,
    options: Arc<ConnectionOptions>,
    shutdown: watch::Receiver<bool>,
    arrivals: Option<Arc<LastArrival>>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Some(connection) = handshake(io, &options).await else {
        return;
    };
    let predict = services.predict.clone().filter(|_| services.state.auth.is_none());
    let context = Arc::new(CallContext {
        services,
        predict,
        peer,
        pending: Default::default(),
        pending_limit: options.max_pending_answer_bytes,
        stall: options.keepalive_timeout,
    });
    Served::new(connection, context, options, arrivals).run(shutdown).await;
}

/// The HTTP/2 preface and settings exchange, within the handshake timeout.
async fn handshake<IO>(io: IO, options: &ConnectionOptions) -> Option<Connection<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let handshake = options.http2().handshake::<_, Bytes>(io);
    match tokio::time::timeout(options.handshake_timeout, handshake).await {
        Ok(Ok(connection)) => Some(connection),
        Ok(Err(error)) => {
            log::debug!("gRPC connection: the HTTP/2 handshake failed: {error}");
            None
        }
        Err(_) => {
            log::debug!(
                "gRPC connection closed: no HTTP/2 preface within {:?}",
                options.handshake_timeout
            );
            None
        }
    }
}

type Connection<IO> = h2::server::Connection<IO, Bytes>;

/// Whether the connection goes on after a wake-up.
#[derive(PartialEq)]
enum Flow {
    Serve,
    Close,
}

/// A connection being served: its calls, its timers and its reset count.
struct Served<IO> {
    connection: Connection<IO>,
    context: Arc<CallContext>,
    options: Arc<ConnectionOptions>,
    arrivals: Option<Arc<LastArrival>>,
    calls: FuturesUnordered<Call>,
    timers: Timers,
    pinger: Option<h2::PingPong>,
    resets: ResetRate,
    opened: u64,
    /// GOAWAY sent for the server's drain: its watch is done.
    draining: bool,
}

impl<IO> Served<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    fn new(
        mut connection: Connection<IO>,
        context: Arc<CallContext>,
        options: Arc<ConnectionOptions>,
        arrivals: Option<Arc<LastArrival>>,
    ) -> Self {
        Served {
            pinger: connection.ping_pong(),
            connection,
            context,
            timers: Timers::new(&options),
            options,
            arrivals,
            calls: FuturesUnordered::new(),
            resets: ResetRate::default(),
            opened: 0,
            draining: false,
        }
    }

    /// Waits for the next thing to happen, and handles it, until the connection closes.
    async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        // One timer and one drain watch for the connection's life: made anew
        // for every wake-up they would cost each call a timer registration.
        let mut armed = self.timers.next();
        let mut sleep = std::pin::pin!(tokio::time::sleep_until(armed));
        let mut stop = std::pin::pin!(shutdown.wait_for(|closing| *closing));
        loop {
            let next = self.timers.next();
            if next != armed {
                sleep.as_mut().reset(next);
                armed = next;
            }
            let pong = async {
                match (self.pinger.as_mut(), self.timers.ping_deadline) {
                    (Some(pinger), Some(_)) => std::future::poll_fn(|cx| pinger.poll_pong(cx)).await.is_ok(),
                    _ => std::future::pending().await,
                }
            };
            let wake = tokio::select! {
                biased;
                Some(ended) = self.calls.next(), if !self.calls.is_empty() => Wake::Ended(ended),
                accepted = std::future::poll_fn(|cx| self.connection.poll_accept(cx)) => Wake::Accepted(accepted),
                answered = pong => Wake::Pong(answered),
                () = &mut sleep => Wake::Timer,
                stopping = &mut stop, if !self.draining => Wake::Shutdown(stopping.is_ok()),
            };
            if self.handle(wake) == Flow::Close {
                return;
            }
        }
    }

    fn handle(&mut self, wake: Wake) -> Flow {
        match wake {
            Wake::Ended(ended) => {
                if ended == Ended::ResetByClient && self.resets.reset() {
                    log::debug!("gRPC connection sent away: it reset most of the calls it opened");
                    self.connection.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
                }
            }
            Wake::Accepted(Some(Ok((request, respond)))) => self.start_call(request, respond),
            Wake::Accepted(Some(Err(error))) => {
                log::debug!("gRPC connection: {error}");
                return Flow::Close;
            }
            Wake::Accepted(None) | Wake::Pong(false) | Wake::Shutdown(false) => return Flow::Close,
            Wake::Pong(true) => self.timers.ping_deadline = None,
            Wake::Shutdown(true) => {
                self.draining = true;
                self.connection.graceful_shutdown();
                // A connection already past its age keeps the earlier end.
                self.timers.going_away(Some(self.options.drain_grace));
            }
            Wake::Timer => return self.on_timer(),
        }
        Flow::Serve
    }

    fn start_call(&mut self, mut request: http::Request<h2::RecvStream>, respond: h2::server::SendResponse<Bytes>) {
        // Under a latency objective, how long the bytes last read
        // waited unread in the socket counts against the call.
        if let Some(waited) = self
            .arrivals
            .as_ref()
            .map(|last| last.waited())
            .filter(|w| !w.is_zero())
        {
            request.extensions_mut().insert(Unread(waited));
        }
        self.resets.opened();
        self.opened += 1;
        // A panic in the call is contained there: the connection serves on.
        self.calls
            .push(Box::pin(calls::run(self.context.clone(), request, respond)));
    }

    fn on_timer(&mut self) -> Flow {
        let busy = !self.calls.is_empty() || self.connection.has_streams();
        match self.timers.fire(&self.options, busy, self.opened) {
            Fired::Nothing => {}
            Fired::Ping => {
                if let Some(pinger) = self.pinger.as_mut() {
                    if pinger.send_ping(h2::Ping::opaque()).is_err() {
                        self.timers.ping_deadline = None;
                    }
                }
            }
            Fired::GoAway(grace) => {
                self.connection.graceful_shutdown();
                self.timers.going_away(grace);
            }
            Fired::Close(why) => {
                log::debug!("gRPC connection closed: {why}");
                return Flow::Close;
            }
        }
        Flow::Serve
    }
}

/// A stream the client opened: its request and the handle its answer goes to.
type Incoming = (http::Request<h2::RecvStream>, h2::server::SendResponse<Bytes>);

// A new stream is the large variant; boxing it would allocate once per call
// for a value that lives one turn of the loop on the stack.
#[allow(clippy::large_enum_variant)]
enum Wake {
    Ended(Ended),
    Accepted(Option<Result<Incoming, h2::Error>>),
    /// A keepalive PING answered (true) or the connection gone (false).
    Pong(bool),
    Timer,
    Shutdown(bool),
}

enum Fired {
    Nothing,
    Ping,
    /// GOAWAY, with the grace its calls get (none: as long as they take).
    GoAway(Option<Duration>),
    Close(&'static str),
}

/// The connection's deadlines.
struct Timers {
    keepalive_at: Option<Instant>,
    ping_deadline: Option<Instant>,
    age_at: Option<Instant>,
    grace_at: Option<Instant>,
    /// When to look whether the connection has been idle since the last look.
    idle_check_at: Option<Instant>,
    /// Calls opened as of that last look: idle means none since, and none open.
    idle_opened: u64,
    /// Gone away: when to close if no call is left by then.
    linger_at: Option<Instant>,
}

impl Timers {
    fn new(options: &ConnectionOptions) -> Timers {
        let now = Instant::now();
        Timers {
            keepalive_at: options.keepalive.and_then(|every| now.checked_add(every)),
            ping_deadline: None,
            age_at: options.max_age.and_then(|age| now.checked_add(age)),
            grace_at: None,
            idle_check_at: options.idle_timeout.and_then(|idle| now.checked_add(idle)),
            idle_opened: 0,
            linger_at: None,
        }
    }

    fn next(&self) -> Instant {
        [
            self.keepalive_at,
            self.ping_deadline,
            self.age_at,
            self.grace_at,
            self.idle_check_at,
            self.linger_at,
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))
    }

    fn going_away(&mut self, grace: Option<Duration>) {
        let now = Instant::now();
        self.age_at = None;
        self.idle_check_at = None;
        self.linger_at = Some(now + GOAWAY_LINGER);
        let end = grace.and_then(|grace| now.checked_add(grace));
        self.grace_at = match (self.grace_at, end) {
            (Some(at), Some(end)) => Some(at.min(end)),
            (at, end) => at.or(end),
        };
    }

    /// What is due now. An idle connection is seen within twice the idle
    /// timeout: looking at a counter, not the clock, keeps it off each call.
    fn fire(&mut self, options: &ConnectionOptions, busy: bool, opened: u64) -> Fired {
        let now = Instant::now();
        let due = |at: Option<Instant>| at.is_some_and(|at| at <= now);
        if due(self.ping_deadline) {
            return Fired::Close("a keepalive ping went unanswered");
        }
        if due(self.grace_at) {
            return Fired::Close("its grace period ended");
        }
        if due(self.linger_at) {
            if !busy {
                return Fired::Close("it went away with no call left");
            }
            self.linger_at = Some(now + GOAWAY_LINGER);
        }
        if let (true, Some(idle)) = (due(self.idle_check_at), options.idle_timeout) {
            if !busy && opened == self.idle_opened {
                log::debug!("gRPC connection idle for {idle:?}: going away");
                return Fired::GoAway(None);
            }
            self.idle_opened = opened;
            self.idle_check_at = now.checked_add(idle);
        }
        if due(self.age_at) {
            return Fired::GoAway(options.grace);
        }
        if let (true, Some(every)) = (due(self.keepalive_at), options.keepalive) {
            self.keepalive_at = now.checked_add(every);
            if self.ping_deadline.is_none() {
                self.ping_deadline = Some(now + options.keepalive_timeout);
                return Fired::Ping;
            }
        }
        Fired::Nothing
    }
}

/// Streams the client reset while their calls ran, against those it opened,
/// in the current second.
#[derive(Default)]
struct ResetRate {
    resets: u32,
    opened: u32,
    since: Option<Instant>,
}

impl ResetRate {
    /// Counted without a clock read: the second moves when a reset comes.
    fn opened(&mut self) {
        self.opened = self.opened.saturating_add(1);
    }

    /// True when the client is to be sent away. A client cancelling some
    /// calls on their deadlines is not: only one resetting most of what it
    /// opens, and many of them.
    fn reset(&mut self) -> bool {
        let now = Instant::now();
        if self
            .since
            .is_none_or(|since| now.duration_since(since) >= Duration::from_secs(1))
        {
            self.since = Some(now);
            self.resets = 0;
            self.opened = 0;
        }
        self.resets += 1;
        self.resets > RESETS_PER_SECOND && self.resets.saturating_mul(2) > self.opened
    }
}

#[cfg(test)]
mod tests;
