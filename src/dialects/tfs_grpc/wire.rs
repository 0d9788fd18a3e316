//! A Predict's answer written as protobuf straight from the run's tensors:
//! the bytes prost writes for the `PredictResponse` that `to_proto` would
//! build, without building it (no `TensorProto`, map, name or value copies).

use prost::encoding::{encoded_len_varint, key_len, WireType};

use crate::tensor::{Tensor, TensorData};

/// The answer's parts: its `model_spec` and its outputs in key order.
pub struct Answer<'a, Outputs> {
    pub model: &'a str,
    pub version: i64,
    pub signature: &'a str,
    /// Names and tensors, walked once for the length and once to write.
    pub outputs: Outputs,
}

impl<'a, Outputs> Answer<'a, Outputs>
where
    Outputs: Iterator<Item = (&'a str, &'a Tensor)> + Clone,
{
    /// The encoded `PredictResponse`'s length.
    pub fn encoded_len(&self) -> usize {
        let spec = self.spec_len();
        let mut len = key_len(2) + encoded_len_varint(spec as u64) + spec;
        for (name, tensor) in self.outputs.clone() {
            let entry = entry_len(name, tensor_len(tensor));
            len += key_len(1) + encoded_len_varint(entry as u64) + entry;
        }
        len
    }

    /// Appends the encoded `PredictResponse`. prost writes fields in the
    /// order of their numbers: `outputs` (1) before `model_spec` (2), and
    /// the spec's `version` (2) between its `name` (1) and `signature_name` (3).
    pub fn encode(&self, buf: &mut Vec<u8>) {
        for (name, tensor) in self.outputs.clone() {
            // Walked once: a varint tensor's length is a pass over its values.
            let len = tensor_len(tensor);
            field_key(1, WireType::LengthDelimited, buf);
            varint(entry_len(name, len) as u64, buf);
            string(1, name, buf);
            field_key(2, WireType::LengthDelimited, buf);
            varint(len as u64, buf);
            write_tensor(tensor, buf);
        }
        field_key(2, WireType::LengthDelimited, buf);
        varint(self.spec_len() as u64, buf);
        string(1, self.model, buf);
        field_key(2, WireType::LengthDelimited, buf);
        varint(version_len(self.version) as u64, buf);
        if self.version != 0 {
            field_key(1, WireType::Varint, buf);
            varint(self.version as u64, buf);
        }
        string(3, self.signature, buf);
    }

    fn spec_len(&self) -> usize {
        let version = version_len(self.version);
        string_len(1, self.model)
            + string_len(3, self.signature)
            + key_len(2)
            + encoded_len_varint(version as u64)
            + version
    }
}

/// `google.protobuf.Int64Value`: its one field, left out when zero.
fn version_len(version: i64) -> usize {
    if version == 0 {
        0
    } else {
        key_len(1) + encoded_len_varint(version as u64)
    }
}

/// A proto3 string field, left out when empty.
fn string_len(tag: u32, value: &str) -> usize {
    if value.is_empty() {
        0
    } else {
        key_len(tag) + encoded_len_varint(value.len() as u64) + value.len()
    }
}

fn string(tag: u32, value: &str, buf: &mut Vec<u8>) {
    if !value.is_empty() {
        field_key(tag, WireType::LengthDelimited, buf);
        varint(value.len() as u64, buf);
        buf.extend_from_slice(value.as_bytes());
    }
}

/// A map entry: its key (left out when empty, as prost leaves a default
/// key out) and its tensor of `tensor_len` bytes.
fn entry_len(key: &str, tensor_len: usize) -> usize {
    string_len(1, key) + key_len(2) + encoded_len_varint(tensor_len as u64) + tensor_len
}

/// The `TensorProto` fields `to_proto` fills: `dtype`, `tensor_shape` and
/// one typed value field.
fn tensor_len(tensor: &Tensor) -> usize {
    let dtype = tensor.dtype().to_proto();
    let shape = shape_len(&tensor.shape);
    let dtype_len = if dtype == 0 {
        0
    } else {
        key_len(1) + encoded_len_varint(dtype as u64)
    };
    dtype_len + key_len(2) + encoded_len_varint(shape as u64) + shape + values_len(&tensor.data)
}

fn write_tensor(tensor: &Tensor, buf: &mut Vec<u8>) {
    let dtype = tensor.dtype().to_proto();
    if dtype != 0 {
        field_key(1, WireType::Varint, buf);
        varint(dtype as u64, buf);
    }
    field_key(2, WireType::LengthDelimited, buf);
    varint(shape_len(&tensor.shape) as u64, buf);
    for &size in &tensor.shape {
        field_key(2, WireType::LengthDelimited, buf);
        varint(dim_len(size) as u64, buf);
        if size != 0 {
            field_key(1, WireType::Varint, buf);
            varint(size as u64, buf);
        }
    }
    write_values(&tensor.data, buf);
}

