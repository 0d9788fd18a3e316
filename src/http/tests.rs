//! Every REST dialect through the route table on the mock runtime, with no
//! socket and no TensorFlow: the happy path and the main errors of each.
//! The mock model `m` serves `y = x + version` (versions 1 and 2).

use std::path::PathBuf;

use actix_web::dev::Service as _;
use actix_web::http::StatusCode;
use actix_web::{test, web, App};
use serde_json::{json, Value};

use crate::server::testing::mock_state;
use crate::server::ServerState;

fn state(name: &str) -> (web::Data<ServerState>, PathBuf) {
    let (state, root) = mock_state(&format!("http-{name}"));
    (web::Data::from(state), root)
}

/// The whole route table and middleware, as the server builds them.
async fn app(
    state: &web::Data<ServerState>,
) -> impl actix_web::dev::Service<
    actix_http::Request,
    Response = actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>,
    Error = actix_web::Error,
> {
    test::init_service(
        App::new()
            .wrap(actix_web::middleware::from_fn(super::middleware::gate))
            .wrap(actix_web::middleware::from_fn(super::middleware::assign))
            .app_data(state.clone())
            .configure(super::configure),
    )
    .await
}

/// A request through the whole route table and middleware; (status, JSON body).
async fn call(state: &web::Data<ServerState>, request: test::TestRequest) -> (StatusCode, Value) {
    let response = app(state).await.call(request.to_request()).await.unwrap();
    let status = response.status();
    let body = test::read_body(response).await;
    let value = serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
    (status, value)
}

fn post(path: &str, body: Value) -> test::TestRequest {
    test::TestRequest::post()
        .uri(path)
        .insert_header(("content-type", "application/json"))
        .set_payload(body.to_string())
}

fn error_text(body: &Value) -> String {
    body["error"].as_str().unwrap_or_default().to_string()
}

#[actix_web::test]
async fn tf_serving_rest_predicts_reports_status_and_refuses_bad_requests() {
    let (state, root) = state("tfs");
    let (status, body) = call(&state, post("/v1/models/m:predict", json!({"instances": [1.0, 2.0]}))).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"predictions": [3.0, 4.0]})));
    let (status, body) = call(
        &state,
        post("/v1/models/m/versions/1:predict", json!({"inputs": {"x": [1.0]}})),
    )
    .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"outputs": [2.0]})));
    let (status, body) = call(&state, test::TestRequest::get().uri("/v1/models/m/versions/2")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["model_version_status"][0]["state"], "AVAILABLE", "{body}");
    let (status, body) = call(&state, post("/v1/models/nope:predict", json!({"instances": [1.0]}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(error_text(&body).contains("nope"), "{body}");
    let (status, body) = call(
        &state,
        post("/v1/models/m/versions/9:predict", json!({"instances": [1.0]})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let request = test::TestRequest::post()
        .uri("/v1/models/m:predict")
        .set_payload("{\"instances\": [1.0");
    let (status, body) = call(&state, request).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = call(
        &state,
        post(
            "/v1/models/m:predict",
            json!({"signature_name": "s", "instances": [1.0]}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(error_text(&body).contains("\"s\""), "{body}");
    std::fs::remove_dir_all(root).unwrap();
}

#[actix_web::test]
async fn sagemaker_pings_invokes_and_refuses_unknown_content_types() {
    let (state, root) = state("sagemaker");
    let (status, _) = call(&state, test::TestRequest::get().uri("/ping")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = call(&state, post("/invocations", json!({"instances": [1.0, 5.0]}))).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"predictions": [3.0, 7.0]})));
    let request = test::TestRequest::post()
        .uri("/invocations")
        .insert_header(("content-type", "application/xml"))
        .set_payload("<x/>");
    let (status, body) = call(&state, request).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
    let request = post("/invocations", json!({"instances": [1.0]}))
        .insert_header(("X-Amzn-SageMaker-Custom-Attributes", "tfs-model-name=nope"));
    let (status, body) = call(&state, request).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    std::fs::remove_dir_all(root).unwrap();
}

#[actix_web::test]
async fn simple_tensorflow_serving_answers_data_and_names_a_missing_model() {
    let (state, root) = state("stfs");
    let (status, body) = call(&state, post("/", json!({"model_name": "m", "data": {"x": [1.0, 2.0]}}))).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"y": [3.0, 4.0]})));
    let (status, body) = call(
        &state,
        post(
            "/",
            json!({"model_name": "m", "model_version": 1, "data": {"x": [1.0]}}),
        ),
    )
    .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"y": [2.0]})));
    let (status, body) = call(&state, post("/", json!({"model_name": "nope", "data": {"x": [1.0]}}))).await;
    assert!(status.is_client_error(), "{status} {body}");
    assert!(error_text(&body).contains("nope"), "{body}");
    std::fs::remove_dir_all(root).unwrap();
}

