//! `tfserve-bench warmup`: a warm-up file (`assets.extra/tf_serving_warmup_requests`)
//! of seeded requests for a SavedModel's default signature, so that a
//! benchmark can give `mixed_precision: auto` real-shaped requests to try
//! modes on: float inputs filled from a fixed sequence in [0, 1), each
//! record different, `rows` rows per record.

use std::path::Path;

use tfserve::signature::SignatureSpec;
use tfserve::tensor::{Tensor, TensorData};
use tfserve::warmup::synthetic_inputs;

/// Writes `records` requests of `rows` rows each for `signature` of `model` into `out`.
pub fn write(model: &str, signature: &SignatureSpec, rows: usize, records: usize, out: &Path) -> Result<(), String> {
    let mut file = Vec::new();
    for record in 0..records {
        let mut inputs = synthetic_inputs(signature, rows)
            .ok_or_else(|| format!("signature {} has an input of unknown shape", signature.name))?;
        for (i, tensor) in inputs.iter_mut().enumerate() {
            fill(tensor, record * 31 + i);
        }
        let named: Vec<(String, Tensor)> = signature.inputs.iter().map(|s| s.key.clone()).zip(inputs).collect();
        file.extend(tfserve::capture::tfrecord_record(&tfserve::capture::Exchange {
            model,
            version: 0,
            signature: &signature.name,
            sampling_rate: 1.0,
            inputs: Some(&named),
            outputs: None,
            kind: tfserve::capture::LogKind::Predict,
            multi_inference: None,
        }));
    }
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(out, file).map_err(|e| format!("{}: {e}", out.display()))
}

fn fill(tensor: &mut Tensor, seed: usize) {
    let mut state = (seed as u64)
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 40) as f64 / (1u64 << 24) as f64
    };
    if let TensorData::Float(values) = &mut tensor.data {
        values.iter_mut().for_each(|v| *v = next() as f32);
    }
}
