//! `tensorflow.TensorProto` ⇄ `Tensor` (gRPC requests, warm-up records): either form (typed `*_val`
//! fields, or `tensor_content`'s little-endian bytes read straight into the
//! typed buffer), answers in the typed fields, as TF Serving writes them.

use super::CodecError;
use crate::proto::tensorflow::{tensor_shape_proto, TensorProto, TensorShapeProto};
use crate::tensor::{DType, LeBytesError, Tensor, TensorData};

/// A request tensor, named `name` in errors.
pub fn to_tensor(proto: &TensorProto, name: &str) -> Result<Tensor, CodecError> {
    let dtype = DType::from_proto(proto.dtype);
    let shape = shape_of(proto.tensor_shape.as_ref(), name)?;
    let elements =
        shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or_else(|| CodecError::TooManyElements {
                input: name.to_string(),
                shape: shape.clone(),
            })?;
    let data = if !proto.tensor_content.is_empty() {
        from_content(dtype, &proto.tensor_content, elements, name)?
    } else {
        from_fields(dtype, proto, elements, name)?
    };
    Ok(Tensor::new(shape, data))
}

fn shape_of(shape: Option<&TensorShapeProto>, name: &str) -> Result<Vec<usize>, CodecError> {
    let Some(shape) = shape else {
        return Ok(Vec::new());
    };
    if shape.unknown_rank {
        return Err(CodecError::UnknownRank(name.to_string()));
    }
    shape
        .dim
        .iter()
        .map(|d| {
            usize::try_from(d.size).map_err(|_| CodecError::NegativeDimension {
                input: name.to_string(),
                size: d.size,
            })
        })
        .collect()
}

/// Reads `tensor_content`: `elements` values of `dtype`, little-endian.
fn from_content(dtype: DType, bytes: &[u8], elements: usize, name: &str) -> Result<TensorData, CodecError> {
    TensorData::from_le_bytes(dtype, bytes, elements).map_err(|e| match e {
        LeBytesError::Length { needed } => CodecError::ContentLength {
            input: name.to_string(),
            got: bytes.len(),
            elements,
            dtype,
            needed,
        },
        LeBytesError::NoFixedWidth if dtype == DType::String => CodecError::StringContent(name.to_string()),
        LeBytesError::NoFixedWidth => unsupported(dtype, name),
    })
}

fn unsupported(dtype: DType, name: &str) -> CodecError {
    CodecError::Unimplemented(format!(
        "input '{name}' has type {}, which tfserve cannot feed",
        dtype.proto_name()
    ))
}

/// Reads the typed field, as TensorFlow's `FromProto` does: as many values as
/// elements, or fewer with the last repeated, or none for zeros.
// Kept whole: one arm per dtype.
fn from_fields(dtype: DType, proto: &TensorProto, elements: usize, name: &str) -> Result<TensorData, CodecError> {
    fn fill<T: Clone + Default>(
        values: Vec<T>,
        elements: usize,
        name: &str,
        field: &'static str,
    ) -> Result<Vec<T>, CodecError> {
        use std::cmp::Ordering;
        match values.len().cmp(&elements) {
            Ordering::Equal => Ok(values),
            Ordering::Greater => Err(CodecError::TooManyValues {
                input: name.to_string(),
                field,
                got: values.len(),
                elements,
            }),
            Ordering::Less => {
                let last = values.last().cloned().unwrap_or_default();
                let mut values = values;
                values.resize(elements, last);
                Ok(values)
            }
        }
    }
    macro_rules! ints {
        ($variant:ident, $t:ty) => {{
            let values = proto
                .int_val
                .iter()
                .map(|&v| {
                    <$t>::try_from(v).map_err(|_| CodecError::IntOutOfRange {
                        input: name.to_string(),
                        value: v,
                        dtype,
                    })
                })
                .collect::<Result<Vec<$t>, _>>()?;
            TensorData::$variant(fill(values, elements, name, "int_val")?)
        }};
    }
    Ok(match dtype {
        DType::Float => TensorData::Float(fill(proto.float_val.clone(), elements, name, "float_val")?),
        DType::Double => TensorData::Double(fill(proto.double_val.clone(), elements, name, "double_val")?),
        // half_val holds each value's 16 bits in an int32.
        DType::Half => {
            let values = proto
                .half_val
                .iter()
                .map(|&bits| half::f16::from_bits(bits as u16))
                .collect();
            TensorData::Half(fill(values, elements, name, "half_val")?)
        }
        DType::Int32 => TensorData::Int32(fill(proto.int_val.clone(), elements, name, "int_val")?),
        DType::Int16 => ints!(Int16, i16),
        DType::Int8 => ints!(Int8, i8),
        DType::UInt8 => ints!(UInt8, u8),
        DType::UInt16 => ints!(UInt16, u16),
        DType::Int64 => TensorData::Int64(fill(proto.int64_val.clone(), elements, name, "int64_val")?),
        DType::UInt32 => TensorData::UInt32(fill(proto.uint32_val.clone(), elements, name, "uint32_val")?),
        DType::UInt64 => TensorData::UInt64(fill(proto.uint64_val.clone(), elements, name, "uint64_val")?),
        DType::Bool => TensorData::Bool(fill(proto.bool_val.clone(), elements, name, "bool_val")?),
        DType::String => TensorData::String(fill(proto.string_val.clone(), elements, name, "string_val")?),
        other => return Err(unsupported(other, name)),
    })
}

