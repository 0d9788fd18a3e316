//! TF Serving REST classify, regress, model status and metadata.

use crate::common;

use common::*;
use serde_json::json;

#[test]
fn classify_with_tf_examples() {
    let request = json!({"signature_name": "classify_x_to_y", "examples": [{"x": 1.0}, {"x": 3.0}]});
    let (status, body) = post_json("/v1/models/tf1_half_plus_two:classify", &request);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"results": [[["pos", 2.5], ["neg", -1.5]], [["pos", 3.5], ["neg", -2.5]]]})
    );
}

#[test]
fn regress_with_context() {
    let request = json!({"signature_name": "regress_x_to_y", "context": {"x": 4.0}, "examples": [{}, {}]});
    let (status, body) = post_json("/v1/models/tf1_half_plus_two:regress", &request);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"results": [4.0, 4.0]}));
    let request = json!({"signature_name": "regress_x_to_y", "examples": [{"x": [0.0]}, {"x": 10.0}]});
    let (_, body) = post_json("/v1/models/tf1_half_plus_two/versions/1:regress", &request);
    assert_eq!(body, json!({"results": [2.0, 7.0]}));
}

#[test]
fn classify_and_regress_errors() {
    let message = error_of(
        post_json(
            "/v1/models/tf1_half_plus_two:classify",
            &json!({"examples": [{"x": 1.0}]}),
        ),
        400,
    );
    // With the method-name check off (TF Serving's default) the structure
    // decides: a float input is no input for serialized tf.Examples.
    assert!(
        message.starts_with("No classification inputs found in SignatureDef 'serving_default'"),
        "{message}"
    );
    let message = error_of(
        post_json(
            "/v1/models/tf1_half_plus_two:regress",
            &json!({"signature_name": "regress_x_to_y"}),
        ),
        400,
    );
    assert!(message.contains("'examples'"), "{message}");
    let request = json!({"signature_name": "regress_x_to_y", "context": {"x": 1.0}, "examples": [{"x": 2.0}]});
    let message = error_of(post_json("/v1/models/tf1_half_plus_two:regress", &request), 400);
    assert!(message.contains("'x'") && message.contains("context"), "{message}");
    // An int64 feature where the model parses floats: TensorFlow's own error, as a 400.
    let request = json!({"signature_name": "regress_x_to_y", "examples": [{"x": 1}]});
    let (status, _) = post_json("/v1/models/tf1_half_plus_two:regress", &request);
    assert_eq!(status, 400);
}

#[test]
fn model_status_lists_versions() {
    let (status, body) = get("/v1/models/adder");
    assert_eq!(status, 200);
    let ok = json!({"error_code": "OK", "error_message": ""});
    assert_eq!(
        body,
        json!({"model_version_status": [
            {"version": "2", "state": "AVAILABLE", "status": ok}
        ]})
    );
    let (_, body) = get("/v1/models/adder/versions/2");
    assert_eq!(body["model_version_status"].as_array().unwrap().len(), 1);
    assert_eq!(body["model_version_status"][0]["version"], "2");
    assert_eq!(
        error_of(get("/v1/models/adder/versions/5"), 404),
        "Servable not found for request: Specific(adder, 5)"
    );
}

#[test]
fn metadata_describes_signatures() {
    let (status, body) = get("/v1/models/half_plus_three/metadata");
    assert_eq!(status, 200);
    assert_eq!(
        body["model_spec"],
        json!({"name": "half_plus_three", "signature_name": "", "version": "1"})
    );
    let defs = body["metadata"]["signature_def"]["signature_def"].as_object().unwrap();
    // TF2's init op is not a servable signature.
    assert_eq!(defs.keys().collect::<Vec<_>>(), vec!["serving_default"]);
    let def = &defs["serving_default"];
    assert_eq!(def["method_name"], "tensorflow/serving/predict");
    assert_eq!(def["inputs"]["x"]["dtype"], "DT_FLOAT");
    assert_eq!(
        def["inputs"]["x"]["tensor_shape"],
        json!({"dim": [{"size": "-1", "name": ""}], "unknown_rank": false})
    );
    assert_eq!(def["outputs"]["y"]["dtype"], "DT_FLOAT");

    let (_, body) = get("/v1/models/tf1_half_plus_two/versions/1/metadata");
    let defs = body["metadata"]["signature_def"]["signature_def"].as_object().unwrap();
    assert_eq!(
        defs.keys().collect::<Vec<_>>(),
        vec!["classify_x_to_y", "regress_x_to_y", "serving_default"]
    );
    assert_eq!(defs["classify_x_to_y"]["method_name"], "tensorflow/serving/classify");
    assert_eq!(defs["classify_x_to_y"]["inputs"]["inputs"]["dtype"], "DT_STRING");

    let (_, body) = get("/v1/models/multi_io/metadata");
    let inputs = &body["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"];
    assert_eq!(inputs["features"]["tensor_shape"]["dim"][1]["size"], "3");
    assert_eq!(inputs["count"]["dtype"], "DT_INT64");
    assert_eq!(inputs["label"]["dtype"], "DT_STRING");
    assert_eq!(inputs["flag"]["dtype"], "DT_BOOL");
}
