//! Access logs: one line per sampled request, REST and gRPC alike, at
//! target `access` through the process's logger, so `--log_format json`
//! makes each line a JSON object with the same keys. The sample is a
//! counter (`--access_log_sampling_rate`), so lines spread evenly; a
//! request not sampled costs one atomic add, and none at all when off.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::service::Trace;

pub struct AccessLog {
    rate: f64,
    seen: AtomicU64,
}

impl AccessLog {
    pub fn new(rate: f64) -> AccessLog {
        AccessLog {
            rate,
            seen: AtomicU64::new(0),
        }
    }

    /// Whether any request gets a line.
    pub fn enabled(&self) -> bool {
        self.rate > 0.0
    }

    /// Whether this request gets a line: all at rate 1, none at 0, and in
    /// between every request that moves `seen × rate` past a whole number.
    pub fn sample(&self) -> bool {
        if self.rate <= 0.0 {
            return false;
        }
        if self.rate >= 1.0 {
            return true;
        }
        let seen = self.seen.fetch_add(1, Ordering::Relaxed) as f64;
        ((seen + 1.0) * self.rate).floor() > (seen * self.rate).floor()
    }
}

/// What the service learnt about a request: the route and what it ran.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Served {
    pub route: String,
    pub model: Option<String>,
    pub version: Option<i64>,
    pub signature: Option<String>,
    pub queue: Option<Duration>,
    pub run: Option<Duration>,
    pub answer_wait: Option<Duration>,
}

impl Served {
    pub fn of(route: &str, trace: &Trace) -> Served {
        Served {
            route: route.to_string(),
            model: trace.model.as_deref().map(str::to_string),
            version: trace.version,
            signature: trace.signature_name().map(str::to_string),
            queue: trace.queue_time,
            run: trace.run_time,
            answer_wait: trace.answer_wait,
        }
    }
}

/// What a request came to, as the transport that answered it tells.
pub struct Ending<'a> {
    /// `rest` or `grpc`.
    pub protocol: &'static str,
    /// The HTTP method, or `gRPC`.
    pub method: &'a str,
    /// The HTTP path, or the gRPC method's route name.
    pub path: &'a str,
    /// The HTTP status, or the gRPC status code.
    pub status: u16,
    /// The gRPC status code's name (`OK`, `NOT_FOUND`, ...); `None` over REST.
    pub grpc_code: Option<&'a str>,
    /// The model the request named, for a request refused before it resolved one.
    pub named_model: Option<&'a str>,
    pub bytes_out: Option<u64>,
    pub served: Option<&'a Served>,
}

/// One request's line: its ending, with what its arrival recorded.
pub struct Line<'a> {
    pub ending: Ending<'a>,
    pub request_id: &'a str,
    pub bytes_in: Option<u64>,
    pub client: Option<SocketAddr>,
    pub total: Duration,
}

pub fn write(line: &Line<'_>) {
    let ending = &line.ending;
    let served = ending.served;
    let millis = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1000.0);
    let client = line.client.map(|c| c.to_string());
    log::info!(
        target: "access",
        request_id = line.request_id,
        protocol = ending.protocol,
        method = ending.method,
        path = ending.path,
        route = served.map(|s| s.route.as_str()),
        model = served.and_then(|s| s.model.as_deref()).or(ending.named_model),
        version = served.and_then(|s| s.version),
        signature = served.and_then(|s| s.signature.as_deref()),
        status = ending.status,
        grpc_code = ending.grpc_code,
        bytes_in = line.bytes_in,
        bytes_out = ending.bytes_out,
        queue_ms = millis(served.and_then(|s| s.queue)),
        run_ms = millis(served.and_then(|s| s.run)),
        answer_wait_ms = millis(served.and_then(|s| s.answer_wait)),
        total_ms = line.total.as_secs_f64() * 1000.0,
        client = client.as_deref();
        "{} {} {}", ending.method, ending.path, Status(ending)
    );
}

/// A line's status as its message shows it: the gRPC code's name, or the HTTP status.
struct Status<'a>(&'a Ending<'a>);

impl std::fmt::Display for Status<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.grpc_code {
            Some(name) => f.write_str(name),
            None => write!(f, "{}", self.0.status),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampled(rate: f64, requests: usize) -> usize {
        let log = AccessLog::new(rate);
        (0..requests).filter(|_| log.sample()).count()
    }

    #[test]
    fn the_sample_is_the_rate_spread_evenly() {
        assert_eq!(sampled(0.0, 1000), 0);
        assert_eq!(sampled(1.0, 1000), 1000);
        assert_eq!(sampled(0.01, 1000), 10);
        assert_eq!(sampled(0.25, 1000), 250);
        let log = AccessLog::new(0.5);
        let picks: Vec<bool> = (0..6).map(|_| log.sample()).collect();
        assert_eq!(picks, [false, true, false, true, false, true]);
    }
}
