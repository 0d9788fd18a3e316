//! Every metric tfserve exports, registered once and rendered as Prometheus text.

use std::sync::LazyLock;

use prometheus::core::Collector;
use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::gpu_metrics::GpuReading;

mod forget;
mod per_thread;
mod queue;
mod summary;

pub use per_thread::PerThread;
pub use queue::{QueueMetrics, SteeringGauges};
pub use summary::{ModelSummary, Summary};

const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0];
const QUEUE_LABELS: &[&str] = &["model", "version", "signature"];
const REQUEST_LABELS: [&str; 6] = ["protocol", "model", "version", "signature", "api", "status"];

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
    batch_objective_margin: GaugeVec,
    rejected: IntCounterVec,
    dropped: IntCounterVec,
    /// Panics contained: `where` is `request` (an HTTP handler) or `batch` (a model run).
    pub panics: IntCounterVec,
    /// Model versions the load audit refused, by the first class not allowed.
    pub refused_loads: IntCounterVec,
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
    /// A loaded version's mode (`mixed_precision: auto`) and its measured speedup over FP32.
    pub model_mode: GaugeVec,
    /// Versions switched to the mode their background trial chose.
    pub model_mode_switches: IntCounterVec,
}

/// Registers a metric once, returning the handle the code counts on.
fn registered<C: Collector + Clone + 'static>(registry: &Registry, metric: C) -> C {
    registry
        .register(Box::new(metric.clone()))
        .expect("metric registered once");
    metric
}

fn int_gauge(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let metric = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    registered(registry, metric)
}

fn gauge(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
    let metric = GaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    registered(registry, metric)
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let metric = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    registered(registry, metric)
}

fn histogram(registry: &Registry, name: &str, help: &str, labels: &[&str], buckets: &[f64]) -> HistogramVec {
    let options = HistogramOpts::new(name, help).buckets(buckets.to_vec());
    registered(registry, HistogramVec::new(options, labels).expect("valid metric"))
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let metrics = metrics();
    // Counters of rare events are written at 0 from the start: an alert on
    // their `rate()` needs a series before the first event.
    let rare: [(&IntCounterVec, &[&str]); 3] = [
        (&metrics.panics, &["request", "batch", "load", "mode_trial"]),
        (&metrics.config_reloads, &["ok", "failed"]),
        (
            &metrics.python_worker_restarts,
            &["crash", "timeout", "memory", "calls"],
        ),
    ];
    for (counter, labels) in rare {
        for label in labels {
            counter.with_label_values(&[*label]);
        }
    }
    metrics
});

// Kept whole: one entry per metric, its name, help and labels: a table.
fn metrics() -> Metrics {
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
        queue_depth: int_gauge(
            &registry,
            "tfserve_queue_depth",
            "Requests waiting in a batching queue.",
            QUEUE_LABELS,
        ),
        batch_cap: int_gauge(
            &registry,
            "tfserve_batch_cap",
            "The largest batch a queue with a latency objective forms, as its controller chose it.",
            QUEUE_LABELS,
        ),
        batch_objective_margin: gauge(
            &registry,
            "tfserve_batch_objective_margin_seconds",
            "How far short of its deadline a queue with a latency objective plans a request to be let in: \
             learned from the on-time requests that took their answers past their deadlines.",
            QUEUE_LABELS,
        ),
        rejected: counter(
            &registry,
            "tfserve_rejected_total",
            "Requests refused by a batching queue: queue_full, too_large (without splitting), late (past a \
             latency objective's deadline, at admission or when its batch was taken), queue_timeout.",
            &["model", "version", "signature", "reason"],
        ),
        dropped: counter(
            &registry,
            "tfserve_dropped_total",
            "Queued requests dropped before running because their client had gone.",
            QUEUE_LABELS,
        ),
        in_flight: registered(
            &registry,
            IntGauge::new(
                "tfserve_requests_in_flight",
                "REST and gRPC requests being handled (admitted under --max_in_flight_requests), \
                 as of this scrape: a per-pod load signal for autoscaling.",
            )
            .expect("valid metric"),
        ),
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
        refused_loads: counter(
            &registry,
            "tfserve_model_loads_refused_total",
            "Model versions not loaded because their signatures reach a class of access not allowed (class), or run a JAX module the linked TensorFlow cannot (jax_module_version, jax_module_platform).",
            &["class"],
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
        gpu_utilization: gauge(
            &registry,
            "tfserve_gpu_utilization_ratio",
            "Share of NVML's last sample period in which a kernel ran on the GPU, 0 to 1.",
            &["gpu"],
        ),
        model_mode: gauge(
            &registry,
            "tfserve_model_mode_speedup",
            "The mode (precision, +xla) a version serves in under mixed_precision auto (float32 while its \
             trial runs), valued at its measured speed over FP32's.",
            &["model", "version", "mode"],
        ),
        model_mode_switches: counter(
            &registry,
            "tfserve_model_mode_switches_total",
            "Versions switched from float32 to the mode their background trial chose (mixed_precision auto).",
            &["model", "version", "mode"],
        ),
        registry,
    }
}

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

#[cfg(test)]
mod tests;
