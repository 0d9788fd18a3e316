//! HTTP/1.1 written and read by hand over a plain socket: requests exactly as
//! given (pipelined, split, malformed) and answers exactly as they arrive.

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub struct Answer {
    pub status: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// Its headers with the values that differ from one request to the next blanked.
    pub fn comparable_headers(&self) -> Vec<(String, String)> {
        let mut headers: Vec<(String, String)> = self
            .headers
            .iter()
            .map(|(name, value)| match name.as_str() {
                "date" | "x-queue-time-ms" | "x-inference-time-ms" => (name.clone(), String::new()),
                _ => (name.clone(), value.clone()),
            })
            .collect();
        headers.sort();
        headers
    }
}

pub fn connect(addr: SocketAddr) -> BufReader<TcpStream> {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    BufReader::new(stream)
}

pub fn read_answer(reader: &mut BufReader<TcpStream>) -> Answer {
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap();
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map(|(_, v)| v.parse().unwrap())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    Answer {
        status: status.trim_end().to_string(),
        headers,
        body: String::from_utf8(body).unwrap(),
    }
}

pub fn post(path: &str, body: &str, extra: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Request-Id: req-1\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}
