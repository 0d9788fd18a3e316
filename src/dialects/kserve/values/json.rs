//! JSON `data` arrays, nested or flat, read straight into typed buffers
//! (no `serde_json::Value` tree), and written back flat.

use std::fmt;

use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};

use super::{unsupported, ValuesError};
use crate::error::ApiError;
use crate::tensor::{DType, TensorData};

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

/// A JSON number as an `f32`, refused where it only fits as infinity.
impl Element for f32 {
    const EXPECTED: &'static str = "a number within FP32's range (±3.4e38)";
    fn from_f64(v: f64) -> Option<Self> {
        Some(v as f32).filter(|x| x.is_finite())
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

/// A JSON number as an `f16`, refused where it only fits as infinity.
impl Element for half::f16 {
    const EXPECTED: &'static str = "a number within FP16's range (±65504)";
    fn from_f64(v: f64) -> Option<Self> {
        Some(half::f16::from_f64(v)).filter(|x| x.is_finite())
    }
    fn from_i64(v: i64) -> Option<Self> {
        <Self as Element>::from_f64(v as f64)
    }
    fn from_u64(v: u64) -> Option<Self> {
        <Self as Element>::from_f64(v as f64)
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
    fn push<E: de::Error>(self, value: Option<T>, given: &dyn fmt::Debug) -> Result<(), E> {
        match value {
            Some(v) => {
                self.0.push(v);
                Ok(())
            }
            None => Err(E::custom(format!(
                "element {} is {given:?}, expected {}",
                self.0.len(),
                T::EXPECTED
            ))),
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

/// Writes elements as a flat JSON array (floats in shortest round-trip form,
/// and as `null` where they are not finite: strict JSON has no NaN or
/// infinity, and KServe's own server writes them so).
pub fn write_json(out: &mut Vec<u8>, data: &TensorData) {
    use crate::codec::encode::write_str;
    let write_f32 = |out: &mut Vec<u8>, x: f32| match x.is_finite() {
        true => out.extend_from_slice(ryu::Buffer::new().format_finite(x).as_bytes()),
        false => out.extend_from_slice(b"null"),
    };
    let write_f64 = |out: &mut Vec<u8>, x: f64| match x.is_finite() {
        true => out.extend_from_slice(ryu::Buffer::new().format_finite(x).as_bytes()),
        false => out.extend_from_slice(b"null"),
    };
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

    #[test]
    fn numbers_past_a_float_types_range_are_refused_naming_the_element() {
        let error = from_json("x", DType::Float, "[[1, 2], [1e39, 4]]")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("input 'x'") && error.contains("element 2 is 1e39") && error.contains("FP32's range"),
            "{error}"
        );
        let error = from_json("h", DType::Half, "[70000]").unwrap_err().to_string();
        assert!(
            error.contains("element 0 is 70000") && error.contains("FP16's range"),
            "{error}"
        );
        assert_eq!(
            from_json("x", DType::Float, "[3.4e38, -1e-50]").unwrap(),
            TensorData::Float(vec![3.4e38, -0.0])
        );
        assert!(from_json("d", DType::Double, "[1e300]").is_ok());
    }

    #[test]
    fn answers_parse_under_a_strict_json_parser_whatever_their_floats() {
        let floats = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 65504.0, 6.1e-5, -0.0];
        let data = [
            TensorData::Float(floats.to_vec()),
            TensorData::Double(floats.iter().map(|&x| f64::from(x)).collect()),
            TensorData::Half(floats.iter().map(|&x| half::f16::from_f32(x)).collect()),
        ];
        for data in data {
            let mut out = Vec::new();
            write_json(&mut out, &data);
            let parsed: Vec<Option<f64>> = serde_json::from_slice(&out).unwrap();
            assert_eq!(&parsed[..3], [None, None, None], "{}", String::from_utf8_lossy(&out));
            assert!(
                parsed[3..].iter().all(Option::is_some),
                "{}",
                String::from_utf8_lossy(&out)
            );
        }
    }
}
