//! Under a latency objective, a request is refused before its body is read
//! when the queue ahead would make it late: what the transports ask of the
//! core before reading a body, free while no queue of the server has an
//! objective.

use std::time::Instant;

use super::{ApiError, Service, VersionSelector};

impl Service {
    /// Whether a queue of this server has a latency objective: the transports
    /// then stamp when bytes arrive, for [`Service::late_before_reading`].
    pub fn any_steered(&self) -> bool {
        self.registry.any_steered()
    }

    /// A request refused before its body is read because the queue ahead
    /// would make it miss the deadline its arrival (`arrived`, else now)
    /// sets ([`super::Servable::late_at_head`]).
    /// Free while no queue has an objective; a request that resolves no
    /// version is left for its route to refuse in its dialect's words.
    pub fn late_before_reading(
        &self,
        model: &str,
        selector: &VersionSelector,
        arrived: Option<Instant>,
    ) -> Result<(), ApiError> {
        if !self.any_steered() {
            return Ok(());
        }
        match self.registry.resolve(model, selector) {
            Ok(servable) => servable
                .late_at_head(arrived.unwrap_or_else(Instant::now))
                .map_or(Ok(()), |late| Err(late.into())),
            Err(_) => Ok(()),
        }
    }
}
