//! Every metric tfserve exports, registered once and rendered as Prometheus text.

use std::sync::LazyLock;

use prometheus::core::Collector;
use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};

use crate::gpu_metrics::GpuReading;

const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0];
const QUEUE_LABELS: &[&str] = &["model", "version", "signature"];
const REQUEST_LABELS: [&str; 6] = ["protocol", "model", "version", "signature", "api", "status"];

/// A metric vector each thread counts on its own copy of, summed when
/// collected: every request is counted, and counting it touches nothing
/// another thread writes (one shared copy costs the threads its cache lines).
/// A thread's copy outlives the thread, so totals never go back.
pub struct PerThread<V>(std::sync::Arc<PerThreadInner<V>>);

pub struct PerThreadInner<V> {
    make: fn() -> V,
    copies: std::sync::Mutex<Vec<V>>,
    descs: Vec<prometheus::core::Desc>,
}

impl<V: Collector + Clone + 'static> PerThread<V> {
    fn registered(registry: &Registry, make: fn() -> V) -> PerThread<V> {
        let descs = make().desc().into_iter().cloned().collect();
        let metric = PerThread(std::sync::Arc::new(PerThreadInner {
            make,
            copies: std::sync::Mutex::new(Vec::new()),
            descs,
        }));
        registry
            .register(Box::new(PerThread(metric.0.clone())))
            .expect("metric registered once");
        metric
    }

    /// A new copy, counted in the totals: for one thread to keep.
    fn copy(&self) -> V {
        let copy = (self.0.make)();
        self.0
            .copies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(copy.clone());
        copy
    }
}

impl<V: Collector + 'static> Collector for PerThread<V> {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.0.descs.iter().collect()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let copies = self.0.copies.lock().unwrap_or_else(|p| p.into_inner());
        let mut families = copies.iter().flat_map(|copy| copy.collect());
        let Some(mut total) = families.next() else {
            return Vec::new();
        };
        let mut merged: std::collections::BTreeMap<Vec<(String, String)>, prometheus::proto::Metric> =
            std::collections::BTreeMap::new();
        let key = |metric: &prometheus::proto::Metric| -> Vec<(String, String)> {
            metric
                .get_label()
                .iter()
                .map(|l| (l.name().to_string(), l.value().to_string()))
                .collect()
        };
        let kind = total.get_field_type();
        for family in std::iter::once(total.clone()).chain(families) {
            for metric in family.get_metric() {
                match merged.entry(key(metric)) {
                    std::collections::btree_map::Entry::Vacant(slot) => {
                        slot.insert(metric.clone());
                    }
                    std::collections::btree_map::Entry::Occupied(mut slot) => add_into(slot.get_mut(), metric, kind),
                }
            }
        }
        total.set_metric(merged.into_values().collect());
        vec![total]
    }
}

/// Adds one copy's counter or histogram into another's.
fn add_into(
    total: &mut prometheus::proto::Metric,
    more: &prometheus::proto::Metric,
    kind: prometheus::proto::MetricType,
) {
    match kind {
        prometheus::proto::MetricType::COUNTER => {
            let mut counter = total.get_counter().clone();
            counter.set_value(counter.get_value() + more.get_counter().get_value());
            total.set_counter(counter);
        }
        prometheus::proto::MetricType::HISTOGRAM => {
            let mut histogram = total.get_histogram().clone();
            let other = more.get_histogram();
            histogram.set_sample_count(histogram.get_sample_count() + other.get_sample_count());
            histogram.set_sample_sum(histogram.get_sample_sum() + other.get_sample_sum());
            let mut buckets = histogram.get_bucket().to_vec();
            for (bucket, add) in buckets.iter_mut().zip(other.get_bucket()) {
                bucket.set_cumulative_count(bucket.cumulative_count() + add.cumulative_count());
            }
            histogram.set_bucket(buckets);
            total.set_histogram(histogram);
        }
        // Only counters and histograms are kept per thread.
        _ => {}
    }
}

pub struct Metrics {
    registry: Registry,
    pub requests: PerThread<IntCounterVec>,
    pub request_seconds: PerThread<HistogramVec>,
    batch_rows: HistogramVec,
    batch_padding: IntCounterVec,
    queue_wait_seconds: HistogramVec,
    run_seconds: HistogramVec,
    queue_depth: IntGaugeVec,
    batch_cap: IntGaugeVec,
    batch_timeout_seconds: GaugeVec,
    rejected: IntCounterVec,
    dropped: IntCounterVec,
    /// Panics contained: `where` is `request` (an HTTP handler) or `batch` (a model run).
    pub panics: IntCounterVec,
    pub python_worker_restarts: IntCounterVec,
    pub config_reloads: IntCounterVec,
    /// Capture records written, by sink (`jsonl`, `tfrecord`, `cloudevents`).
    pub capture_records: IntCounterVec,
    /// Capture files removed by retention, by sink.
    pub capture_files_removed: IntCounterVec,
    /// Capture records dropped, by sink (`queue` when the writer fell behind) and reason.
    pub capture_dropped: IntCounterVec,
    pub in_flight: IntGauge,
    /// Session runs by the replica (GPU) that ran them, for models replicated on several GPUs.
    pub replica_runs: IntCounterVec,
    gpu_memory_used: IntGaugeVec,
    gpu_memory_total: IntGaugeVec,
    gpu_utilization: GaugeVec,
}

