//! `open`: an open-loop HTTP/1.1 load generator. Requests leave on a fixed
//! schedule whatever the server's answers take, and each latency counts from
//! when its request was due, so a server that falls behind is measured as
//! its clients see it (closed-loop tools such as wrk slow down with it).
//! The schedule is even, or a Poisson process (`--poisson`).
//!
//! The generator must not be the tail it measures: everything runs on one
//! thread (a request spawned from another thread waits in the runtime's
//! global queue behind the in-flight ones, milliseconds under load), each
//! request leaves when due rather than at tokio's next millisecond tick
//! (twenty requests apart at 20,000 a second), and
//! how late the generator itself sent each one is reported beside the
//! latencies (`lag_p99_ms`), so a run where it fell behind shows it.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::clock::Clock;

#[derive(clap::Args)]
pub struct OpenLoop {
    /// host:port
    #[arg(long, default_value = "127.0.0.1:8501")]
    pub address: String,
    #[arg(long)]
    pub path: String,
    /// The file whose bytes every request carries.
    #[arg(long)]
    pub body: std::path::PathBuf,
    #[arg(long, default_value = "application/json")]
    pub content_type: String,
    /// Requests per second.
    #[arg(long)]
    pub rate: f64,
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Connections open at most; a request due when all are busy is counted
    /// as `unsent` (the generator, not the server, was the limit).
    #[arg(long, default_value_t = 4000)]
    pub connections: usize,
    /// Poisson arrivals at the rate instead of an even schedule (seeded: the
    /// same schedule every run).
    #[arg(long)]
    pub poisson: bool,
    /// Latency objectives (repeatable): also count the 200s answered within
    /// each (goodput).
    #[arg(long)]
    pub within_ms: Vec<f64>,
}

/// When each request is due, from the start: `total` of them at `rate` per second.
fn schedule(total: u64, rate: f64, poisson: bool) -> Vec<Duration> {
    let interval = 1.0 / rate;
    // xorshift64*: uniform draws for the exponential gaps, no dependency.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut uniform = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        ((state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let mut at = 0.0;
    (0..total)
        .map(|i| {
            if poisson {
                at += -uniform().ln() * interval;
                Duration::from_secs_f64(at)
            } else {
                Duration::from_secs_f64(interval * i as f64)
            }
        })
        .collect()
}

#[derive(Default)]
struct Tally {
    /// Latencies in µs by status (0: the connection failed or closed under the request).
    latencies: BTreeMap<u16, Vec<u64>>,
    /// µs from when each request was due until the generator began sending it.
    lags: Vec<u64>,
    retry_after: usize,
    unsent: usize,
}

struct Answer {
    status: u16,
    retry_after: bool,
    keep_alive: bool,
}

pub fn run(load: OpenLoop) -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(drive(load))
}

/// The request every connection sends, head and body.
fn request_bytes(load: &OpenLoop) -> std::io::Result<Vec<u8>> {
    let body = std::fs::read(&load.body)?;
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n\r\n",
        load.path,
        load.address,
        load.content_type,
        body.len()
    );
    Ok([head.as_bytes(), &body].concat())
}