/// `TensorShapeProto`: one `Dim` message per dimension.
fn shape_len(shape: &[usize]) -> usize {
    shape
        .iter()
        .map(|&size| {
            let dim = dim_len(size);
            key_len(2) + encoded_len_varint(dim as u64) + dim
        })
        .sum()
}

/// `Dim`: its size, left out when zero.
fn dim_len(size: usize) -> usize {
    if size == 0 {
        0
    } else {
        key_len(1) + encoded_len_varint(size as u64)
    }
}

/// A packed repeated field's length, left out when empty.
fn packed_len(tag: u32, payload: usize) -> usize {
    if payload == 0 {
        0
    } else {
        key_len(tag) + encoded_len_varint(payload as u64) + payload
    }
}

fn varints_len(values: impl Iterator<Item = u64>) -> usize {
    values.map(encoded_len_varint).sum()
}

/// Each dtype's field and wire form, as `to_proto` fills it: the narrow
/// integers widen to `int_val`, halves go as their bits in `half_val`.
fn values_len(data: &TensorData) -> usize {
    match data {
        TensorData::Float(v) => packed_len(5, v.len() * 4),
        TensorData::Double(v) => packed_len(6, v.len() * 8),
        TensorData::Half(v) => packed_len(13, varints_len(v.iter().map(|x| u64::from(x.to_bits())))),
        TensorData::Int8(v) => packed_len(7, varints_len(v.iter().map(|&x| i64::from(x) as u64))),
        TensorData::Int16(v) => packed_len(7, varints_len(v.iter().map(|&x| i64::from(x) as u64))),
        TensorData::Int32(v) => packed_len(7, varints_len(v.iter().map(|&x| i64::from(x) as u64))),
        TensorData::UInt8(v) => packed_len(7, varints_len(v.iter().map(|&x| u64::from(x)))),
        TensorData::UInt16(v) => packed_len(7, varints_len(v.iter().map(|&x| u64::from(x)))),
        TensorData::Int64(v) => packed_len(10, varints_len(v.iter().map(|&x| x as u64))),
        TensorData::UInt32(v) => packed_len(16, varints_len(v.iter().map(|&x| u64::from(x)))),
        TensorData::UInt64(v) => packed_len(17, varints_len(v.iter().copied())),
        TensorData::Bool(v) => packed_len(11, v.len()),
        TensorData::String(v) => v
            .iter()
            .map(|s| key_len(8) + encoded_len_varint(s.len() as u64) + s.len())
            .sum(),
    }
}

fn write_packed_varints(tag: u32, values: impl Iterator<Item = u64> + Clone, buf: &mut Vec<u8>) {
    let payload = varints_len(values.clone());
    if payload == 0 {
        return;
    }
    field_key(tag, WireType::LengthDelimited, buf);
    varint(payload as u64, buf);
    for value in values {
        varint(value, buf);
    }
}

fn write_packed_fixed<const N: usize, T: Copy>(tag: u32, values: &[T], bytes: fn(T) -> [u8; N], buf: &mut Vec<u8>) {
    if values.is_empty() {
        return;
    }
    field_key(tag, WireType::LengthDelimited, buf);
    varint((values.len() * N) as u64, buf);
    buf.reserve(values.len() * N);
    for &value in values {
        buf.extend_from_slice(&bytes(value));
    }
}

fn write_values(data: &TensorData, buf: &mut Vec<u8>) {
    match data {
        TensorData::Float(v) => write_packed_fixed(5, v, f32::to_le_bytes, buf),
        TensorData::Double(v) => write_packed_fixed(6, v, f64::to_le_bytes, buf),
        TensorData::Half(v) => write_packed_varints(13, v.iter().map(|x| u64::from(x.to_bits())), buf),
        TensorData::Int8(v) => write_packed_varints(7, v.iter().map(|&x| i64::from(x) as u64), buf),
        TensorData::Int16(v) => write_packed_varints(7, v.iter().map(|&x| i64::from(x) as u64), buf),
        TensorData::Int32(v) => write_packed_varints(7, v.iter().map(|&x| i64::from(x) as u64), buf),
        TensorData::UInt8(v) => write_packed_varints(7, v.iter().map(|&x| u64::from(x)), buf),
        TensorData::UInt16(v) => write_packed_varints(7, v.iter().map(|&x| u64::from(x)), buf),
        TensorData::Int64(v) => write_packed_varints(10, v.iter().map(|&x| x as u64), buf),
        TensorData::UInt32(v) => write_packed_varints(16, v.iter().map(|&x| u64::from(x)), buf),
        TensorData::UInt64(v) => write_packed_varints(17, v.iter().copied(), buf),
        TensorData::Bool(v) => write_packed_fixed(11, v, |b| [u8::from(b)], buf),
        TensorData::String(v) => {
            for s in v {
                field_key(8, WireType::LengthDelimited, buf);
                varint(s.len() as u64, buf);
                buf.extend_from_slice(s);
            }
        }
    }
}

