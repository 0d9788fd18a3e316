//! A partial view of TensorFlow's `NodeDef`, read without TensorFlow by
//! `inspect` (placeholder shapes), the runtime's graph trace (data flow into
//! functions) and the load-time audit (the attributes that say where an op
//! writes).
//!
//! Only the fields those two read are declared; prost skips the rest, so the
//! weights a frozen graph carries in its constants cost a read and nothing else.

use std::collections::BTreeMap;

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct NodeDef {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub op: String,
    #[prost(string, repeated, tag = "3")]
    pub input: Vec<String>,
    #[prost(btree_map = "string, message", tag = "5")]
    pub attr: BTreeMap<String, AttrValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AttrValue {
    /// `Case` lists its branches; the debug ops their URLs.
    #[prost(message, optional, tag = "1")]
    pub list: Option<ListValue>,
    /// A string attribute (`PrintV2`'s `output_stream`).
    #[prost(bytes = "vec", tag = "2")]
    pub s: Vec<u8>,
    /// An integer attribute (`XlaCallModule`'s `version`).
    #[prost(int64, tag = "3")]
    pub i: i64,
    /// A placeholder's shape.
    #[prost(message, optional, tag = "7")]
    pub shape: Option<TensorShapeProto>,
    /// The function a call or loop runs.
    #[prost(message, optional, tag = "10")]
    pub func: Option<NameAttrList>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ListValue {
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub s: Vec<Vec<u8>>,
    #[prost(message, repeated, tag = "9")]
    pub func: Vec<NameAttrList>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct NameAttrList {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TensorShapeProto {
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<Dim>,
    #[prost(bool, tag = "3")]
    pub unknown_rank: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Dim {
    #[prost(int64, tag = "1")]
    pub size: i64,
}