async fn drive(load: OpenLoop) -> Result<(), Box<dyn std::error::Error>> {
    let request = Arc::new(request_bytes(&load)?);
    let idle: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tally: Arc<Mutex<Tally>> = Arc::default();
    let total = (load.rate * load.seconds) as u64;
    let clock = Clock::new()?;
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(total as usize);
    for offset in schedule(total, load.rate, load.poisson) {
        let due = start + offset;
        clock.until(due.into_std()).await?;
        let connection = idle.lock().ok().and_then(|mut idle| idle.pop());
        let connection = match connection {
            Some(c) => Some(c),
            None if open.load(std::sync::atomic::Ordering::Relaxed) < load.connections => None,
            None => {
                if let Ok(mut t) = tally.lock() {
                    t.unsent += 1;
                }
                continue;
            }
        };
        if connection.is_none() {
            open.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let (request, idle, open, tally, address) = (
            request.clone(),
            idle.clone(),
            open.clone(),
            tally.clone(),
            load.address.clone(),
        );
        tasks.push(tokio::spawn(send(
            connection,
            due,
            request,
            address,
            Shared { idle, open, tally },
        )));
    }
    for task in tasks {
        let _ = task.await;
    }
    let tally = tally.lock().map_err(|_| "tally poisoned")?;
    report(&load, start.elapsed().as_secs_f64(), total, &tally);
    Ok(())
}

/// What the requests in flight share: the idle connections, how many are
/// open, and the tally.
struct Shared {
    idle: Arc<Mutex<Vec<TcpStream>>>,
    open: Arc<std::sync::atomic::AtomicUsize>,
    tally: Arc<Mutex<Tally>>,
}

/// Sends one request due at `due` on `connection` (a new one when `None`)
/// and tallies its status and latency from when it was due.
async fn send(connection: Option<TcpStream>, due: Instant, request: Arc<Vec<u8>>, address: String, shared: Shared) {
    let Shared { idle, open, tally } = shared;
    let lag = due.elapsed().as_micros() as u64;
    let outcome = async {
        if let Some(stream) = connection {
            // A connection the server closed while it sat idle (its
            // keep-alive ran out) fails before any answer byte, closed or
            // reset; clients retry those on a new connection, as HTTP allows.
            match exchange(stream, &request).await {
                Err(e) if matches!(e.kind(), ErrorKind::NotConnected | ErrorKind::ConnectionReset) => {}
                done => return done,
            }
        }
        let stream = TcpStream::connect(&address).await?;
        stream.set_nodelay(true)?;
        exchange(stream, &request).await
    };
    let outcome = tokio::time::timeout(Duration::from_secs(30), outcome).await;
    let mut latency = due.elapsed().as_micros() as u64;
    let status = match outcome {
        Ok(Ok((stream, answer, answered_at))) => {
            // From due until the answer arrived, not until the body was all written.
            latency = answered_at.duration_since(due).as_micros() as u64;
            if answer.keep_alive {
                if let Ok(mut idle) = idle.lock() {
                    idle.push(stream);
                }
            } else {
                open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
            if answer.retry_after {
                if let Ok(mut t) = tally.lock() {
                    t.retry_after += 1;
                }
            }
            answer.status
        }
        _ => {
            open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            0
        }
    };
    if let Ok(mut t) = tally.lock() {
        t.latencies.entry(status).or_default().push(latency);
        t.lags.push(lag);
    };
}

/// Sends `request` on `stream` and reads its answer; the stream comes back
/// for reuse with the answer and when it arrived.
async fn exchange(mut stream: TcpStream, request: &[u8]) -> std::io::Result<(TcpStream, Answer, Instant)> {
    // Read while writing, as curl does: a server may answer (503, 413)
    // and close before taking a large body, and that answer is what the
    // client gets, not the failed write.
    let (mut reader, mut writer) = stream.split();
    let read = async { (read_answer(&mut reader).await, Instant::now()) };
    let (written, (answer, answered_at)) = tokio::join!(writer.write_all(request), read);
    let mut answer = answer?;
    if written.is_err() {
        answer.keep_alive = false;
    }
    Ok((stream, answer, answered_at))
}

/// Prints the run as one JSON line: per status, the count and latency
/// quantiles; how late the generator sent requests; and per objective
/// asked for, the 200s answered within it a second (`goodput`, by its ms).
fn report(load: &OpenLoop, elapsed: f64, total: u64, tally: &Tally) {
    let mut statuses = serde_json::Map::new();
    for (status, latencies) in &tally.latencies {
        statuses.insert(status.to_string(), quantiles(latencies));
    }
    let lag = quantiles(&tally.lags);
    let answered = tally.latencies.get(&200).map_or(&[][..], Vec::as_slice);
    let goodput: serde_json::Map<String, serde_json::Value> = (load.within_ms.iter())
        .map(|&ms| {
            let good = answered.iter().filter(|&&us| us as f64 <= ms * 1000.0).count();
            (ms.to_string(), serde_json::json!(good as f64 / elapsed.max(1e-9)))
        })
        .collect();
    println!(
        "{}",
        serde_json::json!({
            "rate": load.rate,
            "goodput": goodput,
            "seconds": elapsed,
            "sent": total as usize - tally.unsent,
            "unsent": tally.unsent,
            "retry_after": tally.retry_after,
            "lag_p99_ms": lag["p99_ms"],
            "lag_max_ms": lag["max_ms"],
            "statuses": statuses,
        })
    );
}

/// The count, median, 99th percentile and maximum of µs values, in ms.
fn quantiles(values: &[u64]) -> serde_json::Value {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let at = |q: f64| {
        sorted
            .get(((sorted.len().max(1) - 1) as f64 * q).round() as usize)
            .map_or(0.0, |&v| v as f64 / 1000.0)
    };
    serde_json::json!({
        "count": sorted.len(),
        "p50_ms": at(0.5),
        "p99_ms": at(0.99),
        "max_ms": at(1.0),
    })
}

/// Reads one response: its status, whether it carried Retry-After and
/// whether the connection stays open; the body is read and dropped.
async fn read_answer(stream: &mut tokio::net::tcp::ReadHalf<'_>) -> std::io::Result<Answer> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let read = stream.read(&mut chunk).await?;
        if read == 0 && buffer.is_empty() {
            return Err(ErrorKind::NotConnected.into());
        }
        if read == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        buffer.extend_from_slice(&chunk[..read]);
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or(ErrorKind::InvalidData)?;
    let header = |name: &str| {
        head.lines()
            .find_map(|line| line.strip_prefix(name).map(|v| v.trim().to_string()))
    };
    let length: usize = header("content-length:").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut have = buffer.len() - head_end;
    while have < length {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        have += read;
    }
    Ok(Answer {
        status,
        retry_after: header("retry-after:").is_some(),
        keep_alive: header("connection:").is_none_or(|v| v != "close"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_closed_before_answering_is_told_apart_from_a_cut_answer() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            let server = tokio::spawn(async move {
                for answer in [
                    &b""[..],
                    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
                    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 2\r\n\r\nno",
                ] {
                    let (mut stream, _) = listener.accept().await.unwrap();
                    let mut request = [0u8; 256];
                    let _ = stream.read(&mut request).await.unwrap();
                    stream.write_all(answer).await.unwrap();
                }
            });
            let request = b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
            let mut kinds = Vec::new();
            for _ in 0..2 {
                let stream = TcpStream::connect(address).await.unwrap();
                kinds.push(exchange(stream, request).await.err().map(|e| e.kind()));
            }
            assert_eq!(kinds, [Some(ErrorKind::NotConnected), Some(ErrorKind::UnexpectedEof)]);
            let stream = TcpStream::connect(address).await.unwrap();
            let (_, answer, _) = exchange(stream, request).await.unwrap();
            assert_eq!(
                (answer.status, answer.retry_after, answer.keep_alive),
                (503, true, true)
            );
            server.await.unwrap();
        });
    }

    #[test]
    fn a_poisson_schedule_keeps_the_rate_with_spread_gaps() {
        let even = schedule(1000, 100.0, false);
        assert_eq!(even[10], Duration::from_millis(100));
        let poisson = schedule(20_000, 100.0, true);
        let span = poisson.last().unwrap().as_secs_f64();
        assert!((190.0..210.0).contains(&span), "{span} s for 20,000 at 100/s");
        let gaps: Vec<f64> = poisson.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
        // An exponential's standard deviation equals its mean (10 ms).
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!((0.009..0.011).contains(&sd), "{sd}");
        assert_eq!(poisson, schedule(20_000, 100.0, true), "seeded");
    }
}
