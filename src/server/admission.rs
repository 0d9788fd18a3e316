//! Admission: the bound on requests handled at once (`--max_in_flight_requests`)
//! and on request-body bytes held at once (`--max_in_flight_bytes`), shared by
//! the REST and gRPC transports, so overload answers at once instead of queueing.

use crate::error::ApiError;

/// A counter of requests being handled, refusing past its limit: overload
/// answers 503 at once instead of queueing without bound.
pub struct InFlight {
    count: std::sync::atomic::AtomicUsize,
    limit: usize,
}

/// One admitted request; leaves the count on drop.
pub struct Admitted<'a>(&'a InFlight);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl InFlight {
    pub fn new(limit: usize) -> InFlight {
        InFlight {
            count: std::sync::atomic::AtomicUsize::new(0),
            limit,
        }
    }

    /// Requests being handled now.
    pub fn current(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn admit(&self) -> Result<Admitted<'_>, ApiError> {
        let before = self.count.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let admitted = Admitted(self);
        if before >= self.limit {
            return Err(ApiError::Overloaded(self.limit));
        }
        Ok(admitted)
    }
}

/// A bound on the request-body bytes held at once, across every request:
/// past it, new bodies answer 503 before they are read, so many large
/// uploads at once cannot exhaust memory. One body is always admitted when
/// nothing else is held (its own limit is `max_request_bytes`).
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
        let before = self.held.fetch_add(bytes, Ordering::AcqRel);
        if before > 0 && before.saturating_add(bytes) > self.limit {
            self.held.fetch_sub(bytes, Ordering::AcqRel);
            return Err(ApiError::BodiesOverBudget(self.limit));
        }
        Ok(BytesBorrowed { budget: self, bytes })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_refuses_past_its_limit_and_frees_on_drop() {
        let in_flight = InFlight::new(1);
        let first = in_flight.admit().map_err(|e| e.to_string()).unwrap();
        assert!(in_flight.admit().is_err());
        assert_eq!(in_flight.current(), 1);
        drop(first);
        assert_eq!(in_flight.current(), 0);
        assert!(in_flight.admit().is_ok());
    }

    #[test]
    fn one_body_is_admitted_alone_whatever_its_size() {
        let budget = ByteBudget::new(10);
        let mut alone = budget.start();
        assert!(alone.grow(50).is_ok());
        let mut other = budget.start();
        assert!(other.grow(1).is_err());
        drop(alone);
        assert!(other.grow(5).is_ok());
        assert_eq!(budget.held(), 5);
        // A borrowed hold follows the same rule, and gives its bytes back.
        assert!(budget.hold(6).is_err());
        let borrowed = budget.hold(5).map_err(|e| e.to_string()).unwrap();
        assert_eq!(budget.held(), 10);
        drop(borrowed);
        drop(other);
        assert!(budget.hold(50).is_ok());
        assert_eq!(budget.held(), 0);
    }
}
