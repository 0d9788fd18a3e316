//! Batch assembly on host tensors: concatenating requests along the batch
//! dimension, padding to a common shape or an allowed batch size, and slicing
//! outputs back into per-request pieces.

use crate::tensor::{Tensor, TensorData};
use crate::with_tensor_data;

/// Concatenates tensors of one dtype along dimension 0. All must share their
/// non-batch dimensions (pad first otherwise).
pub fn concat(parts: &[Tensor]) -> Result<Tensor, String> {
    concat_padded(parts, 0)
}

/// [`concat`](fn@concat) into a buffer with room for `rows` rows, so that padding it to
/// an allowed batch size afterwards ([`pad_rows`]) does not move it again.
pub fn concat_padded(parts: &[Tensor], rows: usize) -> Result<Tensor, String> {
    let first = parts.first().ok_or("nothing to concatenate")?;
    let inner = &first.shape[1..];
    let total: usize = parts.iter().map(|p| p.shape.first().copied().unwrap_or(1)).sum();
    let mut data = empty_like(&first.data, total.max(rows) * first.row_len());
    for part in parts {
        if part.shape.len() != first.shape.len() || part.shape[1..] != *inner {
            return Err(format!(
                "shape {:?} cannot be batched with {:?}",
                part.shape, first.shape
            ));
        }
        extend(&mut data, &part.data, 0, part.data.len())?;
    }
    let mut shape = first.shape.clone();
    shape[0] = total;
    Ok(Tensor::new(shape, data))
}

fn empty_like(data: &TensorData, capacity: usize) -> TensorData {
    match data {
        TensorData::Float(_) => TensorData::Float(Vec::with_capacity(capacity)),
        TensorData::Double(_) => TensorData::Double(Vec::with_capacity(capacity)),
        TensorData::Half(_) => TensorData::Half(Vec::with_capacity(capacity)),
        TensorData::Int8(_) => TensorData::Int8(Vec::with_capacity(capacity)),
        TensorData::Int16(_) => TensorData::Int16(Vec::with_capacity(capacity)),
        TensorData::Int32(_) => TensorData::Int32(Vec::with_capacity(capacity)),
        TensorData::Int64(_) => TensorData::Int64(Vec::with_capacity(capacity)),
        TensorData::UInt8(_) => TensorData::UInt8(Vec::with_capacity(capacity)),
        TensorData::UInt16(_) => TensorData::UInt16(Vec::with_capacity(capacity)),
        TensorData::UInt32(_) => TensorData::UInt32(Vec::with_capacity(capacity)),
        TensorData::UInt64(_) => TensorData::UInt64(Vec::with_capacity(capacity)),
        TensorData::Bool(_) => TensorData::Bool(Vec::with_capacity(capacity)),
        TensorData::String(_) => TensorData::String(Vec::with_capacity(capacity)),
    }
}

/// Appends `src[start..end]` to `dst` (same dtype).
fn extend(dst: &mut TensorData, src: &TensorData, start: usize, end: usize) -> Result<(), String> {
    macro_rules! pairs {
        ($($variant:ident),*) => {
            match (dst, src) {
                $((TensorData::$variant(d), TensorData::$variant(s)) => d.extend_from_slice(&s[start..end]),)*
                (d, s) => return Err(format!("dtype {} cannot be batched with {}", s.dtype(), d.dtype())),
            }
        };
    }
    pairs!(Float, Double, Half, Int8, Int16, Int32, Int64, UInt8, UInt16, UInt32, UInt64, Bool, String);
    Ok(())
}

/// Rows `start..end` of a tensor with a batch dimension.
pub fn slice_rows(tensor: &Tensor, start: usize, end: usize) -> Tensor {
    let row = tensor.row_len();
    let mut data = empty_like(&tensor.data, (end - start) * row);
    // Same dtype on both sides, so this cannot fail.
    let _ = extend(&mut data, &tensor.data, start * row, end * row);
    let mut shape = tensor.shape.clone();
    shape[0] = end - start;
    Tensor::new(shape, data)
}

/// Appends copies of row 0 until the tensor has `rows` rows (for allowed batch sizes).
pub fn pad_rows(tensor: &mut Tensor, rows: usize) {
    let current = tensor.shape[0];
    if rows <= current || current == 0 {
        return;
    }
    let row = tensor.row_len();
    with_tensor_data!(&mut tensor.data, v => {
        v.reserve((rows - current) * row);
        for _ in current..rows {
            v.extend_from_within(0..row);
        }
    });
    tensor.shape[0] = rows;
}

/// Pads every non-batch dimension up to `dims` (same rank), filling with the
/// tensor's first element, as TF Serving's `pad_variable_length_inputs` does.
pub fn pad_inner(tensor: &Tensor, dims: &[usize]) -> Result<Tensor, String> {
    if dims.len() != tensor.shape.len() {
        return Err(format!(
            "rank {} cannot be padded to rank {}",
            tensor.shape.len(),
            dims.len()
        ));
    }
    if dims[1..] == tensor.shape[1..] {
        return Ok(tensor.clone());
    }
    if dims.iter().zip(&tensor.shape).skip(1).any(|(want, have)| want < have) {
        return Err(format!(
            "shape {:?} is larger than the padding target {:?}",
            tensor.shape, dims
        ));
    }
    if tensor.data.is_empty() {
        return Err("an empty tensor has no element to pad with".into());
    }
    let mut target = dims.to_vec();
    target[0] = tensor.shape[0];
    let data = with_tensor_data!(&tensor.data, v => wrap(pad_vec(v, &tensor.shape, &target)));
    Ok(Tensor::new(target, data))
}

