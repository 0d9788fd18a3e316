//! Decodes TF Serving predict request bodies (`instances` rows or columnar
//! `inputs`) straight into typed tensor buffers, checked against a signature.
//!
//! The envelope is parsed first with the tensor payload kept as a raw slice, so
//! the signature (whose name may follow the payload in the object) is known
//! before any number is converted; the payload is then streamed once through
//! serde visitors that append to `TensorData` vectors and infer the shape.

use std::fmt;

use base64::Engine;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::shape::ShapeTracker;
use super::CodecError;
use crate::signature::{SignatureSpec, TensorSpec};
use crate::tensor::{Tensor, TensorData};

/// Which of TF Serving's two request layouts a body used; the response mirrors it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestFormat {
    /// `instances`: a list of examples, answered with `predictions`.
    Row,
    /// `inputs`: one value per named input, answered with `outputs`.
    Columnar,
    /// Simple TensorFlow Serving's `data`: answered with an object of outputs, unwrapped.
    Named,
}

/// A predict body with the tensor payload not yet decoded.
#[derive(Deserialize)]
pub struct PredictEnvelope<'a> {
    #[serde(default)]
    pub signature_name: Option<String>,
    #[serde(borrow, default)]
    instances: Option<&'a RawValue>,
    #[serde(borrow, default)]
    inputs: Option<&'a RawValue>,
}

impl<'a> PredictEnvelope<'a> {
    pub fn parse(body: &'a [u8]) -> Result<Self, CodecError> {
        serde_json::from_slice(body).map_err(|e| CodecError::json_parse(&e))
    }

    pub fn format(&self) -> Result<RequestFormat, CodecError> {
        match (self.instances, self.inputs) {
            (Some(_), Some(_)) => Err(CodecError::invalid(
                "Not both of 'instances' and 'inputs' can be specified in the request body",
            )),
            (Some(_), None) => Ok(RequestFormat::Row),
            (None, Some(_)) => Ok(RequestFormat::Columnar),
            (None, None) => Err(CodecError::invalid(
                "Missing 'inputs' or 'instances' key in the request body",
            )),
        }
    }

    /// Decodes the payload into one tensor per signature input, in signature order.
    pub fn decode(&self, signature: &SignatureSpec) -> Result<Vec<Tensor>, CodecError> {
        match self.format()? {
            RequestFormat::Row => decode_instances(self.instances.map(RawValue::get), signature),
            // `format()` only yields the two TF Serving layouts.
            RequestFormat::Columnar | RequestFormat::Named => {
                decode_inputs(self.inputs.map(RawValue::get), signature, Coercion::Strict)
            }
        }
    }
}

/// How JSON values convert to an input's dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coercion {
    /// TF Serving's rules: no float-to-int narrowing, no bools as numbers.
    Strict,
    /// What `np.asarray(value, dtype)` does, as Simple TensorFlow Serving feeds
    /// its JSON through numpy: floats truncate into integer inputs, bools and
    /// numbers convert both ways, numeric strings parse.
    Numpy,
}

/// Decodes an object keyed by input name (Simple TensorFlow Serving's
/// `data`, TF Serving's columnar `inputs`) into one tensor per signature input.
pub fn decode_named_inputs(
    raw: &str,
    signature: &SignatureSpec,
    coercion: Coercion,
) -> Result<Vec<Tensor>, CodecError> {
    decode_inputs(Some(raw), signature, coercion)
}

/// One signature input being filled.
struct Column<'s> {
    spec: &'s TensorSpec,
    data: TensorData,
    shape: ShapeTracker,
    coercion: Coercion,
    /// Set by a visitor before it fails, so the caller reports a clean message
    /// instead of serde's position-suffixed one.
    error: Option<CodecError>,
}

