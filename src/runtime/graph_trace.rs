//! Data-flow questions about a serialized GraphDef (its function library
//! included), such as "does this input reach a `DecodeBase64` op?".
//!
//! Only the fields the trace needs are declared (nodes as `graph_view` reads
//! them); prost skips the rest, so the weights a frozen graph carries in its
//! constants cost a read and nothing else.

use std::collections::{HashMap, HashSet, VecDeque};

use prost::Message;

use super::graph_view::NodeDef;

#[derive(Clone, PartialEq, prost::Message)]
struct GraphDef {
    #[prost(message, repeated, tag = "1")]
    node: Vec<NodeDef>,
    #[prost(message, optional, tag = "2")]
    library: Option<FunctionDefLibrary>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct FunctionDefLibrary {
    #[prost(message, repeated, tag = "1")]
    function: Vec<FunctionDef>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct FunctionDef {
    #[prost(message, optional, tag = "1")]
    signature: Option<OpDef>,
    #[prost(message, repeated, tag = "3")]
    node_def: Vec<NodeDef>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct OpDef {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, repeated, tag = "2")]
    input_arg: Vec<ArgDef>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ArgDef {
    #[prost(string, tag = "1")]
    name: String,
}

/// A value in the trace: a node (its outputs taken together) or a function
/// argument, within the top-level graph (`scope` None) or a named function.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Value {
    scope: Option<String>,
    name: String,
}

/// A node reading a value: the node, the input position, and its scope.
type Use<'a> = (&'a NodeDef, usize, Option<&'a str>);

/// Visits at most this many values, so a pathological graph cannot stall a load.
const MAX_VISITS: usize = 200_000;

/// Whether data from `start_node` (a top-level node name, the placeholder of a
/// signature input) flows into an op of type `target`, following function
/// calls (`f`), loops and conditionals into their bodies.
pub fn reaches_op(graph_def: &[u8], start_node: &str, target: &str) -> Result<bool, String> {
    let graph = GraphDef::decode(graph_def).map_err(|e| format!("cannot parse the GraphDef: {e}"))?;
    let functions: HashMap<&str, &FunctionDef> = graph
        .library
        .iter()
        .flat_map(|l| &l.function)
        .filter_map(|f| f.signature.as_ref().map(|s| (s.name.as_str(), f)))
        .collect();
    let consumers = consumers(&graph, &functions);
    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([Value {
        scope: None,
        name: start_node.to_string(),
    }]);
    while let Some(value) = queue.pop_front() {
        if seen.len() >= MAX_VISITS || !seen.insert(value.clone()) {
            continue;
        }
        for &(node, position, scope) in consumers.get(&value).into_iter().flatten() {
            if node.op == target {
                return Ok(true);
            }
            queue.push_back(Value {
                scope: scope.map(str::to_string),
                name: node.name.clone(),
            });
            queue.extend(function_arguments(node, position, &functions));
        }
    }
    Ok(false)
}

/// Consumers of each value, per scope (the graph, each function):
/// (consumer node, data input position).
fn consumers<'g>(graph: &'g GraphDef, functions: &HashMap<&'g str, &'g FunctionDef>) -> HashMap<Value, Vec<Use<'g>>> {
    let mut consumers: HashMap<Value, Vec<Use<'_>>> = HashMap::new();
    let scopes = std::iter::once((None, graph.node.as_slice()))
        .chain(functions.iter().map(|(name, f)| (Some(*name), f.node_def.as_slice())));
    for (scope, nodes) in scopes {
        for node in nodes {
            let data_inputs = node.input.iter().filter(|i| !i.starts_with('^'));
            for (position, input) in data_inputs.enumerate() {
                let value = Value {
                    scope: scope.map(str::to_string),
                    name: producer(input).to_string(),
                };
                consumers.entry(value).or_default().push((node, position, scope));
            }
        }
    }
    consumers
}

