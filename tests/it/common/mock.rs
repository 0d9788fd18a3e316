//! The runtime the mock-backed tests run on, without TensorFlow.
//!
//! A version directory loads with the signatures its `saved_model.pb`
//! declares, read as `tfserve inspect` reads them, so signature checks,
//! metadata and error messages are the server's own. Runs compute what the
//! committed models compute (`models/generate.py`, and TF Serving's
//! half_plus_two) when the `saved_model.pb` is byte for byte one of theirs
//! whose graph is arithmetic; any other model loads and answers each run with
//! UNIMPLEMENTED, so what needs its real answers needs TensorFlow.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use prost::Message;
use tfserve::inspect::saved_model::{self, TensorEntry};
use tfserve::proto::tensorflow::{feature::Kind, Example};
use tfserve::runtime::mock::{invalid, MockModel};
use tfserve::runtime::{Loader, Model, RuntimeError, SessionConfig};
use tfserve::signature::{SignatureSpec, TensorSpec};
use tfserve::status::Code;
use tfserve::tensor::{Tensor, TensorData};

/// What a committed model computes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Computes {
    /// `y = x / 2 + offset` (half_plus_two's and half_plus_three's graphs);
    /// over `tf.Example`s, parsed by the graph's node of that name, whose
    /// name TensorFlow's errors end with.
    HalfPlus(f32, &'static str),
    /// `y = x + version` (adder).
    Add(f32),
    MultiIo,
    /// float16 `x` → float32 `2x`.
    Double,
    FirstToken,
}

/// The committed models the mock computes, by their `saved_model.pb`'s bytes.
fn known() -> &'static [(Vec<u8>, Computes)] {
    static KNOWN: OnceLock<Vec<(Vec<u8>, Computes)>> = OnceLock::new();
    KNOWN.get_or_init(|| {
        let models = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models");
        [
            ("half_plus_three/1", Computes::HalfPlus(3.0, "")),
            (
                "half_plus_two/00000123",
                Computes::HalfPlus(2.0, "ParseExample/ParseExample"),
            ),
            (
                "tf1_half_plus_two/1",
                Computes::HalfPlus(2.0, "ParseExample/ParseExampleV2"),
            ),
            ("adder/1", Computes::Add(1.0)),
            ("adder/2", Computes::Add(2.0)),
            ("multi_io/1", Computes::MultiIo),
            ("half_precision/1", Computes::Double),
            ("first_token/1", Computes::FirstToken),
        ]
        .into_iter()
        .filter_map(|(dir, computes)| Some((std::fs::read(models.join(dir).join("saved_model.pb")).ok()?, computes)))
        .collect()
    })
}

pub struct CommittedModels;

impl Loader for CommittedModels {
    fn load(&self, dir: &Path, tags: &[String], _session: &SessionConfig) -> Result<Arc<dyn Model>, RuntimeError> {
        let error = |message: String| RuntimeError::Load {
            path: dir.display().to_string(),
            message,
        };
        let bytes = std::fs::read(dir.join("saved_model.pb")).map_err(|e| error(e.to_string()))?;
        let graphs = saved_model::read(dir).map_err(error)?;
        let graph = graphs
            .iter()
            .find(|g| tags.iter().all(|t| g.tags.contains(t)))
            .ok_or_else(|| error(format!("no MetaGraph has the tags {tags:?}")))?;
        let signatures = graph
            .signatures
            .iter()
            .filter(|s| s.name != "__saved_model_init_op")
            .map(|s| {
                let mut spec = SignatureSpec {
                    name: s.name.clone(),
                    method_name: s.method_name.clone(),
                    inputs: s.inputs.iter().map(spec).collect(),
                    outputs: s.outputs.iter().map(spec).collect(),
                    base64_inputs: Vec::new(),
                };
                spec.sort();
                spec
            })
            .collect::<Vec<_>>();
        let computes = known().iter().find(|(pb, _)| *pb == bytes).map(|(_, c)| *c);
        let outputs: Vec<(String, Vec<String>)> = signatures
            .iter()
            .map(|s| (s.name.clone(), s.outputs.iter().map(|o| o.key.clone()).collect()))
            .collect();
        Ok(Arc::new(MockModel::new(signatures, move |signature, inputs| {
            let keys = outputs
                .iter()
                .find(|(name, _)| name == signature)
                .map(|(_, keys)| keys.as_slice())
                .unwrap_or_default();
            match computes {
                Some(computes) => run(computes, signature, keys, inputs),
                None => Err(RuntimeError::Run {
                    code: Code::Unimplemented,
                    message: "the mock runtime does not compute this model".into(),
                }),
            }
        })))
    }
}

