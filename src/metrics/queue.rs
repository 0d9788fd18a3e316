//! One batching queue's metric handles.

use prometheus::{Gauge, Histogram, IntCounter, IntGauge};

use super::METRICS;

/// What a queue's latency objective chose.
#[derive(Clone)]
pub struct SteeringGauges {
    pub cap: IntGauge,
    /// Seconds short of its deadline a request is planned to be let in.
    pub margin: Gauge,
}

/// One queue's metric handles, resolved once so the hot path does no label lookups.
#[derive(Clone)]
pub struct QueueMetrics {
    pub batch_rows: Histogram,
    pub padding_rows: IntCounter,
    pub queue_wait: Histogram,
    pub run: Histogram,
    pub depth: IntGauge,
    /// What a latency objective chose; only queues with one have the series.
    pub steering: Option<SteeringGauges>,
    labels: std::sync::Arc<[String; 3]>,
    pub rejected_full: IntCounter,
    pub rejected_too_large: IntCounter,
    pub rejected_late: IntCounter,
    pub rejected_timeout: IntCounter,
    pub dropped: IntCounter,
}

impl QueueMetrics {
    pub fn new(model: &str, version: i64, signature: &str) -> QueueMetrics {
        let version = version.to_string();
        let labels = [model, version.as_str(), signature];
        let m = &*METRICS;
        QueueMetrics {
            batch_rows: m.batch_rows.with_label_values(&labels),
            padding_rows: m.batch_padding.with_label_values(&labels),
            queue_wait: m.queue_wait_seconds.with_label_values(&labels),
            run: m.run_seconds.with_label_values(&labels),
            depth: m.queue_depth.with_label_values(&labels),
            steering: None,
            labels: std::sync::Arc::new(labels.map(str::to_string)),
            rejected_full: m
                .rejected
                .with_label_values(&[model, &version, signature, "queue_full"]),
            rejected_too_large: m.rejected.with_label_values(&[model, &version, signature, "too_large"]),
            rejected_late: m.rejected.with_label_values(&[model, &version, signature, "late"]),
            rejected_timeout: m
                .rejected
                .with_label_values(&[model, &version, signature, "queue_timeout"]),
            dropped: m.dropped.with_label_values(&labels),
        }
    }

    /// Adds the series of what a latency objective chooses.
    pub fn steered(&mut self) -> &SteeringGauges {
        let labels = [
            self.labels[0].as_str(),
            self.labels[1].as_str(),
            self.labels[2].as_str(),
        ];
        self.steering.get_or_insert_with(|| SteeringGauges {
            cap: METRICS.batch_cap.with_label_values(&labels),
            margin: METRICS.batch_objective_margin.with_label_values(&labels),
        })
    }
}
