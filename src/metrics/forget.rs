//! Removing an unloaded model's series, so `/metrics` holds only what is
//! served (and what the server counts overall) however many models came
//! and went.

use std::collections::HashMap;

use prometheus::core::{Collector, MetricVec, MetricVecBuilder};

use super::Metrics;

impl Metrics {
    /// Removes every series labelled with `model` and, when given, `version`
    /// (as the labels print it), from every metric that carries them.
    pub fn forget(&self, model: &str, version: Option<i64>) {
        let version = version.map(|v| v.to_string());
        let matches = |labels: &HashMap<&str, &str>| {
            labels.get("model") == Some(&model) && version.as_deref().is_none_or(|v| labels.get("version") == Some(&v))
        };
        self.requests.each(|copy| remove_matching(copy, &matches));
        self.request_seconds.each(|copy| remove_matching(copy, &matches));
        remove_matching(&self.batch_rows, &matches);
        remove_matching(&self.batch_padding, &matches);
        remove_matching(&self.queue_wait_seconds, &matches);
        remove_matching(&self.run_seconds, &matches);
        remove_matching(&self.queue_depth, &matches);
        remove_matching(&self.batch_cap, &matches);
        remove_matching(&self.batch_objective_margin, &matches);
        remove_matching(&self.rejected, &matches);
        remove_matching(&self.dropped, &matches);
        remove_matching(&self.replica_runs, &matches);
        remove_matching(&self.model_mode, &matches);
        remove_matching(&self.model_mode_switches, &matches);
    }
}

/// Removes the series of `vec` whose labels `matches` accepts.
fn remove_matching<B: MetricVecBuilder>(vec: &MetricVec<B>, matches: &dyn Fn(&HashMap<&str, &str>) -> bool) {
    for family in vec.collect() {
        for metric in family.get_metric() {
            let labels: HashMap<&str, &str> = metric.get_label().iter().map(|l| (l.name(), l.value())).collect();
            if matches(&labels) {
                // Gone already (a concurrent removal) is what was wanted.
                let _ = vec.remove(&labels);
            }
        }
    }
}
