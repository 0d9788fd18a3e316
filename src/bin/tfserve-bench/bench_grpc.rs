//! `tfserve-bench grpc` and `decode`: a gRPC Predict load generator (one
//! request built once, sent by `concurrency` callers for a while), and the
//! per-request decode cost of the same input as `tensor_content` and as JSON.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tfserve::codec::tensor_proto;
use tfserve::codec::PredictEnvelope;
use tfserve::proto::tensorflow::serving::prediction_service_client::PredictionServiceClient;
use tfserve::proto::tensorflow::serving::{ModelSpec, PredictRequest};
use tfserve::proto::tensorflow::TensorProto;
use tfserve::signature::SignatureSpec;
use tfserve::tensor::{Tensor, TensorData};
use tfserve::warmup::synthetic_inputs;

type Error = Box<dyn std::error::Error>;

/// A tensor as clients send it: numbers in `tensor_content`, strings in `string_val`.
fn tensor_proto(tensor: &Tensor) -> TensorProto {
    let mut proto = tensor_proto::to_proto(tensor);
    macro_rules! content {
        ($v:expr, $field:ident) => {{
            proto.tensor_content = $v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>().into();
            proto.$field.clear();
        }};
    }
    match &tensor.data {
        TensorData::Float(v) => content!(v, float_val),
        TensorData::Double(v) => content!(v, double_val),
        TensorData::Int32(v) => content!(v, int_val),
        TensorData::Int64(v) => content!(v, int64_val),
        _ => {}
    }
    proto
}

pub fn request(model: &str, signature: &SignatureSpec, rows: usize) -> Result<PredictRequest, Error> {
    let inputs = synthetic_inputs(signature, rows).ok_or("cannot build inputs for this signature")?;
    let inputs: BTreeMap<String, TensorProto> = signature
        .inputs
        .iter()
        .zip(&inputs)
        .map(|(spec, tensor)| (spec.key.clone(), tensor_proto(tensor)))
        .collect();
    Ok(PredictRequest {
        model_spec: Some(ModelSpec {
            name: model.into(),
            ..ModelSpec::default()
        }),
        inputs,
        output_filter: Vec::new(),
    })
}

/// Sends `request` from `concurrency` callers over `connections` HTTP/2
/// connections for `seconds`; prints a JSON line.
pub fn load(
    target: &str,
    request: PredictRequest,
    concurrency: usize,
    connections: usize,
    seconds: f64,
) -> Result<(), Error> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (latencies, errors, wall) = runtime.block_on(async {
        let mut channels = Vec::new();
        for _ in 0..connections.max(1) {
            channels.push(
                tonic::transport::Channel::from_shared(target.to_string())?
                    .connect()
                    .await?,
            );
        }
        let request = Arc::new(request);
        let started = Instant::now();
        let deadline = started + Duration::from_secs_f64(seconds);
        let callers: Vec<_> = (0..concurrency)
            .map(|i| {
                let mut client = PredictionServiceClient::new(channels[i % channels.len()].clone())
                    .max_decoding_message_size(usize::MAX)
                    .max_encoding_message_size(usize::MAX);
                let request = request.clone();
                tokio::spawn(async move {
                    let (mut latencies, mut errors) = (Vec::new(), 0usize);
                    while Instant::now() < deadline {
                        let call = Instant::now();
                        match client.predict((*request).clone()).await {
                            Ok(_) => latencies.push(call.elapsed().as_secs_f64()),
                            Err(_) => errors += 1,
                        }
                    }
                    (latencies, errors)
                })
            })
            .collect();
        let (mut latencies, mut errors) = (Vec::new(), 0);
        for caller in callers {
            let (l, e) = caller.await?;
            latencies.extend(l);
            errors += e;
        }
        Ok::<_, Error>((latencies, errors, started.elapsed().as_secs_f64()))
    })?;
    let mut latencies = latencies;
    latencies.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .map_or(0.0, |s| s * 1000.0)
    };
    println!(
        "{{\"requests\": {}, \"rps\": {:.1}, \"p50_ms\": {:.3}, \"p99_ms\": {:.3}, \"errors\": {errors}}}",
        latencies.len(),
        latencies.len() as f64 / wall,
        at(0.5),
        at(0.99)
    );
    Ok(())
}

/// Microseconds to decode one request's inputs: the gRPC `TensorProto`s into
/// tensors, and a REST JSON body (`rest_body`) through the REST decoder.
pub fn decode_cost(request: &PredictRequest, signature: &SignatureSpec, rest_body: Option<&[u8]>) -> Result<(), Error> {
    // The median call: steadier than the mean on a machine shared with other work.
    let time = |work: &mut dyn FnMut() -> Result<(), Error>| -> Result<f64, Error> {
        work()?;
        let started = Instant::now();
        let mut calls = Vec::new();
        while started.elapsed() < Duration::from_millis(500) || calls.len() < 5 {
            let call = Instant::now();
            work()?;
            calls.push(call.elapsed().as_secs_f64() * 1e6);
        }
        calls.sort_by(f64::total_cmp);
        Ok(calls[calls.len() / 2])
    };
    let grpc_us = time(&mut || {
        for (key, proto) in &request.inputs {
            tensor_proto::to_tensor(proto, key)?;
        }
        Ok(())
    })?;
    let rest_us = match rest_body {
        Some(body) => Some(time(&mut || {
            PredictEnvelope::parse(body)?.decode(signature)?;
            Ok(())
        })?),
        None => None,
    };
    // The envelope alone: finding the payload and the signature name.
    let envelope_us = match rest_body {
        Some(body) => Some(time(&mut || {
            PredictEnvelope::parse(body)?;
            Ok(())
        })?),
        None => None,
    };
    let shown = |us: Option<f64>| us.map_or("null".to_string(), |us| format!("{us:.2}"));
    println!(
        "{{\"grpc_decode_us\": {grpc_us:.2}, \"rest_decode_us\": {}, \"rest_envelope_us\": {}}}",
        shown(rest_us),
        shown(envelope_us)
    );
    Ok(())
}
