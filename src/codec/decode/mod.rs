//! Decodes TF Serving predict request bodies (`instances` rows or columnar
//! `inputs`) straight into typed tensor buffers, checked against a signature.
//!
//! The envelope is parsed first with the tensor payload kept as a raw slice, so
//! the signature (whose name may follow the payload in the object) is known
//! before any number is converted; the payload is then streamed once through
//! serde visitors that append to `TensorData` vectors and infer the shape.

mod column;
mod csv_body;
mod seeds;
#[cfg(test)]
mod tests;

use serde::de::DeserializeSeed;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::CodecError;
use crate::signature::SignatureSpec;
use crate::tensor::Tensor;
pub use column::decode_base64;
use column::Column;
pub use csv_body::decode_csv;
use seeds::{name_failed_element, InputsSeed, InstanceSeed, InstancesSeed, Layout};

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
    finish_rows(columns, rows)
}

/// Decodes a JSON list of instances, as TF Serving's `instances` value.
pub fn decode_instance_list(raw: &str, signature: &SignatureSpec) -> Result<Vec<Tensor>, CodecError> {
    decode_instances(Some(raw), signature)
}

/// Decodes instances given one JSON value each (SageMaker's JSON Lines, or a
/// lone JSON value), exactly as the elements of an `instances` list.
pub fn decode_instance_values<'v>(
    values: impl IntoIterator<Item = &'v str>,
    signature: &SignatureSpec,
) -> Result<Vec<Tensor>, CodecError> {
    let mut columns = new_columns(signature)?;
    let mut layout = Layout::default();
    let mut rows = 0;
    for value in values {
        layout.index = rows;
        let mut deserializer = serde_json::Deserializer::from_str(value);
        let decoded = InstanceSeed {
            columns: &mut columns,
            signature,
            layout: &mut layout,
        }
        .deserialize(&mut deserializer)
        .and_then(|()| deserializer.end());
        if let Err(error) = decoded {
            name_failed_element(&mut columns, rows);
            return Err(layout
                .error
                .take()
                .unwrap_or_else(|| first_column_error(&mut columns, error)));
        }
        rows += 1;
    }
    finish_rows(columns, rows)
}

/// The tensors of `rows` instances: each column's outer dimension closed.
fn finish_rows(columns: Vec<Column<'_>>, rows: usize) -> Result<Vec<Tensor>, CodecError> {
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
