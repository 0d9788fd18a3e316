//! Decodes TF Serving predict request bodies (`instances` rows or columnar
//! `inputs`) straight into typed tensor buffers, checked against a signature.
//!
//! The envelope is read first with the tensor payload kept as a raw slice, so
//! the signature (whose name may follow the payload in the object) is known
//! before any number is converted. Plain numeric payloads are then scanned
//! straight into their buffers (`dense`); the rest stream once through serde
//! visitors that append to `TensorData` vectors and infer the shape.

mod column;
mod csv_body;
mod dense;
mod envelope;
mod seeds;
#[cfg(test)]
mod tests;

use serde::de::DeserializeSeed;

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
pub struct PredictEnvelope<'a> {
    pub signature_name: Option<String>,
    payload: Payload<'a>,
}

/// Where the payload lies, and how sure that is.
enum Payload<'a> {
    /// serde_json parsed the body: the payload is valid JSON.
    Parsed {
        instances: Option<&'a str>,
        inputs: Option<&'a str>,
    },
    /// Scanned, the payload unchecked (see `envelope::scan`). Only the dense
    /// decoder reads it; a payload it declines is decoded from serde_json's
    /// parse of `body`, so every error reads as it words it for the whole body.
    Scanned {
        instances: Option<&'a [u8]>,
        inputs: Option<&'a [u8]>,
        body: &'a [u8],
    },
}

impl<'a> PredictEnvelope<'a> {
    pub fn parse(body: &'a [u8]) -> Result<Self, CodecError> {
        if let Some(parts) = envelope::scan(body) {
            return Ok(PredictEnvelope {
                signature_name: parts.signature_name,
                payload: Payload::Scanned {
                    instances: parts.instances,
                    inputs: parts.inputs,
                    body,
                },
            });
        }
        Self::parsed(body)
    }

    fn parsed(body: &'a [u8]) -> Result<Self, CodecError> {
        let parts = envelope::parse(body)?;
        Ok(PredictEnvelope {
            signature_name: parts.signature_name,
            payload: Payload::Parsed {
                instances: parts.instances,
                inputs: parts.inputs,
            },
        })
    }

    pub fn format(&self) -> Result<RequestFormat, CodecError> {
        let (instances, inputs) = match self.payload {
            Payload::Parsed { instances, inputs } => (instances.is_some(), inputs.is_some()),
            Payload::Scanned { instances, inputs, .. } => (instances.is_some(), inputs.is_some()),
        };
        match (instances, inputs) {
            (true, true) => Err(CodecError::BothLayouts),
            (true, false) => Ok(RequestFormat::Row),
            (false, true) => Ok(RequestFormat::Columnar),
            (false, false) => Err(CodecError::NoLayout),
        }
    }

    /// Decodes the payload into one tensor per signature input, in signature order.
    pub fn decode(&self, signature: &SignatureSpec) -> Result<Vec<Tensor>, CodecError> {
        match self.payload {
            Payload::Scanned {
                instances,
                inputs,
                body,
            } => {
                let dense = match (instances, inputs) {
                    (Some(raw), None) => dense::instances(raw, signature),
                    (None, Some(raw)) => dense::inputs(raw, signature),
                    _ => None,
                };
                match dense {
                    Some(tensors) => Ok(tensors),
                    None => Self::parsed(body)?.decode(signature),
                }
            }
            Payload::Parsed { instances, inputs } => match self.format()? {
                RequestFormat::Row => decode_instances(instances, signature),
                // `format()` only yields the two TF Serving layouts.
                RequestFormat::Columnar | RequestFormat::Named => decode_inputs(inputs, signature, Coercion::Strict),
            },
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
        return Err(CodecError::NoSignatureInputs(signature.name.clone()));
    }
    signature.inputs.iter().map(Column::new).collect()
}

fn decode_instances(raw: Option<&str>, signature: &SignatureSpec) -> Result<Vec<Tensor>, CodecError> {
    let raw = raw.unwrap_or("null");
    if let Some(tensors) = dense::instances(raw.as_bytes(), signature) {
        return Ok(tensors);
    }
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
        return Err(CodecError::NoInstances);
    }
    columns
        .into_iter()
        .map(|mut column| {
            column.shape.close_list(0, rows)?;
            column.finish()
        })
        .collect()
}

fn decode_inputs(raw: Option<&str>, signature: &SignatureSpec, coercion: Coercion) -> Result<Vec<Tensor>, CodecError> {
    let raw = raw.unwrap_or("null");
    // Plain numbers read the same under either coercion.
    if let Some(tensors) = dense::inputs(raw.as_bytes(), signature) {
        return Ok(tensors);
    }
    decode_inputs_with_serde(raw, signature, coercion)
}

fn decode_inputs_with_serde(
    raw: &str,
    signature: &SignatureSpec,
    coercion: Coercion,
) -> Result<Vec<Tensor>, CodecError> {
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
        return Err(CodecError::MissingInput(signature.inputs[missing].key.clone()));
    }
    columns.into_iter().map(Column::finish).collect()
}
