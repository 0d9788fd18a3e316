//! TF Serving's classify/regress JSON: `examples` (+ `context`) become serialized
//! `tf.Example` protos; scores, classes and regression values become `results`.

use std::collections::BTreeMap;

use prost::Message;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::encode::{write_f32, write_str};
use super::CodecError;
use crate::proto::tensorflow::feature::Kind;
use crate::proto::tensorflow::{BytesList, Example, Feature, Features, FloatList, Int64List};
use crate::tensor::{Tensor, TensorData};

/// A classify or regress request body.
#[derive(Deserialize)]
pub struct ExamplesRequest {
    #[serde(default)]
    pub signature_name: Option<String>,
    #[serde(default)]
    context: Option<Value>,
    #[serde(default)]
    examples: Option<Value>,
}

impl ExamplesRequest {
    pub fn parse(body: &[u8]) -> Result<Self, CodecError> {
        serde_json::from_slice(body).map_err(|e| CodecError::json_parse(&e))
    }

    /// One serialized `tf.Example` per entry of `examples`, each carrying the
    /// `context` features too.
    pub fn serialized_examples(&self) -> Result<Tensor, CodecError> {
        let examples = match &self.examples {
            Some(Value::Array(items)) if !items.is_empty() => items,
            Some(Value::Array(_)) => return Err(CodecError::NoExamples),
            Some(_) => return Err(CodecError::ExamplesNotArray),
            None => return Err(CodecError::MissingExamples),
        };
        let context = match &self.context {
            None => BTreeMap::new(),
            Some(Value::Object(map)) => features_of(map, "context")?,
            Some(_) => return Err(CodecError::ContextNotObject),
        };
        let mut serialized = Vec::with_capacity(examples.len());
        for (index, example) in examples.iter().enumerate() {
            let Value::Object(map) = example else {
                return Err(CodecError::ExampleNotObject(index));
            };
            let mut feature = features_of(map, &format!("examples[{index}]"))?;
            for (name, value) in &context {
                if feature.contains_key(name) {
                    return Err(CodecError::FeatureTwice {
                        feature: name.to_string(),
                        index,
                    });
                }
                feature.insert(name.clone(), value.clone());
            }
            serialized.push(
                Example {
                    features: Some(Features { feature }),
                }
                .encode_to_vec(),
            );
        }
        Ok(Tensor::new(vec![serialized.len()], TensorData::String(serialized)))
    }
}

fn features_of(map: &Map<String, Value>, place: &str) -> Result<BTreeMap<String, Feature>, CodecError> {
    map.iter()
        .map(|(name, value)| Ok((name.clone(), feature_of(value, &format!("{place}.{name}"))?)))
        .collect()
}

/// JSON integers become int64 lists, other numbers float lists, strings and
/// `{"b64": ...}` bytes lists; a list takes the kind of its elements.
fn feature_of(value: &Value, place: &str) -> Result<Feature, CodecError> {
    let items: &[Value] = match value {
        Value::Array(items) => items,
        single => std::slice::from_ref(single),
    };
    let bytes_of = |item: &Value| -> Option<Vec<u8>> {
        match item {
            Value::String(s) => Some(s.as_bytes().to_vec()),
            Value::Object(obj) if obj.len() == 1 => obj
                .get("b64")
                .and_then(Value::as_str)
                .and_then(super::decode::decode_base64),
            _ => None,
        }
    };
    let kind = if items.iter().all(|i| i.is_i64() || i.is_u64()) && !items.is_empty() {
        let values = items
            .iter()
            .map(|i| i.as_i64().ok_or(()))
            .collect::<Result<Vec<_>, _>>();
        match values {
            Ok(value) => Kind::Int64List(Int64List { value }),
            Err(()) => return Err(CodecError::FeatureOutOfRange(place.to_string())),
        }
    } else if items.iter().all(Value::is_number) {
        Kind::FloatList(FloatList {
            value: items.iter().filter_map(Value::as_f64).map(|v| v as f32).collect(),
        })
    } else if let Some(value) = items.iter().map(bytes_of).collect::<Option<Vec<_>>>() {
        Kind::BytesList(BytesList { value })
    } else {
        return Err(CodecError::FeatureMixed {
            place: place.to_string(),
            value: value.to_string(),
        });
    };
    Ok(Feature { kind: Some(kind) })
}

