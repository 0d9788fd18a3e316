//! The Open Inference Protocol's REST routes: `/v2` server and model
//! metadata, readiness, `infer` (JSON, and the binary tensor extension), and
//! the model repository extension. Health (`/v2/health/*`) is the management API's.

use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};

pub use super::rest_body::decode_infer_body;
use super::rest_body::{decode, Decoded};
use super::{values, OipError};
use crate::call::http::json as json_response;
use crate::call::http::{read_body, resource, Inference, Outcome};
use crate::error::ApiError;
use crate::server::ServerState;
use crate::service::{tensor_bytes, Service};
use crate::tensor::Tensor;
#[cfg(test)]
use crate::tensor::TensorData;

/// The binary extension's header: how many leading body bytes are JSON.
pub const HEADER_LENGTH: &str = "inference-header-content-length";

pub fn configure(cfg: &mut web::ServiceConfig) {
    // Under static prefixes, inference first: other paths never reach these
    // patterns, and an infer call tries one or two.
    // Each path a resource: another method gets 405 with `Allow`, as
    // KServe's own server (FastAPI) answers.
    let get = |path| resource(path, "GET");
    let post = |path| resource(path, "POST");
    cfg.service(get("/v2").route(web::get().to(server_metadata))).service(
        web::scope("/v2")
            // The spec writes the server-metadata path as `v2/`, and clients built from it ask so.
            .service(get("/").route(web::get().to(server_metadata)))
            .service(
                web::scope("/models")
                    .service(post("/{model}/infer").route(web::post().to(infer)))
                    .service(post("/{model}/versions/{version}/infer").route(web::post().to(infer)))
                    .service(get("/{model}").route(web::get().to(metadata)))
                    .service(get("/{model}/versions/{version}").route(web::get().to(metadata)))
                    .service(get("/{model}/ready").route(web::get().to(ready)))
                    .service(get("/{model}/versions/{version}/ready").route(web::get().to(ready))),
            )
            .service(
                web::scope("/repository")
                    .service(post("/index").route(web::post().to(index)))
                    .service(post("/models/{model}/load").route(web::post().to(load)))
                    .service(post("/models/{model}/unload").route(web::post().to(unload))),
            ),
    );
}

fn segments(req: &HttpRequest) -> (String, String) {
    let get = |name: &str| {
        req.match_info()
            .get(name)
            .map(crate::call::http::decode_segment)
            .unwrap_or_default()
    };
    (get("model"), get("version"))
}

async fn server_metadata() -> HttpResponse {
    json_response(
        StatusCode::OK,
        json!({"name": super::SERVER_NAME, "version": env!("CARGO_PKG_VERSION"), "extensions": super::EXTENSIONS}),
    )
}

async fn metadata(req: HttpRequest, state: web::Data<ServerState>) -> HttpResponse {
    let (model, version) = segments(&req);
    let result = super::model_metadata(&state.service, &model, &version).map(|m| {
        let tensors = |list: &[super::TensorMetadata]| -> Vec<Value> {
            list.iter()
                .map(|t| json!({"name": t.name, "datatype": t.datatype, "shape": t.shape}))
                .collect()
        };
        json_response(
            StatusCode::OK,
            json!({
                "name": m.name,
                "versions": m.versions,
                "platform": super::PLATFORM,
                "inputs": tensors(&m.inputs),
                "outputs": tensors(&m.outputs),
            }),
        )
    });
    crate::call::http::respond(&req, result)
}

async fn ready(req: HttpRequest, state: web::Data<ServerState>) -> HttpResponse {
    let (model, version) = segments(&req);
    let result = super::model_ready_or_unknown(&state.service, &model, &version).and_then(|ready| {
        if ready {
            Ok(json_response(StatusCode::OK, json!({"name": model, "ready": true})))
        } else {
            Err(ApiError::NotReady(format!("model {model} has no available version")))
        }
    });
    crate::call::http::respond(&req, result)
}

