//! Warm-up: the first run at each batch size is slow (graph specialisation),
//! so a version runs its shipped warm-up requests, or every batch size its
//! queues can emit on synthetic inputs, before it takes traffic.

pub mod records;
use records::WarmupRequest;

use std::path::Path;
use std::time::Instant;

use crate::runtime::{Model, RuntimeError};
use crate::signature::{SignatureSpec, CLASSIFY_METHOD, DEFAULT_SIGNATURE, REGRESS_METHOD};
use crate::tensor::{Tensor, TensorData};

/// Zero-valued inputs with `rows` rows; unknown inner dimensions become 1.
/// `None` when an input has an unknown rank or a dtype JSON cannot carry.
pub fn synthetic_inputs(signature: &SignatureSpec, rows: usize) -> Option<Vec<Tensor>> {
    signature
        .inputs
        .iter()
        .map(|spec| {
            let dims = spec.shape.as_ref()?;
            let shape: Vec<usize> = dims
                .iter()
                .enumerate()
                .map(|(i, &d)| {
                    if i == 0 {
                        rows
                    } else if d < 0 {
                        1
                    } else {
                        d as usize
                    }
                })
                .collect();
            let count: usize = shape.iter().product();
            let data = match TensorData::empty(spec.dtype)? {
                TensorData::Float(_) => TensorData::Float(vec![0.0; count]),
                TensorData::Double(_) => TensorData::Double(vec![0.0; count]),
                TensorData::Half(_) => TensorData::Half(vec![half::f16::ZERO; count]),
                TensorData::Int8(_) => TensorData::Int8(vec![0; count]),
                TensorData::Int16(_) => TensorData::Int16(vec![0; count]),
                TensorData::Int32(_) => TensorData::Int32(vec![0; count]),
                TensorData::Int64(_) => TensorData::Int64(vec![0; count]),
                TensorData::UInt8(_) => TensorData::UInt8(vec![0; count]),
                TensorData::UInt16(_) => TensorData::UInt16(vec![0; count]),
                TensorData::UInt32(_) => TensorData::UInt32(vec![0; count]),
                TensorData::UInt64(_) => TensorData::UInt64(vec![0; count]),
                TensorData::Bool(_) => TensorData::Bool(vec![false; count]),
                TensorData::String(_) => TensorData::String(vec![Vec::new(); count]),
            };
            Some(Tensor::new(shape, data))
        })
        .collect()
}

/// Where TF Serving models ship their warm-up requests.
pub const WARMUP_FILE: &str = "assets.extra/tf_serving_warmup_requests";

/// Warms a freshly loaded version. A shipped warm-up file is replayed and
/// must succeed (a failure fails the load, as in TF Serving); otherwise each
/// signature runs once at each of `sizes` on synthetic inputs, and failures
/// (e.g. an image model cannot decode empty strings) are only logged.
pub fn warm_up(
    model: &str,
    version: i64,
    dir: &Path,
    runtime: &dyn Model,
    sizes: &[usize],
) -> Result<(), RuntimeError> {
    let started = Instant::now();
    let file = dir.join(WARMUP_FILE);
    let runs = if file.exists() {
        replay(&file, runtime)?
    } else {
        synthetic(model, version, runtime, sizes)
    };
    log::info!(
        "model {model} version {version}: {runs} warm-up run(s) in {:.0} ms{}",
        started.elapsed().as_secs_f64() * 1000.0,
        if file.exists() { " from assets.extra" } else { "" }
    );
    Ok(())
}

fn replay(file: &Path, runtime: &dyn Model) -> Result<usize, RuntimeError> {
    let runs = recorded_runs(file, runtime)?;
    for (i, (signature, inputs)) in runs.iter().enumerate() {
        runtime.run(signature, inputs.clone()).map_err(|e| RuntimeError::Load {
            path: file.display().to_string(),
            message: format!("record {i}: {e}"),
        })?;
    }
    Ok(runs.len())
}

