//! One signature input being decoded: its typed buffer, the shape inferred
//! as values stream past, and the dtype conversion rules (TF Serving's strict
//! ones or numpy's).

use std::fmt;

use base64::Engine;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::super::shape::ShapeTracker;
use super::super::CodecError;
use super::Coercion;
use crate::signature::TensorSpec;
use crate::tensor::{Tensor, TensorData};

/// One signature input being filled.
pub(super) struct Column<'s> {
    pub(super) spec: &'s TensorSpec,
    pub(super) data: TensorData,
    pub(super) shape: ShapeTracker,
    pub(super) coercion: Coercion,
    /// Set by a visitor before it fails, so the caller reports a clean message
    /// instead of serde's position-suffixed one.
    pub(super) error: Option<CodecError>,
}

impl<'s> Column<'s> {
    pub(super) fn new(spec: &'s TensorSpec) -> Result<Self, CodecError> {
        let data = TensorData::empty(spec.dtype).ok_or_else(|| {
            CodecError::Unimplemented(format!(
                "Conversion of JSON Value to type {} (input '{}') is not supported",
                spec.dtype.proto_name(),
                spec.key
            ))
        })?;
        Ok(Column {
            spec,
            data,
            shape: ShapeTracker::default(),
            coercion: Coercion::Strict,
            error: None,
        })
    }

    pub(super) fn numpy(&self) -> bool {
        self.coercion == Coercion::Numpy
    }

    pub(super) fn fail<E: de::Error>(&mut self, message: String) -> E {
        let error = CodecError::InputValue {
            input: self.spec.key.clone(),
            detail: message,
        };
        let text = error.to_string();
        self.error = Some(error);
        E::custom(text)
    }

    pub(super) fn type_error<E: de::Error>(&mut self, shown: &dyn fmt::Display, json_type: &str) -> E {
        let message = format!(
            "JSON Value: {shown} Type: {json_type} is not of expected type: {}",
            self.spec.dtype.short_name()
        );
        self.fail(message)
    }

    pub(super) fn scalar<E: de::Error>(&mut self, depth: usize) -> Result<(), E> {
        self.shape.scalar(depth).map_err(|e| self.fail(e.to_string()))
    }

    pub(super) fn push_f64<E: de::Error>(&mut self, v: f64) -> Result<(), E> {
        let numpy = self.numpy();
        match &mut self.data {
            TensorData::Float(buf) => buf.push(v as f32),
            TensorData::Double(buf) => buf.push(v),
            TensorData::Half(buf) => buf.push(half::f16::from_f64(v)),
            TensorData::Bool(buf) if numpy => buf.push(v != 0.0),
            TensorData::String(_) => return Err(self.type_error(&v, "Number")),
            _ if numpy => {
                if !v.is_finite() {
                    return Err(self.fail(format!("cannot convert float {v} to integer")));
                }
                // numpy truncates toward zero; out-of-range values are refused below.
                let truncated = v.trunc();
                if truncated < i64::MIN as f64 || truncated >= i64::MAX as f64 {
                    return Err(self.out_of_range(&v));
                }
                return self.push_i64(truncated as i64);
            }
            _ => return Err(self.type_error(&v, "Number")),
        }
        Ok(())
    }

    pub(super) fn push_i64<E: de::Error>(&mut self, v: i64) -> Result<(), E> {
        macro_rules! narrow {
            ($buf:expr) => {
                match v.try_into() {
                    Ok(x) => $buf.push(x),
                    Err(_) => return Err(self.out_of_range(&v)),
                }
            };
        }
        match &mut self.data {
            TensorData::Float(buf) => buf.push(v as f32),
            TensorData::Double(buf) => buf.push(v as f64),
            TensorData::Half(buf) => buf.push(half::f16::from_f64(v as f64)),
            TensorData::Int8(buf) => narrow!(buf),
            TensorData::Int16(buf) => narrow!(buf),
            TensorData::Int32(buf) => narrow!(buf),
            TensorData::Int64(buf) => buf.push(v),
            TensorData::UInt8(buf) => narrow!(buf),
            TensorData::UInt16(buf) => narrow!(buf),
            TensorData::UInt32(buf) => narrow!(buf),
            TensorData::UInt64(buf) => narrow!(buf),
            TensorData::Bool(buf) if self.coercion == Coercion::Numpy => buf.push(v != 0),
            TensorData::Bool(_) | TensorData::String(_) => return Err(self.type_error(&v, "Number")),
        }
        Ok(())
    }

    pub(super) fn push_u64<E: de::Error>(&mut self, v: u64) -> Result<(), E> {
        match (&mut self.data, i64::try_from(v)) {
            (TensorData::UInt64(buf), _) => {
                buf.push(v);
                Ok(())
            }
            (_, Ok(signed)) => self.push_i64(signed),
            (TensorData::Float(buf), Err(_)) => {
                buf.push(v as f32);
                Ok(())
            }
            (TensorData::Double(buf), Err(_)) => {
                buf.push(v as f64);
                Ok(())
            }
            (TensorData::Half(buf), Err(_)) => {
                buf.push(half::f16::from_f64(v as f64));
                Ok(())
            }
            (_, Err(_)) => Err(self.out_of_range(&v)),
        }
    }

    pub(super) fn out_of_range<E: de::Error>(&mut self, v: &dyn fmt::Display) -> E {
        let message = format!("value {v} is out of range for {}", self.spec.dtype.short_name());
        self.fail(message)
    }

