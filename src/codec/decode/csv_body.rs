//! SageMaker `text/csv` bodies decoded straight into a single-input
//! signature's tensor, by the container's rules: one instance per line (a
//! line of one field is a scalar, of several a list), or every field an
//! instance when the input takes one scalar per instance; numbers stay
//! numbers and other fields are strings (RFC 4180 quoting). Values follow
//! the same dtype rules as TF Serving JSON.

use super::super::CodecError;
use super::column::Column;
use crate::signature::SignatureSpec;
use crate::tensor::Tensor;

/// One tensor for the signature's only input. `scalar_instances`: every
/// field is an instance of its own (the input's declared shape is `[-1]`).
pub fn decode_csv(body: &[u8], signature: &SignatureSpec, scalar_instances: bool) -> Result<Tensor, CodecError> {
    let [spec] = signature.inputs.as_slice() else {
        // The container turns CSV lines into plain-list instances, which TF
        // Serving refuses for a signature of several inputs, in these words.
        return Err(CodecError::PlainListForInputs(signature.input_names()));
    };
    let mut column = Column::new(spec)?;
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(body);
    let mut instances = 0;
    // The width of list instances, once a line of several fields was seen;
    // `Some(0)` once a scalar instance was.
    let mut width: Option<usize> = None;
    for (line, record) in reader.records().enumerate() {
        let line = line + 1;
        let record = record.map_err(|e| CodecError::CsvRecord {
            line,
            detail: e.to_string(),
        })?;
        let scalars = scalar_instances || record.len() == 1;
        let this_width = if scalars { 0 } else { record.len() };
        match width {
            None => width = Some(this_width),
            Some(w) if w == this_width => {}
            Some(w) => {
                let describe = |n: usize| {
                    if n == 0 {
                        "one value".to_string()
                    } else {
                        format!("{n} values")
                    }
                };
                return Err(CodecError::CsvRagged {
                    line,
                    this: describe(this_width),
                    earlier: describe(w),
                });
            }
        }
        for field in record.iter() {
            push(&mut column, field)?;
        }
        instances += if scalars { record.len() } else { 1 };
    }
    let shape = match width {
        None => return Err(CodecError::CsvEmpty),
        Some(0) => vec![instances],
        Some(w) => vec![instances, w],
    };
    Ok(Tensor::new(shape, column.data))
}

/// A field as the container's conversion types it (TF Serving 2.20
/// generation): a number when the trimmed field is a JSON number, else the
/// untrimmed field as a string (`+1`, `01`, `.5`, `1.` and `NaN` are strings).
fn push(column: &mut Column<'_>, field: &str) -> Result<(), CodecError> {
    let trimmed = field.trim();
    let pushed: Result<(), serde_json::Error> = if !is_json_number(trimmed) {
        column.push_str(field)
    } else if let Ok(integer) = trimmed.parse::<i64>() {
        column.push_i64(integer)
    } else {
        match trimmed.parse::<f64>() {
            Ok(number) if number.is_finite() => column.push_f64(number),
            _ => column.push_str(field),
        }
    };
    pushed.map_err(|e| {
        column.error.take().unwrap_or_else(|| CodecError::InputValue {
            input: column.spec.key.clone(),
            detail: e.to_string(),
        })
    })
}

/// JSON's number grammar: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
fn is_json_number(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = usize::from(bytes.first() == Some(&b'-'));
    let digits = |i: &mut usize| {
        let start = *i;
        while bytes.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - start
    };
    match bytes.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            digits(&mut i);
        }
        _ => return false,
    }
    if bytes.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::TensorSpec;
    use crate::tensor::{DType, TensorData};

    fn signature(dtype: DType) -> SignatureSpec {
        SignatureSpec {
            name: "serving_default".into(),
            method_name: crate::signature::PREDICT_METHOD.into(),
            inputs: vec![TensorSpec {
                key: "x".into(),
                tensor_name: "x:0".into(),
                dtype,
                shape: None,
            }],
            outputs: vec![],
            base64_inputs: vec![],
        }
    }

    #[test]
    fn only_json_numbers_are_numbers() {
        for number in ["0", "-1", "1.5", "2e3", "-0.5E-2", "10"] {
            assert!(is_json_number(number), "{number}");
        }
        for text in ["+1", "01", ".5", "1.", "NaN", "inf", "", "-", "1e", "0x1", "1,0", " 1"] {
            assert!(!is_json_number(text), "{text}");
        }
        let strings = signature(DType::String);
        // Quoted fields lose their quotes ("" is one quote); a number stays
        // a number even when quoted, as the container's per-field parser reads it.
        let decoded = decode_csv(b"\"a,\"\"b\"\"\",+1\n", &strings, false).unwrap();
        assert_eq!(
            decoded,
            Tensor::new(
                vec![1, 2],
                TensorData::String(vec![b"a,\"b\"".to_vec(), b"+1".to_vec()])
            )
        );
    }

    #[test]
    fn lines_are_instances_and_fields_their_values() {
        let floats = signature(DType::Float);
        let rows = decode_csv(b"1.0,2\n3,4.5\n", &floats, false).unwrap();
        assert_eq!(
            rows,
            Tensor::new(vec![2, 2], TensorData::Float(vec![1.0, 2.0, 3.0, 4.5]))
        );
        let column = decode_csv(b"1.0\n2.0\n5.0", &floats, false).unwrap();
        assert_eq!(column, Tensor::new(vec![3], TensorData::Float(vec![1.0, 2.0, 5.0])));
        let scalars = decode_csv(b"1.0,2.0,5.0", &floats, true).unwrap();
        assert_eq!(scalars.shape, vec![3]);
        let strings = decode_csv(b"a,\"b,c\"\nd,e\n", &signature(DType::String), false).unwrap();
        assert_eq!(
            strings.data,
            TensorData::String(vec![b"a".to_vec(), b"b,c".to_vec(), b"d".to_vec(), b"e".to_vec()])
        );
    }

    #[test]
    fn values_follow_the_json_dtype_rules() {
        let ints = signature(DType::Int32);
        assert_eq!(
            decode_csv(b"1,2", &ints, false).unwrap().data,
            TensorData::Int32(vec![1, 2])
        );
        let error = decode_csv(b"1.5", &ints, false).unwrap_err().to_string();
        assert!(error.contains("not of expected type: int32"), "{error}");
        let error = decode_csv(b"abc", &signature(DType::Float), false)
            .unwrap_err()
            .to_string();
        assert!(error.contains("\"abc\""), "{error}");
    }

    #[test]
    fn ragged_and_empty_bodies_are_refused() {
        let floats = signature(DType::Float);
        let error = decode_csv(b"1,2\n3\n", &floats, false).unwrap_err().to_string();
        assert!(error.contains("CSV line 2") && error.contains("same shape"), "{error}");
        let error = decode_csv(b"1,2\n3,4,5\n", &floats, false).unwrap_err().to_string();
        assert!(error.contains("3 values") && error.contains("2 values"), "{error}");
        assert_eq!(decode_csv(b"", &floats, false).unwrap_err(), CodecError::CsvEmpty);
    }
}
