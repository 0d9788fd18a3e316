//! Which requests the front takes, read from the connection's buffer with
//! `httparse`; everything else goes to actix-web.

use std::ops::Range;
use std::rc::Rc;

use actix_web::http::Method;

use super::BODY_LIMIT;
use crate::dialects::tfs::{self, Route, Verb};
use crate::service::VersionSelector;

/// Headers a request the front takes may carry.
const MAX_HEADERS: usize = 32;
/// A request head longer than this is actix-web's to refuse.
pub(super) const HEAD_LIMIT: usize = 16 << 10;

/// A request the front takes: its route, and where its parts lie in the
/// connection's buffer.
pub(super) struct Head {
    /// Bytes of the request line and headers.
    pub(super) len: usize,
    /// Bytes of the body (its `Content-Length`).
    pub(super) body: usize,
    pub(super) path: Range<usize>,
    pub(super) request_id: Option<Range<usize>>,
    pub(super) content_type: Option<Range<usize>>,
    /// KServe's `Ce-Id`, which a capture's events keep as their id.
    pub(super) ce_id: Option<Range<usize>>,
    /// The client asked to close the connection after this answer.
    pub(super) close: bool,
    pub(super) model: String,
    pub(super) selector: VersionSelector,
    pub(super) verb: Verb,
}

pub(super) enum Parsed {
    Take(Rc<Head>),
    /// The head has not all arrived.
    Partial,
    /// A request the front leaves to actix-web.
    HandOff,
}

/// Reads the request at the start of `buf`: the front takes HTTP/1.1 POSTs
/// of TF Serving's inference routes with exactly one `Host`, a declared body
/// of at most `body_limit` bytes, no transfer or content coding, and no
/// `Expect`, `Upgrade` or query string. It never answers a request it has
/// not checked as actix-web would: anything else goes to actix-web, which
/// refuses what is malformed (a missing `Host` among it: RFC 9112 §3.2) and
/// answers the rest as it always has.
// Kept whole: each check in the order the request's head is read; whatever fails one goes to
// actix-web.
pub(super) fn parse(buf: &[u8], body_limit: usize) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() < HEAD_LIMIT => return Parsed::Partial,
        _ => return Parsed::HandOff,
    };
    let (Some("POST"), Some(1), Some(path)) = (request.method, request.version, request.path) else {
        return Parsed::HandOff;
    };
    // Paths the `http` crate's URI parser refuses are actix-web's to refuse
    // (400); a query string or fragment is for actix-web's routing to read.
    if !path.bytes().all(uri_path_byte) {
        return Parsed::HandOff;
    }
    let Ok(Route::Infer { model, selector, verb }) = tfs::parse_route(&Method::POST, path) else {
        return Parsed::HandOff;
    };
    let at = |part: &[u8]| {
        let start = part.as_ptr() as usize - buf.as_ptr() as usize;
        start..start + part.len()
    };
    let mut head = Head {
        len,
        body: usize::MAX,
        path: at(path.as_bytes()),
        request_id: None,
        content_type: None,
        ce_id: None,
        close: false,
        model,
        selector,
        verb,
    };
    let mut seen_host = false;
    for header in request.headers.iter() {
        let name = header.name;
        let is = |wanted: &str| name.eq_ignore_ascii_case(wanted);
        if is("content-length") {
            match content_length(header.value) {
                Some(length) if head.body == usize::MAX => head.body = length,
                _ => return Parsed::HandOff,
            }
        } else if is("connection") {
            for token in header.value.split(|&b| b == b',') {
                match token.trim_ascii() {
                    t if t.eq_ignore_ascii_case(b"close") => head.close = true,
                    t if t.eq_ignore_ascii_case(b"keep-alive") => {}
                    _ => return Parsed::HandOff,
                }
            }
        } else if is("x-request-id") {
            // Repeated headers are read as actix-web reads them: the first.
            head.request_id.get_or_insert_with(|| at(header.value));
        } else if is("content-type") {
            head.content_type.get_or_insert_with(|| at(header.value));
        } else if is("ce-id") {
            head.ce_id.get_or_insert_with(|| at(header.value));
        } else if is("host") {
            if std::mem::replace(&mut seen_host, true) {
                return Parsed::HandOff;
            }
        } else if is("transfer-encoding") || is("content-encoding") || is("expect") || is("upgrade") {
            return Parsed::HandOff;
        }
    }
    if head.body > body_limit || !seen_host {
        return Parsed::HandOff;
    }
    Parsed::Take(Rc::new(head))
}

/// The head a connection's front last took, byte for byte. A keep-alive
/// client mostly repeats its head exactly (same path, same headers, same
/// body length); a head that starts the buffer with the same bytes, its
/// closing blank line included, parses to the same request, so it is not
/// parsed again.
#[derive(Default)]
pub(super) struct LastHead {
    bytes: Vec<u8>,
    head: Option<Rc<Head>>,
}

impl LastHead {
    /// [`parse`], unless the buffer starts with the last head taken.
    pub(super) fn parse(&mut self, buf: &[u8], body_limit: usize) -> Parsed {
        if let Some(head) = self.head.as_ref().filter(|_| buf.starts_with(&self.bytes)) {
            return Parsed::Take(head.clone());
        }
        let parsed = parse(buf, body_limit);
        if let Parsed::Take(head) = &parsed {
            self.bytes.clear();
            self.bytes.extend_from_slice(&buf[..head.len]);
            self.head = Some(head.clone());
        }
        parsed
    }
}

/// A byte the `http` crate takes in a URI's path as it is (not `?` or `#`,
/// which end the path).
fn uri_path_byte(b: u8) -> bool {
    matches!(b, 0x21..=0x22 | 0x24..=0x3B | 0x3D | 0x40..=0x5F | 0x61..=0x7E)
}

fn content_length(value: &[u8]) -> Option<usize> {
    if value.is_empty() || value.len() > 12 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// A header value as actix-web's `HeaderValue::to_str` reads it: visible
/// ASCII (and tabs) only.
pub(super) fn header_text(value: &[u8]) -> Option<&str> {
    value
        .iter()
        .all(|&b| b == b'\t' || (32..127).contains(&b))
        .then(|| std::str::from_utf8(value).ok())
        .flatten()
}

/// What the front makes of a connection's buffer, for the fuzz target that
/// holds it to actix-web's own parser: the lengths of the request it takes
/// (head, body), or whether it waits for more or hands the connection over.
#[doc(hidden)]
#[derive(Debug, PartialEq, Eq)]
pub enum FrontReading {
    Take { head: usize, body: usize },
    Partial,
    HandOff,
}

/// The front's reading of requests one after another on a connection, the
/// repeated-head shortcut included.
#[doc(hidden)]
#[derive(Default)]
pub struct FrontReader(LastHead);

impl FrontReader {
    pub fn read(&mut self, buf: &[u8]) -> FrontReading {
        match self.0.parse(buf, BODY_LIMIT) {
            Parsed::Take(head) => FrontReading::Take {
                head: head.len,
                body: head.body,
            },
            Parsed::Partial => FrontReading::Partial,
            Parsed::HandOff => FrontReading::HandOff,
        }
    }
}
