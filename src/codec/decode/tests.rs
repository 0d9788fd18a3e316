//! Decoding against hand-made signatures: layouts, dtypes, errors.

use super::*;
use crate::signature::TensorSpec;
use crate::tensor::{DType, TensorData};

fn spec(key: &str, dtype: DType, shape: Option<Vec<i64>>) -> TensorSpec {
    TensorSpec {
        key: key.into(),
        tensor_name: format!("{key}:0"),
        dtype,
        shape,
    }
}

fn signature(inputs: Vec<TensorSpec>) -> SignatureSpec {
    let mut sig = SignatureSpec {
        name: "serving_default".into(),
        method_name: crate::signature::PREDICT_METHOD.into(),
        inputs,
        outputs: vec![],
        base64_inputs: vec![],
    };
    sig.sort();
    sig
}

fn decode(body: &str, sig: &SignatureSpec) -> Result<Vec<Tensor>, CodecError> {
    PredictEnvelope::parse(body.as_bytes())?.decode(sig)
}

#[test]
fn row_format_single_input() {
    let sig = signature(vec![spec("x", DType::Float, Some(vec![-1]))]);
    let out = decode(r#"{"instances": [1.0, 2, 5.5]}"#, &sig).unwrap();
    assert_eq!(out[0], Tensor::new(vec![3], TensorData::Float(vec![1.0, 2.0, 5.5])));
    let named = decode(r#"{"instances": [{"x": 1.0}, {"x": 2}]}"#, &sig).unwrap();
    assert_eq!(named[0].shape, vec![2]);
}

#[test]
fn row_format_multiple_inputs() {
    let sig = signature(vec![
        spec("a", DType::Float, Some(vec![-1, 2])),
        spec("b", DType::Int64, Some(vec![-1])),
        spec("s", DType::String, Some(vec![-1])),
    ]);
    let body = r#"{"instances": [{"a": [1, 2], "b": 3, "s": "x"}, {"s": {"b64": "aGk="}, "b": -4, "a": [3.5, 4]}]}"#;
    let out = decode(body, &sig).unwrap();
    assert_eq!(
        out[0],
        Tensor::new(vec![2, 2], TensorData::Float(vec![1.0, 2.0, 3.5, 4.0]))
    );
    assert_eq!(out[1], Tensor::new(vec![2], TensorData::Int64(vec![3, -4])));
    assert_eq!(out[2].data, TensorData::String(vec![b"x".to_vec(), b"hi".to_vec()]));
}

#[test]
fn row_format_errors_name_the_input_and_element() {
    let sig = signature(vec![spec("a", DType::Float, None), spec("b", DType::Int64, None)]);
    let err = decode(r#"{"instances": [[1, 2]]}"#, &sig).unwrap_err().to_string();
    assert!(err.contains("plain list"), "{err}");
    let err = decode(r#"{"instances": [{"a": 1, "b": 2}, {"a": 1, "b": 2.5}]}"#, &sig)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("element: 1") && err.contains("input 'b'") && err.contains("int64"),
        "{err}"
    );
    let err = decode(r#"{"instances": [{"a": 1}]}"#, &sig).unwrap_err().to_string();
    assert!(err.contains("input 'b'") && err.contains("a,b"), "{err}");
    let err = decode(r#"{"instances": [{"a": 1, "b": 1, "c": 1}]}"#, &sig)
        .unwrap_err()
        .to_string();
    assert!(err.contains("'c'"), "{err}");
}

#[test]
fn instances_must_not_mix_objects_and_values() {
    let sig = signature(vec![spec("x", DType::Float, None)]);
    let err = decode(r#"{"instances": [{"x": 1}, [2]]}"#, &sig)
        .unwrap_err()
        .to_string();
    assert_eq!(err, "Expecting object but got list at item 1 of input list");
    let err = decode(r#"{"instances": [[2], {"x": 1}]}"#, &sig)
        .unwrap_err()
        .to_string();
    assert_eq!(err, "Expecting value/list but got object at item 1 of input list");
    let strings = signature(vec![spec("s", DType::String, None)]);
    let out = decode(r#"{"instances": [{"b64": "aGk="}, "x"]}"#, &strings).unwrap();
    assert_eq!(out[0].data, TensorData::String(vec![b"hi".to_vec(), b"x".to_vec()]));
}

#[test]
fn ragged_instances_are_rejected() {
    let sig = signature(vec![spec("x", DType::Float, None)]);
    let err = decode(r#"{"instances": [[1, 2], [3]]}"#, &sig).unwrap_err().to_string();
    assert!(err.contains("input 'x'") && err.contains("ragged"), "{err}");
    let err = decode(r#"{"instances": []}"#, &sig).unwrap_err().to_string();
    assert!(err.contains("No values"), "{err}");
}

#[test]
fn columnar_format() {
    let sig = signature(vec![
        spec("a", DType::Double, Some(vec![-1, 2])),
        spec("flag", DType::Bool, Some(vec![-1])),
    ]);
    let out = decode(r#"{"inputs": {"a": [[1, 2]], "flag": [true]}}"#, &sig).unwrap();
    assert_eq!(out[0].data, TensorData::Double(vec![1.0, 2.0]));
    assert_eq!(out[1].data, TensorData::Bool(vec![true]));
    let err = decode(r#"{"inputs": {"a": [[1, 2]]}}"#, &sig).unwrap_err().to_string();
    assert!(err.contains("Missing named input: flag"), "{err}");
    let single = signature(vec![spec("x", DType::Float, None)]);
    let out = decode(r#"{"inputs": 3.5}"#, &single).unwrap();
    assert_eq!(out[0], Tensor::new(vec![], TensorData::Float(vec![3.5])));
}

#[test]
fn declared_shapes_do_not_gate_requests() {
    let sig = signature(vec![spec("x", DType::Float, Some(vec![-1, 1]))]);
    let out = decode(r#"{"instances": [1.0, 2.0, 5.0]}"#, &sig).unwrap();
    assert_eq!(out[0].shape, vec![3]);
    let shapeless = signature(vec![spec("x", DType::Float, Some(vec![]))]);
    let out = decode(r#"{"inputs": [[1.0], [2.0]]}"#, &shapeless).unwrap();
    assert_eq!(out[0].shape, vec![2, 1]);
    let out = decode(r#"{"inputs": 3.5}"#, &shapeless).unwrap();
    assert_eq!(out[0], Tensor::new(vec![], TensorData::Float(vec![3.5])));
}

#[test]
fn dtype_rules_follow_tf_serving() {
    let ints = signature(vec![spec("x", DType::Int32, None)]);
    assert!(decode(r#"{"instances": [1.0]}"#, &ints).is_err());
    let err = decode(r#"{"instances": [3000000000]}"#, &ints).unwrap_err().to_string();
    assert!(err.contains("out of range for int32"), "{err}");
    let floats = signature(vec![spec("x", DType::Float, None)]);
    let err = decode(r#"{"instances": ["]["]}"#, &floats).unwrap_err().to_string();
    assert!(
        err.contains(r#"JSON Value: "][" Type: String is not of expected type: float"#),
        "{err}"
    );
    let out = decode(r#"{"instances": ["NaN", "-Infinity"]}"#, &floats).unwrap();
    match &out[0].data {
        TensorData::Float(v) => assert!(v[0].is_nan() && v[1] == f32::NEG_INFINITY),
        other => panic!("{other:?}"),
    }
    let half = signature(vec![spec("x", DType::Half, None)]);
    let out = decode(r#"{"instances": [1, 0.5]}"#, &half).unwrap();
    assert_eq!(
        out[0].data,
        TensorData::Half(vec![half::f16::from_f32(1.0), half::f16::from_f32(0.5)])
    );
    let bfloat = signature(vec![spec("x", DType::BFloat16, None)]);
    assert!(matches!(
        decode(r#"{"instances": [1]}"#, &bfloat),
        Err(CodecError::Unimplemented(_))
    ));
}

#[test]
fn numpy_coercion_converts_as_stfs_does() {
    let sig = signature(vec![
        spec("b", DType::Bool, None),
        spec("f", DType::Float, None),
        spec("i", DType::Int32, None),
    ]);
    let body = r#"{"i": [[1.0], [2.9], [-3.5]], "f": [true, "2.5", 3], "b": [0, 1.5, true]}"#;
    let out = decode_named_inputs(body, &sig, Coercion::Numpy).unwrap();
    assert_eq!(out[0].data, TensorData::Bool(vec![false, true, true]));
    assert_eq!(out[1].data, TensorData::Float(vec![1.0, 2.5, 3.0]));
    assert_eq!(out[2], Tensor::new(vec![3, 1], TensorData::Int32(vec![1, 2, -3])));
    assert!(decode_named_inputs(body, &sig, Coercion::Strict).is_err());
    let ints = signature(vec![spec("i", DType::Int32, None)]);
    for (body, wanted) in [
        (r#"{"i": [NaN]}"#, "cannot convert float NaN"),
        (r#"{"i": [1e12]}"#, "out of range for int32"),
        (r#"{"i": ["1.5"]}"#, "invalid literal for int()"),
    ] {
        let body = super::super::nonfinite::quote_bare_tokens(body.as_bytes());
        let raw = std::str::from_utf8(&body).unwrap();
        let err = decode_named_inputs(raw, &ints, Coercion::Numpy)
            .unwrap_err()
            .to_string();
        assert!(err.contains(wanted), "{err}");
    }
}

#[test]
fn envelope_errors() {
    let sig = signature(vec![spec("x", DType::Float, None)]);
    assert!(decode(r#"{"instances": [1], "inputs": [1]}"#, &sig).is_err());
    assert!(decode(r#"{"signature_name": "s"}"#, &sig)
        .unwrap_err()
        .to_string()
        .contains("Missing"));
    let err = decode(r#"{"instances": [1,"#, &sig).unwrap_err().to_string();
    assert!(err.starts_with("JSON Parse error"), "{err}");
}

#[test]
fn bytes_that_are_not_utf8_are_refused_wherever_they_are() {
    let sig = signature(vec![spec("x", DType::Float, None)]);
    let bodies: [&[u8]; 4] = [
        b"{\"instances\": [1.0], \"note\": \"\xff\"}",
        b"{\"note\": \"a\xc3\", \"instances\": [1.0]}",
        b"{\"\xfe\": 1, \"instances\": [1.0]}",
        b"{\"instances\": [1.0],\n \"n\\u0021\": \"\xff\"}",
    ];
    let wanted = [
        "JSON Parse error: invalid unicode code point at line 1 column 31",
        "JSON Parse error: invalid unicode code point at line 1 column 12",
        "JSON Parse error: invalid unicode code point at line 1 column 3",
        "JSON Parse error: invalid unicode code point at line 2 column 14",
    ];
    for (body, wanted) in bodies.iter().zip(wanted) {
        let error = PredictEnvelope::parse(body).and_then(|e| e.decode(&sig));
        assert_eq!(
            error.unwrap_err().to_string(),
            wanted,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    // The same bodies in UTF-8 are served.
    let fine = "{\"instances\": [1.0], \"note\": \"\u{e9}\"}";
    assert_eq!(decode(fine, &sig).unwrap()[0].data, TensorData::Float(vec![1.0]));
}

#[test]
fn instances_given_one_by_one_decode_as_a_list() {
    let sig = signature(vec![spec("x", DType::Float, None)]);
    let lines = decode_instance_values(["[1.0, 2]", "[3, 4.5]"], &sig).unwrap();
    assert_eq!(
        lines[0],
        Tensor::new(vec![2, 2], TensorData::Float(vec![1.0, 2.0, 3.0, 4.5]))
    );
    assert_eq!(lines, decode_instance_list("[[1.0, 2], [3, 4.5]]", &sig).unwrap());
    let error = decode_instance_values(["[1.0]", "[\"a\"]"], &sig)
        .unwrap_err()
        .to_string();
    assert!(error.contains("element: 1"), "{error}");
    let error = decode_instance_values(["[1.0]", "[2.0]]"], &sig).unwrap_err();
    assert!(matches!(error, CodecError::JsonParse(_)), "{error}");
    assert_eq!(decode_instance_values([], &sig).unwrap_err(), CodecError::NoInstances);
    let two = signature(vec![spec("a", DType::Int32, None), spec("b", DType::String, None)]);
    let objects = decode_instance_values([r#"{"a": 1, "b": "x"}"#, r#"{"a": 2, "b": "y"}"#], &two).unwrap();
    assert_eq!(objects[0].data, TensorData::Int32(vec![1, 2]));
    let error = decode_instance_values([r#"{"a": 1, "b": "x"}"#, "[2]"], &two)
        .unwrap_err()
        .to_string();
    assert!(error.contains("Expecting object but got list at item 1"), "{error}");
}
