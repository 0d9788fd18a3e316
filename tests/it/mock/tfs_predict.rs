//! TF Serving REST predict against the committed models, over real HTTP.

use crate::common;

use base64::Engine;
use common::*;
use serde_json::{json, Value};

#[test]
fn half_plus_three_row_and_columnar() {
    let (status, body) = post_json(
        "/v1/models/half_plus_three:predict",
        &json!({"instances": [1.0, 2.0, 5.0]}),
    );
    assert_eq!(status, 200);
    assert_eq!(body, json!({"predictions": [3.5, 4.0, 5.5]}));
    let (status, body) = post_json(
        "/v1/models/half_plus_three:predict",
        &json!({"inputs": [1.0, 2.0, 5.0]}),
    );
    assert_eq!(status, 200);
    assert_eq!(body, json!({"outputs": [3.5, 4.0, 5.5]}));
    let (_, body) = post_json(
        "/v1/models/half_plus_three:predict",
        &json!({"inputs": {"x": [-2]}, "signature_name": "serving_default"}),
    );
    assert_eq!(body, json!({"outputs": [2.0]}));
    let (_, body) = post_json("/v1/models/half_plus_three:predict", &json!({"instances": [{"x": 4}]}));
    assert_eq!(body, json!({"predictions": [5.0]}));
}

#[test]
fn multiple_inputs_and_outputs_of_every_dtype() {
    let request = json!({"instances": [
        {"features": [1.0, 2.0, 3.5], "count": 2, "label": "ann", "flag": true},
        {"features": [0, -1, 1e3], "count": -5, "label": {"b64": base64::engine::general_purpose::STANDARD.encode("bo\u{e9}")}, "flag": false}
    ]});
    let (status, body) = post_json("/v1/models/multi_io:predict", &request);
    assert_eq!(status, 200, "{body}");
    let rows = body["predictions"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["total"], json!(6.5));
    assert_eq!(rows[0]["scaled"], json!([2.0, 4.0, 7.0]));
    assert_eq!(rows[0]["count_plus_one"], json!(3));
    assert_eq!(rows[0]["greeting"], json!("hello ann"));
    assert_eq!(rows[0]["flag_not"], json!(false));
    // Outputs whose name ends in _bytes are base64, as in TF Serving.
    assert_eq!(rows[0]["label_bytes"], json!({"b64": "YW5u"}));
    assert_eq!(rows[1]["count_plus_one"], json!(-4));
    assert_eq!(rows[1]["scaled"], json!([-0.0, 5.0, -5000.0]));
    assert_eq!(rows[1]["greeting"], json!("hello bo\u{e9}"));
    assert_eq!(rows[1]["flag_not"], json!(true));

    let columnar = json!({"inputs": {"features": [[1, 1, 1]], "count": [7], "label": ["z"], "flag": [false]}});
    let (status, body) = post_json("/v1/models/multi_io:predict", &columnar);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["outputs"]["total"], json!([3.0]));
    assert_eq!(body["outputs"]["count_plus_one"], json!([8]));
    assert_eq!(body["outputs"]["label_bytes"], json!([{"b64": "eg=="}]));
}

#[test]
fn versions_are_routed() {
    let predict = |path: &str| post_json(path, &json!({"instances": [1.0]}));
    // `--models_dir` follows TF Serving's default policy: only the highest version serves.
    let message = error_of(predict("/v1/models/adder/versions/1:predict"), 404);
    assert_eq!(message, "Servable not found for request: Specific(adder, 1)");
    assert_eq!(
        predict("/v1/models/adder/versions/2:predict").1,
        json!({"predictions": [3.0]})
    );
    // The latest version is the highest number.
    assert_eq!(predict("/v1/models/adder:predict").1, json!({"predictions": [3.0]}));
    let message = error_of(predict("/v1/models/adder/versions/9:predict"), 404);
    assert_eq!(message, "Servable not found for request: Specific(adder, 9)");
    let message = error_of(predict("/v1/models/adder/labels/stable:predict"), 400);
    assert_eq!(message, "Unrecognized servable version label: stable");
}

