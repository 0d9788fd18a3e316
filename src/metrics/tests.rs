//! The registry's series: what an objective's queues carry, and GPU readings.

use super::*;

#[test]
fn the_summary_carries_the_cap_an_objective_chose_and_none_without() {
    let mut steered = QueueMetrics::new("summary-steered", 1, "serving_default");
    steered.steered().cap.set(16);
    steered.steered().margin.set(0.004);
    let plain = QueueMetrics::new("summary-plain", 1, "serving_default");
    plain.batch_rows.observe(3.0);
    let summary = METRICS.summary();
    assert_eq!(summary.models["summary-steered"].batch_cap, Some(16.0));
    assert_eq!(summary.models["summary-plain"].batch_cap, None);
    let text = String::from_utf8(METRICS.render()).unwrap();
    assert!(
        text.lines()
            .any(|line| line.starts_with("tfserve_batch_objective_margin_seconds{")
                && line.contains("summary-steered")
                && line.ends_with(" 0.004")),
        "{text}"
    );
    assert!(!text
        .lines()
        .any(|line| line.starts_with("tfserve_batch_objective_margin_seconds{") && line.contains("summary-plain")));
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

#[test]
fn rare_events_are_counted_from_zero_before_the_first() {
    let text = String::from_utf8(METRICS.render()).unwrap();
    for series in [
        r#"tfserve_panics_total{where="load"}"#,
        r#"tfserve_config_reloads_total{outcome="failed"}"#,
        r#"tfserve_python_worker_restarts_total{reason="crash"}"#,
    ] {
        assert!(text.lines().any(|line| line.starts_with(series)), "{series} missing");
    }
}
