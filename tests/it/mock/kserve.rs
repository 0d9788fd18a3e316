//! The Open Inference Protocol over REST with a plain HTTP client: JSON
//! tensors of every kind, outputs chosen, binary outputs, metadata and errors.

use crate::common;

use serde_json::{json, Value};

use common::{base_url, client, error_of, get, post_json};

#[test]
fn json_inference_over_every_datatype() {
    let (status, answer) = post_json(
        "/v2/models/multi_io/infer",
        &json!({
            "id": "req-7",
            "inputs": [
                {"name": "features", "shape": [1, 3], "datatype": "FP32", "data": [[1, 2, 3.5]]},
                {"name": "count", "shape": [1], "datatype": "INT64", "data": [2]},
                {"name": "label", "shape": [1], "datatype": "BYTES", "data": ["ann"]},
                {"name": "flag", "shape": [1], "datatype": "BOOL", "data": [true]}
            ],
            "outputs": [{"name": "greeting"}, {"name": "total"}, {"name": "flag_not"}]
        }),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["model_name"], "multi_io");
    assert_eq!(answer["model_version"], "1");
    assert_eq!(answer["id"], "req-7");
    let outputs: Vec<&Value> = answer["outputs"].as_array().unwrap().iter().collect();
    let by_name = |name: &str| outputs.iter().find(|o| o["name"] == name).copied().unwrap().clone();
    assert_eq!(outputs.len(), 3, "{answer}");
    assert_eq!(
        by_name("greeting"),
        json!({"name": "greeting", "datatype": "BYTES", "shape": [1], "data": ["hello ann"]})
    );
    assert_eq!(by_name("total")["data"], json!([6.5]));
    assert_eq!(
        by_name("flag_not"),
        json!({"name": "flag_not", "datatype": "BOOL", "shape": [1], "data": [false]})
    );
}

#[test]
fn binary_outputs_follow_the_json_header() {
    let response = client()
        .post(format!("{}/v2/models/half_plus_three/infer", base_url()))
        .json(&json!({
            "inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0, 5.0]}],
            "parameters": {"binary_data_output": true}
        }))
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    let length: usize = response.headers()["inference-header-content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(response.headers()["content-type"], "application/octet-stream");
    let body = response.bytes().unwrap();
    let header: Value = serde_json::from_slice(&body[..length]).unwrap();
    assert_eq!(header["outputs"][0]["parameters"]["binary_data_size"], 8);
    let values: Vec<f32> = body[length..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(values, vec![3.5, 5.5]);
}

#[test]
fn metadata_readiness_and_server_description() {
    let (status, server) = get("/v2");
    assert_eq!(status, 200);
    assert_eq!(server["name"], "tfserve");
    // The spec's own spelling of the path.
    assert_eq!(get("/v2/"), (200, server.clone()));
    assert!(server["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e == "binary_tensor_data"));
    let (status, model) = get("/v2/models/half_plus_three");
    assert_eq!(status, 200);
    assert_eq!(
        model["inputs"],
        json!([{"name": "x", "datatype": "FP32", "shape": [-1]}])
    );
    assert_eq!(model["versions"], json!(["1"]));
    assert_eq!(get("/v2/models/half_plus_three/versions/1/ready").0, 200);
    // A version nobody serves is unknown (404), as KServe answers an unknown model.
    assert_eq!(get("/v2/models/half_plus_three/versions/9/ready").0, 404);
    assert_eq!(get("/v2/models/nope/ready").0, 404);
    assert_eq!(get("/v2/models/nope").0, 404);
}

#[test]
fn bad_requests_name_what_is_wrong() {
    let infer = |body: Value| post_json("/v2/models/half_plus_three/infer", &body);
    let message = error_of(
        infer(json!({"inputs": [{"name": "z", "shape": [1], "datatype": "FP32", "data": [1]}]})),
        400,
    );
    assert!(message.contains("'z'") && message.contains("x"), "{message}");
    let message = error_of(
        infer(json!({"inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "data": [1, 2]}]})),
        400,
    );
    assert!(message.contains("needs 3 elements, got 2"), "{message}");
    let message = error_of(
        infer(json!({"inputs": [{"name": "x", "shape": [1], "datatype": "INT64", "data": [1]}]})),
        400,
    );
    assert!(message.contains("INT64") && message.contains("FP32"), "{message}");
    let message = error_of(
        infer(json!({"inputs": [{"name": "x", "shape": [1], "datatype": "BF16", "data": [1]}]})),
        400,
    );
    assert!(message.contains("BF16"), "{message}");
    // A number FP32 holds only as infinity is refused, not answered as one.
    let message = error_of(
        infer(json!({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 1e39]}]})),
        400,
    );
    assert!(
        message.contains("input 'x'") && message.contains("element 1 is 1e39") && message.contains("FP32"),
        "{message}"
    );
    let (status, answer) = post_json(
        "/v2/models/half_precision/infer",
        &json!({"inputs": [{"name": "x", "shape": [2], "datatype": "FP16", "data": [1.5, -2]}]}),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outputs"][0]["data"], json!([3.0, -4.0]));
    let message = error_of(
        infer(
            json!({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}], "outputs": [{"name": "q"}]}),
        ),
        400,
    );
    assert!(message.contains("'q'"), "{message}");
    let message = error_of(post_json("/v2/models/nope/infer", &json!({"inputs": []})), 404);
    assert!(message.contains("nope"), "{message}");
}