/// prost's `encode_key` (see [`varint`]).
#[inline]
fn field_key(tag: u32, wire_type: WireType, buf: &mut Vec<u8>) {
    varint(u64::from(tag << 3 | wire_type as u32), buf);
}

/// prost's `encode_varint`, pushed straight into the `Vec` the answer's
/// length was reserved in, not byte by byte through `BufMut`'s checks.
#[inline]
fn varint(mut value: u64, buf: &mut Vec<u8>) {
    while value >= 0x80 {
        buf.push(value as u8 | 0x80);
        value >>= 7;
    }
    buf.push(value as u8);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use prost::Message;

    use super::*;
    use crate::codec::tensor_proto::to_proto;
    use crate::proto::tensorflow::serving::model_spec::VersionChoice;
    use crate::proto::tensorflow::serving::{ModelSpec, PredictResponse};

    type Outputs<'a> = std::iter::Copied<std::slice::Iter<'a, (&'a str, &'a Tensor)>>;

    fn prost_bytes(answer: &Answer<Outputs>) -> Vec<u8> {
        PredictResponse {
            model_spec: Some(ModelSpec {
                name: answer.model.to_string(),
                signature_name: answer.signature.to_string(),
                version_choice: Some(VersionChoice::Version(answer.version)),
            }),
            outputs: answer
                .outputs
                .clone()
                .map(|(key, tensor)| (key.to_string(), to_proto(tensor)))
                .collect::<BTreeMap<_, _>>(),
        }
        .encode_to_vec()
    }

    fn direct_bytes(answer: &Answer<Outputs>) -> Vec<u8> {
        let mut buf = Vec::new();
        answer.encode(&mut buf);
        assert_eq!(buf.len(), answer.encoded_len());
        buf
    }

    #[test]
    fn every_dtype_is_written_as_prost_writes_its_proto() {
        let tensors = [
            Tensor::new(vec![2, 1], TensorData::Float(vec![3.5, -0.0])),
            Tensor::new(vec![3], TensorData::Double(vec![1e300, f64::NAN, 0.0])),
            Tensor::new(
                vec![2],
                TensorData::Half(vec![half::f16::from_f32(1.5), half::f16::from_f32(-2.0)]),
            ),
            Tensor::new(vec![3], TensorData::Int8(vec![-128, 0, 127])),
            Tensor::new(vec![2], TensorData::Int16(vec![-300, 300])),
            Tensor::new(vec![4], TensorData::Int32(vec![i32::MIN, -1, 0, i32::MAX])),
            Tensor::new(vec![2], TensorData::UInt8(vec![0, 255])),
            Tensor::new(vec![2], TensorData::UInt16(vec![1, 65535])),
            Tensor::new(vec![3], TensorData::Int64(vec![i64::MIN, 200, i64::MAX])),
            Tensor::new(vec![2], TensorData::UInt32(vec![0, u32::MAX])),
            Tensor::new(vec![2], TensorData::UInt64(vec![1 << 40, u64::MAX])),
            Tensor::new(vec![3], TensorData::Bool(vec![true, false, true])),
            Tensor::new(
                vec![3],
                TensorData::String(vec![b"a".to_vec(), vec![], vec![0xff; 200]]),
            ),
            // No elements: no value field, and a zero dimension's empty `Dim`.
            Tensor::new(vec![0, 4], TensorData::Float(vec![])),
            Tensor::new(vec![], TensorData::Int64(vec![7])),
        ];
        for tensor in &tensors {
            let outputs = [("y", tensor)];
            let answer = Answer {
                model: "m",
                version: 123,
                signature: "serving_default",
                outputs: outputs.iter().copied(),
            };
            assert_eq!(direct_bytes(&answer), prost_bytes(&answer), "{tensor:?}");
        }
    }

    #[test]
    fn the_spec_and_several_outputs_are_written_as_prost_writes_them() {
        let a = Tensor::new(vec![1], TensorData::Float(vec![1.0]));
        let b = Tensor::new(vec![300], TensorData::Int64((0..300).collect()));
        let long_name = "n".repeat(300);
        for (model, version, signature) in [
            ("half_plus_three", 1, "serving_default"),
            ("", 0, ""),
            (long_name.as_str(), -5, "s"),
        ] {
            for outputs in [&[][..], &[("a", &a), ("b", &b)][..], &[("", &a)][..]] {
                let answer = Answer {
                    model,
                    version,
                    signature,
                    outputs: outputs.iter().copied(),
                };
                assert_eq!(direct_bytes(&answer), prost_bytes(&answer));
            }
        }
    }
}
