//! TF Serving's warm-up file, `assets.extra/tf_serving_warmup_requests`: a
//! TFRecord file of `PredictionLog` protos. Predict logs become signature
//! inputs; classify and regress logs, and each task of a MultiInference log,
//! become serialized `tf.Example` inputs.

use std::collections::BTreeMap;

use prost::Message;

use crate::proto::tensorflow::serving::input::Kind;
use crate::proto::tensorflow::serving::prediction_log::LogType;
use crate::proto::tensorflow::serving::{Input, ModelSpec, PredictionLog};
use crate::proto::tensorflow::TensorProto;
use crate::tensor::{Tensor, TensorData};

/// At most this many records are replayed, as in TF Serving.
pub const MAX_RECORDS: usize = 1000;

/// One request to replay: a signature and its inputs by key.
#[derive(Debug, PartialEq)]
pub struct WarmupRequest {
    /// The model the record names (empty in most warm-up files).
    pub model: String,
    pub signature: Option<String>,
    pub inputs: BTreeMap<String, Tensor>,
}

/// Splits a TFRecord file into its records, checking the masked CRC32-C of
/// every length and payload.
pub fn tfrecords(mut data: &[u8]) -> Result<Vec<&[u8]>, String> {
    let mut records = Vec::new();
    while !data.is_empty() {
        let header = data.get(..12).ok_or("truncated record header")?;
        let length_bytes: [u8; 8] = header[..8].try_into().map_err(|_| "bad record header")?;
        let length = u64::from_le_bytes(length_bytes) as usize;
        if masked_crc(&header[..8]) != u32::from_le_bytes([header[8], header[9], header[10], header[11]]) {
            return Err(format!("record {}: corrupt length (CRC mismatch)", records.len()));
        }
        let payload = data.get(12..12 + length).ok_or("truncated record payload")?;
        let crc = data.get(12 + length..16 + length).ok_or("truncated record CRC")?;
        if masked_crc(payload) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return Err(format!("record {}: corrupt payload (CRC mismatch)", records.len()));
        }
        records.push(payload);
        data = &data[16 + length..];
    }
    Ok(records)
}

/// One record framed as TFRecord writes it: its length, the length's masked
/// CRC32-C, the payload, the payload's.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut framed = Vec::with_capacity(payload.len() + 16);
    let length = (payload.len() as u64).to_le_bytes();
    framed.extend_from_slice(&length);
    framed.extend_from_slice(&masked_crc(&length).to_le_bytes());
    framed.extend_from_slice(payload);
    framed.extend_from_slice(&masked_crc(payload).to_le_bytes());
    framed
}

/// The files a capture prefix names, `PREFIX-*.tfrecord`, newest first: a
/// model's captured requests, which read as warm-up requests do.
pub fn capture_files(prefix: &str) -> Vec<std::path::PathBuf> {
    let prefix = std::path::Path::new(prefix);
    let dir = match prefix.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => std::path::Path::new("."),
    };
    let (Some(stem), Ok(entries)) = (prefix.file_name().and_then(|n| n.to_str()), std::fs::read_dir(dir)) else {
        return Vec::new();
    };
    let mut found: Vec<(std::time::SystemTime, std::path::PathBuf)> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.strip_prefix(stem).is_some_and(|rest| rest.starts_with('-')) && name.ends_with(".tfrecord")
        })
        .map(|e| {
            let modified = e.metadata().and_then(|m| m.modified());
            (
                modified.unwrap_or(std::time::SystemTime::UNIX_EPOCH),
                dir.join(e.file_name()),
            )
        })
        .collect();
    found.sort_by(|a, b| b.cmp(a));
    found.into_iter().map(|(_, path)| path).collect()
}