fn int_gauge(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let metric = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry
        .register(Box::new(metric.clone()))
        .expect("metric registered once");
    metric
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let metric = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry
        .register(Box::new(metric.clone()))
        .expect("metric registered once");
    metric
}

fn histogram(registry: &Registry, name: &str, help: &str, labels: &[&str], buckets: &[f64]) -> HistogramVec {
    let metric =
        HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets.to_vec()), labels).expect("valid metric");
    registry
        .register(Box::new(metric.clone()))
        .expect("metric registered once");
    metric
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let registry = Registry::new();
    Metrics {
        capture_records: counter(
            &registry,
            "tfserve_capture_records_total",
            "Captured request/response records written, by sink.",
            &["sink"],
        ),
        replica_runs: counter(
            &registry,
            "tfserve_replica_runs_total",
            "Session runs (batches) of a model replicated on several GPUs, by the replica's device.",
            &["model", "version", "device"],
        ),
        capture_files_removed: counter(
            &registry,
            "tfserve_capture_files_removed_total",
            "Capture files removed, oldest first, to keep a sink's directory within its retention limits, by sink.",
            &["sink"],
        ),
        capture_dropped: counter(
            &registry,
            "tfserve_capture_dropped_total",
            "Captured records dropped (the request was answered), by sink and reason.",
            &["sink", "reason"],
        ),
        requests: PerThread::registered(&registry, || {
            IntCounterVec::new(
                Opts::new("tfserve_requests_total", "Requests answered, by outcome."),
                &REQUEST_LABELS,
            )
            .expect("valid metric")
        }),
        request_seconds: PerThread::registered(&registry, || {
            HistogramVec::new(
                HistogramOpts::new(
                    "tfserve_request_duration_seconds",
                    "Time from a request's arrival to its answer.",
                )
                .buckets(LATENCY_BUCKETS.to_vec()),
                &REQUEST_LABELS[..5],
            )
            .expect("valid metric")
        }),
        batch_rows: histogram(
            &registry,
            "tfserve_batch_size",
            "Rows in each batch formed, before padding to an allowed size.",
            QUEUE_LABELS,
            BATCH_BUCKETS,
        ),
        batch_padding: counter(
            &registry,
            "tfserve_batch_padding_rows_total",
            "Rows added to reach an allowed batch size.",
            QUEUE_LABELS,
        ),
        queue_wait_seconds: histogram(
            &registry,
            "tfserve_queue_wait_seconds",
            "Time a request waited in its batching queue.",
            QUEUE_LABELS,
            LATENCY_BUCKETS,
        ),
        run_seconds: histogram(
            &registry,
            "tfserve_run_seconds",
            "Time of each TensorFlow session run (one batch).",
            QUEUE_LABELS,
            LATENCY_BUCKETS,
        ),
        queue_depth: {
            let gauge = IntGaugeVec::new(
                Opts::new("tfserve_queue_depth", "Requests waiting in a batching queue."),
                QUEUE_LABELS,
            )
            .expect("valid metric");
            registry
                .register(Box::new(gauge.clone()))
                .expect("metric registered once");
            gauge
        },
        batch_cap: {
            let gauge = IntGaugeVec::new(
                Opts::new(
                    "tfserve_batch_cap",
                    "The largest batch a queue with a latency objective forms, as its controller chose it.",
                ),
                QUEUE_LABELS,
            )
            .expect("valid metric");
            registry
                .register(Box::new(gauge.clone()))
                .expect("metric registered once");
            gauge
        },
        batch_timeout_seconds: {
            let gauge = GaugeVec::new(
                Opts::new(
                    "tfserve_batch_timeout_seconds",
                    "How long a batch of a queue with a latency objective waits to fill, as its controller chose it.",
                ),
                QUEUE_LABELS,
            )
            .expect("valid metric");
            registry
                .register(Box::new(gauge.clone()))
                .expect("metric registered once");
            gauge
        },
        rejected: counter(
            &registry,
            "tfserve_rejected_total",
            "Requests refused by a batching queue (queue full, or too large without splitting).",
            &["model", "version", "signature", "reason"],
        ),
        dropped: counter(
            &registry,
            "tfserve_dropped_total",
            "Queued requests dropped before running because their client had gone.",
            QUEUE_LABELS,
        ),
        in_flight: {
            let gauge = IntGauge::new(
                "tfserve_requests_in_flight",
                "REST and gRPC requests being handled (admitted under --max_in_flight_requests), \
                 as of this scrape: a per-pod load signal for autoscaling.",
            )
            .expect("valid metric");
            registry
                .register(Box::new(gauge.clone()))
                .expect("metric registered once");
            gauge
        },
        config_reloads: counter(
            &registry,
            "tfserve_config_reloads_total",
            "Periodic re-reads of --model_config_file: ok, or failed (unreadable or invalid; the models stay as they were).",
            &["outcome"],
        ),
        python_worker_restarts: counter(
            &registry,
            "tfserve_python_worker_restarts_total",
            "Python handler workers replaced: crash (exited during a call), timeout (a call \
             passed its deadline), memory (python_worker_max_rss_mb), calls (python_worker_max_requests).",
            &["reason"],
        ),
        panics: counter(
            &registry,
            "tfserve_panics_total",
            "Panics contained (the request or batch failed with a 500; the thread lived on).",
            &["where"],
        ),
        gpu_memory_used: int_gauge(
            &registry,
            "tfserve_gpu_memory_used_bytes",
            "GPU memory in use (every process's), as NVML reports it at this scrape.",
            &["gpu"],
        ),
        gpu_memory_total: int_gauge(
            &registry,
            "tfserve_gpu_memory_total_bytes",
            "GPU memory in all, as NVML reports it.",
            &["gpu"],
        ),
        gpu_utilization: {
            let gauge = GaugeVec::new(
                Opts::new(
                    "tfserve_gpu_utilization_ratio",
                    "Share of NVML's last sample period in which a kernel ran on the GPU, 0 to 1.",
                ),
                &["gpu"],
            )
            .expect("valid metric");
            registry
                .register(Box::new(gauge.clone()))
                .expect("metric registered once");
            gauge
        },
        registry,
    }
});

