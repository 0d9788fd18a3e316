//! A SavedModel pinned to one device, for a replica on a chosen GPU: a copy
//! of its `saved_model.pb` whose graph nodes name that device, beside links
//! to the original variables and assets, so that TensorFlow's own loader
//! (restore, init ops, assets) loads it like any other export.
//!
//! Only the outer graph's nodes are pinned: the functions they call (a TF2
//! model's body) run where their caller runs. Nodes pinned to a CPU keep it.
//! The protobuf is walked with prost's wire primitives and every field not
//! rewritten is copied byte for byte, unknown ones included.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use prost::bytes::Buf;
use prost::encoding::{decode_key, decode_varint, encode_key, encode_varint, WireType};

// Field numbers in TensorFlow's protos (saved_model.proto, meta_graph.proto,
// graph.proto, node_def.proto).
const SAVED_MODEL_META_GRAPHS: u32 = 2;
const META_GRAPH_GRAPH_DEF: u32 = 2;
const GRAPH_NODES: u32 = 1;
const NODE_DEVICE: u32 = 4;

#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error(transparent)]
    Decode(#[from] prost::DecodeError),
    #[error("{0}")]
    Malformed(&'static str),
}

/// The pinned copy's directory, removed when dropped: once loaded (TensorFlow
/// reads a model's assets in its load's init op).
pub struct PinnedCopy {
    dir: PathBuf,
}

impl PinnedCopy {
    pub fn new(source: &Path, device: &str) -> std::io::Result<PinnedCopy> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let graph = source.join("saved_model.pb");
        if !graph.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "replicas are placed by rewriting saved_model.pb, which this export lacks",
            ));
        }
        let dir = std::env::temp_dir().join(format!(
            "tfserve-replica-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let copy = PinnedCopy { dir };
        std::fs::create_dir_all(&copy.dir)?;
        let source = std::fs::canonicalize(source)?;
        for entry in std::fs::read_dir(&source)? {
            let name = entry?.file_name();
            if name != "saved_model.pb" {
                std::os::unix::fs::symlink(source.join(&name), copy.dir.join(&name))?;
            }
        }
        let pinned = pin_saved_model(&std::fs::read(graph)?, device)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("saved_model.pb: {e}")))?;
        std::fs::write(copy.dir.join("saved_model.pb"), pinned)?;
        Ok(copy)
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PinnedCopy {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            log::warn!("cannot remove {}: {e}", self.dir.display());
        }
    }
}

/// `saved_model.pb` with every node of every meta graph that names no device,
/// or a GPU, pinned to `device`.
pub fn pin_saved_model(saved_model: &[u8], device: &str) -> Result<Vec<u8>, PinError> {
    rewrite(saved_model, SAVED_MODEL_META_GRAPHS, &mut |meta_graph| {
        rewrite(meta_graph, META_GRAPH_GRAPH_DEF, &mut |graph| {
            rewrite(graph, GRAPH_NODES, &mut |node| pin_node(node, device))
        })
    })
}

fn pin_node(node: &[u8], device: &str) -> Result<Vec<u8>, PinError> {
    let mut out = Vec::with_capacity(node.len() + device.len() + 2);
    let mut keeps_its_device = false;
    for field in fields(node)? {
        if field.tag == NODE_DEVICE && field.wire_type == WireType::LengthDelimited {
            let named = std::str::from_utf8(field.payload).unwrap_or("");
            if named.is_empty() || named.to_ascii_lowercase().contains("gpu") {
                continue;
            }
            keeps_its_device = true;
        }
        out.extend_from_slice(field.bytes);
    }
    if !keeps_its_device {
        put_bytes(&mut out, NODE_DEVICE, device.as_bytes());
    }
    Ok(out)
}

/// What a length-delimited field's payload becomes.
type Rewrite<'a> = dyn FnMut(&[u8]) -> Result<Vec<u8>, PinError> + 'a;

/// `message` with each length-delimited field `tag` replaced by `f` of its payload.
fn rewrite(message: &[u8], tag: u32, f: &mut Rewrite<'_>) -> Result<Vec<u8>, PinError> {
    let mut out = Vec::with_capacity(message.len() + message.len() / 8);
    for field in fields(message)? {
        if field.tag == tag && field.wire_type == WireType::LengthDelimited {
            put_bytes(&mut out, tag, &f(field.payload)?);
        } else {
            out.extend_from_slice(field.bytes);
        }
    }
    Ok(out)
}

fn put_bytes(out: &mut Vec<u8>, tag: u32, payload: &[u8]) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(payload.len() as u64, out);
    out.extend_from_slice(payload);
}

struct Field<'a> {
    tag: u32,
    wire_type: WireType,
    /// The whole field, key included.
    bytes: &'a [u8],
    /// A length-delimited field's contents (empty for the other wire types).
    payload: &'a [u8],
}

