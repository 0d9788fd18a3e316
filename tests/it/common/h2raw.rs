//! HTTP/2 written by hand, as an attacker writes it: frames from their
//! parts, a request's header block as HPACK literals (no table, no Huffman),
//! and a reader that reports the frames the server sends back by kind.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const DATA: u8 = 0;
pub const HEADERS: u8 = 1;
pub const RST_STREAM: u8 = 3;
pub const SETTINGS: u8 = 4;
pub const GOAWAY: u8 = 7;
pub const CONTINUATION: u8 = 9;
pub const END_STREAM: u8 = 1;
pub const END_HEADERS: u8 = 4;
pub const INITIAL_WINDOW_SIZE: u16 = 4;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;
pub const REFUSED_STREAM: u32 = 0x7;
pub const PREDICT: &str = "/tensorflow.serving.PredictionService/Predict";

pub fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

pub fn settings(out: &mut Vec<u8>, entries: &[(u16, u32)]) {
    let mut payload = Vec::with_capacity(entries.len() * 6);
    for (id, value) in entries {
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&value.to_be_bytes());
    }
    frame(out, SETTINGS, 0, 0, &payload);
}

/// An HPACK integer with an `n`-bit prefix (RFC 7541 §5.1).
fn integer(out: &mut Vec<u8>, first: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// A gRPC request's header block for `path`, every field a literal.
pub fn request_block(path: &str) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        block.push(0);
        integer(&mut block, 0, 7, name.len());
        block.extend_from_slice(name.as_bytes());
        integer(&mut block, 0, 7, value.len());
        block.extend_from_slice(value.as_bytes());
    }
    block
}

/// Predict calls on streams 1, 3, 5, ... (`count` of them), each a HEADERS
/// frame whose body never comes: calls held open.
pub fn held_calls(count: u32) -> Vec<u8> {
    let block = request_block(PREDICT);
    let mut out = Vec::new();
    for n in 0..count {
        frame(&mut out, HEADERS, END_HEADERS, 2 * n + 1, &block);
    }
    out
}

/// A client connection: preface and `entries` sent, the server's frames
/// read on a thread of their own.
pub struct RawConnection {
    pub stream: TcpStream,
    pub seen: Arc<Mutex<Seen>>,
}

/// What the server has sent: frames by kind, the GOAWAY's code, and whether
/// it closed the connection.
#[derive(Default, Debug)]
pub struct Seen {
    pub frames: usize,
    pub headers: usize,
    pub headers_ending_streams: usize,
    pub data_bytes: usize,
    pub settings_acks: usize,
    pub resets: Vec<(u32, u32)>,
    pub goaway: Option<u32>,
    pub closed: bool,
}

impl RawConnection {
    pub fn open(addr: &str, entries: &[(u16, u32)]) -> RawConnection {
        let mut connection = RawConnection::bare(addr);
        let mut hello = PREFACE.to_vec();
        settings(&mut hello, entries);
        connection.stream.write_all(&hello).unwrap();
        connection
    }

    /// Connected, nothing sent.
    pub fn bare(addr: &str) -> RawConnection {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let mut reader = stream.try_clone().unwrap();
        let record = seen.clone();
        std::thread::spawn(move || {
            let mut head = [0u8; 9];
            loop {
                if reader.read_exact(&mut head).is_err() {
                    break;
                }
                let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                let mut payload = vec![0u8; len];
                if reader.read_exact(&mut payload).is_err() {
                    break;
                }
                let stream_id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
                let mut seen = record.lock().unwrap();
                seen.frames += 1;
                match head[3] {
                    HEADERS => {
                        seen.headers += 1;
                        if head[4] & END_STREAM != 0 {
                            seen.headers_ending_streams += 1;
                        }
                    }
                    DATA => seen.data_bytes += len,
                    SETTINGS if head[4] & 1 != 0 => seen.settings_acks += 1,
                    RST_STREAM if len >= 4 => {
                        let code = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
                        seen.resets.push((stream_id, code));
                    }
                    GOAWAY if len >= 8 => {
                        seen.goaway = Some(u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]));
                    }
                    _ => {}
                }
            }
            record.lock().unwrap().closed = true;
        });
        RawConnection { stream, seen }
    }

    /// Writes, false once the server has closed (or reset) the connection.
    pub fn send(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).is_ok()
    }

    pub fn closed(&self) -> bool {
        self.seen.lock().unwrap().closed
    }

    /// Waits up to `limit` for the server to close the connection.
    pub fn wait_closed(&self, limit: Duration) -> bool {
        let start = std::time::Instant::now();
        while start.elapsed() < limit {
            if self.closed() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.closed()
    }
}