/// A thread's request metric handles, by label values. Looking a handle up
/// in its vector takes the vector's lock and clones an `Arc` both worker
/// threads share, on every request; a short list per thread compares a few
/// short strings instead. A server with more label sets than this looks the
/// rest up as before, replacing the newest entry.
const REQUEST_HANDLES_KEPT: usize = 32;

struct RequestHandles {
    count: IntCounter,
    seconds: Histogram,
}

thread_local! {
    static REQUEST_HANDLES: std::cell::RefCell<Vec<([String; 6], RequestHandles)>> =
        const { std::cell::RefCell::new(Vec::new()) };
    /// This thread's copies of the request metrics.
    static REQUEST_COPIES: std::cell::OnceCell<(IntCounterVec, HistogramVec)> = const { std::cell::OnceCell::new() };
}

fn same_labels(kept: &[String; 6], labels: &[&str; 6]) -> bool {
    // Lengths first: `==` on two empty strings may read through a dangling
    // pointer in `memcmp`, which the CPU answers with a slow assist.
    kept.iter()
        .zip(labels)
        .all(|(a, b)| a.len() == b.len() && (a.is_empty() || a.as_str() == *b))
}

/// What one answered request is counted under.
pub struct RequestLabels<'a> {
    /// `rest` or `grpc`.
    pub protocol: &'a str,
    pub model: &'a str,
    pub version: &'a str,
    pub signature: &'a str,
    pub api: &'a str,
    /// The HTTP status, or the gRPC code's name.
    pub status: &'a str,
}

impl Metrics {
    /// Counts one answered request and its duration.
    pub fn record_request(&self, labels: &RequestLabels<'_>, seconds: f64) {
        let RequestLabels {
            protocol,
            model,
            version,
            signature,
            api,
            status,
        } = *labels;
        let labels = [protocol, model, version, signature, api, status];
        REQUEST_HANDLES.with(|cache| {
            let mut cache = cache.borrow_mut();
            let found = cache.iter().position(|(key, _)| same_labels(key, &labels));
            let index = match found {
                Some(index) => index,
                None => {
                    if cache.len() == REQUEST_HANDLES_KEPT {
                        cache.pop();
                    }
                    let handles = REQUEST_COPIES.with(|copies| {
                        let (count, seconds) =
                            copies.get_or_init(|| (self.requests.copy(), self.request_seconds.copy()));
                        RequestHandles {
                            count: count.with_label_values(&labels),
                            seconds: seconds.with_label_values(&labels[..5]),
                        }
                    });
                    cache.push((labels.map(str::to_owned), handles));
                    cache.len() - 1
                }
            };
            let (_, handles) = &cache[index];
            handles.count.inc();
            handles.seconds.observe(seconds);
        });
    }

