//! How long a request is planned to take from now: where the queue's
//! running batches hold every thread it runs on, until the last of them is
//! planned to end (from then every thread takes the next batch as it
//! frees); then the batches of the cap that the on-time rows waiting and
//! its own make, as many at once as the queue runs, each planned full (its
//! own batch may fill behind it).

use std::time::{Duration, Instant};

use super::Controller;

/// One of the queue's batches running now.
#[derive(Clone, Copy, Debug)]
pub struct Running {
    pub id: u64,
    pub started: Instant,
    pub rows: usize,
}

/// The time planned for a request of `rows` rows behind `waiting` on-time
/// rows, from `now`; `None` before any run was measured.
pub(super) fn ahead(
    controller: &Controller,
    (rows, waiting): (usize, usize),
    now: Instant,
    running: &[Running],
) -> Option<Duration> {
    let mut total = Duration::ZERO;
    if running.len() >= controller.parallel {
        let ends = running.iter().map(|run| {
            let planned = controller.planned_run(run.rows)?;
            Some(
                run.started
                    .checked_add(planned)
                    .unwrap_or(now)
                    .saturating_duration_since(now),
            )
        });
        total += ends.collect::<Option<Vec<_>>>()?.into_iter().max()?;
    }
    let cap = controller.cap();
    let waves = (waiting + rows).div_ceil(cap).div_ceil(controller.parallel);
    let full = controller.planned_run(cap)?;
    Some(total.saturating_add(full.saturating_mul(u32::try_from(waves).unwrap_or(u32::MAX))))
}
