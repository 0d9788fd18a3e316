//! The bound on request memory held at once (`--max_in_flight_bytes`): the
//! REST bodies being read and handled, and the tensors decoded from them.
//!
//! What it decides: whether a request may take more bytes of one shared
//! budget, from the bytes every request holds now and the limit. A body
//! holds its bytes from its declared length (or as it arrives) until its
//! request is done. Before a body is decoded, its request also reserves an
//! upper bound of what decoding can allocate, computed from the body in one
//! pass ([`decoded_bound`]: at most one element per separator, each at most
//! 8 bytes, each string its bytes plus a fixed overhead); once decoded, the
//! reservation shrinks to the tensors' real size and is held until the run
//! is answered. A request that would take the budget past its limit while
//! other requests hold some of it is refused 503 (retry later), before the
//! allocation; one whose own bytes and bound pass the limit by themselves is
//! refused 413 (it never fits), however idle the server.
//! What it guarantees: the REST bodies and decoded input tensors held at
//! once never exceed the limit. Outputs, answers being written, and a
//! batch's merged copy are outside it.

use std::sync::atomic::Ordering;

use std::sync::Arc;

use super::{offload, RequestBody, Service, Trace};
use crate::codec::RequestFormat;
use crate::error::ApiError;
use crate::registry::Servable;
use crate::signature::SignatureSpec;
use crate::tensor::{Tensor, TensorData};

/// What one decoded string costs beyond its bytes: its vector's header and
/// the allocator's smallest block.
const STRING_OVERHEAD: usize = std::mem::size_of::<Vec<u8>>() + 16;
/// The widest element a number decodes to (`DT_INT64`, `DT_DOUBLE`).
const WIDEST_ELEMENT: usize = 8;

/// The budget of bytes requests hold at once: REST bodies, and the tensors
/// decoded from them (the policy is this module's first paragraph).
pub struct ByteBudget {
    held: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    limit: usize,
}

/// Bytes a request holds of the budget; given back when the request is done.
pub struct BytesHeld {
    held: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    bytes: usize,
    limit: usize,
}

impl ByteBudget {
    pub fn new(limit: usize) -> ByteBudget {
        ByteBudget {
            held: Default::default(),
            limit,
        }
    }

    /// An empty reservation, grown as the body arrives.
    pub fn start(&self) -> BytesHeld {
        BytesHeld {
            held: self.held.clone(),
            bytes: 0,
            limit: self.limit,
        }
    }

    /// Holds `bytes` for a body read whole before it is handled (the HTTP
    /// front's), as [`BytesHeld::grow`] would from empty, borrowing the
    /// budget rather than sharing it: no reference count per request.
    pub fn hold(&self, bytes: usize) -> Result<BytesBorrowed<'_>, ApiError> {
        use std::sync::atomic::Ordering;
        self.fits_alone(bytes)?;
        let before = self.held.fetch_add(bytes, Ordering::AcqRel);
        if before > 0 && before.saturating_add(bytes) > self.limit {
            self.held.fetch_sub(bytes, Ordering::AcqRel);
            return Err(ApiError::BodiesOverBudget(self.limit));
        }
        Ok(BytesBorrowed { budget: self, bytes })
    }

    /// Refuses a request that needs more than the whole budget by itself.
    fn fits_alone(&self, needs: usize) -> Result<(), ApiError> {
        match needs > self.limit {
            true => Err(ApiError::RequestOverBudget {
                needs,
                limit: self.limit,
            }),
            false => Ok(()),
        }
    }

    /// Bytes held now by every request.
    pub fn held(&self) -> usize {
        self.held.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl BytesHeld {
    /// Bytes this request holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Holds `more` bytes, unless that takes the budget past its limit while
    /// other requests hold some of it.
    pub fn grow(&mut self, more: usize) -> Result<(), ApiError> {
        use std::sync::atomic::Ordering;
        let needs = self.bytes.saturating_add(more);
        if needs > self.limit {
            return Err(ApiError::RequestOverBudget {
                needs,
                limit: self.limit,
            });
        }
        let before = self.held.fetch_add(more, Ordering::AcqRel);
        let others = before - self.bytes;
        if others > 0 && before.saturating_add(more) > self.limit {
            self.held.fetch_sub(more, Ordering::AcqRel);
            return Err(ApiError::BodiesOverBudget(self.limit));
        }
        self.bytes += more;
        Ok(())
    }
}

/// Bytes a request holds of a budget it borrows; given back on drop.
pub struct BytesBorrowed<'a> {
    budget: &'a ByteBudget,
    bytes: usize,
}