/// The shipped warm-up requests as runs: each record's signature and its
/// inputs in the signature's order.
pub fn recorded_runs(file: &Path, runtime: &dyn Model) -> Result<Vec<(String, Vec<Tensor>)>, RuntimeError> {
    let fail = |message: String| RuntimeError::Load {
        path: file.display().to_string(),
        message,
    };
    let data = std::fs::read(file).map_err(|e| fail(e.to_string()))?;
    let requests = records::parse(&data).map_err(fail)?;
    runs_of(requests, runtime).map_err(fail)
}

/// Recorded requests as runs of `runtime`: each one's signature and its
/// inputs in the signature's order; an error names the record.
pub fn runs_of(requests: Vec<WarmupRequest>, runtime: &dyn Model) -> Result<Vec<(String, Vec<Tensor>)>, String> {
    let mut runs = Vec::with_capacity(requests.len());
    for (i, request) in requests.into_iter().enumerate() {
        let name = request.signature.as_deref().unwrap_or(DEFAULT_SIGNATURE);
        let signature = runtime
            .signature(name)
            .ok_or_else(|| format!("record {i}: no signature '{name}'"))?;
        let inputs = signature
            .inputs
            .iter()
            .map(|spec| {
                request
                    .inputs
                    .get(&spec.key)
                    .or_else(|| {
                        (signature.inputs.len() == 1 && request.inputs.len() == 1)
                            .then(|| request.inputs.values().next())
                            .flatten()
                    })
                    .cloned()
                    .ok_or_else(|| format!("record {i}: no input '{}'", spec.key))
            })
            .collect::<Result<Vec<Tensor>, _>>()?;
        runs.push((signature.name.clone(), inputs));
    }
    Ok(runs)
}

fn synthetic(model: &str, version: i64, runtime: &dyn Model, sizes: &[usize]) -> usize {
    let mut runs = 0;
    for signature in runtime.signatures() {
        // A classify or regress signature parses serialized tf.Examples,
        // whose features no signature names: an empty one only fails, and
        // TensorFlow logs each failure.
        if [CLASSIFY_METHOD, REGRESS_METHOD].contains(&signature.method_name.as_str()) {
            log::debug!(
                "model {model} version {version}: no synthetic examples for {} signature {}",
                signature.method_name,
                signature.name
            );
            continue;
        }
        for &rows in sizes {
            let Some(inputs) = synthetic_inputs(signature, rows) else {
                log::debug!(
                    "model {model} version {version}: no synthetic inputs for signature {}",
                    signature.name
                );
                break;
            };
            match runtime.run(&signature.name, inputs) {
                Ok(_) => runs += 1,
                Err(err) => {
                    log::debug!(
                        "model {model} version {version}: warm-up of {} at {rows} rows: {err}",
                        signature.name
                    );
                    break;
                }
            }
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::TensorSpec;
    use crate::tensor::DType;

    #[test]
    fn builds_inputs_of_the_requested_rows() {
        let spec = |key: &str, dtype, shape: Option<Vec<i64>>| TensorSpec {
            key: key.into(),
            tensor_name: format!("{key}:0"),
            dtype,
            shape,
        };
        let signature = SignatureSpec {
            name: "s".into(),
            method_name: String::new(),
            inputs: vec![
                spec("a", DType::Float, Some(vec![-1, 3])),
                spec("b", DType::String, Some(vec![-1, -1])),
            ],
            outputs: vec![],
            base64_inputs: vec![],
        };
        let inputs = synthetic_inputs(&signature, 4).unwrap();
        assert_eq!(inputs[0].shape, vec![4, 3]);
        assert_eq!(inputs[1].shape, vec![4, 1]);
        let unknown = SignatureSpec {
            inputs: vec![spec("c", DType::Float, None)],
            ..signature.clone()
        };
        assert!(synthetic_inputs(&unknown, 1).is_none());
        let scalar = SignatureSpec {
            inputs: vec![spec("k", DType::Int32, Some(vec![]))],
            ..signature
        };
        assert_eq!(
            synthetic_inputs(&scalar, 8).unwrap()[0],
            Tensor::new(vec![], TensorData::Int32(vec![0]))
        );
    }
}
