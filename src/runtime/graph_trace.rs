//! Data-flow questions about a GraphDef (its function library included), such
//! as "does this input reach a `DecodeBase64` op?" (the loader) and "which
//! nodes can running these outputs execute?" (the load-time audit).
//!
//! Only the fields the trace needs are declared (nodes as `graph_view` reads
//! them); prost skips the rest, so the weights a frozen graph carries in its
//! constants cost a read and nothing else.

use std::collections::{HashMap, HashSet, VecDeque};

#[cfg(any(test, feature = "tensorflow"))]
use prost::Message;

use super::graph_view::NodeDef;

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct GraphDef {
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeDef>,
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

#[cfg(any(test, feature = "tensorflow"))]
/// A value in the trace: a node (its outputs taken together) or a function
/// argument, within the top-level graph (`scope` None) or a named function.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Value {
    scope: Option<String>,
    name: String,
}

#[cfg(any(test, feature = "tensorflow"))]
/// A node reading a value: the node, the input position, and its scope.
type Use<'a> = (&'a NodeDef, usize, Option<&'a str>);

/// Visits at most this many values, so a pathological graph cannot stall a load.
const MAX_VISITS: usize = 200_000;

#[cfg(any(test, feature = "tensorflow"))]
/// Whether data from `start_node` (a top-level node name, the placeholder of a
/// signature input) flows into an op of type `target`, following function
/// calls (`f`), loops and conditionals into their bodies.
pub fn reaches_op(graph_def: &[u8], start_node: &str, target: &str) -> Result<bool, String> {
    let graph = GraphDef::decode(graph_def).map_err(|e| format!("cannot parse the GraphDef: {e}"))?;
    let functions = library(&graph);
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

/// Every node that running the top-level nodes `outputs` can execute, with
/// where it is: a top-level node by its name, a node inside a function by
/// the path of calls that reach it (`call/inner_call/ReadFile`).
///
/// The top-level graph is walked backwards along data and control inputs, as
/// a session prunes it; a function that is called runs whole (TensorFlow 2
/// keeps a function's stateful ops whether or not its outputs use them), and
/// so does every function it names, transitively: calls, loop and branch
/// bodies, dataset functions. Each function is listed once, under the first
/// path found. More than `MAX_VISITS` nodes is an error, not a partial answer.
pub(crate) fn nodes_run<'g>(graph: &'g GraphDef, outputs: &[&str]) -> Result<Vec<(String, &'g NodeDef)>, String> {
    let functions = library(graph);
    let by_name: HashMap<&str, &NodeDef> = graph.node.iter().map(|n| (n.name.as_str(), n)).collect();
    let too_many = || format!("the graph runs more than {MAX_VISITS} nodes");
    let mut run = Vec::new();
    let mut seen_nodes = HashSet::new();
    let mut pending: VecDeque<&str> = outputs.iter().copied().collect();
    while let Some(name) = pending.pop_front() {
        // A name with no node fails TensorFlow's own load; nothing runs.
        let Some(node) = by_name.get(name) else { continue };
        if !seen_nodes.insert(name) {
            continue;
        }
        if run.len() >= MAX_VISITS {
            return Err(too_many());
        }
        run.push((node.name.clone(), *node));
        pending.extend(node.input.iter().map(|i| producer(i.trim_start_matches('^'))));
    }
    let mut seen_functions = HashSet::new();
    let mut calls: VecDeque<(String, &FunctionDef)> = VecDeque::new();
    for (path, node) in &run {
        calls.extend(called(node, &functions).map(|f| (path.clone(), f)));
    }
    while let Some((caller, function)) = calls.pop_front() {
        let Some(name) = function.signature.as_ref().map(|s| s.name.as_str()) else {
            continue;
        };
        if !seen_functions.insert(name) {
            continue;
        }
        for node in &function.node_def {
            if run.len() >= MAX_VISITS {
                return Err(too_many());
            }
            let path = format!("{caller}/{}", node.name);
            calls.extend(called(node, &functions).map(|f| (path.clone(), f)));
            run.push((path, node));
        }
    }
    Ok(run)
}

/// The graph's functions by name.
fn library(graph: &GraphDef) -> HashMap<&str, &FunctionDef> {
    graph
        .library
        .iter()
        .flat_map(|l| &l.function)
        .filter_map(|f| f.signature.as_ref().map(|s| (s.name.as_str(), f)))
        .collect()
}

/// The library functions a node runs: its op when the op is one (a TF1
/// Defun), and every function its attributes name.
fn called<'g>(node: &'g NodeDef, functions: &HashMap<&str, &'g FunctionDef>) -> impl Iterator<Item = &'g FunctionDef> {
    let by_op = functions.get(node.op.as_str()).copied();
    let named: Vec<&FunctionDef> = node
        .attr
        .values()
        .flat_map(|v| v.func.iter().chain(v.list.iter().flat_map(|l| &l.func)))
        .filter_map(|f| functions.get(f.name.as_str()).copied())
        .collect();
    by_op.into_iter().chain(named)
}

#[cfg(any(test, feature = "tensorflow"))]
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

#[cfg(any(test, feature = "tensorflow"))]
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
                    ..ListValue::default()
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

    #[test]
    fn lists_what_outputs_run_through_functions_and_control_edges() {
        let calling = |name: &str, op: &str, inputs: &[&str], attr: &str, function: &str| {
            let mut n = node(name, op, inputs);
            n.attr.insert(
                attr.into(),
                AttrValue {
                    func: Some(NameAttrList { name: function.into() }),
                    ..AttrValue::default()
                },
            );
            n
        };
        let function = |name: &str, nodes: Vec<NodeDef>| FunctionDef {
            signature: Some(OpDef {
                name: name.into(),
                input_arg: vec![],
            }),
            node_def: nodes,
        };
        let graph = GraphDef {
            node: vec![
                node("x", "Placeholder", &[]),
                calling("call", "StatefulPartitionedCall", &["x", "^side"], "f", "outer"),
                node("side", "WriteFile", &[]),
                node("y", "Identity", &["call:0"]),
                node("unused", "ReadFile", &[]),
                calling("restore", "StatefulPartitionedCall", &[], "f", "restore_fn"),
            ],
            library: Some(FunctionDefLibrary {
                function: vec![
                    function(
                        "outer",
                        vec![
                            calling("loop", "While", &[], "body", "body_fn"),
                            node("defun", "defun_fn", &[]),
                        ],
                    ),
                    function("body_fn", vec![node("read", "ReadFile", &[])]),
                    function("defun_fn", vec![node("list", "MatchingFiles", &[])]),
                    function("restore_fn", vec![node("restore", "RestoreV2", &[])]),
                ],
            }),
        };
        let run: Vec<(String, String)> = nodes_run(&graph, &["y"])
            .unwrap()
            .into_iter()
            .map(|(path, n)| (path, n.op.clone()))
            .collect();
        let has = |path: &str, op: &str| run.iter().any(|(p, o)| p == path && o == op);
        assert!(has("side", "WriteFile"), "a control input runs: {run:?}");
        assert!(has("call/loop/read", "ReadFile"), "a loop body inside a call: {run:?}");
        assert!(has("call/defun/list", "MatchingFiles"), "a Defun-style call: {run:?}");
        assert!(
            !run.iter().any(|(p, _)| p == "unused" || p.contains("restore")),
            "{run:?}"
        );
        assert!(nodes_run(&graph, &["missing"]).unwrap().is_empty());
    }
}
