//! What a failing sink says about the records it loses: the first loss at
//! once, then at most one line per interval with how many were lost since
//! the last, so a full disk or a dead receiver cannot flood the log.

use std::time::{Duration, Instant};

use crate::metrics::METRICS;

/// How often a failing sink may log.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Default)]
pub struct Losses {
    /// Losses not yet told.
    untold: u64,
    /// Why the last one happened.
    reason: String,
    told_at: Option<Instant>,
}

impl Losses {
    pub const fn new() -> Losses {
        Losses {
            untold: 0,
            reason: String::new(),
            told_at: None,
        }
    }

    /// Counts one loss; returns the line to log when one is due.
    pub fn lost(&mut self, now: Instant, reason: impl std::fmt::Display) -> Option<String> {
        self.untold += 1;
        self.reason = reason.to_string();
        match self.told_at {
            Some(at) if now.duration_since(at) < LOG_INTERVAL => None,
            _ => {
                self.told_at = Some(now);
                self.take()
            }
        }
    }

    /// The losses not yet told, as a line, if any.
    pub fn take(&mut self) -> Option<String> {
        if self.untold == 0 {
            return None;
        }
        let line = format!(
            "{} record{} lost: {}",
            self.untold,
            if self.untold == 1 { "" } else { "s" },
            self.reason
        );
        self.untold = 0;
        Some(line)
    }
}

/// Counts a record a sink could not take; logs it as [`Losses`] allows.
pub(super) fn failed(sink: &str, target: &str, error: &dyn std::fmt::Display) {
    METRICS.capture_dropped.with_label_values(&[sink, "write_failed"]).inc();
    let reason = format!("cannot write to the {sink} sink ({target}): {error}");
    let line = LOSSES
        .lock()
        .ok()
        .and_then(|mut losses| losses.lost(Instant::now(), reason));
    if let Some(line) = line {
        log::warn!("capture: {line}");
    }
}

/// The losses not yet logged, logged (the writer's last act).
pub(super) fn tell_losses() {
    if let Some(line) = LOSSES.lock().ok().and_then(|mut losses| losses.take()) {
        log::warn!("capture: {line}");
    }
}

/// Only the writer thread writes files; a lock nobody contends with.
static LOSSES: std::sync::Mutex<Losses> = std::sync::Mutex::new(Losses::new());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_losses_is_told_once_per_interval_with_its_count() {
        let start = Instant::now();
        let mut losses = Losses::default();
        assert_eq!(
            losses.lost(start, "disk full").as_deref(),
            Some("1 record lost: disk full")
        );
        let told: Vec<String> = (1..=1000u64)
            .filter_map(|i| losses.lost(start + Duration::from_millis(i * 15), "disk full"))
            .collect();
        // 15 s of losses: one more line at the 10 s mark, the rest held.
        assert_eq!(told, ["667 records lost: disk full"]);
        assert_eq!(losses.take().as_deref(), Some("333 records lost: disk full"));
        assert_eq!(losses.take(), None);
    }
}