/// `{"results": [[[label, score], ...], ...]}` from classes `[N, K]` (strings)
/// and/or scores `[N, K]` (floats).
pub fn classify_response(classes: Option<&Tensor>, scores: Option<&Tensor>) -> Result<Vec<u8>, CodecError> {
    let (labels, label_shape) = typed_output(classes, "classes", "a string", |data| match data {
        TensorData::String(v) => Some(v),
        _ => None,
    })?;
    let (values, score_shape) = typed_output(scores, "scores", "a float", |data| match data {
        TensorData::Float(v) => Some(v),
        _ => None,
    })?;
    let shape = if values.is_some() { score_shape } else { label_shape };
    let (rows, per_row) = match shape {
        [n] => (*n, 1),
        [n, k] => (*n, *k),
        other => return Err(CodecError::ClassificationShape(other.to_vec())),
    };
    if values.is_some() && labels.is_some() && label_shape != score_shape {
        return Err(CodecError::ClassificationMismatch {
            classes: label_shape.to_vec(),
            scores: score_shape.to_vec(),
        });
    }
    let mut out = b"{\"results\":[".to_vec();
    for row in 0..rows {
        if row > 0 {
            out.push(b',');
        }
        out.push(b'[');
        for k in 0..per_row {
            if k > 0 {
                out.push(b',');
            }
            let i = row * per_row + k;
            out.push(b'[');
            let label = labels
                .map(|l| String::from_utf8_lossy(&l[i]).into_owned())
                .unwrap_or_default();
            write_str(&mut out, &label);
            out.push(b',');
            write_f32(&mut out, values.map(|v| v[i]).unwrap_or(0.0));
            out.push(b']');
        }
        out.push(b']');
    }
    out.extend_from_slice(b"]}");
    Ok(out)
}

/// A classification output's values when it has the dtype `expected` names,
/// with its shape (`[]` when the signature has no such output).
fn typed_output<'t, T>(
    tensor: Option<&'t Tensor>,
    key: &str,
    expected: &'static str,
    values: impl Fn(&'t TensorData) -> Option<&'t T>,
) -> Result<(Option<&'t T>, &'t [usize]), CodecError> {
    let Some(tensor) = tensor else {
        return Ok((None, &[]));
    };
    match values(&tensor.data) {
        Some(v) => Ok((Some(v), tensor.shape.as_slice())),
        None => Err(CodecError::ClassificationType {
            key: key.to_string(),
            expected,
            got: tensor.dtype(),
        }),
    }
}

/// `{"results": [v, ...]}` from a regression output of shape `[N]` or `[N, 1]`.
pub fn regress_response(outputs: &Tensor) -> Result<Vec<u8>, CodecError> {
    let TensorData::Float(values) = &outputs.data else {
        return Err(CodecError::RegressionType(outputs.dtype()));
    };
    if !matches!(outputs.shape.as_slice(), [_] | [_, 1]) {
        return Err(CodecError::RegressionShape(outputs.shape.clone()));
    }
    let mut out = b"{\"results\":[".to_vec();
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_f32(&mut out, *v);
    }
    out.extend_from_slice(b"]}");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples_become_tf_examples_with_context() {
        let req =
            ExamplesRequest::parse(br#"{"context": {"c": "k"}, "examples": [{"x": 1.5}, {"x": [1, 2]}]}"#).unwrap();
        let tensor = req.serialized_examples().unwrap();
        let TensorData::String(protos) = tensor.data else {
            panic!()
        };
        let first = Example::decode(protos[0].as_slice()).unwrap().features.unwrap().feature;
        assert_eq!(first["x"].kind, Some(Kind::FloatList(FloatList { value: vec![1.5] })));
        assert_eq!(
            first["c"].kind,
            Some(Kind::BytesList(BytesList {
                value: vec![b"k".to_vec()]
            }))
        );
        let second = Example::decode(protos[1].as_slice()).unwrap().features.unwrap().feature;
        assert_eq!(second["x"].kind, Some(Kind::Int64List(Int64List { value: vec![1, 2] })));
    }

    #[test]
    fn bad_examples_are_rejected() {
        for body in [
            r#"{}"#,
            r#"{"examples": []}"#,
            r#"{"examples": [1]}"#,
            r#"{"examples": [{"x": [1, "a"]}]}"#,
        ] {
            let req = ExamplesRequest::parse(body.as_bytes()).unwrap();
            assert!(req.serialized_examples().is_err(), "{body}");
        }
        let req = ExamplesRequest::parse(br#"{"context": {"x": 1}, "examples": [{"x": 2}]}"#).unwrap();
        assert!(req.serialized_examples().unwrap_err().to_string().contains("'x'"));
    }

    #[test]
    fn results_layouts() {
        let classes = Tensor::new(vec![1, 2], TensorData::String(vec![b"a".to_vec(), b"b".to_vec()]));
        let scores = Tensor::new(vec![1, 2], TensorData::Float(vec![0.25, 0.75]));
        let out = classify_response(Some(&classes), Some(&scores)).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"results":[[["a",0.25],["b",0.75]]]}"#
        );
        let reg = Tensor::new(vec![2, 1], TensorData::Float(vec![2.5, 3.0]));
        assert_eq!(
            String::from_utf8(regress_response(&reg).unwrap()).unwrap(),
            r#"{"results":[2.5,3.0]}"#
        );
    }
}