/// TFRecord's checksum: CRC32-C, rotated and offset so a CRC of CRCs differs.
pub fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Parses the warm-up file into requests (at most `MAX_RECORDS`).
pub fn parse(data: &[u8]) -> Result<Vec<WarmupRequest>, String> {
    tfrecords(data)?
        .into_iter()
        .take(MAX_RECORDS)
        .enumerate()
        .map(|(i, record)| {
            let log = PredictionLog::decode(record).map_err(|e| format!("record {i}: not a PredictionLog: {e}"))?;
            requests_of(log).map_err(|e| format!("record {i}: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(|requests| requests.into_iter().flatten().collect())
}

fn model_of(spec: Option<&ModelSpec>) -> String {
    spec.map(|s| s.name.clone()).unwrap_or_default()
}

fn signature_of(spec: Option<&ModelSpec>) -> Option<String> {
    spec.map(|s| s.signature_name.clone()).filter(|s| !s.is_empty())
}

/// The runs a log replays: one, or one per task of a MultiInference call.
fn requests_of(log: PredictionLog) -> Result<Vec<WarmupRequest>, String> {
    let (spec, input) = match log.log_type {
        Some(LogType::PredictLog(predict)) => {
            let predict = predict.request.unwrap_or_default();
            let inputs = predict
                .inputs
                .into_iter()
                .map(|(key, proto)| {
                    Ok((
                        key.clone(),
                        tensor_of(&proto).map_err(|e| format!("input '{key}': {e}"))?,
                    ))
                })
                .collect::<Result<_, String>>()?;
            return Ok(vec![WarmupRequest {
                model: model_of(predict.model_spec.as_ref()),
                signature: signature_of(predict.model_spec.as_ref()),
                inputs,
            }]);
        }
        Some(LogType::MultiInferenceLog(log)) => {
            let request = log.request.unwrap_or_default();
            let examples = examples_tensor(request.input)?;
            return Ok(request
                .tasks
                .iter()
                .map(|task| WarmupRequest {
                    model: model_of(task.model_spec.as_ref()),
                    signature: signature_of(task.model_spec.as_ref()),
                    inputs: BTreeMap::from([("inputs".to_string(), examples.clone())]),
                })
                .collect());
        }
        Some(LogType::ClassifyLog(log)) => {
            let request = log.request.unwrap_or_default();
            (request.model_spec, request.input)
        }
        Some(LogType::RegressLog(log)) => {
            let request = log.request.unwrap_or_default();
            (request.model_spec, request.input)
        }
        _ => return Err("only predict, classify, regress and multi-inference logs can be replayed".into()),
    };
    Ok(vec![WarmupRequest {
        model: model_of(spec.as_ref()),
        signature: signature_of(spec.as_ref()),
        inputs: BTreeMap::from([("inputs".to_string(), examples_tensor(input)?)]),
    }])
}

/// A classify/regress call's examples as the string tensor its signature takes.
fn examples_tensor(input: Option<Input>) -> Result<Tensor, String> {
    let examples: Vec<Vec<u8>> = match input.and_then(|i| i.kind) {
        Some(Kind::ExampleList(list)) => list.examples.iter().map(Message::encode_to_vec).collect(),
        Some(Kind::ExampleListWithContext(list)) => {
            let context = list.context.as_ref().map(Message::encode_to_vec).unwrap_or_default();
            list.examples
                .iter()
                .map(|example| [context.as_slice(), &example.encode_to_vec()].concat())
                .collect()
        }
        None => return Err("classify/regress log without examples".into()),
    };
    Ok(Tensor::new(vec![examples.len()], TensorData::String(examples)))
}

/// A `TensorProto` as a host tensor, as TensorFlow reads one.
pub fn tensor_of(proto: &TensorProto) -> Result<Tensor, String> {
    crate::codec::tensor_proto::to_tensor(proto, "tensor").map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(payload: &[u8]) -> Vec<u8> {
        let mut out = (payload.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(&masked_crc(&out[..8]).to_le_bytes());
        out.extend_from_slice(payload);
        out.extend_from_slice(&masked_crc(payload).to_le_bytes());
        out
    }

    fn shape(dims: &[usize]) -> Option<crate::proto::tensorflow::TensorShapeProto> {
        Some(crate::codec::tensor_proto::shape_proto(dims))
    }

    #[test]
    fn reads_predict_logs_from_tfrecords() {
        let x = TensorProto {
            dtype: 1,
            tensor_shape: shape(&[2]),
            float_val: vec![1.0, 2.0],
            ..Default::default()
        };
        let request = crate::proto::tensorflow::serving::PredictRequest {
            model_spec: Some(ModelSpec {
                signature_name: "serving_default".into(),
                ..Default::default()
            }),
            inputs: BTreeMap::from([("x".to_string(), x)]),
            output_filter: Vec::new(),
        };
        let log = PredictionLog {
            log_metadata: None,
            log_type: Some(LogType::PredictLog(crate::proto::tensorflow::serving::PredictLog {
                request: Some(request),
                response: None,
            })),
        };
        let mut file = record(&log.encode_to_vec());
        file.extend(record(&log.encode_to_vec()));
        let requests = parse(&file).unwrap();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].signature.as_deref(), Some("serving_default"));
        assert_eq!(
            requests[0].inputs["x"],
            Tensor::new(vec![2], TensorData::Float(vec![1.0, 2.0]))
        );
        file[20] ^= 1;
        assert!(parse(&file).unwrap_err().contains("CRC"));
    }

    #[test]
    fn tensor_content_and_broadcast_values() {
        let content: Vec<u8> = [3i64, 4].iter().flat_map(|v| v.to_le_bytes()).collect();
        let proto = TensorProto {
            dtype: 9,
            tensor_shape: shape(&[2]),
            tensor_content: content.into(),
            ..Default::default()
        };
        assert_eq!(tensor_of(&proto).unwrap().data, TensorData::Int64(vec![3, 4]));
        let filled = TensorProto {
            dtype: 1,
            tensor_shape: shape(&[2, 2]),
            float_val: vec![0.5],
            ..Default::default()
        };
        assert_eq!(tensor_of(&filled).unwrap().data, TensorData::Float(vec![0.5; 4]));
        // Fewer values than the shape: the last repeats, as TensorFlow reads it.
        let short = TensorProto {
            dtype: 1,
            tensor_shape: shape(&[3]),
            float_val: vec![1.0, 2.0],
            ..Default::default()
        };
        assert_eq!(tensor_of(&short).unwrap().data, TensorData::Float(vec![1.0, 2.0, 2.0]));
        let bad = TensorProto {
            dtype: 1,
            tensor_shape: shape(&[1]),
            float_val: vec![1.0, 2.0],
            ..Default::default()
        };
        assert!(tensor_of(&bad).is_err());
    }
}
