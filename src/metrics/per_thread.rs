//! Metric vectors each thread counts on its own copy of, summed when collected.

use prometheus::core::Collector;
use prometheus::Registry;

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
    pub(super) fn registered(registry: &Registry, make: fn() -> V) -> PerThread<V> {
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

    /// Calls `f` on every thread's copy (to remove series from them all).
    pub(super) fn each(&self, f: impl Fn(&V)) {
        let copies = self.0.copies.lock().unwrap_or_else(|p| p.into_inner());
        copies.iter().for_each(f);
    }

    /// A new copy, counted in the totals: for one thread to keep.
    pub(super) fn copy(&self) -> V {
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

#[cfg(test)]
mod tests {
    use prometheus::{Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, TextEncoder};

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
