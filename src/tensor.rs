//! Typed host tensors, independent of TensorFlow: what requests decode into and
//! what responses encode from.

use std::fmt;

/// Element types a signature can declare. Only the ones JSON can carry have a
/// `TensorData` variant; the rest are named so errors can say what was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    Float,
    Double,
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Bool,
    String,
    Half,
    BFloat16,
    /// Any other TensorFlow `DataType` enum value (complex, resource, variant, ...).
    Other(i32),
}

impl DType {
    /// Maps TensorFlow's `DataType` proto enum value.
    pub fn from_proto(code: i32) -> DType {
        match code {
            1 => DType::Float,
            2 => DType::Double,
            3 => DType::Int32,
            4 => DType::UInt8,
            5 => DType::Int16,
            6 => DType::Int8,
            7 => DType::String,
            9 => DType::Int64,
            10 => DType::Bool,
            14 => DType::BFloat16,
            17 => DType::UInt16,
            19 => DType::Half,
            22 => DType::UInt32,
            23 => DType::UInt64,
            other => DType::Other(other),
        }
    }

    pub fn to_proto(self) -> i32 {
        match self {
            DType::Float => 1,
            DType::Double => 2,
            DType::Int32 => 3,
            DType::UInt8 => 4,
            DType::Int16 => 5,
            DType::Int8 => 6,
            DType::String => 7,
            DType::Int64 => 9,
            DType::Bool => 10,
            DType::BFloat16 => 14,
            DType::UInt16 => 17,
            DType::Half => 19,
            DType::UInt32 => 22,
            DType::UInt64 => 23,
            DType::Other(code) => code,
        }
    }

    /// The proto enum name, as TF Serving prints it in metadata (`DT_FLOAT`).
    pub fn proto_name(self) -> String {
        let name = match self {
            DType::Float => "DT_FLOAT",
            DType::Double => "DT_DOUBLE",
            DType::Int8 => "DT_INT8",
            DType::Int16 => "DT_INT16",
            DType::Int32 => "DT_INT32",
            DType::Int64 => "DT_INT64",
            DType::UInt8 => "DT_UINT8",
            DType::UInt16 => "DT_UINT16",
            DType::UInt32 => "DT_UINT32",
            DType::UInt64 => "DT_UINT64",
            DType::Bool => "DT_BOOL",
            DType::String => "DT_STRING",
            DType::Half => "DT_HALF",
            DType::BFloat16 => "DT_BFLOAT16",
            DType::Other(code) => return other_proto_name(code),
        };
        name.to_string()
    }

    /// Short name used in error messages (`float`, `int64`, ...), as TF Serving's.
    pub fn short_name(self) -> String {
        self.proto_name().trim_start_matches("DT_").to_ascii_lowercase()
    }
}

fn other_proto_name(code: i32) -> String {
    match code {
        0 => "DT_INVALID".into(),
        8 => "DT_COMPLEX64".into(),
        11 => "DT_QINT8".into(),
        12 => "DT_QUINT8".into(),
        13 => "DT_QINT32".into(),
        15 => "DT_QINT16".into(),
        16 => "DT_QUINT16".into(),
        18 => "DT_COMPLEX128".into(),
        20 => "DT_RESOURCE".into(),
        21 => "DT_VARIANT".into(),
        other => format!("DT_UNKNOWN_{other}"),
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.short_name())
    }
}

/// Flat, row-major element buffer of one dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    Float(Vec<f32>),
    Double(Vec<f64>),
    /// IEEE half precision (`DT_HALF`); JSON carries it as numbers.
    Half(Vec<half::f16>),
    Int8(Vec<i8>),
    Int16(Vec<i16>),
    Int32(Vec<i32>),
    Int64(Vec<i64>),
    UInt8(Vec<u8>),
    UInt16(Vec<u16>),
    UInt32(Vec<u32>),
    UInt64(Vec<u64>),
    Bool(Vec<bool>),
    /// Byte strings: TensorFlow strings are arbitrary bytes, not UTF-8.
    String(Vec<Vec<u8>>),
}

/// Applies one expression to the vector inside any `TensorData` variant.
#[macro_export]
macro_rules! with_tensor_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            $crate::tensor::TensorData::Float($v) => $body,
            $crate::tensor::TensorData::Double($v) => $body,
            $crate::tensor::TensorData::Half($v) => $body,
            $crate::tensor::TensorData::Int8($v) => $body,
            $crate::tensor::TensorData::Int16($v) => $body,
            $crate::tensor::TensorData::Int32($v) => $body,
            $crate::tensor::TensorData::Int64($v) => $body,
            $crate::tensor::TensorData::UInt8($v) => $body,
            $crate::tensor::TensorData::UInt16($v) => $body,
            $crate::tensor::TensorData::UInt32($v) => $body,
            $crate::tensor::TensorData::UInt64($v) => $body,
            $crate::tensor::TensorData::Bool($v) => $body,
            $crate::tensor::TensorData::String($v) => $body,
        }
    };
}

