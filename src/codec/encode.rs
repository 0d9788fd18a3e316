//! Writes output tensors as TF Serving JSON responses straight into a byte
//! buffer: floats in shortest round-trip form, `_bytes` outputs as base64.

use base64::Engine;

use super::{CodecError, RequestFormat};
use crate::tensor::{Tensor, TensorData};

/// One named output tensor, as produced by a run.
pub struct NamedOutput<'a> {
    pub key: &'a str,
    pub tensor: &'a Tensor,
}

/// Encodes a predict response in the layout the request used.
pub fn predict_response(format: RequestFormat, outputs: &[NamedOutput<'_>]) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(estimate_size(outputs));
    match format {
        RequestFormat::Columnar => {
            out.extend_from_slice(b"{\"outputs\":");
            match outputs {
                [single] => write_tensor(&mut out, single),
                _ => write_named(&mut out, outputs),
            }
            out.push(b'}');
        }
        RequestFormat::Named => write_named(&mut out, outputs),
        RequestFormat::Row => {
            let rows = common_batch_size(outputs)?;
            out.extend_from_slice(b"{\"predictions\":[");
            for row in 0..rows {
                if row > 0 {
                    out.push(b',');
                }
                match outputs {
                    [single] => write_row(&mut out, single, row),
                    _ => {
                        out.push(b'{');
                        for (i, output) in outputs.iter().enumerate() {
                            if i > 0 {
                                out.push(b',');
                            }
                            write_str(&mut out, output.key);
                            out.push(b':');
                            write_row(&mut out, output, row);
                        }
                        out.push(b'}');
                    }
                }
            }
            out.extend_from_slice(b"]}");
        }
    }
    Ok(out)
}

/// `{"name": value, ...}` for every output.
fn write_named(out: &mut Vec<u8>, outputs: &[NamedOutput<'_>]) {
    out.push(b'{');
    for (i, output) in outputs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, output.key);
        out.push(b':');
        write_tensor(out, output);
    }
    out.push(b'}');
}