/// The function arguments that a value fed to `node` at `position` becomes:
/// in an op that is itself a library function (TF1 Defun), then in those its
/// attributes name (`f`, branches, bodies).
fn function_arguments(node: &NodeDef, position: usize, functions: &HashMap<&str, &FunctionDef>) -> Vec<Value> {
    let called = functions.get(node.op.as_str()).map(|def| (*def, Some(position)));
    // Conditionals pass their inputs after the condition or branch index,
    // which itself reaches no branch argument.
    let shifted = matches!(node.op.as_str(), "If" | "StatelessIf" | "Case" | "StatelessCase");
    let argument = if shifted {
        position.checked_sub(1)
    } else {
        Some(position)
    };
    let named = node.attr.values().flat_map(|v| {
        v.func
            .iter()
            .chain(v.list.iter().flat_map(|l| &l.func))
            .filter_map(|f| functions.get(f.name.as_str()))
            .map(move |def| (*def, argument))
    });
    let mut values = Vec::new();
    for (def, argument) in called.into_iter().chain(named) {
        let (Some(signature), Some(argument)) = (&def.signature, argument) else {
            continue;
        };
        let targets: Vec<&ArgDef> = match signature.input_arg.get(argument) {
            Some(arg) => vec![arg],
            // Unknown calling convention: assume any argument may carry it.
            None => signature.input_arg.iter().collect(),
        };
        values.extend(targets.into_iter().map(|arg| Value {
            scope: Some(signature.name.clone()),
            name: arg.name.clone(),
        }));
    }
    values
}

/// The node (or function argument) an input string names: `node`, `node:2`,
/// or inside functions `node:output:0`.
fn producer(input: &str) -> &str {
    input.split(':').next().unwrap_or(input)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::graph_view::{AttrValue, ListValue, NameAttrList};

    fn node(name: &str, op: &str, inputs: &[&str]) -> NodeDef {
        NodeDef {
            name: name.into(),
            op: op.into(),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            attr: Default::default(),
        }
    }

    #[test]
    fn follows_nodes_and_function_calls() {
        let mut call = node("call", "StatefulPartitionedCall", &["other", "images"]);
        call.attr.insert(
            "f".into(),
            AttrValue {
                func: Some(NameAttrList { name: "body".into() }),
                ..AttrValue::default()
            },
        );
        let graph = GraphDef {
            node: vec![
                node("images", "Placeholder", &[]),
                node("other", "Placeholder", &[]),
                node("plain", "Placeholder", &[]),
                node("identity", "Identity", &["plain:0"]),
                call,
            ],
            library: Some(FunctionDefLibrary {
                function: vec![FunctionDef {
                    signature: Some(OpDef {
                        name: "body".into(),
                        input_arg: vec![ArgDef { name: "a".into() }, ArgDef { name: "b".into() }],
                    }),
                    node_def: vec![
                        node("copy", "Identity", &["b"]),
                        node("decode", "DecodeBase64", &["copy:output:0"]),
                        node("other_use", "Neg", &["a"]),
                    ],
                }],
            }),
        }
        .encode_to_vec();
        assert!(reaches_op(&graph, "images", "DecodeBase64").unwrap());
        assert!(!reaches_op(&graph, "other", "DecodeBase64").unwrap());
        assert!(!reaches_op(&graph, "plain", "DecodeBase64").unwrap());
        assert!(reaches_op(b"\xff\xff", "x", "DecodeBase64").is_err());

        // A Case's branches (an attribute list) and a Defun-style call (the op is the function).
        let mut case = node("case", "Case", &["index", "images"]);
        case.attr.insert(
            "branches".into(),
            AttrValue {
                list: Some(ListValue {
                    func: vec![NameAttrList { name: "branch".into() }],
                }),
                ..AttrValue::default()
            },
        );
        let function = |name: &str, arg: &str, nodes: Vec<NodeDef>| FunctionDef {
            signature: Some(OpDef {
                name: name.into(),
                input_arg: vec![ArgDef { name: arg.into() }],
            }),
            node_def: nodes,
        };
        let graph = GraphDef {
            node: vec![
                node("images", "Placeholder", &[]),
                node("index", "Placeholder", &[]),
                case,
                node("texts", "Placeholder", &[]),
                node("defun", "decode_fn", &["texts"]),
            ],
            library: Some(FunctionDefLibrary {
                function: vec![
                    function("branch", "img", vec![node("d", "DecodeBase64", &["img"])]),
                    function("decode_fn", "t", vec![node("d", "DecodeBase64", &["t"])]),
                ],
            }),
        }
        .encode_to_vec();
        assert!(reaches_op(&graph, "images", "DecodeBase64").unwrap());
        assert!(reaches_op(&graph, "texts", "DecodeBase64").unwrap());
        assert!(!reaches_op(&graph, "index", "DecodeBase64").unwrap());
    }
}
