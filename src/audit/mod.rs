//! What a model's signatures can touch outside the request, decided before
//! the model loads.
//!
//! Policy: a SavedModel is a program from someone else. At every load, the
//! audit reads `saved_model.pb` (without TensorFlow) and lists, for each
//! signature the server would expose, every op its outputs can run: the
//! nodes they depend on through data and control edges, and every op of every
//! function those nodes call, transitively (`runtime::graph_trace::nodes_run`).
//! Each op is classed by what it reaches outside the request (`ops.rs`, made
//! from TensorFlow's own op list; ops a `--custom_op_paths` library registers
//! are `custom_ops`, native code nobody here can read). A version whose
//! signatures reach a class that neither `--allow_model_access` (every model)
//! nor the model's own `allow_access` (its config entry) allows does not load:
//! its status is `END` with an error naming the signature, the op, its node,
//! the class and how to allow it. Guarantees: with nothing allowed, no
//! signature of a served model contains an op of the table's classes or a
//! custom op; the load itself (variable restore, the init op that fills
//! asset-backed tables) is not a signature run and is not audited; a text
//! SavedModel (`saved_model.pbtxt`), which the audit cannot read, is refused
//! unless every class is allowed. The audit reads the files TensorFlow then
//! loads: whoever can rewrite them in between can already replace the model.

mod jax;
mod ops;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use prost::Message;

use crate::runtime::graph_trace::{nodes_run, GraphDef};
use crate::runtime::graph_view::{AttrValue, NodeDef};

use jax::jax_modules;
pub use jax::{JaxModule, ModulePlacement, JAX_MODULE_VERSIONS};

/// What an op reaches outside the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Access {
    /// Reads files or lists folders (and, through TensorFlow's file systems,
    /// `gs://` objects).
    FilesRead,
    /// Writes files.
    FilesWrite,
    /// Talks to another process or host.
    Network,
    /// Runs an op from a `--custom_op_paths` library.
    CustomOps,
}

impl Access {
    pub const ALL: [Access; 4] = [
        Access::FilesRead,
        Access::FilesWrite,
        Access::Network,
        Access::CustomOps,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Access::FilesRead => "files_read",
            Access::FilesWrite => "files_write",
            Access::Network => "network",
            Access::CustomOps => "custom_ops",
        }
    }
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Access {
    type Err = String;

    fn from_str(text: &str) -> Result<Access, String> {
        Access::ALL.into_iter().find(|a| a.name() == text).ok_or_else(|| {
            let names: Vec<&str> = Access::ALL.iter().map(|a| a.name()).collect();
            format!("'{text}' is not a class of access (known: {}, all)", names.join(", "))
        })
    }
}

/// A comma-separated list of classes (`files_read,network`; `all`; empty).
pub fn parse_classes(text: &str) -> Result<BTreeSet<Access>, String> {
    let mut classes = BTreeSet::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if item == "all" {
            classes.extend(Access::ALL);
        } else {
            classes.insert(item.parse()?);
        }
    }
    Ok(classes)
}

/// One op a signature can run that reaches outside the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reach {
    pub class: Access,
    pub op: String,
    /// Its node, as the path of calls that reach it.
    pub node: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignatureAudit {
    pub signature: String,
    /// One entry per op type (its first node), in class order.
    pub reaches: Vec<Reach>,
    /// The serialized JAX modules it runs, in node order.
    pub modules: Vec<JaxModule>,
}

impl SignatureAudit {
    pub fn classes(&self) -> BTreeSet<Access> {
        self.reaches.iter().map(|r| r.class).collect()
    }
}

/// What every signature of one SavedModel reaches, sorted by signature name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelAudit {
    pub signatures: Vec<SignatureAudit>,
    /// Set when the SavedModel could not be read by the audit (a text
    /// SavedModel): it is then refused unless everything is allowed.
    pub unreadable: Option<String>,
}

/// The signature the TF2 loader runs once at load to initialise tables: not
/// served, so not a signature the audit judges.
const INIT_SIGNATURE: &str = crate::signature::INIT_OP_SIGNATURE;

impl ModelAudit {
    /// Every class any signature reaches.
    pub fn classes(&self) -> BTreeSet<Access> {
        self.signatures.iter().flat_map(SignatureAudit::classes).collect()
    }

    /// The class a refusal under `allowed` is counted under: the first class
    /// reached and not allowed (`all` for what could not be audited).
    pub fn refused_class(&self, allowed: &BTreeSet<Access>) -> Option<&'static str> {
        if self.unreadable.is_some() {
            return (allowed.len() < Access::ALL.len()).then_some("all");
        }
        let reached = self.signatures.iter().flat_map(|s| &s.reaches);
        reached
            .map(|r| r.class)
            .find(|c| !allowed.contains(c))
            .map(Access::name)
    }

    /// Why the model may not load under `allowed`, or `None` when it may.
    pub fn refusal(&self, allowed: &BTreeSet<Access>) -> Option<String> {
        if let Some(reason) = &self.unreadable {
            let missing: Vec<&str> = Access::ALL
                .iter()
                .filter(|a| !allowed.contains(a))
                .map(|a| a.name())
                .collect();
            if missing.is_empty() {
                return None;
            }
            return Some(format!(
                "model is refused: {reason}, so what its signatures reach is unknown; {}",
                how_to_allow(&["all"])
            ));
        }
        let denied: Vec<(&SignatureAudit, &Reach)> = self
            .signatures
            .iter()
            .flat_map(|s| s.reaches.iter().map(move |r| (s, r)))
            .filter(|(_, r)| !allowed.contains(&r.class))
            .collect();
        let (signature, first) = denied.first()?;
        let classes: BTreeSet<&str> = denied.iter().map(|(_, r)| r.class.name()).collect();
        let classes: Vec<&str> = classes.into_iter().collect();
        let others = match denied.len() {
            1 => String::new(),
            n => format!(" and {} more op(s) of classes not allowed", n - 1),
        };
        Some(format!(
            "model is refused: signature '{}' reaches {} (node '{}', class {}){others}; {}",
            signature.signature,
            first.op,
            first.node,
            first.class,
            how_to_allow(&classes)
        ))
    }

    /// One line for the log and the status pages: `serving_default: files_read
    /// (ReadFile); other: nothing outside the request`.
    pub fn summary(&self) -> String {
        if let Some(reason) = &self.unreadable {
            return format!("not audited ({reason})");
        }
        let mut out = String::new();
        for (i, signature) in self.signatures.iter().enumerate() {
            if i > 0 {
                out.push_str("; ");
            }
            let _ = write!(out, "{}: {}", signature.signature, reach_list(&signature.reaches));
        }
        if out.is_empty() {
            out.push_str("no signatures");
        }
        out
    }
}

