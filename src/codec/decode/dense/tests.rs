//! The dense scanner against the general decoder: same tensors, or a give-up.

use super::*;
use crate::signature::SignatureSpec;
use crate::tensor::DType;

fn signature(inputs: &[(&str, DType)]) -> SignatureSpec {
    SignatureSpec::of_inputs(inputs)
}

fn floats(tensor: &Tensor) -> &[f32] {
    match &tensor.data {
        TensorData::Float(v) => v,
        other => panic!("not float: {other:?}"),
    }
}

#[test]
fn numbers_parse_as_the_standard_library_does() {
    let sig = signature(&[("x", DType::Double)]);
    let tokens = [
        "0",
        "-0",
        "7",
        "-12",
        "0.5",
        "-0.25",
        "3.14159",
        "1e3",
        "1E-3",
        "2.5e+2",
        "0.549",
        "1e22",
        "1e23",
        "123456789012345678",
        "0.1234567890123456789",
        "5e-324",
        "1.7976931348623157e308",
        "0.000001",
        "9007199254740993",
        "4.35",
        "1e-400",
    ];
    for token in tokens {
        let tensors = inputs(format!("[{token}]").as_bytes(), &sig).unwrap_or_else(|| panic!("{token}"));
        let TensorData::Double(values) = &tensors[0].data else {
            panic!()
        };
        let expected: f64 = token.parse().unwrap();
        assert_eq!(values[0].to_bits(), expected.to_bits(), "{token}");
    }
}

#[test]
fn image_rows_keep_their_shape() {
    let sig = signature(&[("x", DType::Float)]);
    let tensors = instances(b"[[[0.5, 1, 2], [3, 4.25, 5]], [[6,7,8],[9,10,11]]]", &sig).unwrap();
    assert_eq!(tensors[0].shape, vec![2, 2, 3]);
    assert_eq!(floats(&tensors[0])[..4], [0.5, 1.0, 2.0, 3.0]);
    let tensors = instances(b" [1.0, 2.0] ", &sig).unwrap();
    assert_eq!(tensors[0].shape, vec![2]);
}

#[test]
fn keyed_inputs_fill_each_column() {
    let sig = signature(&[("a", DType::Int32), ("b", DType::Float)]);
    let tensors = inputs(br#"{"b": [[1.5, 2]], "a": [1, 2, 3]}"#, &sig).unwrap();
    assert_eq!(tensors[0].data, TensorData::Int32(vec![1, 2, 3]));
    assert_eq!(tensors[1].shape, vec![1, 2]);
    assert_eq!(floats(&tensors[1]), [1.5, 2.0]);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
    /// Whatever numbers and layout, the dense reader accepts only what
    /// serde accepts, in the same shape, and every value is the correctly
    /// rounded one (serde_json's own reading of long mantissas can be a
    /// unit or two off).
    #[test]
    fn reads_what_serde_reads(
        numbers in proptest::collection::vec(proptest::prelude::any::<f64>(), 1..24),
        width in 1usize..4,
        style in 0u8..4,
        dtype in proptest::sample::select(vec![DType::Float, DType::Double, DType::Half, DType::Int64, DType::Int32]),
    ) {
        let written: Vec<String> = numbers
            .iter()
            .map(|v| match style {
                0 => format!("{v}"),
                1 => format!("{v:e}"),
                2 => format!("{:.3}", v.fract()),
                _ => format!("{}", (v.fract() * 1000.0) as i64),
            })
            .filter(|t| !t.contains("inf") && !t.contains("NaN"))
            .collect();
        proptest::prop_assume!(!written.is_empty());
        let rows: Vec<String> = written.chunks(width).map(|c| format!("[{}]", c.join(", "))).collect();
        // Only whole rows, so the lists are never ragged unless the last is short.
        let raw = format!("[{}]", rows.join(",\n "));
        let sig = signature(&[("x", dtype)]);
        let general = super::super::decode_inputs_with_serde(&raw, &sig, super::super::Coercion::Strict);
        match (inputs(raw.as_bytes(), &sig), general) {
            (Some(dense), Ok(general)) => {
                proptest::prop_assert_eq!(&dense[0].shape, &general[0].shape);
                proptest::prop_assert_eq!(&dense[0].data, &correctly_rounded(&written, dtype));
            }
            // Declining is always allowed; reading what serde refuses is not.
            (Some(dense), Err(error)) => proptest::prop_assert!(false, "read {dense:?} where serde says {error}"),
            (None, _) => {}
        }
    }
}

/// What each token means: integers exactly, decimals through the
/// standard library's correctly rounded parser, then the dtype's cast.
fn correctly_rounded(tokens: &[String], dtype: DType) -> TensorData {
    let integer = |t: &String| !t.contains(['.', 'e', 'E']);
    let float = |t: &String| t.parse::<f64>().unwrap();
    match dtype {
        DType::Double => TensorData::Double(
            tokens
                .iter()
                .map(|t| {
                    if integer(t) {
                        t.parse::<i64>().unwrap() as f64
                    } else {
                        float(t)
                    }
                })
                .collect(),
        ),
        DType::Float => TensorData::Float(
            tokens
                .iter()
                .map(|t| {
                    if integer(t) {
                        t.parse::<i64>().unwrap() as f32
                    } else {
                        float(t) as f32
                    }
                })
                .collect(),
        ),
        DType::Half => TensorData::Half(tokens.iter().map(|t| half::f16::from_f64(float(t))).collect()),
        DType::Int64 => TensorData::Int64(tokens.iter().map(|t| t.parse().unwrap()).collect()),
        DType::Int32 => TensorData::Int32(tokens.iter().map(|t| t.parse().unwrap()).collect()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn leaves_every_other_case_to_the_general_decoder() {
    let float = signature(&[("x", DType::Float)]);
    let int = signature(&[("x", DType::Int32)]);
    let byte = signature(&[("x", DType::UInt8)]);
    let text = signature(&[("x", DType::String)]);
    let two = signature(&[("a", DType::Float), ("b", DType::Float)]);
    for (raw, sig) in [
        ("[]", &float),
        ("[1, 2", &float),
        ("[1, 2,]", &float),
        ("[[1, 2], [3]]", &float),
        ("[[1, 2], 3]", &float),
        ("[NaN]", &float),
        ("[\"1\"]", &float),
        ("[null]", &float),
        ("[true]", &float),
        ("[01]", &float),
        ("[1.]", &float),
        ("[.5]", &float),
        ("[1e]", &float),
        ("[-]", &float),
        ("[+1]", &float),
        ("[1e400]", &float),
        ("[-0]", &int),
        ("[{\"b64\": \"AA==\"}]", &float),
        ("[1.5]", &int),
        ("[256]", &byte),
        ("[-1]", &byte),
        ("[1]", &text),
        ("[12345678901234567890]", &int),
        ("[1] x", &float),
        ("[{\"a\": 1, \"b\": 2}]", &two),
    ] {
        assert!(instances(raw.as_bytes(), sig).is_none(), "{raw}");
    }
    for (raw, sig) in [
        (r#"{"a": [1]}"#, &two),
        (r#"{"a": [1], "a": [2], "b": [3]}"#, &two),
        (r#"{"a": [1], "c": [2], "b": [3]}"#, &two),
        (r#"{"a\u0041": [1]}"#, &two),
        (r#"{}"#, &two),
        ("[1]", &two),
    ] {
        assert!(inputs(raw.as_bytes(), sig).is_none(), "{raw}");
    }
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    assert!(inputs(deep.as_bytes(), &float).is_none());
}