#[actix_web::test]
async fn open_inference_protocol_infers_and_answers_health_and_readiness() {
    let (state, root) = state("kserve");
    let request = json!({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}]});
    let (status, body) = call(&state, post("/v2/models/m/infer", request.clone())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["outputs"][0]["data"], json!([3.0, 4.0]), "{body}");
    assert_eq!(body["model_version"], "2", "{body}");
    let (status, body) = call(&state, post("/v2/models/m/versions/1/infer", request)).await;
    assert_eq!(
        (status, &body["outputs"][0]["data"]),
        (StatusCode::OK, &json!([2.0, 3.0]))
    );
    let bad = json!({"inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "data": [1.0]}]});
    let (status, body) = call(&state, post("/v2/models/m/infer", bad)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = call(&state, test::TestRequest::get().uri("/v2/health/live")).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"live": true})));
    let (status, body) = call(&state, test::TestRequest::get().uri("/v2/health/ready")).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"ready": true})));
    let (status, body) = call(&state, test::TestRequest::get().uri("/v2/models/nope/ready")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    std::fs::remove_dir_all(root).unwrap();
}

/// A known path asked with another method: 405, `Allow` listing the
/// methods it takes and a JSON error naming both; under `/v1`, TF
/// Serving's own answer to a request it has no route for.
#[actix_web::test]
async fn a_method_a_path_does_not_take_is_405_with_allow() {
    let (state, root) = state("methods");
    let app = app(&state).await;
    let cases = [
        ("TRACE", "/v2/health/ready", "GET, HEAD"),
        ("POST", "/ping", "GET, HEAD"),
        ("GET", "/invocations", "POST"),
        ("GET", "/v2/models/m/infer", "POST"),
        ("GET", "/v2/models/m/versions/1/infer", "POST"),
        ("DELETE", "/v2/models/m", "GET"),
        ("GET", "/v2/repository/index", "POST"),
        ("PUT", "/models", "GET, POST"),
        ("POST", "/models/m", "GET, DELETE"),
        ("GET", "/models/m/invoke", "POST"),
        ("POST", "/metrics", "GET"),
        ("DELETE", "/dashboard", "GET"),
        ("POST", "/health", "GET"),
        ("PUT", "/", "GET, POST"),
    ];
    for (method, path, allow) in cases {
        let method = actix_web::http::Method::from_bytes(method.as_bytes()).unwrap();
        let request = test::TestRequest::default().method(method.clone()).uri(path);
        let response = app.call(request.to_request()).await.unwrap();
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        assert_eq!(response.headers().get("allow").unwrap(), allow, "{method} {path}");
        let body: Value = serde_json::from_slice(&test::read_body(response).await).unwrap();
        assert_eq!(
            error_text(&body),
            format!("Method Not Allowed: {method} {path} (this path takes {allow})")
        );
    }
    for (method, path) in [("TRACE", "/v1/health/live"), ("DELETE", "/v1/models/m:predict")] {
        let method = actix_web::http::Method::from_bytes(method.as_bytes()).unwrap();
        let request = test::TestRequest::default().method(method.clone()).uri(path);
        let (status, body) = call(&state, request).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}");
        assert!(error_text(&body).starts_with("Malformed request"), "{body}");
    }
    // The methods each path takes still answer.
    let (status, _) = call(&state, test::TestRequest::get().uri("/ping")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call(
        &state,
        test::TestRequest::default()
            .method(actix_web::http::Method::HEAD)
            .uri("/v2/health/live"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    std::fs::remove_dir_all(root).unwrap();
}

#[actix_web::test]
async fn management_api_lists_unloads_and_unknown_routes_are_json_404s() {
    let (state, root) = state("manage");
    let (status, body) = call(&state, test::TestRequest::get().uri("/tfserve/models")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["models"][0]["name"], "m", "{body}");
    let (status, body) = call(&state, test::TestRequest::delete().uri("/tfserve/models/m")).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"unloaded": "m"})));
    let (status, body) = call(&state, post("/v1/models/m:predict", json!({"instances": [1.0]}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = call(&state, test::TestRequest::get().uri("/no/such/route")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(error_text(&body).contains("/no/such/route"), "{body}");
    std::fs::remove_dir_all(root).unwrap();
}
