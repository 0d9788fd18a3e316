//! Reads `saved_model.pb` without TensorFlow: every MetaGraph's tags and
//! signatures, and the shapes the graph's placeholders really take.
//!
//! Only the fields `inspect` needs are declared; prost skips the rest.

use std::collections::BTreeMap;
use std::path::Path;

use prost::Message;

use crate::runtime::graph_view::{NodeDef, TensorShapeProto};
use crate::tensor::DType;

#[derive(Clone, PartialEq, prost::Message)]
struct SavedModel {
    #[prost(message, repeated, tag = "2")]
    meta_graphs: Vec<MetaGraphDef>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct MetaGraphDef {
    #[prost(message, optional, tag = "1")]
    meta_info_def: Option<MetaInfoDef>,
    #[prost(message, optional, tag = "2")]
    graph_def: Option<GraphDef>,
    #[prost(btree_map = "string, message", tag = "5")]
    signature_def: BTreeMap<String, SignatureDef>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct MetaInfoDef {
    #[prost(string, repeated, tag = "4")]
    tags: Vec<String>,
    #[prost(string, tag = "5")]
    tensorflow_version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct GraphDef {
    #[prost(message, repeated, tag = "1")]
    node: Vec<NodeDef>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SignatureDef {
    #[prost(btree_map = "string, message", tag = "1")]
    inputs: BTreeMap<String, TensorInfo>,
    #[prost(btree_map = "string, message", tag = "2")]
    outputs: BTreeMap<String, TensorInfo>,
    #[prost(string, tag = "3")]
    method_name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TensorInfo {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(int32, tag = "2")]
    dtype: i32,
    #[prost(message, optional, tag = "3")]
    tensor_shape: Option<TensorShapeProto>,
}

/// A shape as a proto states it: `None` for unknown rank, `-1` for an unknown dimension.
pub type Dims = Option<Vec<i64>>;

fn dims(shape: Option<&TensorShapeProto>) -> Dims {
    match shape {
        None => None,
        Some(shape) if shape.unknown_rank => None,
        Some(shape) => Some(shape.dim.iter().map(|d| d.size).collect()),
    }
}

/// One signature input or output, with the shape its graph tensor really has
/// when that tensor is a placeholder.
#[derive(Debug, PartialEq)]
pub struct TensorEntry {
    pub key: String,
    pub tensor_name: String,
    pub dtype: DType,
    pub declared: Dims,
    /// `Some` when the tensor is a placeholder: the shape it accepts.
    pub placeholder: Option<Dims>,
}

#[derive(Debug, PartialEq)]
pub struct SignatureEntry {
    pub name: String,
    pub method_name: String,
    pub inputs: Vec<TensorEntry>,
    pub outputs: Vec<TensorEntry>,
}

#[derive(Debug, PartialEq)]
pub struct MetaGraphEntry {
    pub tags: Vec<String>,
    pub tensorflow_version: String,
    pub signatures: Vec<SignatureEntry>,
}

/// Every MetaGraph of `dir/saved_model.pb`, in file order.
pub fn read(dir: &Path) -> Result<Vec<MetaGraphEntry>, String> {
    let path = dir.join("saved_model.pb");
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let model = SavedModel::decode(bytes.as_slice())
        .map_err(|e| format!("{}: not a SavedModel protobuf: {e}", path.display()))?;
    Ok(model.meta_graphs.iter().map(meta_graph_entry).collect())
}

fn meta_graph_entry(meta: &MetaGraphDef) -> MetaGraphEntry {
    let placeholders: BTreeMap<&str, Dims> = meta
        .graph_def
        .iter()
        .flat_map(|g| &g.node)
        .filter(|n| n.op == "Placeholder" || n.op == "PlaceholderWithDefault")
        .map(|n| {
            (
                n.name.as_str(),
                dims(n.attr.get("shape").and_then(|a| a.shape.as_ref())),
            )
        })
        .collect();
    let tensors = |map: &BTreeMap<String, TensorInfo>| -> Vec<TensorEntry> {
        map.iter()
            .map(|(key, info)| {
                let (op, _) = crate::signature::split_tensor_name(&info.name);
                TensorEntry {
                    key: key.clone(),
                    tensor_name: info.name.clone(),
                    dtype: DType::from_proto(info.dtype),
                    declared: dims(info.tensor_shape.as_ref()),
                    placeholder: placeholders.get(op).cloned(),
                }
            })
            .collect()
    };
    let info = meta.meta_info_def.clone().unwrap_or_default();
    MetaGraphEntry {
        tags: info.tags,
        tensorflow_version: info.tensorflow_version,
        signatures: meta
            .signature_def
            .iter()
            .map(|(name, def)| SignatureEntry {
                name: name.clone(),
                method_name: def.method_name.clone(),
                inputs: tensors(&def.inputs),
                outputs: tensors(&def.outputs),
            })
            .collect(),
    }
}

/// Why a declared input shape does not say what the graph takes, if it does not.
pub fn inexact(entry: &TensorEntry) -> Option<String> {
    let taken = entry.placeholder.as_ref()?;
    if *taken == entry.declared {
        return None;
    }
    let declared = format_dims(&entry.declared);
    let taken_text = format_dims(taken);
    let reason = match (&entry.declared, taken) {
        (Some(d), _) if d.is_empty() => "an empty shape, as old exports write for 'unknown'",
        (Some(d), Some(t)) if d.len() != t.len() => "a different rank",
        (Some(_), None) => "a shape where the graph takes any rank",
        _ => "other dimensions",
    };
    Some(format!(
        "input '{}' declares {declared} ({reason}) but its placeholder takes {taken_text}; \
         requests are checked by the graph, not by the declared shape",
        entry.key
    ))
}

/// A shape as `saved_model_cli` prints it: `(-1, 3)`, `(-1)`, `()`,
/// `unknown_rank` (its dimensions joined inside parentheses, not a Python tuple).
pub fn format_dims(dims: &Dims) -> String {
    match dims {
        None => "unknown_rank".to_string(),
        Some(d) => format!("({})", d.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::graph_view::{AttrValue, Dim};

    fn entry(declared: Dims, placeholder: Option<Dims>) -> TensorEntry {
        TensorEntry {
            key: "x".into(),
            tensor_name: "x:0".into(),
            dtype: DType::Float,
            declared,
            placeholder,
        }
    }

    #[test]
    fn formats_shapes_as_saved_model_cli() {
        assert_eq!(format_dims(&None), "unknown_rank");
        assert_eq!(format_dims(&Some(vec![])), "()");
        assert_eq!(format_dims(&Some(vec![-1])), "(-1)");
        assert_eq!(format_dims(&Some(vec![-1, 3])), "(-1, 3)");
    }

    #[test]
    fn flags_declared_shapes_the_graph_does_not_enforce() {
        assert_eq!(inexact(&entry(Some(vec![-1]), Some(Some(vec![-1])))), None);
        assert_eq!(
            inexact(&entry(Some(vec![-1]), None)),
            None,
            "not a placeholder: nothing to compare"
        );
        let empty = inexact(&entry(Some(vec![]), Some(None))).unwrap();
        assert!(
            empty.contains("declares ()") && empty.contains("unknown_rank"),
            "{empty}"
        );
        let estimator = inexact(&entry(Some(vec![-1, 1]), Some(Some(vec![-1])))).unwrap();
        assert!(estimator.contains("different rank"), "{estimator}");
    }

    #[test]
    fn reads_meta_graphs_and_placeholders() {
        let shape = |d: &[i64]| TensorShapeProto {
            dim: d.iter().map(|&size| Dim { size }).collect(),
            unknown_rank: false,
        };
        let mut attr = BTreeMap::new();
        attr.insert(
            "shape".to_string(),
            AttrValue {
                shape: Some(shape(&[-1])),
                ..AttrValue::default()
            },
        );
        let mut inputs = BTreeMap::new();
        inputs.insert(
            "x".to_string(),
            TensorInfo {
                name: "x:0".into(),
                dtype: 1,
                tensor_shape: Some(shape(&[-1, 1])),
            },
        );
        let mut signature_def = BTreeMap::new();
        signature_def.insert(
            "serving_default".to_string(),
            SignatureDef {
                inputs,
                outputs: BTreeMap::new(),
                method_name: crate::signature::PREDICT_METHOD.into(),
            },
        );
        let model = SavedModel {
            meta_graphs: vec![MetaGraphDef {
                meta_info_def: Some(MetaInfoDef {
                    tags: vec!["serve".into()],
                    tensorflow_version: "1.15.0".into(),
                }),
                graph_def: Some(GraphDef {
                    node: vec![NodeDef {
                        name: "x".into(),
                        op: "Placeholder".into(),
                        attr,
                        ..NodeDef::default()
                    }],
                }),
                signature_def,
            }],
        };
        let dir = std::env::temp_dir().join(format!("tfserve-inspect-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("saved_model.pb"), model.encode_to_vec()).unwrap();
        let metas = read(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(metas[0].tags, vec!["serve"]);
        let x = &metas[0].signatures[0].inputs[0];
        assert_eq!(
            (x.declared.clone(), x.placeholder.clone()),
            (Some(vec![-1, 1]), Some(Some(vec![-1])))
        );
    }
}
