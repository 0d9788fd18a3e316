//! The compatibility corpus (`tests/compat`): SavedModels shaped like real
//! exports (TF 1.x graphs with inexact signatures, Estimator, Keras 2 and 3,
//! multi-signature modules, several tag-sets, many dtypes), each request run
//! through the TF Serving REST API, SageMaker's `/invocations` and Simple
//! TensorFlow Serving's `POST /`, with and without batching, and compared with
//! what TensorFlow's Python API computed for it.

use crate::common;

use std::sync::OnceLock;

use serde_json::{json, Map, Value};

use common::{repo_path, spawn_server};

fn cases() -> Vec<Value> {
    let text = std::fs::read_to_string(repo_path("tests/compat/cases.json")).expect("cases.json is committed");
    serde_json::from_str::<Vec<Value>>(&text).expect("cases.json is a list")
}

/// Two servers over the corpus: batching off (every request runs alone) and
/// on (requests merge by their actual shapes; scalars run alone).
fn servers() -> &'static [String; 2] {
    static URLS: OnceLock<[String; 2]> = OnceLock::new();
    URLS.get_or_init(|| {
        let start = |batching: bool| {
            let mut settings = common::local_settings();
            settings.models.models_dir = repo_path("tests/compat/models");
            settings.batching.enable_batching = batching;
            settings.models.file_system_poll_wait_seconds = 0;
            format!("http://{}", spawn_server(settings))
        };
        [start(false), start(true)]
    })
}

fn post(url: &str, content_type: &str, headers: &[(&str, String)], body: String) -> (u16, Value) {
    let mut request = common::client()
        .post(url)
        .header("Content-Type", content_type)
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().expect("request is answered");
    let status = response.status().as_u16();
    let text = response.text().expect("body is read");
    let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: {e}: {text}"));
    (status, value)
}

/// Equal up to a float tolerance (TF kernels differ in the last digits across CPUs).
fn same(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::Number(a), Value::Number(b)) => {
            let (a, b) = (a.as_f64().unwrap_or(f64::NAN), b.as_f64().unwrap_or(f64::NAN));
            (a - b).abs() <= 1e-4 * b.abs().max(1.0)
        }
        (Value::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y)),
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| same(v, w)))
        }
        (a, b) => a == b,
    }
}

fn assert_same(what: &str, got: &Value, want: &Value) {
    assert!(same(got, want), "{what}\n got: {got}\nwant: {want}");
}

/// Every number in a nested value, in order (CSV answers are compared as values only).
fn numbers(value: &Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items.iter().flat_map(numbers).collect(),
        other => vec![other.clone()],
    }
}

/// The row-format request and answer of a columnar case, when every input
/// and output has the same 0th dimension (TF Serving's condition for rows).
fn as_rows(inputs: &Map<String, Value>, outputs: &Map<String, Value>) -> Option<(Value, Value)> {
    let rows = |value: &Value| value.as_array().map(Vec::len);
    let n = rows(inputs.values().next()?)?;
    if n == 0 || !inputs.values().chain(outputs.values()).all(|v| rows(v) == Some(n)) {
        return None;
    }
    let row = |map: &Map<String, Value>, i: usize| -> Map<String, Value> {
        map.iter().map(|(k, v)| (k.clone(), v[i].clone())).collect()
    };
    let instances: Vec<Value> = (0..n).map(|i| Value::Object(row(inputs, i))).collect();
    let predictions: Vec<Value> = (0..n)
        .map(|i| match outputs.len() {
            1 => outputs.values().next().map(|v| v[i].clone()).unwrap_or_default(),
            _ => Value::Object(row(outputs, i)),
        })
        .collect();
    Some((Value::Array(instances), Value::Array(predictions)))
}

fn check_predict(base: &str, case: &Value) {
    let (name, model, signature) = (&case["name"], case["model"].as_str().unwrap(), &case["signature"]);
    let inputs = case["inputs"].as_object().expect("predict cases have inputs");
    let outputs = case["outputs"].as_object().expect("predict cases have outputs");
    let columnar = json!({"signature_name": signature, "inputs": inputs});
    // TF Serving unwraps a single output in the columnar layout.
    let expected = match outputs.len() {
        1 => json!({"outputs": outputs.values().next()}),
        _ => json!({"outputs": outputs}),
    };
    let tfs_url = format!("{base}/v1/models/{model}:predict");
    let (status, body) = post(&tfs_url, "application/json", &[], columnar.to_string());
    assert_eq!(status, 200, "{name} (TF Serving, columnar): {body}");
    assert_same(&format!("{name} (TF Serving, columnar)"), &body, &expected);

    let attributes = [(
        "X-Amzn-SageMaker-Custom-Attributes",
        format!("tfs-model-name={model},tfs-method=predict"),
    )];
    let (status, body) = post(
        &format!("{base}/invocations"),
        "application/json",
        &attributes,
        columnar.to_string(),
    );
    assert_eq!(status, 200, "{name} (SageMaker JSON): {body}");
    assert_same(&format!("{name} (SageMaker JSON)"), &body, &expected);

    if let Some((instances, predictions)) = as_rows(inputs, outputs) {
        let rows = json!({"signature_name": signature, "instances": instances});
        let (status, body) = post(&tfs_url, "application/json", &[], rows.to_string());
        assert_eq!(status, 200, "{name} (TF Serving, rows): {body}");
        assert_same(
            &format!("{name} (TF Serving, rows)"),
            &body,
            &json!({ "predictions": predictions }),
        );
        if let Some(csv) = case["csv"].as_str() {
            let (status, body) = post(&format!("{base}/invocations"), "text/csv", &attributes, csv.into());
            assert_eq!(status, 200, "{name} (SageMaker CSV): {body}");
            assert_same(
                &format!("{name} (SageMaker CSV)"),
                &Value::Array(numbers(&body["predictions"])),
                &Value::Array(numbers(&predictions)),
            );
        }
    }

    let stfs = json!({"model_name": model, "signature_name": signature, "data": inputs});
    let (status, body) = post(&format!("{base}/"), "application/json", &[], stfs.to_string());
    assert_eq!(status, 200, "{name} (Simple TensorFlow Serving): {body}");
    assert_same(
        &format!("{name} (Simple TensorFlow Serving)"),
        &body,
        &Value::Object(outputs.clone()),
    );
}

