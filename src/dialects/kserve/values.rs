//! Tensor elements in the Open Inference Protocol's forms: raw little-endian
//! bytes (BYTES as 4-byte-length-prefixed elements), and JSON `data` arrays
//! (nested or flat) read straight into typed buffers.

use std::fmt;

use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};

use crate::error::ApiError;
use crate::tensor::{DType, TensorData};

/// An input's elements that do not fit its datatype and shape.
#[derive(Debug, thiserror::Error)]
pub enum ValuesError {
    #[error(
        "input '{input}': {got} bytes of data, but its shape needs {elements} {datatype} elements ({needed} bytes)"
    )]
    RawLength {
        input: String,
        got: usize,
        elements: usize,
        datatype: &'static str,
        needed: usize,
    },
    #[error("input '{input}': {got} bytes of FP16 data, but its shape needs {elements} elements")]
    HalfLength { input: String, got: usize, elements: usize },
    #[error("input '{input}': {got} bytes of BOOL data, but its shape needs {elements}")]
    BoolLength { input: String, got: usize, elements: usize },
    #[error("input '{input}': BYTES data is truncated at element {index}")]
    BytesTruncated { input: String, index: usize },
    #[error("input '{input}': {got} BYTES elements, but its shape needs {elements}")]
    BytesCount { input: String, got: usize, elements: usize },
    #[error("input '{input}': datatype {datatype} is not supported")]
    Unsupported { input: String, datatype: &'static str },
    #[error("input '{input}': data: {detail}")]
    Data { input: String, detail: String },
}

impl From<ValuesError> for ApiError {
    fn from(error: ValuesError) -> ApiError {
        ApiError::BadRequest(error.to_string())
    }
}

pub fn from_le_bytes(name: &str, dtype: DType, raw: &[u8], elements: usize) -> Result<TensorData, ApiError> {
    macro_rules! read {
        ($variant:ident, $t:ty) => {{
            const SIZE: usize = std::mem::size_of::<$t>();
            if Some(raw.len()) != elements.checked_mul(SIZE) {
                return Err(ValuesError::RawLength {
                    input: name.to_string(),
                    got: raw.len(),
                    elements,
                    datatype: super::datatype(dtype),
                    needed: elements.saturating_mul(SIZE),
                }
                .into());
            }
            TensorData::$variant(
                raw.chunks_exact(SIZE)
                    .map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or([0; SIZE])))
                    .collect(),
            )
        }};
    }
    Ok(match dtype {
        DType::Float => read!(Float, f32),
        DType::Double => read!(Double, f64),
        DType::Half => {
            if Some(raw.len()) != elements.checked_mul(2) {
                return Err(ValuesError::HalfLength {
                    input: name.to_string(),
                    got: raw.len(),
                    elements,
                }
                .into());
            }
            TensorData::Half(
                raw.chunks_exact(2)
                    .map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])))
                    .collect(),
            )
        }
        DType::Int8 => read!(Int8, i8),
        DType::Int16 => read!(Int16, i16),
        DType::Int32 => read!(Int32, i32),
        DType::Int64 => read!(Int64, i64),
        DType::UInt8 => read!(UInt8, u8),
        DType::UInt16 => read!(UInt16, u16),
        DType::UInt32 => read!(UInt32, u32),
        DType::UInt64 => read!(UInt64, u64),
        DType::Bool => {
            if raw.len() != elements {
                return Err(ValuesError::BoolLength {
                    input: name.to_string(),
                    got: raw.len(),
                    elements,
                }
                .into());
            }
            TensorData::Bool(raw.iter().map(|b| *b != 0).collect())
        }
        DType::String => TensorData::String(length_prefixed(name, raw, elements)?),
        other => return Err(unsupported(name, other)),
    })
}

fn unsupported(name: &str, dtype: DType) -> ApiError {
    ValuesError::Unsupported {
        input: name.to_string(),
        datatype: super::datatype(dtype),
    }
    .into()
}

fn length_prefixed(name: &str, mut raw: &[u8], elements: usize) -> Result<Vec<Vec<u8>>, ApiError> {
    let mut items = Vec::with_capacity(elements.min(raw.len() / 4));
    while !raw.is_empty() {
        let truncated = || ValuesError::BytesTruncated {
            input: name.to_string(),
            index: items.len(),
        };
        let header: [u8; 4] = raw.get(..4).and_then(|h| h.try_into().ok()).ok_or_else(truncated)?;
        let length = u32::from_le_bytes(header) as usize;
        let item = raw.get(4..4 + length).ok_or_else(truncated)?;
        items.push(item.to_vec());
        raw = &raw[4 + length..];
    }
    if items.len() != elements {
        return Err(ValuesError::BytesCount {
            input: name.to_string(),
            got: items.len(),
            elements,
        }
        .into());
    }
    Ok(items)
}