#[test]
fn bad_inputs_get_400_naming_the_problem() {
    let path = "/v1/models/half_plus_three:predict";
    let message = error_of(post_json(path, &json!({"instances": [[1, 2], [3]]})), 400);
    assert!(
        message.contains("element: 1") && message.contains("input 'x'") && message.contains("ragged"),
        "{message}"
    );
    let message = error_of(post_json(path, &json!({"instances": ["]["]})), 400);
    assert_eq!(
        message,
        "Failed to process element: 0 of 'instances' list. Error: input 'x': JSON Value: \"][\" Type: String is not of expected type: float"
    );
    let message = error_of(post(path, "{\"instances\": [1,"), 400);
    assert!(message.starts_with("JSON Parse error"), "{message}");
    let message = error_of(post_json(path, &json!({"instances": []})), 400);
    assert!(message.contains("No values"), "{message}");
    let message = error_of(post_json(path, &json!({"instances": [1], "inputs": [1]})), 400);
    assert!(message.contains("Not both"), "{message}");
    let message = error_of(post_json(path, &json!({"signature_name": "serving_default"})), 400);
    assert!(message.contains("Missing 'inputs' or 'instances'"), "{message}");
    // The declared shape ([-1]) is no gate: the graph takes [1,1] too.
    let (status, body) = post_json(path, &json!({"instances": [[1.0]]}));
    assert_eq!((status, body), (200, json!({"predictions": [[3.5]]})));

    let multi = "/v1/models/multi_io:predict";
    let message = error_of(
        post_json(
            multi,
            &json!({"instances": [{"features": [1, 2, 3], "count": 1.5, "label": "a", "flag": true}]}),
        ),
        400,
    );
    assert!(
        message.contains("input 'count'") && message.contains("int64"),
        "{message}"
    );
    let message = error_of(
        post_json(
            multi,
            &json!({"instances": [{"features": [1, 2, 3], "count": 1, "label": "a"}]}),
        ),
        400,
    );
    assert!(
        message.contains("input 'flag'") && message.contains("count,features,flag,label"),
        "{message}"
    );
    let message = error_of(post_json(multi, &json!({"instances": [[1, 2, 3]]})), 400);
    assert!(message.contains("plain list"), "{message}");
    let message = error_of(
        post_json(
            multi,
            &json!({"inputs": {"features": [[1, 2, 3]], "count": [1], "label": ["a"]}}),
        ),
        400,
    );
    assert_eq!(message, "Missing named input: flag in 'inputs' object");
    let message = error_of(
        post_json(
            multi,
            &json!({"instances": [{"features": [1, 2, 3], "count": 1, "label": "a", "flag": 1}]}),
        ),
        400,
    );
    assert!(
        message.contains("input 'flag'") && message.contains("bool"),
        "{message}"
    );
}

#[test]
fn bare_non_finite_tokens_are_numbers_as_in_tf_serving() {
    let response = common::client()
        .post(format!("{}/v1/models/half_plus_three:predict", common::base_url()))
        .body(r#"{"instances": [NaN, Infinity, -Infinity, 1.0]}"#)
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.text().unwrap(),
        r#"{"predictions":[NaN,Infinity,-Infinity,3.5]}"#
    );
}

#[test]
fn request_ids_are_echoed_or_generated() {
    let url = format!("{}/v1/models/half_plus_three:predict", common::base_url());
    let body = r#"{"instances": [1.0]}"#;
    let response = common::client()
        .post(&url)
        .header("X-Request-Id", "trace-7f3a")
        .body(body)
        .send()
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "trace-7f3a");
    let response = common::client().post(&url).body(body).send().unwrap();
    let generated = response.headers()["x-request-id"].to_str().unwrap().to_string();
    assert_eq!(generated.len(), 16, "{generated}");
    assert!(generated.bytes().all(|b| b.is_ascii_hexdigit()), "{generated}");
    // Error answers carry it too.
    let response = common::client().post(&url).body("{").send().unwrap();
    assert_eq!(response.status().as_u16(), 400);
    assert!(response.headers().contains_key("x-request-id"));
}