fn check_examples(base: &str, case: &Value) {
    let (name, model, method) = (
        &case["name"],
        case["model"].as_str().unwrap(),
        case["method"].as_str().unwrap(),
    );
    let request = json!({"signature_name": case["signature"], "examples": case["examples"]});
    let expected = json!({"results": case["results"]});
    let (status, body) = post(
        &format!("{base}/v1/models/{model}:{method}"),
        "application/json",
        &[],
        request.to_string(),
    );
    assert_eq!(status, 200, "{name} (TF Serving :{method}): {body}");
    assert_same(&format!("{name} (TF Serving :{method})"), &body, &expected);
    let attributes = [(
        "X-Amzn-SageMaker-Custom-Attributes",
        format!("tfs-model-name={model},tfs-method={method}"),
    )];
    let (status, body) = post(
        &format!("{base}/invocations"),
        "application/json",
        &attributes,
        request.to_string(),
    );
    assert_eq!(status, 200, "{name} (SageMaker {method}): {body}");
    assert_same(&format!("{name} (SageMaker {method})"), &body, &expected);
}

#[test]
fn every_corpus_case_answers_as_tensorflow_computes_it() {
    let cases = cases();
    assert!(cases.len() >= 20, "the corpus lost its cases");
    for base in servers() {
        for case in &cases {
            match case["method"].as_str() {
                Some("predict") => check_predict(base, case),
                Some("classify" | "regress") => check_examples(base, case),
                other => panic!("{}: unknown method {other:?}", case["name"]),
            }
        }
    }
}

#[test]
fn every_corpus_model_loads_with_its_signatures() {
    let base = &servers()[0];
    let models: std::collections::BTreeSet<String> = cases()
        .iter()
        .map(|c| c["model"].as_str().unwrap().to_string())
        .collect();
    for model in models {
        let response = common::client()
            .get(format!("{base}/v1/models/{model}/metadata"))
            .send()
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{model}");
        let metadata: Value = response.json().unwrap();
        let defs = &metadata["metadata"]["signature_def"]["signature_def"];
        assert!(defs.as_object().is_some_and(|d| !d.is_empty()), "{model}: {metadata}");
    }
}

fn case(name: &str) -> Value {
    cases()
        .into_iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no case {name}"))
}

#[test]
fn method_name_check_is_off_unless_asked_for() {
    // TF2 writes the predict method on every signature; by default the structure decides.
    let classify = case("tf2_examples_classify");
    let regress = case("tf2_examples_regress");
    check_examples(&servers()[0], &classify);
    check_examples(&servers()[0], &regress);
    let mut settings = common::local_settings();
    settings.models.models_dir = repo_path("tests/compat/models");
    settings.models.file_system_poll_wait_seconds = 0;
    settings.models.enable_signature_method_name_check = true;
    let strict = format!("http://{}", spawn_server(settings));
    for (case, method, kind) in [
        (&classify, "classify", "classification"),
        (&regress, "regress", "regression"),
    ] {
        let request = json!({"signature_name": case["signature"], "examples": case["examples"]});
        let url = format!("{strict}/v1/models/tf2_examples:{method}");
        let (status, body) = post(&url, "application/json", &[], request.to_string());
        assert_eq!(status, 400, "{body}");
        assert_eq!(
            body["error"],
            format!("Expected {kind} signature method_name to be tensorflow/serving/{method}. Was: tensorflow/serving/predict")
        );
    }
    // Signatures that do declare the method still answer under the check.
    check_examples(&strict, &case("estimator_dnn_regress"));
}

#[test]
fn stfs_base64_decode_feeds_estimator_examples() {
    let classify = case("estimator_dnn_classify_default");
    let examples = json!({"examples": classify["examples"]}).to_string();
    let serialized = tfserve::codec::example::ExamplesRequest::parse(examples.as_bytes())
        .unwrap()
        .serialized_examples()
        .unwrap();
    let tfserve::tensor::TensorData::String(serialized) = serialized.data else {
        panic!("serialized examples are strings");
    };
    use base64::Engine;
    let encoded: Vec<String> = serialized
        .iter()
        .map(|bytes| base64::engine::general_purpose::URL_SAFE.encode(bytes))
        .collect();
    let request = |decode: bool| {
        json!({"model_name": "estimator_dnn", "signature_name": "predict", "base64_decode": decode,
               "data": {"examples": encoded}})
        .to_string()
    };
    let base = &servers()[0];
    let (status, body) = post(&format!("{base}/"), "application/json", &[], request(true));
    assert_eq!(status, 200, "{body}");
    // The predict signature's probabilities are the classify signature's scores.
    let scores: Vec<Value> = classify["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pairs| Value::Array(pairs.as_array().unwrap().iter().map(|p| p[1].clone()).collect()))
        .collect();
    assert_same(
        "base64_decode probabilities",
        &body["probabilities"],
        &Value::Array(scores),
    );
    // Undecoded, the text reaches ParseExample, and TensorFlow's error is a 400.
    let (status, body) = post(&format!("{base}/"), "application/json", &[], request(false));
    assert_eq!(status, 400, "{body}");
}