/// `src` (of `shape`) laid into a buffer of `target`, the gaps filled with `src[0]`.
fn pad_vec<T: Clone>(src: &[T], shape: &[usize], target: &[usize]) -> Vec<T> {
    let mut out = vec![src[0].clone(); target.iter().product()];
    copy_block(src, &mut out, shape, &strides(shape), &strides(target), 0, 0, 0);
    out
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

/// Copies the source block into the larger output, dimension by dimension.
#[allow(clippy::too_many_arguments)]
fn copy_block<T: Clone>(
    src: &[T],
    dst: &mut [T],
    shape: &[usize],
    strides_in: &[usize],
    strides_out: &[usize],
    dim: usize,
    offset_in: usize,
    offset_out: usize,
) {
    if dim + 1 == shape.len() {
        dst[offset_out..offset_out + shape[dim]].clone_from_slice(&src[offset_in..offset_in + shape[dim]]);
        return;
    }
    for i in 0..shape[dim] {
        copy_block(
            src,
            dst,
            shape,
            strides_in,
            strides_out,
            dim + 1,
            offset_in + i * strides_in[dim],
            offset_out + i * strides_out[dim],
        );
    }
}

/// Rewraps a vector into the `TensorData` variant of its element type.
trait Wrap: Sized {
    fn wrap(v: Vec<Self>) -> TensorData;
}

fn wrap<T: Wrap>(v: Vec<T>) -> TensorData {
    T::wrap(v)
}

macro_rules! wrap_impl {
    ($($ty:ty => $variant:ident),*) => {$(
        impl Wrap for $ty {
            fn wrap(v: Vec<Self>) -> TensorData {
                TensorData::$variant(v)
            }
        }
    )*};
}

wrap_impl!(f32 => Float, f64 => Double, half::f16 => Half, i8 => Int8, i16 => Int16, i32 => Int32, i64 => Int64, u8 => UInt8,
    u16 => UInt16, u32 => UInt32, u64 => UInt64, bool => Bool, Vec<u8> => String);

#[cfg(test)]
mod tests {
    use super::*;

    fn floats(shape: Vec<usize>, v: Vec<f32>) -> Tensor {
        Tensor::new(shape, TensorData::Float(v))
    }

    #[test]
    fn concat_and_slice_round_trip() {
        let a = floats(vec![1, 2], vec![1.0, 2.0]);
        let b = floats(vec![2, 2], vec![3.0, 4.0, 5.0, 6.0]);
        let batch = concat(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(batch, floats(vec![3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
        assert_eq!(slice_rows(&batch, 0, 1), a);
        assert_eq!(slice_rows(&batch, 1, 3), b);
        assert!(concat(&[a, floats(vec![1, 3], vec![0.0; 3])]).is_err());
    }

    #[test]
    fn a_batch_concatenated_with_room_for_its_padding_is_padded_in_place() {
        let a = floats(vec![1, 2], vec![1.0, 2.0]);
        let b = floats(vec![2, 2], vec![3.0, 4.0, 5.0, 6.0]);
        let mut batch = concat_padded(&[a, b], 4).unwrap();
        let TensorData::Float(before) = &batch.data else {
            unreachable!()
        };
        let (address, capacity) = (before.as_ptr(), before.capacity());
        assert_eq!(capacity, 8, "room for four rows of two");
        pad_rows(&mut batch, 4);
        assert_eq!(batch, floats(vec![4, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 1.0, 2.0]));
        let TensorData::Float(after) = &batch.data else {
            unreachable!()
        };
        assert_eq!(after.as_ptr(), address, "padding reused the buffer");
    }

    #[test]
    fn pads_rows_with_the_first_row() {
        let mut t = Tensor::new(
            vec![2, 2],
            TensorData::String(vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]),
        );
        pad_rows(&mut t, 3);
        assert_eq!(t.shape, vec![3, 2]);
        assert_eq!(
            t.data,
            TensorData::String(vec![
                b"a".to_vec(),
                b"b".to_vec(),
                b"c".to_vec(),
                b"d".to_vec(),
                b"a".to_vec(),
                b"b".to_vec()
            ])
        );
    }

    #[test]
    fn pads_inner_dimensions_with_the_first_element() {
        let t = Tensor::new(vec![2, 2], TensorData::Int64(vec![7, 1, 2, 3]));
        let padded = pad_inner(&t, &[5, 3]).unwrap();
        assert_eq!(
            padded,
            Tensor::new(vec![2, 3], TensorData::Int64(vec![7, 1, 7, 2, 3, 7]))
        );
        let three = floats(vec![1, 1, 2], vec![1.0, 2.0]);
        let padded = pad_inner(&three, &[1, 2, 3]).unwrap();
        assert_eq!(padded, floats(vec![1, 2, 3], vec![1.0, 2.0, 1.0, 1.0, 1.0, 1.0]));
        assert!(pad_inner(&t, &[2, 1]).is_err());
    }
}
