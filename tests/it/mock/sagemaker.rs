//! The SageMaker container contract over HTTP: /ping, /invocations in every
//! content type, custom attributes, Accept, and the errors.

use crate::common;

use common::sagemaker::{base_url, invoke};
use serde_json::json;

#[test]
fn ping_answers_when_the_default_model_is_available() {
    let response = reqwest::blocking::get(format!("{}/ping", base_url())).unwrap();
    assert_eq!(response.status().as_u16(), 200);
}

#[test]
fn every_content_type_reaches_the_default_model() {
    let expected = json!({"predictions": [3.5, 4.0, 5.5]});
    let cases: &[(&str, &str)] = &[
        ("application/json", r#"{"instances": [1.0, 2.0, 5.0]}"#),
        ("application/json", r#"{"inputs": [1.0, 2.0, 5.0]}"#),
        ("text/csv", "1.0,2.0,5.0"),
        ("text/csv", "1.0\n2.0\n5.0\n"),
        ("text/csv; charset=utf-8", "1.0\r\n2.0\r\n5.0"),
        ("application/jsonlines", "1.0\n2.0\n5.0"),
        ("application/jsons", "1.0\n2.0\n5.0"),
        ("application/jsonlines", "1.0 2.0\n\n5.0\n"),
    ];
    for (content_type, body) in cases {
        let (status, _, answer) = invoke(Some(content_type), None, None, *body);
        assert_eq!(status, 200, "{content_type}: {answer}");
        let answer = if answer.get("outputs").is_some() {
            json!({"predictions": answer["outputs"]})
        } else {
            answer
        };
        assert_eq!(answer, expected, "{content_type} {body:?}");
    }
    // A list of lists is the instances list itself, however it is spaced.
    for body in ["[[1.0], [2.0], [5.0]]", "[ [1.0],\n  [2.0],\n  [5.0]\n]"] {
        let (_, _, answer) = invoke(Some("application/json"), None, None, body);
        assert_eq!(answer, json!({"predictions": [[3.5], [4.0], [5.5]]}), "{body:?}");
    }
    // A bare value is one instance.
    let (_, _, answer) = invoke(Some("application/json"), None, None, "2.0");
    assert_eq!(answer, json!({"predictions": [4.0]}));
}

#[test]
fn custom_attributes_select_model_version_and_method() {
    let (status, _, answer) = invoke(
        Some("text/csv"),
        Some("tfs-model-name=adder,tfs-model-version=1"),
        None,
        "1.0\n2.0",
    );
    assert_eq!((status, answer), (200, json!({"predictions": [2.0, 3.0]})));
    let regress = r#"{"signature_name": "regress_x_to_y", "examples": [{"x": 1.0}, {"x": 3.0}]}"#;
    let (status, _, answer) = invoke(
        Some("application/json"),
        Some("tfs-model-name=tf1_half_plus_two,tfs-method=regress"),
        None,
        regress,
    );
    assert_eq!((status, answer), (200, json!({"results": [2.5, 3.5]})));
    let classify = r#"{"signature_name": "classify_x_to_y", "examples": [{"x": 1.0}]}"#;
    let (_, _, answer) = invoke(
        Some("application/json"),
        Some("tfs-model-name=tf1_half_plus_two,tfs-method=classify"),
        None,
        classify,
    );
    assert_eq!(answer, json!({"results": [[["pos", 2.5], ["neg", -1.5]]]}));
    // JSON Lines of objects for a model with several inputs.
    let lines = "{\"features\": [1, 2, 3], \"count\": 1, \"label\": \"a\", \"flag\": true}\n\
                 {\"features\": [0, 0, 1], \"count\": 5, \"label\": \"b\", \"flag\": false}";
    let (status, _, answer) = invoke(
        Some("application/jsonlines"),
        Some("tfs-model-name=multi_io"),
        None,
        lines,
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["predictions"][1]["count_plus_one"], json!(6));
    assert_eq!(answer["predictions"][0]["greeting"], json!("hello a"));
    // Pretty-printed objects, one after another, are JSON Lines too.
    let pretty = "{\n  \"features\": [1, 2, 3],\n  \"count\": 1,\n  \"label\": \"a\",\n  \"flag\": true\n}\n\
                  {\"features\": [0, 0, 1], \"count\": NaN, \"label\": \"b\", \"flag\": false}";
    let (status, _, answer) = invoke(Some("application/json"), Some("tfs-model-name=multi_io"), None, pretty);
    // NaN parses as TF Serving parses it, then fails the int64 input, naming the element.
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"].as_str().unwrap_or_default();
    assert!(message.contains("element: 1"), "{message}");
    let (status, _, answer) = invoke(
        Some("application/json"),
        Some("tfs-model-name=multi_io"),
        None,
        pretty.replace("NaN", "5"),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["predictions"][1]["count_plus_one"], json!(6));
    // CSV lines are plain-list instances, which a signature of several inputs refuses.
    let (status, _, answer) = invoke(Some("text/csv"), Some("tfs-model-name=multi_io"), None, "1,2,3");
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"].as_str().unwrap_or_default().contains("plain list"),
        "{answer}"
    );
}

#[test]
fn tf_serving_tutorial_model_answers_json_csv_and_examples() {
    // A TF 1.x export whose signature declares [-1,1] for an input the graph takes as [N].
    let model = Some("tfs-model-name=half_plus_two");
    let (status, _, answer) = invoke(
        Some("application/json"),
        model,
        None,
        r#"{"instances": [1.0, 2.0, 5.0]}"#,
    );
    assert_eq!((status, answer), (200, json!({"predictions": [2.5, 3.0, 4.5]})));
    let (status, _, answer) = invoke(Some("text/csv"), model, None, "1.0\n2.0\n5.0");
    assert_eq!((status, answer), (200, json!({"predictions": [2.5, 3.0, 4.5]})));
    let regress = r#"{"signature_name": "regress_x_to_y", "examples": [{"x": 1.0}, {"x": 5.0}]}"#;
    let attributes = Some("tfs-model-name=half_plus_two,tfs-method=regress");
    let (status, _, answer) = invoke(Some("application/json"), attributes, None, regress);
    assert_eq!((status, answer), (200, json!({"results": [2.5, 4.5]})));
}

#[test]
fn answers_are_typed_json_whatever_the_accept() {
    // The TF Serving 2.20 container: JSON and JSON Lines accepts both get application/json.
    for accept in [
        "application/jsonlines",
        "application/json",
        "application/jsonlines, application/json",
    ] {
        let (status, content_type, _) = invoke(Some("text/csv"), None, Some(accept), "1.0");
        assert_eq!((status, content_type.as_str()), (200, "application/json"), "{accept}");
    }
}

#[test]
fn errors_are_json_with_the_right_status() {
    let (status, _, answer) = invoke(Some("application/xml"), None, None, "<a/>");
    assert_eq!(
        (status, answer),
        (415, json!({"error": "Unsupported Media Type: application/xml"}))
    );
    let (status, _, answer) = invoke(None, None, None, "1.0");
    assert_eq!(
        (status, answer),
        (415, json!({"error": "Unsupported Media Type: Unknown"}))
    );
    let (status, _, answer) = invoke(Some("text/csv"), Some("tfs-model-name=nope"), None, "1.0");
    assert_eq!(status, 404, "{answer}");
    let (status, _, answer) = invoke(Some("text/csv"), Some("tfs-model-version=x"), None, "1.0");
    assert_eq!(status, 400);
    assert!(
        answer["error"].as_str().unwrap().contains("tfs-model-version"),
        "{answer}"
    );
    let (status, _, answer) = invoke(Some("text/csv"), Some("tfs-method=explain"), None, "1.0");
    assert_eq!(status, 400);
    assert!(answer["error"].as_str().unwrap().contains("tfs-method"), "{answer}");
    let (status, _, answer) = invoke(Some("text/csv"), None, None, "1.0,abc");
    assert_eq!(status, 400, "{answer}");
}
