//! What keeps the mock runtime honest: every committed model the mock claims
//! to compute (`common/mock.rs`) is served twice, once on TensorFlow and once
//! on the mock, and the same requests, good and bad, over TF Serving's REST
//! API, its classify and regress, KServe v2 and SageMaker's `/invocations`,
//! must get the same status codes, the same error messages and the same
//! answers (floats within 1e-5). The mock-run tests lean on those answers.

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::common;

/// The models `common/mock.rs` computes, by name under `models/`.
const COMPUTED: [&str; 7] = [
    "adder",
    "first_token",
    "half_plus_three",
    "half_plus_two",
    "half_precision",
    "multi_io",
    "tf1_half_plus_two",
];

fn serve(loader: Arc<dyn tfserve::runtime::Loader>) -> SocketAddr {
    let dir = common::temp_dir("mock-agrees");
    let config = json!({"model_config_list": {"config": COMPUTED.iter().map(|name| json!({
        "name": name,
        "base_path": common::repo_path(&format!("models/{name}")),
        "model_platform": "tensorflow",
    })).collect::<Vec<_>>()}});
    let mut settings = common::config_settings(&config, &dir);
    settings.models.default_model_name = Some("half_plus_three".into());
    common::spawn_server_on(settings, loader)
}

/// (method, path, content type, body): each sent as it is to both servers.
fn requests() -> Vec<(&'static str, String, &'static str, String)> {
    let mut all = Vec::new();
    let mut predict = |model: &str, body: Value| {
        all.push((
            "POST",
            format!("/v1/models/{model}:predict"),
            "application/json",
            body.to_string(),
        ));
    };
    for model in ["half_plus_three", "half_plus_two", "tf1_half_plus_two", "adder"] {
        predict(model, json!({"instances": [1.0, 2.0, 5.0]}));
        predict(model, json!({"inputs": [0.5, -3.25]}));
        predict(model, json!({"inputs": {"x": [1e30, -0.0]}}));
        predict(model, json!({"instances": []}));
        predict(model, json!({"instances": ["a"]}));
        predict(model, json!({"instances": [[1.0, 2.0]]}));
        predict(model, json!({"inputs": {"y": [1.0]}}));
        predict(model, json!({"instances": [1.0], "signature_name": "nope"}));
        predict(model, json!({"instances": [1.0], "inputs": [1.0]}));
    }
    predict("adder/versions/1", json!({"instances": [1.0]}));
    predict("adder/versions/2", json!({"instances": [1.0]}));
    predict("adder/versions/3", json!({"instances": [1.0]}));
    predict("half_precision", json!({"instances": [1.5, -2.0, 0.25]}));
    predict("half_precision", json!({"instances": [70000.0]}));
    predict("first_token", json!({"instances": [[7, 8, 9], [1, 2, 3]]}));
    predict("first_token", json!({"inputs": {"tokens": [[4]]}}));
    predict("first_token", json!({"instances": [[1, 2], [3]]}));
    predict("first_token", json!({"instances": [[1.5, 2]]}));
    let row = |count: i64, label: &str, flag: bool| json!({"features": [1.0, 2.0, 3.5], "count": count, "label": label, "flag": flag});
    predict(
        "multi_io",
        json!({"instances": [row(2, "a", true), row(-1, "bé", false)]}),
    );
    predict(
        "multi_io",
        json!({"inputs": {"features": [[0.5, 0.0, 1.0]], "count": [3], "label": [{"b64": "aGk="}], "flag": [true]}}),
    );
    predict(
        "multi_io",
        json!({"instances": [{"features": [1.0, 2.0], "count": 1, "label": "a", "flag": true}]}),
    );
    predict(
        "multi_io",
        json!({"instances": [{"features": [1.0, 2.0, 3.0], "count": 1, "label": "a"}]}),
    );
    predict(
        "multi_io",
        json!({"inputs": {"features": [[1.0, 2.0, 3.0]], "count": [1, 2], "label": ["a"], "flag": [true]}}),
    );
    predict(
        "multi_io",
        json!({"inputs": {"features": [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], "count": [1, 2, 3], "label": ["a"], "flag": [true]}}),
    );
    predict(
        "multi_io",
        json!({"instances": [{"features": [1.0, 2.0, 3.0], "count": 1.5, "label": "a", "flag": true}]}),
    );
    for model in ["half_plus_two", "tf1_half_plus_two"] {
        for (verb, signature) in [("classify", "classify_x_to_y"), ("regress", "regress_x_to_y")] {
            let path = format!("/v1/models/{model}:{verb}");
            let body = |examples: Value| json!({"signature_name": signature, "examples": examples}).to_string();
            all.push((
                "POST",
                path.clone(),
                "application/json",
                body(json!([{"x": 1.0}, {"x": -4.0}])),
            ));
            all.push(("POST", path.clone(), "application/json", body(json!([{"y": 1.0}]))));
            all.push(("POST", path, "application/json", body(json!([{"x": "a"}]))));
        }
    }
    for (model, body) in [
        (
            "half_plus_three",
            json!({"inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "data": [1.0, 2.0, 5.0]}]}),
        ),
        (
            "half_plus_three",
            json!({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0, 5.0]}]}),
        ),
        (
            "half_plus_three",
            json!({"inputs": [{"name": "x", "shape": [1], "datatype": "INT32", "data": [1]}]}),
        ),
        (
            "first_token",
            json!({"inputs": [{"name": "tokens", "shape": [2, 2], "datatype": "INT64", "data": [5, 6, 7, 8]}]}),
        ),
        (
            "half_precision",
            json!({"inputs": [{"name": "x", "shape": [2], "datatype": "FP16", "data": [0.5, 3.0]}]}),
        ),
    ] {
        all.push((
            "POST",
            format!("/v2/models/{model}/infer"),
            "application/json",
            body.to_string(),
        ));
    }
    all.push(("POST", "/invocations".into(), "text/csv", "1.0\n2.0\n5.0".into()));
    all.push((
        "POST",
        "/invocations".into(),
        "application/json",
        r#"{"instances": [[1.0], "x"]}"#.into(),
    ));
    for model in COMPUTED {
        all.push(("GET", format!("/v1/models/{model}/metadata"), "", String::new()));
    }
    all
}

