//! `tfserve-bench grpc` and `decode`: a gRPC Predict load generator (one
//! request built once, sent by `concurrency` callers for a while), and the
//! per-request decode cost of the same input as `tensor_content` and as JSON.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tfserve::codec::tensor_proto;
use tfserve::codec::PredictEnvelope;
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
/// connections for `seconds`; prints a JSON line. The calls go straight
/// through `h2` on two single-threaded runtimes (as `wrk -t2` does for REST),
/// the request encoded once: a load generator sharing the machine with the
/// server should cost it as little CPU as it can. A call counts when its
/// trailers say `grpc-status: 0`.
pub fn load(
    target: &str,
    request: PredictRequest,
    concurrency: usize,
    connections: usize,
    seconds: f64,
) -> Result<(), Error> {
    let uri: http::Uri = format!(
        "{}/tensorflow.serving.PredictionService/Predict",
        target.trim_end_matches('/')
    )
    .parse()?;
    let authority = uri.authority().ok_or("the target has no host")?.to_string();
    let call = Arc::new(Call {
        uri,
        body: bytes::Bytes::from(framed(&request)?),
    });
    let connections = connections.max(1);
    let threads = connections.min(2);
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let workers: Vec<_> = (0..threads)
        .map(|thread| {
            // This thread's share of connections and callers.
            let share = |total: usize| total / threads + usize::from(thread < total % threads);
            let (connections, callers) = (share(connections), share(concurrency));
            let (call, authority) = (call.clone(), authority.clone());
            std::thread::spawn(move || -> Result<(Vec<f64>, usize), String> {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                runtime.block_on(load_thread(call, authority, connections, callers, deadline))
            })
        })
        .collect();
    let (mut latencies, mut errors) = (Vec::new(), 0);
    for worker in workers {
        let (l, e) = worker.join().map_err(|_| "a load thread panicked")??;
        latencies.extend(l);
        errors += e;
    }
    let wall = started.elapsed().as_secs_f64();
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

/// A message as a gRPC body carries it: uncompressed, its length before it.
pub fn framed(message: &impl prost::Message) -> Result<Vec<u8>, Error> {
    let encoded = message.encode_to_vec();
    let mut body = Vec::with_capacity(5 + encoded.len());
    body.push(0);
    body.extend_from_slice(&u32::try_from(encoded.len())?.to_be_bytes());
    body.extend_from_slice(&encoded);
    Ok(body)
}

/// The call every caller makes.
struct Call {
    uri: http::Uri,
    body: bytes::Bytes,
}

async fn load_thread(
    call: Arc<Call>,
    authority: String,
    connections: usize,
    callers: usize,
    deadline: Instant,
) -> Result<(Vec<f64>, usize), String> {
    let mut senders = Vec::new();
    for _ in 0..connections.max(1) {
        let tcp = tokio::net::TcpStream::connect(&authority)
            .await
            .map_err(|e| e.to_string())?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        let (sender, connection) = h2::client::Builder::new()
            .initial_window_size(1 << 20)
            .initial_connection_window_size(1 << 20)
            .handshake::<_, bytes::Bytes>(tcp)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        senders.push(sender);
    }
    let tasks: Vec<_> = (0..callers)
        .map(|i| {
            let sender = senders[i % senders.len()].clone();
            let call = call.clone();
            tokio::spawn(async move {
                let (mut latencies, mut errors) = (Vec::new(), 0usize);
                while Instant::now() < deadline {
                    let started = Instant::now();
                    match predict(sender.clone(), &call).await {
                        Ok(()) => latencies.push(started.elapsed().as_secs_f64()),
                        Err(_) => errors += 1,
                    }
                }
                (latencies, errors)
            })
        })
        .collect();
    let (mut latencies, mut errors) = (Vec::new(), 0);
    for task in tasks {
        let (l, e) = task.await.map_err(|e| e.to_string())?;
        latencies.extend(l);
        errors += e;
    }
    Ok((latencies, errors))
}

/// One Predict call; `Ok` when it ends with `grpc-status: 0`.
async fn predict(sender: h2::client::SendRequest<bytes::Bytes>, call: &Call) -> Result<(), Error> {
    let request = http::Request::post(call.uri.clone())
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())?;
    let mut sender = sender.ready().await?;
    let (response, mut stream) = sender.send_request(request, false)?;
    stream.send_data(call.body.clone(), true)?;
    let response = response.await?;
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        body.flow_control().release_capacity(chunk.len())?;
    }
    let status = body.trailers().await?.and_then(|t| t.get("grpc-status").cloned());
    match status {
        Some(status) if status == "0" => Ok(()),
        other => Err(format!("grpc-status {other:?}").into()),
    }
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
