//! Properties over every dtype and layout: a response the encoder writes,
//! sent back as a request, decodes to the same tensors (encode → decode is
//! the identity), and every decoder answers arbitrary input with tensors or
//! a typed error, never a panic.

use proptest::prelude::*;

use super::decode::{decode_csv, decode_instance_values, decode_named_inputs, Coercion};
use super::encode::{predict_response, NamedOutput};
use super::nonfinite::quote_bare_tokens;
use super::{PredictEnvelope, RequestFormat};
use crate::signature::SignatureSpec;
use crate::tensor::{DType, Tensor, TensorData};

fn signature(inputs: &[(&str, DType)]) -> SignatureSpec {
    SignatureSpec::of_inputs(inputs)
}

/// A shape of rank 1 to 3 with every dimension at least 1.
fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..4, 1..4)
}

fn values<T: std::fmt::Debug>(element: impl Strategy<Value = T>, len: usize) -> impl Strategy<Value = Vec<T>> {
    prop::collection::vec(element, len)
}

/// A tensor of any JSON-carried dtype, and the key it travels under: strings
/// that are not UTF-8 travel as base64 under a `_bytes` key, as TF Serving does.
fn tensor() -> impl Strategy<Value = (&'static str, Tensor)> {
    shape().prop_flat_map(|shape| {
        let n: usize = shape.iter().product();
        let data = prop_oneof![
            values(any::<f32>(), n).prop_map(TensorData::Float),
            values(any::<f64>(), n).prop_map(TensorData::Double),
            values(any::<i8>(), n).prop_map(TensorData::Int8),
            values(any::<i16>(), n).prop_map(TensorData::Int16),
            values(any::<i32>(), n).prop_map(TensorData::Int32),
            values(any::<i64>(), n).prop_map(TensorData::Int64),
            values(any::<u8>(), n).prop_map(TensorData::UInt8),
            values(any::<u16>(), n).prop_map(TensorData::UInt16),
            values(any::<u32>(), n).prop_map(TensorData::UInt32),
            values(any::<u64>(), n).prop_map(TensorData::UInt64),
            values(any::<bool>(), n).prop_map(TensorData::Bool),
            values(".{0,8}".prop_map(String::into_bytes), n).prop_map(TensorData::String),
            values(prop::collection::vec(any::<u8>(), 0..8), n).prop_map(TensorData::String),
        ];
        (Just(shape), data).prop_map(|(shape, data)| {
            let utf8 = match &data {
                TensorData::String(v) => v.iter().all(|s| std::str::from_utf8(s).is_ok()),
                _ => true,
            };
            let key = if utf8 { "x" } else { "x_bytes" };
            (key, Tensor::new(shape, data))
        })
    })
}

/// Equality that takes NaN as equal to NaN (the JSON round trip keeps NaN,
/// not its payload), and float64 values within a few ULP: JSON numbers are
/// parsed with serde_json's fast algorithm, which, like TF Serving's RapidJSON
/// without full precision, may land a few ULP off for doubles; float32
/// inputs, rounded from the double, come back exact. Exact parsing
/// (`float_roundtrip`) measured 2.26 → 3.35 ms for a 224×224×3 float image
/// body, on every float request, for a difference only float64 inputs see.
fn same(a: &Tensor, b: &Tensor) -> bool {
    let ulps = |p: f64, q: f64| (p.to_bits() as i64).wrapping_sub(q.to_bits() as i64).unsigned_abs();
    match (&a.data, &b.data) {
        (TensorData::Float(x), TensorData::Float(y)) => {
            a.shape == b.shape
                && x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()) || p == q)
        }
        (TensorData::Double(x), TensorData::Double(y)) => {
            a.shape == b.shape
                && x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(p, q)| p == q || (p.is_nan() && q.is_nan()) || ulps(*p, *q) <= 8)
        }
        _ => a == b,
    }
}

/// A response body, renamed into the matching request layout.
fn as_request(response: &[u8], format: RequestFormat) -> Vec<u8> {
    let text = String::from_utf8_lossy(response);
    match format {
        RequestFormat::Columnar => text.replacen("{\"outputs\":", "{\"inputs\":", 1).into_bytes(),
        RequestFormat::Row => text.replacen("{\"predictions\":", "{\"instances\":", 1).into_bytes(),
        RequestFormat::Named => format!("{{\"inputs\":{text}}}").into_bytes(),
    }
}

fn decode(body: &[u8], signature: &SignatureSpec) -> Result<Vec<Tensor>, super::CodecError> {
    let body = quote_bare_tokens(body);
    PredictEnvelope::parse(&body)?.decode(signature)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn one_tensor_survives_every_layout((key, tensor) in tensor()) {
        let signature = signature(&[(key, tensor.dtype())]);
        for format in [RequestFormat::Columnar, RequestFormat::Row, RequestFormat::Named] {
            let response = predict_response(format, &[NamedOutput { key, tensor: &tensor }]).unwrap();
            let decoded = decode(&as_request(&response, format), &signature);
            let decoded = decoded.map_err(|e| TestCaseError::fail(format!("{format:?}: {e}")))?;
            prop_assert!(same(&decoded[0], &tensor), "{:?}: {:?} became {:?}", format, tensor, decoded[0]);
        }
    }

    #[test]
    fn several_tensors_survive_as_named_inputs((_, a) in tensor(), (_, b) in tensor()) {
        let b = Tensor::new(b.shape.clone(), b.data);
        prop_assume!(!matches!(a.data, TensorData::String(_)) && !matches!(b.data, TensorData::String(_)));
        let signature = signature(&[("a", a.dtype()), ("b", b.dtype())]);
        let outputs = [NamedOutput { key: "a", tensor: &a }, NamedOutput { key: "b", tensor: &b }];
        let response = predict_response(RequestFormat::Columnar, &outputs).unwrap();
        let decoded = decode(&as_request(&response, RequestFormat::Columnar), &signature).unwrap();
        prop_assert!(same(&decoded[0], &a), "{:?} became {:?}", a, decoded[0]);
        prop_assert!(same(&decoded[1], &b), "{:?} became {:?}", b, decoded[1]);
    }

    #[test]
    fn decoders_answer_anything_with_tensors_or_an_error(body in prop::collection::vec(any::<u8>(), 0..256)) {
        let signatures = [
            signature(&[("x", DType::Float)]),
            signature(&[("x", DType::Int64)]),
            signature(&[("x", DType::String)]),
            signature(&[("a", DType::Int32), ("b", DType::Bool)]),
        ];
        for signature in &signatures {
            let _ = decode(&body, signature);
            let _ = decode_csv(&body, signature, false);
            let _ = decode_csv(&body, signature, true);
            if let Ok(text) = std::str::from_utf8(&body) {
                let _ = decode_instance_values([text], signature);
                let _ = decode_named_inputs(text, signature, Coercion::Numpy);
                let _ = decode_named_inputs(text, signature, Coercion::Strict);
            }
        }
    }

    #[test]
    fn json_shaped_input_never_panics(body in r#"\{"(instances|inputs)": ?[\[\]\{\}0-9.,:" a-z\-eE]{0,60}\}"#) {
        for signature in [signature(&[("x", DType::Float)]), signature(&[("a", DType::Int32), ("b", DType::String)])] {
            let _ = decode(body.as_bytes(), &signature);
        }
    }
}
