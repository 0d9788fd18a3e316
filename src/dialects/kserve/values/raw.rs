//! Raw little-endian tensor bytes, as `raw_input_contents` and binary
//! extension bodies carry them.

use super::super::datatype;
use super::{unsupported, ValuesError};
use crate::error::ApiError;
use crate::tensor::{DType, LeBytesError, TensorData};

pub fn from_le_bytes(name: &str, dtype: DType, raw: &[u8], elements: usize) -> Result<TensorData, ApiError> {
    if dtype == DType::String {
        return Ok(TensorData::String(length_prefixed(name, raw, elements)?));
    }
    TensorData::from_le_bytes(dtype, raw, elements).map_err(|e| {
        let (input, got) = (name.to_string(), raw.len());
        match e {
            LeBytesError::NoFixedWidth => unsupported(name, dtype),
            LeBytesError::Length { .. } if dtype == DType::Half => {
                ValuesError::HalfLength { input, got, elements }.into()
            }
            LeBytesError::Length { .. } if dtype == DType::Bool => {
                ValuesError::BoolLength { input, got, elements }.into()
            }
            LeBytesError::Length { needed } => ValuesError::RawLength {
                input,
                got,
                elements,
                datatype: datatype(dtype),
                needed,
            }
            .into(),
        }
    })
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
}