    pub(super) fn push_bool<E: de::Error>(&mut self, v: bool) -> Result<(), E> {
        let numpy = self.numpy();
        match &mut self.data {
            TensorData::Bool(buf) => {
                buf.push(v);
                Ok(())
            }
            TensorData::String(_) => Err(self.type_error(&v, if v { "True" } else { "False" })),
            _ if numpy => self.push_i64(i64::from(v)),
            _ => Err(self.type_error(&v, if v { "True" } else { "False" })),
        }
    }

    pub(super) fn push_str<E: de::Error>(&mut self, v: &str) -> Result<(), E> {
        let numpy = self.numpy();
        match &mut self.data {
            TensorData::String(buf) => buf.push(v.as_bytes().to_vec()),
            // JSON has no token for these; TF Serving accepts them bare, we accept them quoted too.
            TensorData::Float(_) | TensorData::Double(_) | TensorData::Half(_) if non_finite(v).is_some() => {
                return self.push_f64(non_finite(v).unwrap_or(f64::NAN));
            }
            TensorData::Bool(_) => return Err(self.type_error(&format_args!("{v:?}"), "String")),
            _ if numpy => return self.push_numeric_text(v),
            _ => return Err(self.type_error(&format_args!("{v:?}"), "String")),
        }
        Ok(())
    }

    /// A numeric string for a numeric input, parsed as numpy parses it
    /// (`int("1.5")` fails, `float("1.5")` does not).
    pub(super) fn push_numeric_text<E: de::Error>(&mut self, v: &str) -> Result<(), E> {
        let text = v.trim();
        let floating = matches!(
            self.data,
            TensorData::Float(_) | TensorData::Double(_) | TensorData::Half(_)
        );
        if floating {
            if let Ok(x) = text.parse::<f64>() {
                return self.push_f64(x);
            }
            return Err(self.fail(format!("could not convert string to float: {v:?}")));
        }
        if let Some(x) = non_finite(text) {
            return self.push_f64(x);
        }
        match text.parse::<i64>() {
            Ok(x) => self.push_i64(x),
            Err(_) => Err(self.fail(format!("invalid literal for int() with base 10: {v:?}"))),
        }
    }

    pub(super) fn push_b64<E: de::Error>(&mut self, encoded: &str) -> Result<(), E> {
        let decoded = match decode_base64(encoded) {
            Some(bytes) => bytes,
            None => {
                let message = format!("'b64' value is not valid base64 ({} characters)", encoded.len());
                return Err(self.fail(message));
            }
        };
        match &mut self.data {
            TensorData::String(buf) => {
                buf.push(decoded);
                Ok(())
            }
            _ => Err(self.type_error(&"{\"b64\": ...}", "Object")),
        }
    }

    /// The rest of a `{"b64": "..."}` object whose key has been read: one
    /// string value and no other key.
    pub(super) fn read_b64<'de, A: MapAccess<'de>>(&mut self, map: &mut A, depth: usize) -> Result<(), A::Error> {
        let encoded: String = map
            .next_value()
            .map_err(|_| self.fail::<A::Error>("the value of 'b64' must be a string".to_string()))?;
        if map.next_key::<String>()?.is_some() {
            return Err(self.fail("a 'b64' object must have exactly one key".to_string()));
        }
        self.scalar(depth)?;
        self.push_b64(&encoded)
    }

    /// The tensor as sent. Declared shapes are not checked: as in TF Serving,
    /// signatures are often inexact (old exports declare no dims, Estimators
    /// `[-1,1]` for inputs that take `[N]`) and the graph is the judge.
    pub(super) fn finish(self) -> Result<Tensor, CodecError> {
        Ok(Tensor::new(self.shape.finish(), self.data))
    }
}

pub(super) fn non_finite(v: &str) -> Option<f64> {
    match v {
        "NaN" | "nan" => Some(f64::NAN),
        "Infinity" | "inf" => Some(f64::INFINITY),
        "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

/// Accepts standard and URL-safe alphabets, padded or not, as clients vary.
pub fn decode_base64(encoded: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
    use base64::engine::DecodePaddingMode;
    const LENIENT: GeneralPurposeConfig =
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
    const STANDARD: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::STANDARD, LENIENT);
    const URL_SAFE: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::URL_SAFE, LENIENT);
    STANDARD.decode(encoded).or_else(|_| URL_SAFE.decode(encoded)).ok()
}

/// Streams one JSON value (scalar or nested lists) into a column.
pub(super) struct ValueSeed<'c, 's> {
    pub(super) column: &'c mut Column<'s>,
    pub(super) depth: usize,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a value or nested list for input '{}'", self.column.spec.key)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.column.scalar(self.depth)?;
        self.column.push_bool(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.column.scalar(self.depth)?;
        self.column.push_i64(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.column.scalar(self.depth)?;
        self.column.push_u64(v)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.column.scalar(self.depth)?;
        self.column.push_f64(v)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.column.scalar(self.depth)?;
        self.column.push_str(v)
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(self.column.type_error(&"null", "Null"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let column = self.column;
        column
            .shape
            .enter_list(self.depth)
            .map_err(|e| column.fail::<A::Error>(e.to_string()))?;
        let mut len = 0;
        while seq
            .next_element_seed(ValueSeed {
                column: &mut *column,
                depth: self.depth + 1,
            })?
            .is_some()
        {
            len += 1;
        }
        column
            .shape
            .close_list(self.depth, len)
            .map_err(|e| column.fail(e.to_string()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let column = self.column;
        let key: Option<String> = map.next_key()?;
        if key.as_deref() != Some("b64") {
            return Err(column.type_error(&"{...}", "Object"));
        }
        column.read_b64(&mut map, self.depth)
    }
}