/// Row responses need every output to share its 0th dimension, as TF Serving requires.
fn common_batch_size(outputs: &[NamedOutput<'_>]) -> Result<usize, CodecError> {
    let mut batch = None;
    for output in outputs {
        let Some(size) = output.tensor.batch_size() else {
            return Err(CodecError::OutputNoShape(output.key.to_string()));
        };
        match batch {
            None => batch = Some(size),
            Some(expected) if expected != size => {
                return Err(CodecError::OutputBatch {
                    name: output.key.to_string(),
                    size,
                    expected,
                })
            }
            Some(_) => {}
        }
    }
    Ok(batch.unwrap_or(0))
}

fn estimate_size(outputs: &[NamedOutput<'_>]) -> usize {
    64 + outputs.iter().map(|o| o.tensor.data.len() * 12).sum::<usize>()
}

fn write_tensor(out: &mut Vec<u8>, output: &NamedOutput<'_>) {
    let binary = output.key.ends_with("_bytes");
    write_nested(out, &output.tensor.data, binary, &output.tensor.shape, 0);
}

fn write_row(out: &mut Vec<u8>, output: &NamedOutput<'_>, row: usize) {
    let binary = output.key.ends_with("_bytes");
    let row_len = output.tensor.row_len();
    write_nested(
        out,
        &output.tensor.data,
        binary,
        &output.tensor.shape[1..],
        row * row_len,
    );
}

/// Writes the elements starting at `offset` as nested lists of `dims`.
fn write_nested(out: &mut Vec<u8>, data: &TensorData, binary: bool, dims: &[usize], offset: usize) {
    match dims.split_first() {
        None => write_element(out, data, binary, offset),
        Some((&len, inner)) => {
            let stride: usize = inner.iter().product();
            out.push(b'[');
            for i in 0..len {
                if i > 0 {
                    out.push(b',');
                }
                write_nested(out, data, binary, inner, offset + i * stride);
            }
            out.push(b']');
        }
    }
}

fn write_element(out: &mut Vec<u8>, data: &TensorData, binary: bool, i: usize) {
    let mut ints = itoa::Buffer::new();
    match data {
        TensorData::Float(v) => write_f32(out, v[i]),
        TensorData::Double(v) => write_f64(out, v[i]),
        TensorData::Half(v) => write_f32(out, v[i].to_f32()),
        TensorData::Int8(v) => out.extend_from_slice(ints.format(v[i]).as_bytes()),
        TensorData::Int16(v) => out.extend_from_slice(ints.format(v[i]).as_bytes()),
        TensorData::Int32(v) => out.extend_from_slice(ints.format(v[i]).as_bytes()),
        TensorData::Int64(v) => out.extend_from_slice(ints.format(v[i]).as_bytes()),
        TensorData::UInt8(v) => out.extend_from_slice(ints.format(v[i]).as_bytes()),
        TensorData::UInt16(v) => out.extend_from_slice(ints.format(v[i]).as_bytes()),
        TensorData::UInt32(v) => out.extend_from_slice(ints.format(v[i]).as_bytes()),
        TensorData::UInt64(v) => out.extend_from_slice(ints.format(v[i]).as_bytes()),
        TensorData::Bool(v) => out.extend_from_slice(if v[i] { b"true" } else { b"false" }),
        TensorData::String(v) => write_bytes(out, &v[i], binary),
    }
}

/// Strings go out as JSON strings; outputs named `*_bytes`, and any value that is
/// not UTF-8 (JSON strings cannot hold raw bytes), as `{"b64": ...}`.
pub fn write_bytes(out: &mut Vec<u8>, bytes: &[u8], binary: bool) {
    match std::str::from_utf8(bytes) {
        Ok(text) if !binary => write_str(out, text),
        _ => {
            out.extend_from_slice(b"{\"b64\":\"");
            let start = out.len();
            let encoded_len = base64::encoded_len(bytes.len(), true).unwrap_or(0);
            out.resize(start + encoded_len, 0);
            let written = base64::engine::general_purpose::STANDARD
                .encode_slice(bytes, &mut out[start..])
                .unwrap_or(0);
            out.truncate(start + written);
            out.extend_from_slice(b"\"}");
        }
    }
}

pub fn write_str(out: &mut Vec<u8>, text: &str) {
    // Writing a &str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

/// Shortest round-trip form; whole numbers keep a `.0`; non-finite values as
/// TF Serving writes them (`NaN`, `Infinity`, `-Infinity`).
pub fn write_f32(out: &mut Vec<u8>, v: f32) {
    if v.is_finite() {
        out.extend_from_slice(ryu::Buffer::new().format_finite(v).as_bytes());
    } else {
        write_non_finite(out, v.is_nan(), v.is_sign_negative());
    }
}

pub fn write_f64(out: &mut Vec<u8>, v: f64) {
    if v.is_finite() {
        out.extend_from_slice(ryu::Buffer::new().format_finite(v).as_bytes());
    } else {
        write_non_finite(out, v.is_nan(), v.is_sign_negative());
    }
}

fn write_non_finite(out: &mut Vec<u8>, nan: bool, negative: bool) {
    out.extend_from_slice(match (nan, negative) {
        (true, _) => b"NaN".as_slice(),
        (false, false) => b"Infinity".as_slice(),
        (false, true) => b"-Infinity".as_slice(),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(format: RequestFormat, outputs: &[NamedOutput<'_>]) -> String {
        String::from_utf8(predict_response(format, outputs).unwrap()).unwrap()
    }

    #[test]
    fn non_finite_floats_are_written_as_tf_serving_writes_them() {
        let y = Tensor::new(
            vec![3],
            TensorData::Float(vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY]),
        );
        let outputs = [NamedOutput { key: "y", tensor: &y }];
        assert_eq!(
            text(RequestFormat::Row, &outputs),
            r#"{"predictions":[NaN,Infinity,-Infinity]}"#
        );
    }

    #[test]
    fn single_output_rows_and_columns() {
        let y = Tensor::new(vec![3], TensorData::Float(vec![3.5, 4.0, 5.5]));
        let outputs = [NamedOutput { key: "y", tensor: &y }];
        assert_eq!(text(RequestFormat::Row, &outputs), r#"{"predictions":[3.5,4.0,5.5]}"#);
        assert_eq!(text(RequestFormat::Columnar, &outputs), r#"{"outputs":[3.5,4.0,5.5]}"#);
    }

    #[test]
    fn several_outputs_per_row() {
        let a = Tensor::new(vec![2, 2], TensorData::Int64(vec![1, 2, 3, 4]));
        let b = Tensor::new(vec![2], TensorData::String(vec![b"x".to_vec(), vec![0xff]]));
        let outputs = [
            NamedOutput { key: "a", tensor: &a },
            NamedOutput { key: "b", tensor: &b },
        ];
        assert_eq!(
            text(RequestFormat::Row, &outputs),
            r#"{"predictions":[{"a":[1,2],"b":"x"},{"a":[3,4],"b":{"b64":"/w=="}}]}"#
        );
        assert_eq!(
            text(RequestFormat::Columnar, &outputs),
            r#"{"outputs":{"a":[[1,2],[3,4]],"b":["x",{"b64":"/w=="}]}}"#
        );
    }

    #[test]
    fn bytes_suffix_outputs_are_base64() {
        let t = Tensor::new(vec![1], TensorData::String(vec![b"hi".to_vec()]));
        let outputs = [NamedOutput {
            key: "image_bytes",
            tensor: &t,
        }];
        assert_eq!(
            text(RequestFormat::Row, &outputs),
            r#"{"predictions":[{"b64":"aGk="}]}"#
        );
    }

    #[test]
    fn floats_are_shortest_round_trip() {
        let t = Tensor::new(
            vec![5],
            TensorData::Float(vec![0.1, 1e-7, f32::NAN, f32::NEG_INFINITY, 16777216.0]),
        );
        let outputs = [NamedOutput { key: "y", tensor: &t }];
        assert_eq!(
            text(RequestFormat::Columnar, &outputs),
            r#"{"outputs":[0.1,1e-7,NaN,-Infinity,16777216.0]}"#
        );
    }

    #[test]
    fn row_responses_need_a_common_batch_dimension() {
        let a = Tensor::new(vec![2], TensorData::Int32(vec![1, 2]));
        let b = Tensor::new(vec![3], TensorData::Int32(vec![1, 2, 3]));
        let scalar = Tensor::new(vec![], TensorData::Int32(vec![1]));
        let mixed = [
            NamedOutput { key: "a", tensor: &a },
            NamedOutput { key: "b", tensor: &b },
        ];
        assert!(predict_response(RequestFormat::Row, &mixed).is_err());
        let scalar_out = [NamedOutput {
            key: "s",
            tensor: &scalar,
        }];
        assert!(predict_response(RequestFormat::Row, &scalar_out).is_err());
        assert_eq!(text(RequestFormat::Columnar, &scalar_out), r#"{"outputs":1}"#);
    }
}