impl TensorData {
    /// An empty buffer for `dtype`, or `None` for a dtype tfserve cannot feed.
    pub fn empty(dtype: DType) -> Option<TensorData> {
        Some(match dtype {
            DType::Float => TensorData::Float(Vec::new()),
            DType::Double => TensorData::Double(Vec::new()),
            DType::Half => TensorData::Half(Vec::new()),
            DType::Int8 => TensorData::Int8(Vec::new()),
            DType::Int16 => TensorData::Int16(Vec::new()),
            DType::Int32 => TensorData::Int32(Vec::new()),
            DType::Int64 => TensorData::Int64(Vec::new()),
            DType::UInt8 => TensorData::UInt8(Vec::new()),
            DType::UInt16 => TensorData::UInt16(Vec::new()),
            DType::UInt32 => TensorData::UInt32(Vec::new()),
            DType::UInt64 => TensorData::UInt64(Vec::new()),
            DType::Bool => TensorData::Bool(Vec::new()),
            DType::String => TensorData::String(Vec::new()),
            DType::BFloat16 | DType::Other(_) => return None,
        })
    }

    pub fn dtype(&self) -> DType {
        match self {
            TensorData::Float(_) => DType::Float,
            TensorData::Double(_) => DType::Double,
            TensorData::Half(_) => DType::Half,
            TensorData::Int8(_) => DType::Int8,
            TensorData::Int16(_) => DType::Int16,
            TensorData::Int32(_) => DType::Int32,
            TensorData::Int64(_) => DType::Int64,
            TensorData::UInt8(_) => DType::UInt8,
            TensorData::UInt16(_) => DType::UInt16,
            TensorData::UInt32(_) => DType::UInt32,
            TensorData::UInt64(_) => DType::UInt64,
            TensorData::Bool(_) => DType::Bool,
            TensorData::String(_) => DType::String,
        }
    }

    /// `elements` values of a fixed-width `dtype` from little-endian bytes:
    /// TensorFlow's `tensor_content`, KServe's raw input contents.
    pub fn from_le_bytes(dtype: DType, bytes: &[u8], elements: usize) -> Result<TensorData, LeBytesError> {
        macro_rules! read {
            ($variant:ident, $t:ty, $from:expr) => {{
                const SIZE: usize = std::mem::size_of::<$t>();
                if Some(bytes.len()) != elements.checked_mul(SIZE) {
                    return Err(LeBytesError::Length {
                        needed: elements.saturating_mul(SIZE),
                    });
                }
                TensorData::$variant(
                    bytes
                        .chunks_exact(SIZE)
                        .map(|c| {
                            let word: [u8; SIZE] = c.try_into().unwrap_or([0; SIZE]);
                            ($from)(word)
                        })
                        .collect(),
                )
            }};
        }
        Ok(match dtype {
            DType::Float => read!(Float, f32, f32::from_le_bytes),
            DType::Double => read!(Double, f64, f64::from_le_bytes),
            DType::Half => read!(Half, u16, |b: [u8; 2]| half::f16::from_bits(u16::from_le_bytes(b))),
            DType::Int8 => read!(Int8, i8, i8::from_le_bytes),
            DType::Int16 => read!(Int16, i16, i16::from_le_bytes),
            DType::Int32 => read!(Int32, i32, i32::from_le_bytes),
            DType::Int64 => read!(Int64, i64, i64::from_le_bytes),
            DType::UInt8 => read!(UInt8, u8, u8::from_le_bytes),
            DType::UInt16 => read!(UInt16, u16, u16::from_le_bytes),
            DType::UInt32 => read!(UInt32, u32, u32::from_le_bytes),
            DType::UInt64 => read!(UInt64, u64, u64::from_le_bytes),
            DType::Bool => read!(Bool, u8, |b: [u8; 1]| b[0] != 0),
            _ => return Err(LeBytesError::NoFixedWidth),
        })
    }

    pub fn len(&self) -> usize {
        with_tensor_data!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why little-endian bytes do not make a tensor's buffer.
#[derive(Debug, PartialEq)]
pub enum LeBytesError {
    /// Not `elements` values of the dtype's width: `needed` bytes.
    Length { needed: usize },
    /// Strings, and dtypes tfserve cannot feed, have no fixed width.
    NoFixedWidth,
}

/// A dense tensor: a shape and a row-major buffer whose length is the shape's product.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: TensorData,
}

impl Tensor {
    pub fn new(shape: Vec<usize>, data: TensorData) -> Tensor {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        Tensor { shape, data }
    }

    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// Number of elements in one row (the product of all but the first dimension).
    pub fn row_len(&self) -> usize {
        self.shape.iter().skip(1).product()
    }

    /// Size of the 0th (batch) dimension; `None` for a scalar.
    pub fn batch_size(&self) -> Option<usize> {
        self.shape.first().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proto_codes_round_trip() {
        for code in 0..30 {
            assert_eq!(DType::from_proto(code).to_proto(), code);
        }
        assert_eq!(DType::from_proto(1).proto_name(), "DT_FLOAT");
        assert_eq!(DType::Int64.short_name(), "int64");
    }

    #[test]
    fn bfloat16_has_no_buffer() {
        assert_eq!(TensorData::empty(DType::Half).map(|d| d.dtype()), Some(DType::Half));
        assert!(TensorData::empty(DType::BFloat16).is_none());
        assert_eq!(TensorData::empty(DType::Bool).map(|d| d.dtype()), Some(DType::Bool));
    }

    #[test]
    fn row_len_skips_batch_dimension() {
        let t = Tensor::new(vec![2, 3], TensorData::Float(vec![0.0; 6]));
        assert_eq!(t.row_len(), 3);
        assert_eq!(t.batch_size(), Some(2));
    }
}