async fn infer(req: HttpRequest, payload: web::Payload, state: web::Data<ServerState>) -> HttpResponse {
    let (model, version) = segments(&req);
    let mut inference = Inference::begin(&req);
    let trace = &mut inference.trace;
    let mut header_length = None;
    let result = async {
        let length = req.headers().get(HEADER_LENGTH).map(|v| {
            v.to_str()
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or(OipError::HeaderNotByteCount { header: HEADER_LENGTH })
        });
        let length = length.transpose()?;
        let body = read_body(&req, payload, &state).await?;
        crate::call::http::keep_body(&state, trace, &body);
        // The decoded tensors count against the budget until their run is over.
        let decoded = if length == Some(0) {
            raw_request(&state.service, &model, &version, &body)?
        } else {
            let binary = length.map_or(0, |json| body.len().saturating_sub(json));
            let measure = |decoded: &Decoded| {
                let tensors = decoded.inputs.iter().map(|input| std::slice::from_ref(&input.tensor));
                tensors.map(tensor_bytes).sum()
            };
            let decode = move |body: &[u8]| decode(body, length);
            let (decoded, reserved) = state
                .service
                .decode_within_budget(&body, binary, decode, measure)
                .await?;
            trace.held = Some(Box::new(reserved));
            decoded
        };
        let answer = run(&state.service, &model, &version, decoded, trace).await?;
        header_length = answer.1;
        Ok(answer.0)
    }
    .await;
    // Binary outputs: the JSON header's length, and the body is no longer JSON.
    let content_type = header_length.map(|_| HeaderValue::from_static("application/octet-stream"));
    let outcome = Outcome {
        result,
        content_type,
        model: &model,
        api: "v2_infer",
    };
    let mut response = inference.conclude(&req, outcome).into_response();
    if let Some(length) = header_length {
        if let Ok(value) = HeaderValue::from_str(&length.to_string()) {
            response
                .headers_mut()
                .insert(HeaderName::from_static(HEADER_LENGTH), value);
        }
    }
    response
}

/// A body with `Inference-Header-Content-Length: 0`: no JSON header, the
/// whole body one input (Triton's raw binary request), every output binary.
fn raw_request(service: &Service, model: &str, version: &str, body: &[u8]) -> Result<Decoded, ApiError> {
    let (_, signature) = service.resolve(model, &super::selector(version)?, None)?;
    let input = super::raw_body_input(&signature, model, body)?;
    Ok(Decoded {
        id: None,
        signature: None,
        inputs: vec![input],
        requested: Vec::new(),
        binary: Vec::new(),
        all_binary: true,
    })
}

/// Runs the request; the answer's bytes, and the JSON header's length when
/// binary outputs follow it.
async fn run(
    service: &Service,
    model: &str,
    version: &str,
    decoded: Decoded,
    trace: &mut crate::service::Trace,
) -> Result<(Vec<u8>, Option<usize>), ApiError> {
    let (servable, _, outputs) = super::infer(
        service,
        model,
        version,
        decoded.signature.as_deref(),
        decoded.inputs,
        &decoded.requested,
        trace,
    )
    .await?;
    let mut out = Vec::with_capacity(256);
    let mut binary: Vec<u8> = Vec::new();
    out.extend_from_slice(b"{\"model_name\":");
    crate::codec::encode::write_str(&mut out, &servable.model);
    out.extend_from_slice(b",\"model_version\":");
    crate::codec::encode::write_str(&mut out, &servable.version.to_string());
    if let Some(id) = &decoded.id {
        out.extend_from_slice(b",\"id\":");
        crate::codec::encode::write_str(&mut out, id);
    }
    out.extend_from_slice(b",\"outputs\":[");
    let mut any_binary = false;
    for (i, (name, tensor)) in outputs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_output_head(&mut out, name, tensor);
        // As Triton and KServe: `binary_data_output` covers the outputs not
        // listed; a listed output is binary only when its own `binary_data` says so.
        let as_binary = if decoded.requested.is_empty() {
            decoded.all_binary
        } else {
            decoded.binary.contains(name)
        };
        if as_binary {
            any_binary = true;
            let raw = super::to_raw(tensor);
            out.extend_from_slice(format!(",\"parameters\":{{\"binary_data_size\":{}}}}}", raw.len()).as_bytes());
            binary.extend_from_slice(&raw);
        } else {
            out.extend_from_slice(b",\"data\":");
            values::write_json(&mut out, &tensor.data);
            out.push(b'}');
        }
    }
    out.extend_from_slice(b"]}");
    if !any_binary {
        return Ok((out, None));
    }
    let length = out.len();
    out.extend_from_slice(&binary);
    Ok((out, Some(length)))
}

