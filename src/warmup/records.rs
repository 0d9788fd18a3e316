//! TF Serving's warm-up file, `assets.extra/tf_serving_warmup_requests`: a
//! TFRecord file of `PredictionLog` protos. Predict logs become signature
//! inputs; classify and regress logs become serialized `tf.Example` inputs.

use std::collections::BTreeMap;

use prost::Message;

use crate::tensor::{DType, Tensor, TensorData};

/// At most this many records are replayed, as in TF Serving.
pub const MAX_RECORDS: usize = 1000;

/// One request to replay: a signature and its inputs by key.
#[derive(Debug, PartialEq)]
pub struct WarmupRequest {
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

fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

#[derive(Clone, PartialEq, prost::Message)]
struct PredictionLog {
    #[prost(message, optional, tag = "2")]
    classify_log: Option<ExamplesLog>,
    #[prost(message, optional, tag = "3")]
    regress_log: Option<ExamplesLog>,
    #[prost(message, optional, tag = "6")]
    predict_log: Option<PredictLog>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PredictLog {
    #[prost(message, optional, tag = "1")]
    request: Option<PredictRequest>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ModelSpec {
    #[prost(string, tag = "3")]
    signature_name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PredictRequest {
    #[prost(message, optional, tag = "1")]
    model_spec: Option<ModelSpec>,
    #[prost(btree_map = "string, message", tag = "2")]
    inputs: BTreeMap<String, TensorProto>,
}

/// Classification and regression logs share this shape: a request whose
/// input holds a list of examples, kept serialized.
#[derive(Clone, PartialEq, prost::Message)]
struct ExamplesLog {
    #[prost(message, optional, tag = "1")]
    request: Option<ExamplesRequest>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ExamplesRequest {
    #[prost(message, optional, tag = "1")]
    model_spec: Option<ModelSpec>,
    #[prost(message, optional, tag = "2")]
    input: Option<Input>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Input {
    #[prost(message, optional, tag = "1")]
    example_list: Option<ExampleList>,
    #[prost(message, optional, tag = "2")]
    example_list_with_context: Option<ExampleList>,
}

/// `repeated Example examples = 1`, read as raw bytes (the wire format of a
/// message field and a bytes field is the same).
#[derive(Clone, PartialEq, prost::Message)]
struct ExampleList {
    #[prost(bytes = "vec", repeated, tag = "1")]
    examples: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    #[prost(int32, tag = "1")]
    dtype: i32,
    #[prost(message, optional, tag = "2")]
    tensor_shape: Option<TensorShapeProto>,
    #[prost(bytes = "vec", tag = "4")]
    tensor_content: Vec<u8>,
    #[prost(float, repeated, tag = "5")]
    float_val: Vec<f32>,
    #[prost(double, repeated, tag = "6")]
    double_val: Vec<f64>,
    #[prost(int32, repeated, tag = "7")]
    int_val: Vec<i32>,
    #[prost(bytes = "vec", repeated, tag = "8")]
    string_val: Vec<Vec<u8>>,
    #[prost(int64, repeated, tag = "10")]
    int64_val: Vec<i64>,
    #[prost(bool, repeated, tag = "11")]
    bool_val: Vec<bool>,
    #[prost(uint32, repeated, tag = "16")]
    uint32_val: Vec<u32>,
    #[prost(uint64, repeated, tag = "17")]
    uint64_val: Vec<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TensorShapeProto {
    #[prost(message, repeated, tag = "2")]
    dim: Vec<Dim>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Dim {
    #[prost(int64, tag = "1")]
    size: i64,
}

/// Parses the warm-up file into requests (at most `MAX_RECORDS`).
pub fn parse(data: &[u8]) -> Result<Vec<WarmupRequest>, String> {
    tfrecords(data)?
        .into_iter()
        .take(MAX_RECORDS)
        .enumerate()
        .map(|(i, record)| {
            let log = PredictionLog::decode(record).map_err(|e| format!("record {i}: not a PredictionLog: {e}"))?;
            request_of(log).map_err(|e| format!("record {i}: {e}"))
        })
        .collect()
}

fn signature_of(spec: Option<&ModelSpec>) -> Option<String> {
    spec.map(|s| s.signature_name.clone()).filter(|s| !s.is_empty())
}

fn request_of(log: PredictionLog) -> Result<WarmupRequest, String> {
    if let Some(predict) = log.predict_log.and_then(|p| p.request) {
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
        return Ok(WarmupRequest {
            signature: signature_of(predict.model_spec.as_ref()),
            inputs,
        });
    }
    let examples = log.classify_log.or(log.regress_log).and_then(|l| l.request);
    if let Some(request) = examples {
        let list = request
            .input
            .and_then(|i| i.example_list.or(i.example_list_with_context))
            .ok_or("classify/regress log without examples")?;
        let rows = list.examples.len();
        let tensor = Tensor::new(vec![rows], TensorData::String(list.examples));
        return Ok(WarmupRequest {
            signature: signature_of(request.model_spec.as_ref()),
            inputs: BTreeMap::from([("inputs".to_string(), tensor)]),
        });
    }
    Err("only predict, classify and regress logs can be replayed".into())
}

/// A `TensorProto` as a host tensor: from `tensor_content` (little-endian
/// bytes) or the typed value fields (one value fills the whole shape).
pub fn tensor_of(proto: &TensorProto) -> Result<Tensor, String> {
    let shape: Vec<usize> = proto
        .tensor_shape
        .as_ref()
        .map(|s| s.dim.iter().map(|d| d.size.max(0) as usize).collect())
        .unwrap_or_default();
    let count: usize = shape.iter().product();
    let dtype = DType::from_proto(proto.dtype);
    let content = &proto.tensor_content;
    macro_rules! numeric {
        ($ty:ty, $variant:ident, $field:expr) => {{
            let values: Vec<$ty> = if !content.is_empty() {
                content
                    .chunks_exact(std::mem::size_of::<$ty>())
                    .map(|c| <$ty>::from_le_bytes(c.try_into().expect("chunk size")))
                    .collect()
            } else {
                $field.iter().map(|&v| v as $ty).collect()
            };
            TensorData::$variant(fill(values, count)?)
        }};
    }
    let data = match dtype {
        DType::Float => numeric!(f32, Float, proto.float_val),
        DType::Double => numeric!(f64, Double, proto.double_val),
        DType::Int8 => numeric!(i8, Int8, proto.int_val),
        DType::Int16 => numeric!(i16, Int16, proto.int_val),
        DType::Int32 => numeric!(i32, Int32, proto.int_val),
        DType::Int64 => numeric!(i64, Int64, proto.int64_val),
        DType::UInt8 => numeric!(u8, UInt8, proto.int_val),
        DType::UInt16 => numeric!(u16, UInt16, proto.int_val),
        DType::UInt32 => numeric!(u32, UInt32, proto.uint32_val),
        DType::UInt64 => numeric!(u64, UInt64, proto.uint64_val),
        DType::Bool => {
            let values = if content.is_empty() {
                proto.bool_val.clone()
            } else {
                content.iter().map(|&b| b != 0).collect()
            };
            TensorData::Bool(fill(values, count)?)
        }
        DType::String => TensorData::String(fill(proto.string_val.clone(), count)?),
        other => return Err(format!("dtype {} cannot be replayed", other.proto_name())),
    };
    Ok(Tensor::new(shape, data))
}

fn fill<T: Clone>(values: Vec<T>, count: usize) -> Result<Vec<T>, String> {
    match values.len() {
        n if n == count => Ok(values),
        1 => Ok(vec![values[0].clone(); count]),
        n => Err(format!("{n} values for a shape of {count} elements")),
    }
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

    fn shape(dims: &[i64]) -> Option<TensorShapeProto> {
        Some(TensorShapeProto {
            dim: dims.iter().map(|&size| Dim { size }).collect(),
        })
    }

    #[test]
    fn reads_predict_logs_from_tfrecords() {
        let x = TensorProto {
            dtype: 1,
            tensor_shape: shape(&[2]),
            float_val: vec![1.0, 2.0],
            ..Default::default()
        };
        let request = PredictRequest {
            model_spec: Some(ModelSpec {
                signature_name: "serving_default".into(),
            }),
            inputs: BTreeMap::from([("x".to_string(), x)]),
        };
        let log = PredictionLog {
            predict_log: Some(PredictLog { request: Some(request) }),
            ..Default::default()
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
            tensor_content: content,
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
        let bad = TensorProto {
            dtype: 1,
            tensor_shape: shape(&[3]),
            float_val: vec![1.0, 2.0],
            ..Default::default()
        };
        assert!(tensor_of(&bad).is_err());
    }
}