/// `files_read (ReadFile, MatchingFiles), files_write (WriteFile)`, or
/// `nothing outside the request`.
pub fn reach_list(reaches: &[Reach]) -> String {
    if reaches.is_empty() {
        return "nothing outside the request".into();
    }
    let classes: BTreeSet<Access> = reaches.iter().map(|r| r.class).collect();
    classes
        .into_iter()
        .map(|class| {
            let ops: Vec<&str> = reaches
                .iter()
                .filter(|r| r.class == class)
                .map(|r| r.op.as_str())
                .collect();
            format!("{class} ({})", ops.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn how_to_allow(classes: &[&str]) -> String {
    let list = classes.join(",");
    format!(
        "allow it with --allow_model_access={list} (every model) or allow_access: \"{list}\" in this model's config entry"
    )
}

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
    signature_def: std::collections::BTreeMap<String, SignatureDef>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct MetaInfoDef {
    #[prost(string, repeated, tag = "4")]
    tags: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SignatureDef {
    #[prost(btree_map = "string, message", tag = "2")]
    outputs: std::collections::BTreeMap<String, TensorInfo>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TensorInfo {
    #[prost(string, tag = "1")]
    name: String,
}

/// Audits the SavedModel in `dir` under the MetaGraph whose tag set is
/// `tags` (as TensorFlow picks it). `Ok(None)` when there is nothing
/// TensorFlow could load (no `saved_model.pb`, no such tag set): its own
/// load then fails with its own message.
pub fn audit(dir: &Path, tags: &[String], custom_ops: &[String]) -> Result<Option<ModelAudit>, String> {
    let path = dir.join("saved_model.pb");
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if dir.join("saved_model.pbtxt").exists() {
                return Ok(Some(ModelAudit {
                    signatures: Vec::new(),
                    unreadable: Some(
                        "it is a text SavedModel (saved_model.pbtxt), which the audit does not read".into(),
                    ),
                }));
            }
            return Ok(None);
        }
        Err(e) => return Err(format!("cannot read {} to audit it: {e}", path.display())),
    };
    let model = SavedModel::decode(bytes.as_slice())
        .map_err(|e| format!("{}: not a SavedModel protobuf: {e}", path.display()))?;
    let wanted: BTreeSet<&str> = tags.iter().map(String::as_str).collect();
    let Some(meta) = model.meta_graphs.iter().find(|m| {
        let have: BTreeSet<&str> = m
            .meta_info_def
            .iter()
            .flat_map(|i| &i.tags)
            .map(String::as_str)
            .collect();
        have == wanted
    }) else {
        return Ok(None);
    };
    let empty = GraphDef::default();
    let graph = meta.graph_def.as_ref().unwrap_or(&empty);
    let custom: BTreeSet<&str> = custom_ops.iter().map(String::as_str).collect();
    let mut signatures = Vec::new();
    for (name, def) in meta.signature_def.iter().filter(|(name, _)| *name != INIT_SIGNATURE) {
        let outputs: Vec<&str> = def
            .outputs
            .values()
            .map(|t| crate::signature::split_tensor_name(&t.name).0)
            .collect();
        let nodes = nodes_run(graph, &outputs).map_err(|e| format!("signature '{name}': {e}"))?;
        signatures.push(SignatureAudit {
            signature: name.clone(),
            reaches: reaches(&nodes, &custom),
            modules: jax_modules(&nodes),
        });
    }
    Ok(Some(ModelAudit {
        signatures,
        unreadable: None,
    }))
}

/// The classed ops among `nodes`, one per op type, in class order.
fn reaches(nodes: &[(String, &NodeDef)], custom: &BTreeSet<&str>) -> Vec<Reach> {
    let mut found: Vec<Reach> = Vec::new();
    for (path, node) in nodes {
        let class = if custom.contains(node.op.as_str()) {
            Some(Access::CustomOps)
        } else {
            ops::class_of(&node.op, &|name| node.attr.get(name).and_then(string_attr))
        };
        let Some(class) = class else { continue };
        if found.iter().any(|r| r.op == node.op && r.class == class) {
            continue;
        }
        found.push(Reach {
            class,
            op: node.op.clone(),
            node: path.clone(),
        });
    }
    found.sort_by_key(|r| r.class);
    found
}

/// A string attribute, or a list of strings joined by ','.
fn string_attr(value: &AttrValue) -> Option<String> {
    if !value.s.is_empty() {
        return Some(String::from_utf8_lossy(&value.s).into_owned());
    }
    let list = value.list.as_ref()?;
    if list.s.is_empty() {
        return None;
    }
    let items: Vec<String> = list.s.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect();
    Some(items.join(","))
}

#[cfg(test)]
mod tests;