fn write_output_head(out: &mut Vec<u8>, name: &str, tensor: &Tensor) {
    out.extend_from_slice(b"{\"name\":");
    crate::codec::encode::write_str(out, name);
    out.extend_from_slice(b",\"datatype\":\"");
    out.extend_from_slice(super::datatype(tensor.dtype()).as_bytes());
    out.extend_from_slice(b"\",\"shape\":[");
    for (i, d) in tensor.shape.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(d.to_string().as_bytes());
    }
    out.push(b']');
}

/// `POST /v2/repository/index`: every model version and its state.
async fn index(req: HttpRequest, body: web::Bytes, state: web::Data<ServerState>) -> HttpResponse {
    let ready_only = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("ready").and_then(Value::as_bool))
        .unwrap_or(false);
    let entries: Vec<Value> = super::repository::index(&state.service, ready_only)
        .into_iter()
        .map(|e| json!({"name": e.name, "version": e.version, "state": e.state, "reason": e.reason}))
        .collect();
    let _ = &req;
    json_response(StatusCode::OK, Value::Array(entries))
}

async fn load(req: HttpRequest, state: web::Data<ServerState>) -> HttpResponse {
    let (model, _) = segments(&req);
    let result = super::repository::load(&state, &model)
        .await
        .map(|()| json_response(StatusCode::OK, json!({})));
    crate::call::http::respond(&req, result)
}

async fn unload(req: HttpRequest, state: web::Data<ServerState>) -> HttpResponse {
    let (model, _) = segments(&req);
    let result = super::repository::unload(&state, &model)
        .await
        .map(|()| json_response(StatusCode::OK, json!({})));
    crate::call::http::respond(&req, result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(result: Result<Decoded, ApiError>) -> ApiError {
        match result {
            Ok(_) => panic!("decoded a request that should be refused"),
            Err(error) => error,
        }
    }

    #[test]
    fn binary_inputs_follow_the_json_header() {
        let json = br#"{"inputs":[{"name":"x","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}}],"outputs":[{"name":"y","parameters":{"binary_data":true}}]}"#;
        let mut body = json.to_vec();
        body.extend_from_slice(&1.5f32.to_le_bytes());
        body.extend_from_slice(&2.0f32.to_le_bytes());
        let decoded = decode(&body, Some(json.len())).unwrap();
        assert_eq!(decoded.inputs[0].tensor.data, TensorData::Float(vec![1.5, 2.0]));
        assert_eq!(decoded.binary, vec!["y".to_string()]);
        assert!(decode(&body, Some(body.len() + 1)).is_err());
        let short = &body[..body.len() - 1];
        assert!(refused(decode(short, Some(json.len())))
            .to_string()
            .contains("binary_data_size 8"));
    }

    #[test]
    fn json_inputs_check_their_shape() {
        let body = br#"{"inputs":[{"name":"x","shape":[2,2],"datatype":"INT64","data":[[1,2],[3,4]]}]}"#;
        let decoded = decode(body, None).unwrap();
        assert_eq!(decoded.inputs[0].tensor.shape, vec![2, 2]);
        let bad = br#"{"inputs":[{"name":"x","shape":[3],"datatype":"INT64","data":[1,2]}]}"#;
        assert!(refused(decode(bad, None)).to_string().contains("needs 3 elements"));
        let fp16 = br#"{"inputs":[{"name":"x","shape":[1],"datatype":"FP16","data":[1.5]}]}"#;
        assert_eq!(
            decode(fp16, None).unwrap().inputs[0].tensor.data,
            TensorData::Half(vec![half::f16::from_f32(1.5)])
        );
        let bf16 = br#"{"inputs":[{"name":"x","shape":[1],"datatype":"BF16","data":[1]}]}"#;
        let error = refused(decode(bf16, None));
        assert_eq!(error.status().as_u16(), 400);
        assert!(
            error.to_string().contains("input 'x': datatype BF16 is not supported"),
            "{error}"
        );
    }
}