/// An answer tensor in the typed fields (`float_val`, `int64_val`, ...).
pub fn to_proto(tensor: &Tensor) -> TensorProto {
    let mut proto = TensorProto {
        dtype: tensor.dtype().to_proto(),
        tensor_shape: Some(shape_proto(&tensor.shape)),
        ..TensorProto::default()
    };
    match &tensor.data {
        TensorData::Float(v) => proto.float_val = v.clone(),
        TensorData::Double(v) => proto.double_val = v.clone(),
        TensorData::Half(v) => proto.half_val = v.iter().map(|x| i32::from(x.to_bits())).collect(),
        TensorData::Int8(v) => proto.int_val = v.iter().map(|&x| i32::from(x)).collect(),
        TensorData::Int16(v) => proto.int_val = v.iter().map(|&x| i32::from(x)).collect(),
        TensorData::Int32(v) => proto.int_val = v.clone(),
        TensorData::UInt8(v) => proto.int_val = v.iter().map(|&x| i32::from(x)).collect(),
        TensorData::UInt16(v) => proto.int_val = v.iter().map(|&x| i32::from(x)).collect(),
        TensorData::Int64(v) => proto.int64_val = v.clone(),
        TensorData::UInt32(v) => proto.uint32_val = v.clone(),
        TensorData::UInt64(v) => proto.uint64_val = v.clone(),
        TensorData::Bool(v) => proto.bool_val = v.clone(),
        TensorData::String(v) => proto.string_val = v.clone(),
    }
    proto
}

pub fn shape_proto(shape: &[usize]) -> TensorShapeProto {
    TensorShapeProto {
        dim: shape
            .iter()
            .map(|&size| tensor_shape_proto::Dim {
                size: size as i64,
                name: String::new(),
            })
            .collect(),
        unknown_rank: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proto(dtype: DType, shape: &[usize]) -> TensorProto {
        TensorProto {
            dtype: dtype.to_proto(),
            tensor_shape: Some(shape_proto(shape)),
            ..TensorProto::default()
        }
    }

    #[test]
    fn tensor_content_reads_little_endian_values() {
        let mut p = proto(DType::Float, &[2, 2]);
        let values = [1.5f32, -2.0, 0.25, 8.0];
        p.tensor_content = values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>().into();
        let tensor = to_tensor(&p, "x").unwrap();
        assert_eq!(tensor, Tensor::new(vec![2, 2], TensorData::Float(values.to_vec())));
        p.tensor_content = vec![0u8; 15].into();
        let error = to_tensor(&p, "x").unwrap_err().to_string();
        assert!(error.contains("15 bytes") && error.contains("'x'"), "{error}");
    }

    #[test]
    fn typed_fields_repeat_their_last_value() {
        let mut p = proto(DType::Int64, &[3]);
        p.int64_val = vec![7];
        assert_eq!(to_tensor(&p, "x").unwrap().data, TensorData::Int64(vec![7, 7, 7]));
        p.int64_val = vec![];
        assert_eq!(to_tensor(&p, "x").unwrap().data, TensorData::Int64(vec![0, 0, 0]));
        p.int64_val = vec![1, 2, 3, 4];
        assert!(to_tensor(&p, "x").is_err());
        let mut small = proto(DType::Int8, &[1]);
        small.int_val = vec![300];
        assert!(to_tensor(&small, "x").unwrap_err().to_string().contains("out of range"));
    }

    #[test]
    fn answers_round_trip_through_the_typed_fields() {
        for tensor in [
            Tensor::new(vec![2], TensorData::Float(vec![1.0, 2.5])),
            Tensor::new(vec![1, 2], TensorData::UInt8(vec![0, 255])),
            Tensor::new(vec![2], TensorData::String(vec![b"a".to_vec(), vec![0, 159]])),
            Tensor::new(vec![], TensorData::Bool(vec![true])),
        ] {
            assert_eq!(to_tensor(&to_proto(&tensor), "y").unwrap(), tensor);
        }
    }

    #[test]
    fn half_values_and_bfloat16_refusals() {
        let mut half = proto(DType::Half, &[2]);
        half.half_val = vec![0x3c00, 0xc000];
        let values = vec![half::f16::from_f32(1.0), half::f16::from_f32(-2.0)];
        assert_eq!(to_tensor(&half, "h").unwrap().data, TensorData::Half(values.clone()));
        half.half_val.clear();
        half.tensor_content = values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>().into();
        assert_eq!(to_tensor(&half, "h").unwrap().data, TensorData::Half(values));
        let bfloat16 = to_tensor(&proto(DType::BFloat16, &[1]), "b").unwrap_err();
        assert_eq!(
            crate::status::HasCode::code(&bfloat16),
            crate::status::Code::Unimplemented
        );
        let mut p = proto(DType::Float, &[1]);
        if let Some(shape) = p.tensor_shape.as_mut() {
            shape.dim[0].size = -1;
        }
        assert!(to_tensor(&p, "x").unwrap_err().to_string().contains("negative"));
    }
}
