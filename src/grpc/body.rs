//! A unary call's request body as the gRPC port collects it for a Predict
//! it decodes itself: chunks gathered while they can still be one
//! uncompressed message within the receive limit, and that message decoded.
//! Pure (no I/O), so the fuzz target drives it with bodies split anywhere.

use bytes::{Bytes, BytesMut};
use prost::Message;

use crate::proto::tensorflow::serving::PredictRequest;

/// A body gathered chunk by chunk. One chunk (a body in one DATA frame) is
/// kept as it came, without a copy; several go into one buffer sized by the
/// message's length prefix.
#[derive(Default)]
pub struct MessageBody {
    first: Option<Bytes>,
    buffer: BytesMut,
}

impl MessageBody {
    /// Adds a chunk; false once the body can no longer be one message within
    /// `limit` (the call then goes to tonic with what was read).
    pub fn push(&mut self, chunk: Bytes, limit: usize) -> bool {
        match self.first.take() {
            None if self.buffer.is_empty() => self.first = Some(chunk),
            None => self.buffer.extend_from_slice(&chunk),
            Some(earlier) => {
                let expected = message_len(&earlier).map_or(0, |len| len.min(limit) + 5);
                self.buffer.reserve(expected.max(earlier.len() + chunk.len()));
                self.buffer.extend_from_slice(&earlier);
                self.buffer.extend_from_slice(&chunk);
            }
        }
        fits(self.bytes(), limit)
    }

    fn bytes(&self) -> &[u8] {
        self.first.as_deref().unwrap_or(&self.buffer)
    }

    /// What was read, whole or not.
    pub fn into_bytes(self) -> Bytes {
        self.first.unwrap_or_else(|| self.buffer.freeze())
    }
}

fn message_len(body: &[u8]) -> Option<usize> {
    let prefix = body.get(1..5)?;
    Some(u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize)
}

/// Whether the bytes so far can still be one uncompressed message within the limit.
pub fn fits(body: &[u8], limit: usize) -> bool {
    match (body.first(), message_len(body)) {
        (None, _) => true,
        (Some(&flag), None) => flag == 0,
        (Some(&flag), Some(len)) => flag == 0 && len <= limit && body.len() <= 5 + len,
    }
}

/// Whether a body is exactly one uncompressed message within the limit.
pub fn whole(body: &[u8], limit: usize) -> bool {
    body.first() == Some(&0) && message_len(body).is_some_and(|len| len <= limit && body.len() == 5 + len)
}

/// The Predict a whole body holds, decoded from shared bytes: each
/// `tensor_content` is a slice of the body, not a copy. None when the body
/// is not one message within the limit, or its bytes are not a PredictRequest.
pub fn predict_request(body: &Bytes, limit: usize) -> Option<PredictRequest> {
    if !whole(body, limit) {
        return None;
    }
    PredictRequest::decode(body.slice(5..)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_one_message_only_when_its_prefix_says_so() {
        let mut body = vec![0, 0, 0, 0, 3, 1, 2, 3];
        assert!(whole(&body, 3));
        assert!(!whole(&body, 2), "over the limit");
        assert!(fits(&body[..6], 3) && !whole(&body[..6], 3), "not yet whole");
        body.push(4);
        assert!(!fits(&body, 3) && !whole(&body, 3), "a second message");
        body[0] = 1;
        assert!(!fits(&body[..1], 10), "compressed");
        assert!(fits(&[], 0) && !whole(&[], 0));
    }

    #[test]
    fn chunks_gather_into_the_body_they_split() {
        let body: Vec<u8> = [0, 0, 0, 0, 6].into_iter().chain(1..=6).collect();
        for split in 0..body.len() {
            let mut gathered = MessageBody::default();
            assert!(gathered.push(Bytes::copy_from_slice(&body[..split]), 100));
            assert!(gathered.push(Bytes::copy_from_slice(&body[split..]), 100));
            assert_eq!(gathered.into_bytes(), body);
        }
        let mut over = MessageBody::default();
        assert!(!over.push(Bytes::copy_from_slice(&body), 5), "over the limit");
    }
}