#[test]
fn instances_mixing_objects_and_lists_get_400() {
    let path = "/v1/models/half_plus_three:predict";
    let message = error_of(post(path, r#"{"instances": [{"x": 1.0}, [2.0]]}"#), 400);
    assert_eq!(message, "Expecting object but got list at item 1 of input list");
    let message = error_of(post(path, r#"{"instances": [1.0, {"x": 2.0}]}"#), 400);
    assert_eq!(message, "Expecting value/list but got object at item 1 of input list");
}

#[test]
fn unknown_things_get_404() {
    let body = json!({"instances": [1.0]});
    let message = error_of(post_json("/v1/models/nope:predict", &body), 404);
    assert_eq!(message, "Servable not found for request: Latest(nope)");
    let with_signature = json!({"instances": [1.0], "signature_name": "nope"});
    // An unknown signature is the request's fault: InvalidArgument (400), as GetInfoMap answers.
    let message = error_of(post_json("/v1/models/half_plus_three:predict", &with_signature), 400);
    assert_eq!(message, "Serving signature name: \"nope\" not found in signature def");
    let message = error_of(get("/v1/models/nope"), 404);
    assert_eq!(message, "Could not find any versions of model nope");
    let message = error_of(get("/not/an/api"), 404);
    assert!(message.contains("/not/an/api"), "{message}");
}

#[test]
fn malformed_routes_get_400() {
    let message = error_of(
        post_json("/v1/models/half_plus_three/versions/x:predict", &json!({})),
        400,
    );
    assert!(message.starts_with("Malformed request: POST"), "{message}");
    let message = error_of(post_json("/v1/models/half_plus_three:explain", &json!({})), 400);
    assert!(message.starts_with("Malformed request"), "{message}");
    assert_eq!(error_of(get("/v1/models"), 400), "Missing model name in request.");
}

#[test]
fn half_precision_inputs_are_read_as_numbers() {
    let (status, body) = post_json("/v1/models/half_precision:predict", &json!({"instances": [1.0, 2.5]}));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"predictions": [2.0, 5.0]}));
}

/// POSTs `body` gzip-compressed to half_plus_three.
fn post_gzip(body: &[u8]) -> reqwest::blocking::Response {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(body).unwrap();
    client()
        .post(format!("{}/v1/models/half_plus_three:predict", base_url()))
        .header("Content-Encoding", "gzip")
        .body(encoder.finish().unwrap())
        .send()
        .unwrap()
}

#[test]
fn gzip_bodies_are_decompressed_and_limits_enforced() {
    let response = post_gzip(br#"{"instances": [1.0, 3.0]}"#);
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.json::<Value>().unwrap(), json!({"predictions": [3.5, 4.5]}));

    let big = format!("{{\"instances\": [{}1]}}", "1,".repeat(MAX_REQUEST_BYTES / 2));
    let message = error_of(post("/v1/models/half_plus_three:predict", big), 413);
    assert!(
        message.contains(&MAX_REQUEST_BYTES.to_string()) && message.contains("max_request_bytes"),
        "{message}"
    );
    // A compressed body may not expand past the limit either.
    let mut bomb = vec![b' '; MAX_REQUEST_BYTES * 2];
    bomb[0] = b'[';
    assert_eq!(post_gzip(&bomb).status().as_u16(), 413);
}

#[test]
fn concurrent_requests_all_succeed() {
    let handles: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..25 {
                    let x = (t * 100 + i) as f64;
                    let (status, body) = post_json("/v1/models/half_plus_three:predict", &json!({"instances": [x]}));
                    assert_eq!(status, 200);
                    assert_close(&body["predictions"], &[0.5 * x + 3.0], 1e-3);
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
}