    /// Sets the GPU gauges from one reading of every GPU.
    pub fn record_gpus(&self, gpus: &[GpuReading]) {
        for gpu in gpus {
            let label = gpu.index.to_string();
            let as_gauge = |bytes: u64| i64::try_from(bytes).unwrap_or(i64::MAX);
            self.gpu_memory_used
                .with_label_values(&[&label])
                .set(as_gauge(gpu.used_bytes));
            self.gpu_memory_total
                .with_label_values(&[&label])
                .set(as_gauge(gpu.total_bytes));
            if gpu.utilization.is_finite() {
                self.gpu_utilization.with_label_values(&[&label]).set(gpu.utilization);
            }
        }
    }

    /// Prometheus text exposition of every metric (the GPUs read now).
    pub fn render(&self) -> Vec<u8> {
        self.record_gpus(&crate::gpu_metrics::readings());
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metrics.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}

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

/// The batch cap and timeout a queue's latency objective chose.
#[derive(Clone)]
pub struct SteeringGauges {
    pub cap: IntGauge,
    pub timeout: Gauge,
}

impl SteeringGauges {
    pub fn set(&self, cap: usize, timeout: std::time::Duration) {
        self.cap.set(cap as i64);
        self.timeout.set(timeout.as_secs_f64());
    }
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
            timeout: METRICS.batch_timeout_seconds.with_label_values(&labels),
        })
    }
}

#[cfg(test)]
mod per_thread_tests {
    use super::*;

    #[test]
    fn copies_on_other_threads_add_up() {
        let registry = Registry::new();
        let requests = PerThread::registered(&registry, || {
            IntCounterVec::new(Opts::new("t_requests_total", "help"), &["model"]).expect("valid")
        });
        let seconds = PerThread::registered(&registry, || {
            HistogramVec::new(
                HistogramOpts::new("t_seconds", "help").buckets(vec![0.1, 1.0]),
                &["model"],
            )
            .expect("valid")
        });
        std::thread::scope(|scope| {
            for value in [0.05, 0.5, 5.0] {
                let (requests, seconds) = (&requests, &seconds);
                scope.spawn(move || {
                    requests.copy().with_label_values(&["a"]).inc_by(2);
                    requests.copy().with_label_values(&["b"]).inc();
                    seconds.copy().with_label_values(&["a"]).observe(value);
                });
            }
        });
        let counts = requests.collect();
        let by_model: Vec<(String, f64)> = counts[0]
            .get_metric()
            .iter()
            .map(|m| (m.get_label()[0].value().to_string(), m.get_counter().get_value()))
            .collect();
        assert_eq!(by_model, [("a".to_string(), 6.0), ("b".to_string(), 3.0)]);
        let histogram = seconds.collect()[0].get_metric()[0].get_histogram().clone();
        assert_eq!(histogram.get_sample_count(), 3);
        assert!((histogram.get_sample_sum() - 5.55).abs() < 1e-9);
        let buckets: Vec<u64> = histogram.get_bucket().iter().map(|b| b.cumulative_count()).collect();
        assert_eq!(buckets, [1, 2]);
        // The registry renders the totals.
        let mut text = Vec::new();
        TextEncoder::new().encode(&registry.gather(), &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("t_requests_total{model=\"a\"} 6"), "{text}");
        assert!(text.contains("t_seconds_count{model=\"a\"} 3"), "{text}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_carries_the_cap_an_objective_chose_and_none_without() {
        let mut steered = QueueMetrics::new("summary-steered", 1, "serving_default");
        steered.steered().set(16, std::time::Duration::from_millis(2));
        let plain = QueueMetrics::new("summary-plain", 1, "serving_default");
        plain.batch_rows.observe(3.0);
        let summary = METRICS.summary();
        assert_eq!(summary.models["summary-steered"].batch_cap, Some(16.0));
        assert_eq!(summary.models["summary-plain"].batch_cap, None);
    }

    #[test]
    fn gpu_readings_become_gauges_labelled_by_index() {
        let metrics = &*METRICS;
        metrics.record_gpus(&[
            GpuReading {
                index: 0,
                used_bytes: 3 << 30,
                total_bytes: 80 << 30,
                utilization: 0.42,
            },
            GpuReading {
                index: 1,
                used_bytes: 1024,
                total_bytes: 2048,
                utilization: f64::NAN,
            },
        ]);
        let text = String::from_utf8(metrics.render()).unwrap();
        assert!(
            text.contains("tfserve_gpu_memory_used_bytes{gpu=\"0\"} 3221225472"),
            "{text}"
        );
        assert!(
            text.contains("tfserve_gpu_memory_total_bytes{gpu=\"1\"} 2048"),
            "{text}"
        );
        assert!(text.contains("tfserve_gpu_utilization_ratio{gpu=\"0\"} 0.42"), "{text}");
        assert!(!text.contains("tfserve_gpu_utilization_ratio{gpu=\"1\"}"), "{text}");
    }
}
