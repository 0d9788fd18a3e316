//! The REST front against actix-web's own HTTP/1.1 parser: a byte stream
//! split at random points, read request by request as a connection reads it.
//! The front never panics, and every request it takes (answers itself) is
//! one actix-web's codec reads alike: a POST with the same head length and
//! the same body length. Anything actix-web would refuse, the front leaves.
#![no_main]

use actix_codec::Decoder;
use actix_http::h1::{Codec, Message};
use actix_http::ServiceConfig;
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tfserve::http::{FrontReader, FrontReading};

fuzz_target!(|data: &[u8]| {
    // The first bytes choose where the stream is split; the rest is the stream.
    let (splits, stream) = data.split_at(data.len().min(4));
    let mut reader = FrontReader::default();
    let mut buf: Vec<u8> = Vec::new();
    let mut at = 0;
    let mut split = splits.iter().cycle();
    while at < stream.len() {
        let step = 1 + usize::from(*split.next().unwrap_or(&255));
        let end = (at + step).min(stream.len());
        buf.extend_from_slice(&stream[at..end]);
        at = end;
        loop {
            match reader.read(&buf) {
                FrontReading::Take { head, body } => {
                    agree_with_actix(&buf, head, body);
                    if buf.len() < head + body {
                        break;
                    }
                    buf.drain(..head + body);
                }
                FrontReading::Partial => break,
                FrontReading::HandOff => return,
            }
        }
    }
});

thread_local! {
    /// actix-web's service configuration, made once inside a local task set
    /// kept beside it: it starts a task that keeps the `Date` header's clock,
    /// which the decoder never reads.
    static ACTIX: (tokio::runtime::Runtime, tokio::task::LocalSet, ServiceConfig) = {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let local = tokio::task::LocalSet::new();
        let config = local.block_on(&runtime, async { ServiceConfig::default() });
        (runtime, local, config)
    };
}

/// actix-web's codec reads the same request from the same bytes.
fn agree_with_actix(buf: &[u8], head: usize, body: usize) {
    let mut codec = Codec::new(ACTIX.with(|(_, _, config)| config.clone()));
    let mut bytes = BytesMut::from(buf);
    let message = codec.decode(&mut bytes);
    let request = match message {
        Ok(Some(Message::Item(request))) => request,
        other => panic!(
            "the front took a request actix-web reads as {other:?}: {:?}",
            String::from_utf8_lossy(&buf[..head])
        ),
    };
    assert_eq!(request.method(), actix_http::Method::POST);
    assert_eq!(buf.len() - bytes.len(), head, "actix-web's head ends elsewhere");
    // The body: actix-web's payload decoder yields exactly `body` bytes (an
    // empty one has no payload decoder: what follows is the next request).
    if body > 0 && buf.len() >= head + body {
        let mut read = 0;
        loop {
            match codec.decode(&mut bytes) {
                Ok(Some(Message::Chunk(Some(chunk)))) => read += chunk.len(),
                Ok(Some(Message::Chunk(None))) => break,
                other => panic!("actix-web's body reads as {other:?} after {read} bytes"),
            }
        }
        assert_eq!(read, body, "actix-web reads a body of another length");
    }
}