fn send(client: &reqwest::blocking::Client, addr: SocketAddr, request: &(&str, String, &str, String)) -> (u16, Value) {
    let (method, path, content_type, body) = request;
    let url = format!("http://{addr}{path}");
    let response = match *method {
        "GET" => client.get(url).send(),
        _ => client
            .post(url)
            .header("content-type", *content_type)
            .body(body.clone())
            .send(),
    }
    .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let status = response.status().as_u16();
    let text = response.text().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Equal, with floats within 1e-5 relative: the mock computes in f32 or f64
/// where TensorFlow's kernels may round once more.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-5 * x.abs().max(y.abs()),
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

#[test]
fn the_mock_answers_every_request_as_tensorflow_does() {
    let on_tensorflow = serve(Arc::new(tfserve::runtime::TensorFlowLoader {
        sees_gpu: false,
        custom_ops: Vec::new(),
    }));
    let on_mock = serve(Arc::new(common::mock::CommittedModels));
    let client = common::client();
    let requests = requests();
    let mut differences = Vec::new();
    for request in &requests {
        let want = send(&client, on_tensorflow, request);
        let got = send(&client, on_mock, request);
        if want.0 != got.0 || !same(&want.1, &got.1) {
            differences.push(format!(
                "{} {} {}\n  TensorFlow: {} {}\n  mock:       {} {}",
                request.0, request.1, request.3, want.0, want.1, got.0, got.1
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} requests answered differently:\n{}",
        differences.len(),
        requests.len(),
        differences.join("\n")
    );
}
