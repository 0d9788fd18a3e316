//! A request as a stream carries it: its header block decoded into a head
//! (pseudo-headers, metadata, whether its message is compressed), and
//! whether its body is one message a Predict can be decoded from.

use std::sync::Arc;

use bytes::Bytes;
use tonic::codegen::http::{self, HeaderName, HeaderValue, Method, Request};

use super::frame::Reason;
use super::hpack;

/// The header list a request may carry (names, values and 32 bytes each).
pub const MAX_HEADER_LIST: usize = 16 << 10;
const PREDICT_PATH: &str = "/tensorflow.serving.PredictionService/Predict";

/// Whether the message collected so far can still be a Predict served
/// from its decoded message: one uncompressed message within the limit.
/// A compressed one, an over-long one or a second one goes to tonic,
/// which answers them as it always has.
pub fn predict_fits(body: &[u8], limit: usize) -> bool {
    if body.len() < 5 {
        return true;
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    body[0] == 0 && len <= limit && body.len() <= 5 + len
}

/// Whether a body holds exactly one uncompressed gRPC message, within the
/// limit, after its 5-byte prefix.
pub fn decodable(body: &[u8], limit: usize) -> bool {
    let Some((prefix, message)) = body.split_at_checked(5) else {
        return false;
    };
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    prefix[0] == 0 && message.len() == len && len <= limit
}

pub enum Fields {
    /// Shared: a connection keeps its last head to reuse for the same block.
    Request(Arc<RequestHead>),
    Malformed,
    TooLarge(usize),
}

/// A request's header block, decoded.
#[derive(Clone)]
pub struct RequestHead {
    pub method: Bytes,
    pub scheme: Option<Bytes>,
    pub authority: Option<Bytes>,
    pub path: Bytes,
    /// In the order sent; a `HeaderMap` is built only for a relayed call,
    /// since a Predict reads two of them.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// A message compressed with `grpc-encoding`: tonic decompresses it,
    /// and answers in the same coding when the client accepts it.
    pub compressed: bool,
}

impl RequestHead {
    /// An uncompressed Predict: answered uncompressed, as TF Serving
    /// answers, whatever `grpc-accept-encoding` allows.
    pub fn is_predict(&self) -> bool {
        &self.method[..] == b"POST" && &self.path[..] == PREDICT_PATH.as_bytes() && !self.compressed
    }

    /// The first value sent under `name`, as `HeaderMap::get` finds it,
    /// when it is text.
    pub fn header(&self, name: &HeaderName) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, value)| value.to_str().ok())
    }

    pub fn into_parts(self) -> Option<http::request::Parts> {
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
        parts.headers.reserve(self.headers.len());
        for (name, value) in self.headers {
            parts.headers.append(name, value);
        }
        Some(parts)
    }
}

/// A header block as a request's head.
pub fn decode(decoder: &mut hpack::Decoder, block: &Bytes) -> Result<Fields, Reason> {
    let mut method = None;
    let mut scheme = None;
    let mut authority = None;
    let mut path = None;
    let mut headers = Vec::new();
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
                (Ok(name), Ok(value)) => headers.push((name, value)),
                _ => malformed = true,
            }
        })
        .map_err(|_| Reason::COMPRESSION_ERROR)?;
    if size > MAX_HEADER_LIST {
        return Ok(Fields::TooLarge(size));
    }
    match (method, path, malformed) {
        (Some(method), Some(path), false) => Ok(Fields::Request(Arc::new(RequestHead {
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
