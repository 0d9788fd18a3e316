//! Tensors across the C API: a batch's inputs fed with one copy each, and
//! the outputs fetched back into tfserve's own tensors.

use super::*;

/// An input converted to a TensorFlow tensor, kept alive for the run.
pub(super) enum Feed {
    Float(tfr::Tensor<f32>),
    Double(tfr::Tensor<f64>),
    Half(tfr::Tensor<half::f16>),
    Int8(tfr::Tensor<i8>),
    Int16(tfr::Tensor<i16>),
    Int32(tfr::Tensor<i32>),
    Int64(tfr::Tensor<i64>),
    UInt8(tfr::Tensor<u8>),
    UInt16(tfr::Tensor<u16>),
    UInt32(tfr::Tensor<u32>),
    UInt64(tfr::Tensor<u64>),
    Bool(tfr::Tensor<bool>),
    String(tfr::Tensor<ByteString>),
}

/// The batch's values into a TensorFlow tensor with one `memcpy` (the crate's
/// `with_values` copies element by element).
macro_rules! numeric_feed {
    ($variant:ident, $dims:expr, $values:expr) => {{
        let mut tensor = tfr::Tensor::new(&$dims);
        if tensor.len() != $values.len() {
            return Err(internal(format!(
                "{} values for a tensor of shape {:?}",
                $values.len(),
                $dims
            )));
        }
        tensor.copy_from_slice(&$values);
        Feed::$variant(tensor)
    }};
}

impl Feed {
    pub(super) fn from_tensor(tensor: Tensor) -> Result<Feed, RuntimeError> {
        let dims: Vec<u64> = tensor.shape.iter().map(|&d| d as u64).collect();
        Ok(match tensor.data {
            TensorData::Float(v) => numeric_feed!(Float, dims, v),
            TensorData::Double(v) => numeric_feed!(Double, dims, v),
            TensorData::Half(v) => numeric_feed!(Half, dims, v),
            TensorData::Int8(v) => numeric_feed!(Int8, dims, v),
            TensorData::Int16(v) => numeric_feed!(Int16, dims, v),
            TensorData::Int32(v) => numeric_feed!(Int32, dims, v),
            TensorData::Int64(v) => numeric_feed!(Int64, dims, v),
            TensorData::UInt8(v) => numeric_feed!(UInt8, dims, v),
            TensorData::UInt16(v) => numeric_feed!(UInt16, dims, v),
            TensorData::UInt32(v) => numeric_feed!(UInt32, dims, v),
            TensorData::UInt64(v) => numeric_feed!(UInt64, dims, v),
            TensorData::Bool(v) => numeric_feed!(Bool, dims, v),
            TensorData::String(values) => {
                let mut tensor = tfr::Tensor::<ByteString>::new(&dims);
                for (slot, value) in tensor.iter_mut().zip(values) {
                    *slot = ByteString(value);
                }
                Feed::String(tensor)
            }
        })
    }

    pub(super) fn add_to<'a>(&'a self, args: &mut SessionRunArgs<'a>, operation: &Operation, index: i32) {
        match self {
            Feed::Float(t) => args.add_feed(operation, index, t),
            Feed::Double(t) => args.add_feed(operation, index, t),
            Feed::Half(t) => args.add_feed(operation, index, t),
            Feed::Int8(t) => args.add_feed(operation, index, t),
            Feed::Int16(t) => args.add_feed(operation, index, t),
            Feed::Int32(t) => args.add_feed(operation, index, t),
            Feed::Int64(t) => args.add_feed(operation, index, t),
            Feed::UInt8(t) => args.add_feed(operation, index, t),
            Feed::UInt16(t) => args.add_feed(operation, index, t),
            Feed::UInt32(t) => args.add_feed(operation, index, t),
            Feed::UInt64(t) => args.add_feed(operation, index, t),
            Feed::Bool(t) => args.add_feed(operation, index, t),
            Feed::String(t) => args.add_feed(operation, index, t),
        }
    }
}

pub(super) fn fetch(
    args: &mut SessionRunArgs<'_>,
    token: tfr::FetchToken,
    dtype: DataType,
    key: &str,
) -> Result<Tensor, RuntimeError> {
    macro_rules! take {
        ($ty:ty, $variant:ident) => {{
            let t = args.fetch::<$ty>(token).map_err(|s| internal(s.to_string()))?;
            let shape = t.dims().iter().map(|&d| d as usize).collect();
            Tensor::new(shape, TensorData::$variant(t.to_vec()))
        }};
    }
    Ok(match dtype {
        DataType::Float => take!(f32, Float),
        DataType::Double => take!(f64, Double),
        DataType::Half => take!(half::f16, Half),
        DataType::Int8 => take!(i8, Int8),
        DataType::Int16 => take!(i16, Int16),
        DataType::Int32 => take!(i32, Int32),
        DataType::Int64 => take!(i64, Int64),
        DataType::UInt8 => take!(u8, UInt8),
        DataType::UInt16 => take!(u16, UInt16),
        DataType::UInt32 => take!(u32, UInt32),
        DataType::UInt64 => take!(u64, UInt64),
        DataType::Bool => take!(bool, Bool),
        DataType::String => {
            let t = args.fetch::<ByteString>(token).map_err(|s| internal(s.to_string()))?;
            let shape = t.dims().iter().map(|&d| d as usize).collect();
            Tensor::new(shape, TensorData::String(t.iter().map(|b| b.0.clone()).collect()))
        }
        other => {
            return Err(RuntimeError::Run {
                code: Code::Unimplemented,
                message: format!("output '{key}' has dtype {other}, which JSON responses cannot carry"),
            })
        }
    })
}