pub fn to_le_bytes(data: &TensorData) -> Vec<u8> {
    macro_rules! write {
        ($v:expr) => {
            $v.iter().flat_map(|x| x.to_le_bytes()).collect()
        };
    }
    match data {
        TensorData::Float(v) => write!(v),
        TensorData::Double(v) => write!(v),
        TensorData::Half(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        TensorData::Int8(v) => write!(v),
        TensorData::Int16(v) => write!(v),
        TensorData::Int32(v) => write!(v),
        TensorData::Int64(v) => write!(v),
        TensorData::UInt8(v) => v.clone(),
        TensorData::UInt16(v) => write!(v),
        TensorData::UInt32(v) => write!(v),
        TensorData::UInt64(v) => write!(v),
        TensorData::Bool(v) => v.iter().map(|&b| u8::from(b)).collect(),
        TensorData::String(v) => {
            let mut out = Vec::with_capacity(v.iter().map(|s| s.len() + 4).sum());
            for item in v {
                out.extend_from_slice(&(item.len() as u32).to_le_bytes());
                out.extend_from_slice(item);
            }
            out
        }
    }
}

/// An element type JSON `data` can be read into.
trait Element: Sized {
    const EXPECTED: &'static str;
    fn from_f64(_: f64) -> Option<Self> {
        None
    }
    fn from_i64(_: i64) -> Option<Self> {
        None
    }
    fn from_u64(_: u64) -> Option<Self> {
        None
    }
    fn from_bool(_: bool) -> Option<Self> {
        None
    }
    fn from_str(_: &str) -> Option<Self> {
        None
    }
}

macro_rules! integer {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const EXPECTED: &'static str = "an integer in range";
            fn from_i64(v: i64) -> Option<Self> { <$t>::try_from(v).ok() }
            fn from_u64(v: u64) -> Option<Self> { <$t>::try_from(v).ok() }
        }
    )*};
}
integer!(i8, i16, i32, i64, u8, u16, u32, u64);

impl Element for f32 {
    const EXPECTED: &'static str = "a number";
    fn from_f64(v: f64) -> Option<Self> {
        Some(v as f32)
    }
    fn from_i64(v: i64) -> Option<Self> {
        Some(v as f32)
    }
    fn from_u64(v: u64) -> Option<Self> {
        Some(v as f32)
    }
}

impl Element for f64 {
    const EXPECTED: &'static str = "a number";
    fn from_f64(v: f64) -> Option<Self> {
        Some(v)
    }
    fn from_i64(v: i64) -> Option<Self> {
        Some(v as f64)
    }
    fn from_u64(v: u64) -> Option<Self> {
        Some(v as f64)
    }
}

impl Element for half::f16 {
    const EXPECTED: &'static str = "a number";
    fn from_f64(v: f64) -> Option<Self> {
        Some(half::f16::from_f64(v))
    }
    fn from_i64(v: i64) -> Option<Self> {
        Some(half::f16::from_f64(v as f64))
    }
    fn from_u64(v: u64) -> Option<Self> {
        Some(half::f16::from_f64(v as f64))
    }
}

impl Element for bool {
    const EXPECTED: &'static str = "true or false";
    fn from_bool(v: bool) -> Option<Self> {
        Some(v)
    }
}

impl Element for Vec<u8> {
    const EXPECTED: &'static str = "a string";
    fn from_str(v: &str) -> Option<Self> {
        Some(v.as_bytes().to_vec())
    }
}

/// Pushes every element of a (nested) JSON array into `out`.
struct Flat<'a, T>(&'a mut Vec<T>);

impl<'de, T: Element> DeserializeSeed<'de> for Flat<'_, T> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, T: Element> Visitor<'de> for Flat<'_, T> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} or an array of them", T::EXPECTED)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if let Some(hint) = seq.size_hint() {
            self.0.reserve(hint);
        }
        while seq.next_element_seed(Flat(&mut *self.0))?.is_some() {}
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.push(T::from_f64(v), &v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.push(T::from_i64(v), &v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.push(T::from_u64(v), &v)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.push(T::from_bool(v), &v)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.push(T::from_str(v), &v)
    }
}

impl<T: Element> Flat<'_, T> {
    fn push<E: de::Error>(self, value: Option<T>, given: &dyn fmt::Display) -> Result<(), E> {
        match value {
            Some(v) => {
                self.0.push(v);
                Ok(())
            }
            None => Err(E::custom(format!("expected {}, got {given}", T::EXPECTED))),
        }
    }
}

fn flatten<T: Element>(json: &str) -> Result<Vec<T>, serde_json::Error> {
    let mut out = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_str(json);
    Flat(&mut out).deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(out)
}

