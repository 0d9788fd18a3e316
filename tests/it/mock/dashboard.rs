//! The dashboard: its page and state over HTTP, and the page driven in
//! headless Chromium (tests/browser/dashboard.mjs) with a screenshot saved
//! under target/test-artifacts/.

use crate::common;

use common::*;

#[test]
fn page_is_self_contained_and_served_on_both_routes() {
    for path in ["/dashboard", "/"] {
        let response = client()
            .get(format!("{}{path}", base_url()))
            .header("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
            .send()
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path}");
        let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
        assert!(content_type.starts_with("text/html"), "{content_type}");
        let page = response.text().unwrap();
        assert!(page.contains("id=\"models\""), "{path}");
        // Nothing is fetched from elsewhere: no absolute URLs in src/href attributes.
        for attribute in ["src=\"http", "href=\"http", "src=\"//", "href=\"//"] {
            assert!(
                !page.contains(attribute),
                "{path} loads an external asset ({attribute})"
            );
        }
    }
}

#[test]
fn the_root_answers_kserve_liveness_to_clients_that_do_not_ask_for_html() {
    let response = client().get(format!("{}/", base_url())).send().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body: serde_json::Value = response.json().unwrap();
    assert_eq!(body, serde_json::json!({"status": "alive"}));
}

#[test]
fn state_lists_models_signatures_and_metrics() {
    let (status, _) = post_json(
        "/",
        &serde_json::json!({"model_name": "half_plus_three", "data": {"x": [1.0]}}),
    );
    assert_eq!(status, 200);
    let (status, state) = get("/dashboard/state");
    assert_eq!(status, 200, "{state}");
    let models = state["models"].as_array().unwrap();
    let adder = models.iter().find(|m| m["name"] == "adder").unwrap();
    let versions: Vec<i64> = adder["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_i64().unwrap())
        .collect();
    // As TF Serving by default, only the highest version serves.
    assert_eq!(versions, vec![2]);
    assert_eq!(adder["versions"][0]["state"], "AVAILABLE");
    assert_eq!(adder["handlers"], false);
    let cnn = models.iter().find(|m| m["name"] == "mnist_cnn").unwrap();
    let input = &cnn["versions"][0]["signatures"][0]["inputs"][0];
    assert_eq!(input["dtype"], "DT_FLOAT");
    assert_eq!(input["shape"], serde_json::json!([-1, 28, 28, 1]));
    let metrics = &state["metrics"];
    assert!(metrics["requests"].as_u64().unwrap() >= 1, "{metrics}");
    assert!(metrics["model_requests"]["half_plus_three"].as_u64().unwrap() >= 1);
    assert!(metrics["latency_count"].as_u64().unwrap() >= 1);
    assert!(!metrics["latency_buckets"].as_array().unwrap().is_empty());
    // Per model, for the plots.
    let half = &metrics["models"]["half_plus_three"];
    assert!(half["requests"].as_u64().unwrap() >= 1, "{metrics}");
    assert!(half["latency_count"].as_u64().unwrap() >= 1, "{metrics}");
    assert!(half["batches"].as_u64().unwrap() >= 1, "{metrics}");
    assert_eq!(
        half["latency_buckets"].as_array().unwrap().len(),
        metrics["latency_buckets"].as_array().unwrap().len()
    );
}

#[test]
fn a_request_refused_before_it_resolves_counts_under_the_model_it_named_if_one_is_served() {
    let (status, _) = post_json(
        "/v1/models/half_plus_three:predict",
        &serde_json::json!({"instances": ["not a number"]}),
    );
    assert_eq!(status, 400);
    let (status, _) = post_json(
        "/v1/models/label_probe_unknown:predict",
        &serde_json::json!({"instances": [1.0]}),
    );
    assert_eq!(status, 404);
    let text = client()
        .get(format!("{}/metrics", base_url()))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let refused = text
        .lines()
        .filter(|line| line.starts_with("tfserve_requests_total{"))
        .find(|line| line.contains("model=\"half_plus_three\"") && line.contains("status=\"400\""));
    assert!(refused.is_some_and(|line| line.contains("version=\"\"")), "{text}");
    // A name no model has never becomes a label.
    assert!(!text.contains("label_probe_unknown"), "{text}");
}