fn spec(entry: &TensorEntry) -> TensorSpec {
    TensorSpec {
        key: entry.key.clone(),
        tensor_name: entry.tensor_name.clone(),
        dtype: entry.dtype,
        shape: entry.declared.clone(),
    }
}

/// One run: `inputs` in the signature's input order, outputs in `keys`' order.
fn run(computes: Computes, signature: &str, keys: &[String], inputs: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> {
    let mut inputs = inputs.into_iter();
    let mut first = inputs.next().ok_or_else(|| invalid("no input"))?;
    match (computes, &mut first.data) {
        (Computes::HalfPlus(offset, _), TensorData::Float(x)) => x.iter_mut().for_each(|v| *v = *v / 2.0 + offset),
        (Computes::HalfPlus(offset, parse_node), TensorData::String(examples)) => {
            // TF Serving's half_plus_two: y2 and y3 add 3 instead of 2.
            let offset = if signature.ends_with("y2") || signature.ends_with("y3") {
                3.0
            } else {
                offset
            };
            return examples_run(offset, parse_node, keys, examples);
        }
        (Computes::Add(version), TensorData::Float(x)) => x.iter_mut().for_each(|v| *v += version),
        (Computes::Double, TensorData::Half(x)) => {
            let doubled = x.iter().map(|v| v.to_f32() * 2.0).collect();
            return Ok(vec![Tensor::new(first.shape, TensorData::Float(doubled))]);
        }
        (Computes::FirstToken, TensorData::Int64(tokens)) => return Ok(first_token(&first.shape, tokens)),
        (Computes::MultiIo, _) => return multi_io(keys, first, inputs.collect()),
        (_, other) => return Err(invalid(&format!("unexpected input of {}", other.dtype()))),
    }
    Ok(vec![first])
}

/// half_plus_two's classify and regress signatures over serialized
/// `tf.Example`s: `x` (or `x2`) / 2 + offset, and tf1's constant classes;
/// refused in the words of TensorFlow's ParseExample at `parse_node`.
fn examples_run(
    offset: f32,
    parse_node: &str,
    keys: &[String],
    examples: &[Vec<u8>],
) -> Result<Vec<Tensor>, RuntimeError> {
    let refused = |what: String| invalid(&format!("Name: <unknown>, {what}\n\t [[{{{{node {parse_node}}}}}]]"));
    let mut values = Vec::with_capacity(examples.len());
    for (index, bytes) in examples.iter().enumerate() {
        let example = Example::decode(bytes.as_slice()).map_err(|e| invalid(&format!("not a tf.Example: {e}")))?;
        let features = example.features.map(|f| f.feature).unwrap_or_default();
        let (key, kind) = ["x", "x2"]
            .iter()
            .find_map(|key| Some((*key, features.get(*key)?.kind.as_ref()?)))
            .ok_or_else(|| refused("Feature: x (data type: float) is required but could not be found.".into()))?;
        let x = match kind {
            Kind::FloatList(list) => list.value.first().copied().unwrap_or_default(),
            other => {
                let dtype = match other {
                    Kind::BytesList(_) => "string",
                    _ => "int64",
                };
                return Err(refused(format!(
                    "Key: {key}, Index: {index}.  Data types don't match. Data type: {dtype} but expected type: float"
                )));
            }
        };
        values.push(x / 2.0 + offset);
    }
    let rows = values.len();
    keys.iter()
        .map(|key| match key.as_str() {
            "classes" => Ok(Tensor::new(
                vec![rows, 2],
                TensorData::String((0..rows).flat_map(|_| [b"pos".to_vec(), b"neg".to_vec()]).collect()),
            )),
            "scores" if keys.len() == 2 => Ok(Tensor::new(
                vec![rows, 2],
                TensorData::Float(values.iter().flat_map(|y| [*y, 1.0 - y]).collect()),
            )),
            _ => Ok(Tensor::new(vec![rows, 1], TensorData::Float(values.clone()))),
        })
        .collect()
}

fn first_token(shape: &[usize], tokens: &[i64]) -> Vec<Tensor> {
    let rows = shape.first().copied().unwrap_or(0);
    let width = shape.get(1).copied().unwrap_or(0);
    let first = (0..rows).map(|r| tokens.get(r * width).copied().unwrap_or(0)).collect();
    vec![
        Tensor::new(vec![rows], TensorData::Int64(first)),
        Tensor::new(vec![rows], TensorData::Int32(vec![width as i32; rows])),
    ]
}

/// multi_io: inputs `count`, `features`, `flag`, `label` (sorted by key);
/// outputs in `keys`' order.
fn multi_io(keys: &[String], count: Tensor, rest: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> {
    let [features, flag, label]: [Tensor; 3] = rest.try_into().map_err(|_| invalid("multi_io takes four inputs"))?;
    let features_shape = features.shape.clone();
    let (TensorData::Int64(count), TensorData::Float(features), TensorData::Bool(flag), TensorData::String(label)) =
        (count.data, features.data, flag.data, label.data)
    else {
        return Err(invalid("multi_io's inputs have other dtypes"));
    };
    // Each output has its own input's rows; `scaled` broadcasts a single row
    // of either side against the other's, as TensorFlow's Mul does, and is
    // refused in its words, naming the committed graph's function and node.
    let width = features_shape.get(1).copied().unwrap_or(0).max(1);
    let feature_rows = features.len() / width;
    let scaled_rows = match (feature_rows, count.len()) {
        (f, c) if f == c || c == 1 => f,
        (1, c) => c,
        (f, c) => return Err(invalid(&format!("Incompatible shapes: [{f},{width}] vs. [{c},1]\n\t [[{{{{function_node __inference_serve_200}}}}{{{{node mul}}}}]]"))),
    };
    keys.iter()
        .map(|key| {
            let (shape, data) = match key.as_str() {
                "count_plus_one" => (
                    vec![count.len()],
                    TensorData::Int64(count.iter().map(|c| c + 1).collect()),
                ),
                "flag_not" => (vec![flag.len()], TensorData::Bool(flag.iter().map(|f| !f).collect())),
                "greeting" => (
                    vec![label.len()],
                    TensorData::String(label.iter().map(|l| [b"hello ".as_slice(), l].concat()).collect()),
                ),
                "label_bytes" => (vec![label.len()], TensorData::String(label.clone())),
                "scaled" => (
                    vec![scaled_rows, width],
                    TensorData::Double(
                        (0..scaled_rows * width)
                            .map(|i| {
                                let (row, column) = (i / width, i % width);
                                let feature = features[(row % feature_rows) * width + column];
                                f64::from(feature) * count[row % count.len()] as f64
                            })
                            .collect(),
                    ),
                ),
                "total" => (
                    vec![feature_rows],
                    TensorData::Float(features.chunks(width).map(|row| row.iter().sum()).collect()),
                ),
                other => return Err(invalid(&format!("multi_io has no output {other}"))),
            };
            Ok(Tensor::new(shape, data))
        })
        .collect()
}