impl Drop for BytesBorrowed<'_> {
    fn drop(&mut self) {
        self.budget
            .held
            .fetch_sub(self.bytes, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Drop for BytesHeld {
    fn drop(&mut self) {
        self.held.fetch_sub(self.bytes, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Bytes a request reserved for its decoded tensors; given back on drop,
/// which the batcher does once the run that holds the tensors is over.
pub struct Reserved {
    held: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    bytes: usize,
}

impl ByteBudget {
    /// Reserves `bytes` beside the `own` bytes the request already holds
    /// (its body), unless that takes the budget past its limit while other
    /// requests hold some of it.
    pub fn reserve(&self, own: usize, bytes: usize) -> Result<Reserved, ApiError> {
        self.fits_alone(own.saturating_add(bytes))?;
        let before = self.held.fetch_add(bytes, Ordering::AcqRel);
        let others = before.saturating_sub(own);
        if others > 0 && before.saturating_add(bytes) > self.limit {
            self.held.fetch_sub(bytes, Ordering::AcqRel);
            return Err(ApiError::BodiesOverBudget(self.limit));
        }
        let held = self.held.clone();
        Ok(Reserved { held, bytes })
    }
}

impl Reserved {
    /// Keeps only `actual` bytes of the reservation (never more than reserved).
    pub fn settle(&mut self, actual: usize) {
        let freed = self.bytes.saturating_sub(actual);
        self.held.fetch_sub(freed, Ordering::AcqRel);
        self.bytes -= freed;
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// An upper bound of the bytes decoding `body` into tensors can allocate,
/// whatever its format (JSON, CSV, KServe's binary data): every element
/// ends at a separator (`,` `[` newline) or is raw binary, so there are at
/// most as many as separators plus one, each at most [`WIDEST_ELEMENT`]
/// bytes; a string also costs its bytes (at most the body's) and
/// [`STRING_OVERHEAD`], and strings are at most half the quotes plus, in
/// the `binary` bytes of KServe's binary data, one per 4-byte length prefix.
pub fn decoded_bound(body: &[u8], binary: usize) -> usize {
    let separators = memchr::memchr3_iter(b',', b'[', b'\n', body).count();
    let quotes = memchr::memchr_iter(b'"', body).count();
    let numbers = (separators + 1).saturating_mul(WIDEST_ELEMENT);
    let strings = (quotes / 2 + binary / 4).saturating_mul(STRING_OVERHEAD);
    body.len().saturating_add(numbers).saturating_add(strings)
}

/// The bytes a request's decoded tensors hold.
pub fn tensor_bytes(tensors: &[Tensor]) -> usize {
    tensors.iter().map(|t| data_bytes(&t.data)).sum()
}

fn data_bytes(data: &TensorData) -> usize {
    match data {
        TensorData::String(items) => items.iter().map(|s| s.len() + STRING_OVERHEAD).sum(),
        other => crate::with_tensor_data!(other, v => std::mem::size_of_val(v.as_slice())),
    }
}

impl Service {
    /// The bytes budget shared by every REST request.
    pub fn body_budget(&self) -> &ByteBudget {
        &self.body_budget
    }

    /// Decodes a body (`decode`, off the HTTP worker when large) under the
    /// budget: reserves [`decoded_bound`] first (`binary`: the bytes of
    /// KServe's binary data in it), then keeps what `measure` says the result
    /// holds. The reservation is held until dropped, which the caller does
    /// once the run is answered.
    pub async fn decode_within_budget<T: Send + 'static>(
        &self,
        body: &(impl RequestBody + ?Sized),
        binary: usize,
        decode: impl FnOnce(&[u8]) -> Result<T, ApiError> + Send + 'static,
        measure: impl FnOnce(&T) -> usize,
    ) -> Result<(T, Reserved), ApiError> {
        let bytes = body.as_slice();
        let mut reserved = self.body_budget.reserve(bytes.len(), decoded_bound(bytes, binary))?;
        let decoded = offload::decode_body(body, decode).await?;
        reserved.settle(measure(&decoded));
        Ok((decoded, reserved))
    }

    /// Decodes a body for `servable` under the budget and runs the predict it
    /// holds, the decoded tensors held against the budget until answered.
    /// `decode` gives the run's signature, answer layout and inputs, or
    /// `Err(other)` for a body another path answers (then returned as is).
    pub async fn decode_and_predict<T: Send + 'static>(
        &self,
        servable: &Arc<Servable>,
        body: &(impl RequestBody + ?Sized),
        decode: impl FnOnce(&Servable, &[u8]) -> Result<Result<DecodedPredict, T>, ApiError> + Send + 'static,
        trace: &mut Trace,
    ) -> Result<Result<Vec<u8>, T>, ApiError> {
        let decode = {
            let servable = servable.clone();
            move |body: &[u8]| decode(&servable, body)
        };
        let measure =
            |decoded: &Result<DecodedPredict, T>| decoded.as_ref().map_or(0, |(_, _, inputs)| tensor_bytes(inputs));
        let (decoded, held) = self.decode_within_budget(body, 0, decode, measure).await?;
        // The run keeps it until the tensors are dropped, even past a timeout.
        trace.held = Some(Box::new(held));
        let (signature, format, inputs) = match decoded {
            Ok(decoded) => decoded,
            Err(other) => return Ok(Err(other)),
        };
        trace.resolved(servable, &signature);
        let answer = self.predict_inputs(servable, &signature, inputs, format, trace).await?;
        Ok(Ok(answer))
    }
}

/// A predict's decoded request: its signature, the answer's layout and its inputs.
pub type DecodedPredict = (Arc<SignatureSpec>, RequestFormat, Vec<Tensor>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    #[test]
    fn a_body_past_the_whole_budget_is_refused_even_alone() {
        let budget = ByteBudget::new(10);
        let mut alone = budget.start();
        assert!(alone.grow(8).is_ok());
        let refused = alone.grow(3).map(drop).unwrap_err();
        assert_eq!(refused.status().as_u16(), 413);
        assert_eq!(
            refused.to_string(),
            "request needs 11 bytes for its body and decoded tensors, more than the limit of 10 bytes (max_in_flight_bytes)"
        );
        let mut other = budget.start();
        let busy = other.grow(3).map(drop).unwrap_err();
        assert_eq!(busy.status().as_u16(), 503);
        drop(alone);
        assert!(other.grow(5).is_ok());
        assert_eq!(budget.held(), 5);
        // A borrowed hold follows the same rules, and gives its bytes back.
        assert_eq!(budget.hold(6).map(drop).unwrap_err().status().as_u16(), 503);
        let borrowed = budget.hold(5).map_err(|e| e.to_string()).unwrap();
        assert_eq!(budget.held(), 10);
        drop(borrowed);
        drop(other);
        assert_eq!(budget.hold(50).map(drop).unwrap_err().status().as_u16(), 413);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn decoded_tensors_are_reserved_before_and_settled_after() {
        let budget = ByteBudget::new(100);
        let body = budget.hold(40).map_err(|e| e.to_string()).unwrap();
        // Alone, a request may not pass the limit with its own decoded tensors.
        assert_eq!(budget.reserve(40, 61).map(drop).unwrap_err().status().as_u16(), 413);
        let mut own = budget.reserve(40, 60).map_err(|e| e.to_string()).unwrap();
        assert_eq!(budget.held(), 100);
        own.settle(30);
        assert_eq!((own.bytes(), budget.held()), (30, 70));
        // Beside it, another request's reservation past the limit is refused.
        assert!(budget.reserve(0, 31).is_err());
        assert_eq!(budget.held(), 70);
        let other = budget.reserve(0, 30).map_err(|e| e.to_string()).unwrap();
        drop((own, other, body));
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn the_bound_covers_what_json_can_decode_to() {
        // Numbers: "0," is two bytes and may be an int64.
        let zeros = format!("[{}0]", "0,".repeat(1000));
        let decoded = Tensor::new(vec![1001], TensorData::Int64(vec![0; 1001]));
        assert!(decoded_bound(zeros.as_bytes(), 0) >= tensor_bytes(&[decoded]));
        // Empty strings: three bytes each, a vector each.
        let empty = format!("[{}\"\"]", "\"\",".repeat(1000));
        let decoded = Tensor::new(vec![1001], TensorData::String(vec![Vec::new(); 1001]));
        assert!(decoded_bound(empty.as_bytes(), 0) >= tensor_bytes(&[decoded]));
        // One long string: its bytes and one overhead.
        let long = format!("{{\"b64\": \"{}\"}}", "A".repeat(4000));
        let decoded = Tensor::new(vec![1], TensorData::String(vec![vec![0; 3000]]));
        assert!(decoded_bound(long.as_bytes(), 0) >= tensor_bytes(&[decoded]));
    }
}