fn fields(message: &[u8]) -> Result<Vec<Field<'_>>, PinError> {
    let mut rest = message;
    let mut out = Vec::new();
    while rest.has_remaining() {
        let start = message.len() - rest.len();
        let (tag, wire_type) = decode_key(&mut rest)?;
        let skip = |rest: &mut &[u8], n: usize| {
            if rest.len() < n {
                return Err(PinError::Malformed("a field runs past the end of its message"));
            }
            rest.advance(n);
            Ok(())
        };
        let mut payload: &[u8] = &[];
        match wire_type {
            WireType::Varint => {
                decode_varint(&mut rest)?;
            }
            WireType::SixtyFourBit => skip(&mut rest, 8)?,
            WireType::ThirtyTwoBit => skip(&mut rest, 4)?,
            WireType::LengthDelimited => {
                let len = usize::try_from(decode_varint(&mut rest)?)
                    .map_err(|_| PinError::Malformed("a length out of range"))?;
                if rest.len() < len {
                    return Err(PinError::Malformed("a field runs past the end of its message"));
                }
                payload = &rest[..len];
                rest.advance(len);
            }
            WireType::StartGroup | WireType::EndGroup => {
                return Err(PinError::Malformed(
                    "a group field, which TensorFlow's protos never use",
                ))
            }
        }
        let end = message.len() - rest.len();
        out.push(Field {
            tag,
            wire_type,
            bytes: &message[start..end],
            payload,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[derive(Clone, PartialEq, Message)]
    struct SavedModel {
        #[prost(int64, tag = "1")]
        schema_version: i64,
        #[prost(message, repeated, tag = "2")]
        meta_graphs: Vec<MetaGraph>,
    }

    #[derive(Clone, PartialEq, Message)]
    struct MetaGraph {
        #[prost(string, tag = "9")]
        unmodelled: String,
        #[prost(message, optional, tag = "2")]
        graph_def: Option<GraphDef>,
    }

    #[derive(Clone, PartialEq, Message)]
    struct GraphDef {
        #[prost(message, repeated, tag = "1")]
        node: Vec<NodeDef>,
        #[prost(bytes = "vec", tag = "2")]
        library: Vec<u8>,
    }

    #[derive(Clone, PartialEq, Message)]
    struct NodeDef {
        #[prost(string, tag = "1")]
        name: String,
        #[prost(string, repeated, tag = "3")]
        input: Vec<String>,
        #[prost(string, tag = "4")]
        device: String,
        #[prost(float, tag = "6")]
        fixed32: f32,
        #[prost(double, tag = "7")]
        fixed64: f64,
    }

    struct Scratch(PathBuf);

    impl Scratch {
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn node(name: &str, device: &str) -> NodeDef {
        NodeDef {
            name: name.into(),
            input: vec!["a:0".into()],
            device: device.into(),
            fixed32: 1.5,
            fixed64: 2.5,
        }
    }

    #[test]
    fn pins_nodes_without_a_device_or_on_a_gpu_and_keeps_everything_else() {
        let graph = GraphDef {
            node: vec![
                node("free", ""),
                node("gpu", "/device:GPU:0"),
                node("cpu", "/job:localhost/device:CPU:0"),
            ],
            library: vec![1, 2, 3],
        };
        let model = SavedModel {
            schema_version: 1,
            meta_graphs: vec![MetaGraph {
                unmodelled: "tags and signatures".into(),
                graph_def: Some(graph.clone()),
            }],
        };
        let pinned = SavedModel::decode(
            pin_saved_model(&model.encode_to_vec(), "/device:GPU:1")
                .unwrap()
                .as_slice(),
        )
        .unwrap();
        let meta = &pinned.meta_graphs[0];
        assert_eq!(meta.unmodelled, "tags and signatures");
        let pinned_graph = meta.graph_def.as_ref().unwrap();
        assert_eq!(pinned_graph.library, graph.library);
        let devices: Vec<&str> = pinned_graph.node.iter().map(|n| n.device.as_str()).collect();
        assert_eq!(
            devices,
            ["/device:GPU:1", "/device:GPU:1", "/job:localhost/device:CPU:0"]
        );
        assert_eq!(pinned_graph.node[1], node("gpu", "/device:GPU:1"));
        assert_eq!(pinned.schema_version, 1);
    }

    #[test]
    fn a_truncated_file_is_an_error() {
        let model = SavedModel {
            schema_version: 1,
            meta_graphs: vec![MetaGraph {
                unmodelled: String::new(),
                graph_def: Some(GraphDef {
                    node: vec![node("n", "")],
                    library: Vec::new(),
                }),
            }],
        }
        .encode_to_vec();
        assert!(pin_saved_model(&model[..model.len() - 3], "/device:GPU:0").is_err());
    }

    #[test]
    fn the_copy_links_the_variables_and_goes_away_with_its_model() {
        let source = Scratch(std::env::temp_dir().join(format!("tfserve-placement-test-{}", std::process::id())));
        std::fs::create_dir_all(source.path().join("variables")).unwrap();
        std::fs::write(source.path().join("variables/variables.index"), b"index").unwrap();
        let model = SavedModel {
            schema_version: 1,
            meta_graphs: vec![MetaGraph::default()],
        };
        std::fs::write(source.path().join("saved_model.pb"), model.encode_to_vec()).unwrap();
        let copy = PinnedCopy::new(source.path(), "/device:GPU:0").unwrap();
        let dir = copy.path().to_path_buf();
        assert_eq!(std::fs::read(dir.join("variables/variables.index")).unwrap(), b"index");
        assert!(dir.join("saved_model.pb").is_file());
        drop(copy);
        assert!(!dir.exists());
        std::fs::remove_file(source.path().join("saved_model.pb")).unwrap();
        let error = PinnedCopy::new(source.path(), "/device:GPU:0").err().unwrap();
        assert!(error.to_string().contains("saved_model.pb"), "{error}");
    }
}
