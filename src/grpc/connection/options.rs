//! How connections are served: the `h2` server's limits, keepalive pings,
//! connection age and idle time, and the bounds on what one client may hold.

use std::time::Duration;

/// Each stream's receive window: a whole small request arrives without
/// waiting for a WINDOW_UPDATE.
const STREAM_WINDOW: u32 = 1 << 20;
/// The connection's receive window, shared by its streams.
const CONNECTION_WINDOW: u32 = 2 << 20;
/// The header list a request may carry (names, values and 32 bytes each).
const MAX_HEADER_LIST: u32 = 16 << 10;
/// The concurrent streams a client may open unless told otherwise.
const DEFAULT_MAX_STREAMS: u32 = 200;
/// Streams the client reset before they were accepted, held at once: more
/// is the rapid-reset attack, answered with GOAWAY ENHANCE_YOUR_CALM.
const MAX_PENDING_ACCEPT_RESETS: usize = 20;
/// Stream errors the server may answer on one connection before it sends
/// the client away (hyper's bound).
const MAX_LOCAL_ERROR_RESETS: usize = 1024;
/// Answer bytes the `h2` crate holds for one stream beyond what its window
/// takes; the rest waits in the call, counted against the pending budget.
const MAX_SEND_BUFFER: usize = 400 << 10;

pub struct ConnectionOptions {
    /// A PING this often; unanswered for `keepalive_timeout`, the connection closes.
    pub keepalive: Option<Duration>,
    /// Also how long an answer may wait for a client's window before its stream is reset.
    pub keepalive_timeout: Duration,
    pub max_concurrent_streams: Option<u32>,
    /// After this long a connection gets GOAWAY, then `grace` to finish its calls.
    pub max_age: Option<Duration>,
    pub grace: Option<Duration>,
    /// A connection with no call open for this long gets GOAWAY.
    pub idle_timeout: Option<Duration>,
    /// The client's HTTP/2 preface must arrive within this (after TLS).
    pub handshake_timeout: Duration,
    /// Answer bytes one connection may hold for a client that does not open
    /// its window; an answer beyond it is refused (RESOURCE_EXHAUSTED).
    pub max_pending_answer_bytes: usize,
    /// Connections served at once; more are closed as they are accepted.
    pub max_connections: usize,
    /// What the server's drain leaves calls still open to finish (a health
    /// `Watch` never does) before they are reset.
    pub drain_grace: Duration,
}

impl ConnectionOptions {
    pub fn new(
        keepalive: Option<Duration>,
        keepalive_timeout: Option<Duration>,
        max_concurrent_streams: Option<u32>,
    ) -> ConnectionOptions {
        ConnectionOptions {
            keepalive,
            // tonic's default: a ping unanswered for 20 s closes the connection.
            keepalive_timeout: keepalive_timeout.unwrap_or(Duration::from_secs(20)),
            max_concurrent_streams,
            max_age: None,
            grace: None,
            idle_timeout: None,
            handshake_timeout: Duration::from_secs(10),
            max_pending_answer_bytes: 16 << 20,
            max_connections: usize::MAX,
            drain_grace: Duration::from_secs(30),
        }
    }

    /// The `h2` server's settings, every limit named rather than left to its defaults.
    pub fn http2(&self) -> h2::server::Builder {
        let mut builder = h2::server::Builder::new();
        builder
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_header_list_size(MAX_HEADER_LIST)
            .max_concurrent_streams(self.max_concurrent_streams.unwrap_or(DEFAULT_MAX_STREAMS))
            .max_pending_accept_reset_streams(MAX_PENDING_ACCEPT_RESETS)
            .max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS))
            .max_send_buffer_size(MAX_SEND_BUFFER);
        builder
    }
}