impl<'s> Column<'s> {
    fn new(spec: &'s TensorSpec) -> Result<Self, CodecError> {
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

    fn numpy(&self) -> bool {
        self.coercion == Coercion::Numpy
    }

    fn fail<E: de::Error>(&mut self, message: String) -> E {
        let error = CodecError::invalid(format!("input '{}': {message}", self.spec.key));
        let text = error.to_string();
        self.error = Some(error);
        E::custom(text)
    }

    fn type_error<E: de::Error>(&mut self, shown: &dyn fmt::Display, json_type: &str) -> E {
        let message = format!(
            "JSON Value: {shown} Type: {json_type} is not of expected type: {}",
            self.spec.dtype.short_name()
        );
        self.fail(message)
    }

    fn scalar<E: de::Error>(&mut self, depth: usize) -> Result<(), E> {
        self.shape.scalar(depth).map_err(|m| self.fail(m))
    }

    fn push_f64<E: de::Error>(&mut self, v: f64) -> Result<(), E> {
        let numpy = self.numpy();
        match &mut self.data {
            TensorData::Float(buf) => buf.push(v as f32),
            TensorData::Double(buf) => buf.push(v),
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

    fn push_i64<E: de::Error>(&mut self, v: i64) -> Result<(), E> {
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

    fn push_u64<E: de::Error>(&mut self, v: u64) -> Result<(), E> {
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
            (_, Err(_)) => Err(self.out_of_range(&v)),
        }
    }

    fn out_of_range<E: de::Error>(&mut self, v: &dyn fmt::Display) -> E {
        let message = format!("value {v} is out of range for {}", self.spec.dtype.short_name());
        self.fail(message)
    }

    fn push_bool<E: de::Error>(&mut self, v: bool) -> Result<(), E> {
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

    fn push_str<E: de::Error>(&mut self, v: &str) -> Result<(), E> {
        let numpy = self.numpy();
        match &mut self.data {
            TensorData::String(buf) => buf.push(v.as_bytes().to_vec()),
            // JSON has no token for these; TF Serving accepts them bare, we accept them quoted too.
            TensorData::Float(_) | TensorData::Double(_) if non_finite(v).is_some() => {
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
    fn push_numeric_text<E: de::Error>(&mut self, v: &str) -> Result<(), E> {
        let text = v.trim();
        let floating = matches!(self.data, TensorData::Float(_) | TensorData::Double(_));
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

    fn push_b64<E: de::Error>(&mut self, encoded: &str) -> Result<(), E> {
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
    fn read_b64<'de, A: MapAccess<'de>>(&mut self, map: &mut A, depth: usize) -> Result<(), A::Error> {
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
    fn finish(self) -> Result<Tensor, CodecError> {
        Ok(Tensor::new(self.shape.finish(), self.data))
    }
}

fn non_finite(v: &str) -> Option<f64> {
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
struct ValueSeed<'c, 's> {
    column: &'c mut Column<'s>,
    depth: usize,
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
            .map_err(|m| column.fail::<A::Error>(m))?;
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
        column.shape.close_list(self.depth, len).map_err(|m| column.fail(m))
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

fn first_column_error(columns: &mut [Column<'_>], fallback: serde_json::Error) -> CodecError {
    columns
        .iter_mut()
        .find_map(|c| c.error.take())
        .unwrap_or_else(|| CodecError::json_parse(&fallback))
}

fn new_columns(signature: &SignatureSpec) -> Result<Vec<Column<'_>>, CodecError> {
    if signature.inputs.is_empty() {
        return Err(CodecError::invalid(format!(
            "signature '{}' has no inputs",
            signature.name
        )));
    }
    signature.inputs.iter().map(Column::new).collect()
}

fn decode_instances(raw: Option<&str>, signature: &SignatureSpec) -> Result<Vec<Tensor>, CodecError> {
    let raw = raw.unwrap_or("null");
    let mut columns = new_columns(signature)?;
    let mut deserializer = serde_json::Deserializer::from_str(raw);
    let mut layout = Layout::default();
    let rows = InstancesSeed {
        columns: &mut columns,
        signature,
        layout: &mut layout,
    }
    .deserialize(&mut deserializer)
    .map_err(|e| {
        layout
            .error
            .take()
            .unwrap_or_else(|| first_column_error(&mut columns, e))
    })?;
    if rows == 0 {
        return Err(CodecError::invalid("No values in 'instances' array"));
    }
    columns
        .into_iter()
        .map(|mut column| {
            column.shape.close_list(0, rows).map_err(CodecError::invalid)?;
            column.finish()
        })
        .collect()
}

fn decode_inputs(raw: Option<&str>, signature: &SignatureSpec, coercion: Coercion) -> Result<Vec<Tensor>, CodecError> {
    let raw = raw.unwrap_or("null");
    let mut columns = new_columns(signature)?;
    for column in &mut columns {
        column.coercion = coercion;
    }
    let mut deserializer = serde_json::Deserializer::from_str(raw);
    let mut seen = vec![false; columns.len()];
    InputsSeed {
        columns: &mut columns,
        seen: &mut seen,
    }
    .deserialize(&mut deserializer)
    .map_err(|e| first_column_error(&mut columns, e))?;
    if let Some(missing) = seen.iter().position(|s| !s) {
        return Err(CodecError::invalid(format!(
            "Missing named input: {} in 'inputs' object",
            signature.inputs[missing].key
        )));
    }
    columns.into_iter().map(Column::finish).collect()
}

/// The `instances` list: one element per example.
struct InstancesSeed<'c, 's> {
    columns: &'c mut [Column<'s>],
    signature: &'s SignatureSpec,
    layout: &'c mut Layout,
}

/// Whether `instances` holds objects keyed by input name or bare values and
/// lists: the first element decides, and TF Serving refuses a mix.
#[derive(Default)]
struct Layout {
    objects: Option<bool>,
    index: usize,
    error: Option<CodecError>,
}

impl Layout {
    fn element<E: de::Error>(&mut self, is_object: bool) -> Result<(), E> {
        let expected = *self.objects.get_or_insert(is_object);
        if expected == is_object {
            return Ok(());
        }
        let message = if expected {
            format!("Expecting object but got list at item {} of input list", self.index)
        } else {
            format!(
                "Expecting value/list but got object at item {} of input list",
                self.index
            )
        };
        self.error = Some(CodecError::invalid(message.clone()));
        Err(E::custom(message))
    }
}

impl<'de> DeserializeSeed<'de> for InstancesSeed<'_, '_> {
    type Value = usize;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<usize, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for InstancesSeed<'_, '_> {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("'instances' to be a list/array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
        let mut index = 0;
        loop {
            self.layout.index = index;
            let seed = InstanceSeed {
                columns: &mut *self.columns,
                signature: self.signature,
                layout: &mut *self.layout,
            };
            match seq.next_element_seed(seed) {
                Ok(Some(())) => index += 1,
                Ok(None) => return Ok(index),
                Err(err) => {
                    if let Some(column) = self.columns.iter_mut().find(|c| c.error.is_some()) {
                        let inner = column.error.take().map(|e| e.to_string()).unwrap_or_default();
                        column.error = Some(CodecError::invalid(format!(
                            "Failed to process element: {index} of 'instances' list. Error: {inner}"
                        )));
                    }
                    return Err(err);
                }
            }
        }
    }
}

/// One element of `instances`: a bare value (single-input signatures) or an
/// object keyed by input name.
struct InstanceSeed<'c, 's> {
    columns: &'c mut [Column<'s>],
    signature: &'s SignatureSpec,
    layout: &'c mut Layout,
}

impl<'s> InstanceSeed<'_, 's> {
    fn single<E: de::Error>(&mut self) -> Result<ValueSeed<'_, 's>, E> {
        self.layout.element(false)?;
        if self.columns.len() != 1 {
            let message = format!(
                "instances is a plain list, but expecting list of objects as multiple input tensors required as per tensorinfo_map (inputs: {})",
                self.signature.input_names()
            );
            return Err(self.columns[0].fail(message));
        }
        Ok(ValueSeed {
            column: &mut self.columns[0],
            depth: 1,
        })
    }
}

impl<'de> DeserializeSeed<'de> for InstanceSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

macro_rules! forward_to_single {
    ($($method:ident($ty:ty)),*) => {$(
        fn $method<E: de::Error>(mut self, v: $ty) -> Result<(), E> {
            self.single()?.$method(v)
        }
    )*};
}

impl<'de> Visitor<'de> for InstanceSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an instance: a value, a list, or an object keyed by input name")
    }

    forward_to_single!(
        visit_bool(bool),
        visit_i64(i64),
        visit_u64(u64),
        visit_f64(f64),
        visit_str(&str)
    );

    fn visit_unit<E: de::Error>(mut self) -> Result<(), E> {
        self.single()?.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, seq: A) -> Result<(), A::Error> {
        self.single()?.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = vec![false; self.columns.len()];
        let mut first = true;
        while let Some(key) = map.next_key::<String>()? {
            if first && key == "b64" && self.columns.len() == 1 {
                // A binary string value for the only input, not a named-input object.
                self.layout.element(false)?;
                return self.columns[0].read_b64(&mut map, 1);
            }
            if first {
                self.layout.element(true)?;
            }
            first = false;
            let Some(position) = self.signature.input_index(&key) else {
                let names = self.signature.input_names();
                return Err(self.columns[0].fail(format!(
                    "JSON object has key '{key}', but its keys must be equal to: {names}"
                )));
            };
            if std::mem::replace(&mut seen[position], true) {
                return Err(self.columns[position].fail(format!("duplicate key '{key}'")));
            }
            map.next_value_seed(ValueSeed {
                column: &mut self.columns[position],
                depth: 1,
            })?;
        }
        if let Some(missing) = seen.iter().position(|s| !s) {
            let names = self.signature.input_names();
            return Err(self.columns[missing].fail(format!(
                "JSON object is missing this input; its keys must be equal to: {names}"
            )));
        }
        Ok(())
    }
}

/// The columnar `inputs` value: a bare value (single input) or an object keyed by input name.
struct InputsSeed<'c, 's> {
    columns: &'c mut [Column<'s>],
    seen: &'c mut [bool],
}

impl<'s> InputsSeed<'_, 's> {
    fn single<E: de::Error>(&mut self) -> Result<ValueSeed<'_, 's>, E> {
        if self.columns.len() != 1 {
            let message =
                "'inputs' is a plain value, but the signature has several inputs; use an object keyed by input name"
                    .to_string();
            return Err(self.columns[0].fail(message));
        }
        self.seen[0] = true;
        Ok(ValueSeed {
            column: &mut self.columns[0],
            depth: 0,
        })
    }
}

impl<'de> DeserializeSeed<'de> for InputsSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for InputsSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("'inputs' to be a value, a list, or an object keyed by input name")
    }

    forward_to_single!(
        visit_bool(bool),
        visit_i64(i64),
        visit_u64(u64),
        visit_f64(f64),
        visit_str(&str)
    );

    fn visit_unit<E: de::Error>(mut self) -> Result<(), E> {
        self.single()?.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, seq: A) -> Result<(), A::Error> {
        self.single()?.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut first = true;
        while let Some(key) = map.next_key::<String>()? {
            if first && key == "b64" && self.columns.len() == 1 && self.columns[0].spec.key != "b64" {
                self.seen[0] = true;
                return self.columns[0].read_b64(&mut map, 0);
            }
            first = false;
            let Some(position) = self.columns.iter().position(|c| c.spec.key == key) else {
                let names: Vec<&str> = self.columns.iter().map(|c| c.spec.key.as_str()).collect();
                return Err(self.columns[0].fail(format!(
                    "'inputs' has key '{key}', which is not an input of the signature (inputs: {})",
                    names.join(",")
                )));
            };
            if std::mem::replace(&mut self.seen[position], true) {
                return Err(self.columns[position].fail(format!("duplicate key '{key}'")));
            }
            map.next_value_seed(ValueSeed {
                column: &mut self.columns[position],
                depth: 0,
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;

    fn spec(key: &str, dtype: DType, shape: Option<Vec<i64>>) -> TensorSpec {
        TensorSpec {
            key: key.into(),
            tensor_name: format!("{key}:0"),
            dtype,
            shape,
        }
    }

    fn signature(inputs: Vec<TensorSpec>) -> SignatureSpec {
        let mut sig = SignatureSpec {
            name: "serving_default".into(),
            method_name: crate::signature::PREDICT_METHOD.into(),
            inputs,
            outputs: vec![],
            base64_inputs: vec![],
        };
        sig.sort();
        sig
    }

    fn decode(body: &str, sig: &SignatureSpec) -> Result<Vec<Tensor>, CodecError> {
        PredictEnvelope::parse(body.as_bytes())?.decode(sig)
    }

    #[test]
    fn row_format_single_input() {
        let sig = signature(vec![spec("x", DType::Float, Some(vec![-1]))]);
        let out = decode(r#"{"instances": [1.0, 2, 5.5]}"#, &sig).unwrap();
        assert_eq!(out[0], Tensor::new(vec![3], TensorData::Float(vec![1.0, 2.0, 5.5])));
        let named = decode(r#"{"instances": [{"x": 1.0}, {"x": 2}]}"#, &sig).unwrap();
        assert_eq!(named[0].shape, vec![2]);
    }

    #[test]
    fn row_format_multiple_inputs() {
        let sig = signature(vec![
            spec("a", DType::Float, Some(vec![-1, 2])),
            spec("b", DType::Int64, Some(vec![-1])),
            spec("s", DType::String, Some(vec![-1])),
        ]);
        let body =
            r#"{"instances": [{"a": [1, 2], "b": 3, "s": "x"}, {"s": {"b64": "aGk="}, "b": -4, "a": [3.5, 4]}]}"#;
        let out = decode(body, &sig).unwrap();
        assert_eq!(
            out[0],
            Tensor::new(vec![2, 2], TensorData::Float(vec![1.0, 2.0, 3.5, 4.0]))
        );
        assert_eq!(out[1], Tensor::new(vec![2], TensorData::Int64(vec![3, -4])));
        assert_eq!(out[2].data, TensorData::String(vec![b"x".to_vec(), b"hi".to_vec()]));
    }

    #[test]
    fn row_format_errors_name_the_input_and_element() {
        let sig = signature(vec![spec("a", DType::Float, None), spec("b", DType::Int64, None)]);
        let err = decode(r#"{"instances": [[1, 2]]}"#, &sig).unwrap_err().to_string();
        assert!(err.contains("plain list"), "{err}");
        let err = decode(r#"{"instances": [{"a": 1, "b": 2}, {"a": 1, "b": 2.5}]}"#, &sig)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("element: 1") && err.contains("input 'b'") && err.contains("int64"),
            "{err}"
        );
        let err = decode(r#"{"instances": [{"a": 1}]}"#, &sig).unwrap_err().to_string();
        assert!(err.contains("input 'b'") && err.contains("a,b"), "{err}");
        let err = decode(r#"{"instances": [{"a": 1, "b": 1, "c": 1}]}"#, &sig)
            .unwrap_err()
            .to_string();
        assert!(err.contains("'c'"), "{err}");
    }

    #[test]
    fn instances_must_not_mix_objects_and_values() {
        let sig = signature(vec![spec("x", DType::Float, None)]);
        let err = decode(r#"{"instances": [{"x": 1}, [2]]}"#, &sig)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "Expecting object but got list at item 1 of input list");
        let err = decode(r#"{"instances": [[2], {"x": 1}]}"#, &sig)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "Expecting value/list but got object at item 1 of input list");
        let strings = signature(vec![spec("s", DType::String, None)]);
        let out = decode(r#"{"instances": [{"b64": "aGk="}, "x"]}"#, &strings).unwrap();
        assert_eq!(out[0].data, TensorData::String(vec![b"hi".to_vec(), b"x".to_vec()]));
    }

    #[test]
    fn ragged_instances_are_rejected() {
        let sig = signature(vec![spec("x", DType::Float, None)]);
        let err = decode(r#"{"instances": [[1, 2], [3]]}"#, &sig).unwrap_err().to_string();
        assert!(err.contains("input 'x'") && err.contains("ragged"), "{err}");
        let err = decode(r#"{"instances": []}"#, &sig).unwrap_err().to_string();
        assert!(err.contains("No values"), "{err}");
    }

    #[test]
    fn columnar_format() {
        let sig = signature(vec![
            spec("a", DType::Double, Some(vec![-1, 2])),
            spec("flag", DType::Bool, Some(vec![-1])),
        ]);
        let out = decode(r#"{"inputs": {"a": [[1, 2]], "flag": [true]}}"#, &sig).unwrap();
        assert_eq!(out[0].data, TensorData::Double(vec![1.0, 2.0]));
        assert_eq!(out[1].data, TensorData::Bool(vec![true]));
        let err = decode(r#"{"inputs": {"a": [[1, 2]]}}"#, &sig).unwrap_err().to_string();
        assert!(err.contains("Missing named input: flag"), "{err}");
        let single = signature(vec![spec("x", DType::Float, None)]);
        let out = decode(r#"{"inputs": 3.5}"#, &single).unwrap();
        assert_eq!(out[0], Tensor::new(vec![], TensorData::Float(vec![3.5])));
    }

    #[test]
    fn declared_shapes_do_not_gate_requests() {
        let sig = signature(vec![spec("x", DType::Float, Some(vec![-1, 1]))]);
        let out = decode(r#"{"instances": [1.0, 2.0, 5.0]}"#, &sig).unwrap();
        assert_eq!(out[0].shape, vec![3]);
        let shapeless = signature(vec![spec("x", DType::Float, Some(vec![]))]);
        let out = decode(r#"{"inputs": [[1.0], [2.0]]}"#, &shapeless).unwrap();
        assert_eq!(out[0].shape, vec![2, 1]);
        let out = decode(r#"{"inputs": 3.5}"#, &shapeless).unwrap();
        assert_eq!(out[0], Tensor::new(vec![], TensorData::Float(vec![3.5])));
    }

    #[test]
    fn dtype_rules_follow_tf_serving() {
        let ints = signature(vec![spec("x", DType::Int32, None)]);
        assert!(decode(r#"{"instances": [1.0]}"#, &ints).is_err());
        let err = decode(r#"{"instances": [3000000000]}"#, &ints).unwrap_err().to_string();
        assert!(err.contains("out of range for int32"), "{err}");
        let floats = signature(vec![spec("x", DType::Float, None)]);
        let err = decode(r#"{"instances": ["]["]}"#, &floats).unwrap_err().to_string();
        assert!(
            err.contains(r#"JSON Value: "][" Type: String is not of expected type: float"#),
            "{err}"
        );
        let out = decode(r#"{"instances": ["NaN", "-Infinity"]}"#, &floats).unwrap();
        match &out[0].data {
            TensorData::Float(v) => assert!(v[0].is_nan() && v[1] == f32::NEG_INFINITY),
            other => panic!("{other:?}"),
        }
        let half = signature(vec![spec("x", DType::Half, None)]);
        assert!(matches!(
            decode(r#"{"instances": [1]}"#, &half),
            Err(CodecError::Unimplemented(_))
        ));
    }

    #[test]
    fn numpy_coercion_converts_as_stfs_does() {
        let sig = signature(vec![
            spec("b", DType::Bool, None),
            spec("f", DType::Float, None),
            spec("i", DType::Int32, None),
        ]);
        let body = r#"{"i": [[1.0], [2.9], [-3.5]], "f": [true, "2.5", 3], "b": [0, 1.5, true]}"#;
        let out = decode_named_inputs(body, &sig, Coercion::Numpy).unwrap();
        assert_eq!(out[0].data, TensorData::Bool(vec![false, true, true]));
        assert_eq!(out[1].data, TensorData::Float(vec![1.0, 2.5, 3.0]));
        assert_eq!(out[2], Tensor::new(vec![3, 1], TensorData::Int32(vec![1, 2, -3])));
        assert!(decode_named_inputs(body, &sig, Coercion::Strict).is_err());
        let ints = signature(vec![spec("i", DType::Int32, None)]);
        for (body, wanted) in [
            (r#"{"i": [NaN]}"#, "cannot convert float NaN"),
            (r#"{"i": [1e12]}"#, "out of range for int32"),
            (r#"{"i": ["1.5"]}"#, "invalid literal for int()"),
        ] {
            let body = super::super::nonfinite::quote_bare_tokens(body.as_bytes());
            let raw = std::str::from_utf8(&body).unwrap();
            let err = decode_named_inputs(raw, &ints, Coercion::Numpy)
                .unwrap_err()
                .to_string();
            assert!(err.contains(wanted), "{err}");
        }
    }

    #[test]
    fn envelope_errors() {
        let sig = signature(vec![spec("x", DType::Float, None)]);
        assert!(decode(r#"{"instances": [1], "inputs": [1]}"#, &sig).is_err());
        assert!(decode(r#"{"signature_name": "s"}"#, &sig)
            .unwrap_err()
            .to_string()
            .contains("Missing"));
        let err = decode(r#"{"instances": [1,"#, &sig).unwrap_err().to_string();
        assert!(err.starts_with("JSON Parse error"), "{err}");
    }
}
