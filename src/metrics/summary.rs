//! The totals the dashboard polls, summed over label sets.

use prometheus::core::Collector;

use super::Metrics;

/// Totals over every label set, for the dashboard: it polls these and shows
/// the differences between polls (rates, interval latencies).
#[derive(Debug, Default, serde::Serialize)]
pub struct Summary {
    pub requests: u64,
    /// Requests answered with a 4xx or 5xx status.
    pub errors: u64,
    /// Requests per model (unresolved models under "").
    pub model_requests: std::collections::BTreeMap<String, u64>,
    pub latency_count: u64,
    pub latency_sum_seconds: f64,
    /// Cumulative `(upper bound in seconds, count)` pairs.
    pub latency_buckets: Vec<(f64, u64)>,
    pub batches: u64,
    pub batch_rows: f64,
    /// The same totals per model, for the dashboard's plots.
    pub models: std::collections::BTreeMap<String, ModelSummary>,
}

/// One model's totals (every version, signature and protocol together).
#[derive(Debug, Default, serde::Serialize)]
pub struct ModelSummary {
    pub requests: u64,
    pub errors: u64,
    pub latency_count: u64,
    pub latency_sum_seconds: f64,
    /// Cumulative `(upper bound in seconds, count)` pairs.
    pub latency_buckets: Vec<(f64, u64)>,
    pub batches: u64,
    pub batch_rows: f64,
    /// The largest batch cap a latency objective chose among the model's
    /// queues; none without an objective.
    pub batch_cap: Option<f64>,
}

/// Adds a histogram's cumulative buckets into `totals`.
fn add_buckets(totals: &mut Vec<(f64, u64)>, buckets: &[prometheus::proto::Bucket]) {
    if totals.is_empty() {
        *totals = buckets.iter().map(|b| (b.upper_bound(), 0)).collect();
    }
    for (total, bucket) in totals.iter_mut().zip(buckets) {
        total.1 += bucket.cumulative_count();
    }
}

/// A metric's label value.
fn label_of(metric: &prometheus::proto::Metric, name: &str) -> String {
    metric
        .get_label()
        .iter()
        .find(|l| l.name() == name)
        .map(|l| l.value().to_string())
        .unwrap_or_default()
}

impl Metrics {
    pub fn summary(&self) -> Summary {
        let mut summary = Summary::default();
        for family in self.requests.collect() {
            for metric in family.get_metric() {
                let count = metric.get_counter().get_value() as u64;
                let status = label_of(metric, "status");
                // HTTP statuses 4xx/5xx, or any gRPC code but OK.
                let failed =
                    status.starts_with(['4', '5']) || (label_of(metric, "protocol") == "grpc" && status != "OK");
                let model = label_of(metric, "model");
                summary.requests += count;
                *summary.model_requests.entry(model.clone()).or_default() += count;
                let own = summary.models.entry(model).or_default();
                own.requests += count;
                if failed {
                    summary.errors += count;
                    own.errors += count;
                }
            }
        }
        for family in self.request_seconds.collect() {
            for metric in family.get_metric() {
                let histogram = metric.get_histogram();
                summary.latency_count += histogram.get_sample_count();
                summary.latency_sum_seconds += histogram.get_sample_sum();
                add_buckets(&mut summary.latency_buckets, histogram.get_bucket());
                let own = summary.models.entry(label_of(metric, "model")).or_default();
                own.latency_count += histogram.get_sample_count();
                own.latency_sum_seconds += histogram.get_sample_sum();
                add_buckets(&mut own.latency_buckets, histogram.get_bucket());
            }
        }
        for family in self.batch_rows.collect() {
            for metric in family.get_metric() {
                let histogram = metric.get_histogram();
                summary.batches += histogram.get_sample_count();
                summary.batch_rows += histogram.get_sample_sum();
                let own = summary.models.entry(label_of(metric, "model")).or_default();
                own.batches += histogram.get_sample_count();
                own.batch_rows += histogram.get_sample_sum();
            }
        }
        for family in self.batch_cap.collect() {
            for metric in family.get_metric() {
                let cap = metric.get_gauge().get_value();
                let own = summary.models.entry(label_of(metric, "model")).or_default();
                own.batch_cap = Some(own.batch_cap.map_or(cap, |c: f64| c.max(cap)));
            }
        }
        summary
    }
}
