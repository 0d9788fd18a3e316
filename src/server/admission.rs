//! Admission: the bound on requests handled at once (`--max_in_flight_requests`),
//! shared by the REST and gRPC transports, so overload answers at once instead
//! of queueing. The bound on bytes held (`--max_in_flight_bytes`) is the
//! service's (`crate::service::ByteBudget`): decoded tensors count too.

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
}