/// Reads an input's JSON `data` (nested or flat) as `dtype` elements.
pub fn from_json(name: &str, dtype: DType, json: &str) -> Result<TensorData, ApiError> {
    let error = |e: serde_json::Error| ValuesError::Data {
        input: name.to_string(),
        detail: e.to_string(),
    };
    Ok(match dtype {
        DType::Float => TensorData::Float(flatten(json).map_err(error)?),
        DType::Double => TensorData::Double(flatten(json).map_err(error)?),
        DType::Half => TensorData::Half(flatten(json).map_err(error)?),
        DType::Int8 => TensorData::Int8(flatten(json).map_err(error)?),
        DType::Int16 => TensorData::Int16(flatten(json).map_err(error)?),
        DType::Int32 => TensorData::Int32(flatten(json).map_err(error)?),
        DType::Int64 => TensorData::Int64(flatten(json).map_err(error)?),
        DType::UInt8 => TensorData::UInt8(flatten(json).map_err(error)?),
        DType::UInt16 => TensorData::UInt16(flatten(json).map_err(error)?),
        DType::UInt32 => TensorData::UInt32(flatten(json).map_err(error)?),
        DType::UInt64 => TensorData::UInt64(flatten(json).map_err(error)?),
        DType::Bool => TensorData::Bool(flatten(json).map_err(error)?),
        DType::String => TensorData::String(flatten(json).map_err(error)?),
        other => return Err(unsupported(name, other)),
    })
}

/// Writes elements as a flat JSON array (floats in shortest round-trip form).
pub fn write_json(out: &mut Vec<u8>, data: &TensorData) {
    use crate::codec::encode::{write_f32, write_f64, write_str};
    out.push(b'[');
    macro_rules! each {
        ($v:expr, $item:ident => $write:expr) => {
            for (i, $item) in $v.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                $write;
            }
        };
    }
    match data {
        TensorData::Float(v) => each!(v, x => write_f32(out, *x)),
        TensorData::Double(v) => each!(v, x => write_f64(out, *x)),
        TensorData::Half(v) => each!(v, x => write_f32(out, x.to_f32())),
        TensorData::Bool(v) => each!(v, x => out.extend_from_slice(if *x { b"true" } else { b"false" })),
        TensorData::String(v) => each!(v, x => write_str(out, &String::from_utf8_lossy(x))),
        TensorData::Int8(v) => each!(v, x => out.extend_from_slice(itoa::Buffer::new().format(*x).as_bytes())),
        TensorData::Int16(v) => each!(v, x => out.extend_from_slice(itoa::Buffer::new().format(*x).as_bytes())),
        TensorData::Int32(v) => each!(v, x => out.extend_from_slice(itoa::Buffer::new().format(*x).as_bytes())),
        TensorData::Int64(v) => each!(v, x => out.extend_from_slice(itoa::Buffer::new().format(*x).as_bytes())),
        TensorData::UInt8(v) => each!(v, x => out.extend_from_slice(itoa::Buffer::new().format(*x).as_bytes())),
        TensorData::UInt16(v) => each!(v, x => out.extend_from_slice(itoa::Buffer::new().format(*x).as_bytes())),
        TensorData::UInt32(v) => each!(v, x => out.extend_from_slice(itoa::Buffer::new().format(*x).as_bytes())),
        TensorData::UInt64(v) => each!(v, x => out.extend_from_slice(itoa::Buffer::new().format(*x).as_bytes())),
    }
    out.push(b']');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_bytes_round_trip_every_type() {
        for data in [
            TensorData::Float(vec![1.5, -0.25]),
            TensorData::Int64(vec![i64::MIN, 7]),
            TensorData::UInt16(vec![65535, 1]),
            TensorData::Bool(vec![true, false]),
            TensorData::String(vec![b"ab".to_vec(), Vec::new()]),
        ] {
            let raw = to_le_bytes(&data);
            assert_eq!(from_le_bytes("x", data.dtype(), &raw, data.len()).unwrap(), data);
        }
        let error = from_le_bytes("x", DType::Float, &[0; 7], 2).unwrap_err().to_string();
        assert!(error.contains("7 bytes") && error.contains("'x'"), "{error}");
        assert!(from_le_bytes("s", DType::String, &[5, 0, 0, 0, b'a'], 1).is_err());
    }

    #[test]
    fn json_data_reads_nested_or_flat() {
        assert_eq!(
            from_json("x", DType::Float, "[[1, 2.5], [3, 4]]").unwrap(),
            TensorData::Float(vec![1.0, 2.5, 3.0, 4.0])
        );
        assert_eq!(
            from_json("b", DType::String, r#"["a", "b"]"#).unwrap(),
            TensorData::String(vec![b"a".to_vec(), b"b".to_vec()])
        );
        let error = from_json("i", DType::Int8, "[1, 300]").unwrap_err().to_string();
        assert!(error.contains("'i'") && error.contains("300"), "{error}");
        assert!(from_json("f", DType::Float, r#"[1, "x"]"#).is_err());
        let mut out = Vec::new();
        write_json(&mut out, &TensorData::Float(vec![0.1, 2.0]));
        assert_eq!(out, b"[0.1,2.0]");
    }
}
