//! The audit's op table: which TensorFlow ops reach outside the request when a signature runs them, and how.
//!
//! [`class_of`] classes one node:
//!
//! - [`Access::FilesRead`]: reads files or lists folders (checkpoint restores, file datasets and readers, ...).
//!   TensorFlow's file systems reach the network too (`gs://` is built in, other schemes load as plugins), so a
//!   read of a remote path leaves the host; the class stays `FilesRead`, as the path, not the op, decides that.
//! - [`Access::FilesWrite`]: writes, creates or deletes files (checkpoint saves, summary writers, dataset
//!   snapshots, ...), or changes a file system's settings for the whole process.
//! - [`Access::Network`]: talks to other processes or hosts (tf.data service, the RPC ops, collectives, ...). An
//!   op's class is what it can reach by design, even where tfserve's one-process session keeps it local.
//! - [`Access::CustomOps`] is not decided here: it is the class of ops TensorFlow does not register (they come
//!   from a custom op library), which this table never names.
//!
//! `None`: the op reaches nothing outside the request. That is every op the table does not name (the rest of
//! TensorFlow's ~1,900 ops compute on tensors) and the reviewed candidates of `REVIEWED_LOCAL` (in `reviewed.rs`). A few ops' class
//! depends on a string attribute (`PrintV2`'s output stream, the debug ops' URLs, the proto ops' descriptor
//! source, a candidate sampler's vocabulary file): they are in `BY_ATTRIBUTE`.
//!
//! How it was made, and how to redo it: `python3 scripts/op_access.py` reads every op TensorFlow 2.21 registers,
//! picks the candidates (ops whose name, or the name of an input or attribute, speaks of files, paths, readers,
//! writers, summaries, checkpoints, addresses, RPC, collectives, send/recv, TPUs, ...: generous on purpose) and
//! fails while a candidate is in none of the arrays below, an array names an op TensorFlow does not register, or
//! two arrays name one op. Each candidate was reviewed against its op definition and kernel. After a TensorFlow
//! upgrade, rerun it and classify what it lists (into `REVIEWED_LOCAL` when it reaches nothing outside, under a
//! comment that says why); `python3 scripts/op_access.py --list` prints every candidate with its inputs,
//! attributes, kernels and verdict.

use super::Access;

/// The class of what running `op` reaches outside the request, `None` when it reaches nothing outside.
/// `string_attr(name)` returns the node's string attribute `name` (e.g. PrintV2's `output_stream`,
/// the debug ops' `debug_urls` entries joined by ',', the proto ops' `descriptor_source`), None when absent.
pub(super) fn class_of(op: &str, string_attr: &dyn Fn(&str) -> Option<String>) -> Option<Access> {
    if BY_ATTRIBUTE.contains(&op) {
        by_attribute(op, string_attr)
    } else if FILES_READ.contains(&op) {
        Some(Access::FilesRead)
    } else if FILES_WRITE.contains(&op) {
        Some(Access::FilesWrite)
    } else if NETWORK.contains(&op) {
        Some(Access::Network)
    } else {
        None
    }
}

/// The class of an op of `BY_ATTRIBUTE`, from the string attribute that decides it (an absent attribute has
/// its default, which reaches nothing outside).
fn by_attribute(op: &str, string_attr: &dyn Fn(&str) -> Option<String>) -> Option<Access> {
    match op {
        // Appends to the file a `file://` stream names; the others are stdout, stderr (the default) and the log.
        "PrintV2" => {
            let stream = string_attr("output_stream")?;
            stream.starts_with("file://").then_some(Access::FilesWrite)
        }
        // Per debug URL: `grpc://` streams to a debug server, `file://` dumps under a folder, `memcbk://` calls
        // back in the process (`DebugIdentityV2` takes `file://` only); no URL, nothing is published.
        "DebugIdentity" | "DebugIdentityV2" | "DebugIdentityV3" | "DebugNanCount" | "DebugNumericSummary" => {
            let urls = string_attr("debug_urls")?;
            let any = |scheme: &str| urls.split(',').any(|url| url.trim().starts_with(scheme));
            if any("grpc://") {
                Some(Access::Network)
            } else if any("file://") {
                Some(Access::FilesWrite)
            } else {
                None
            }
        }
        // A descriptor source other than the built-in pool ("" or "local://", the default) or inline bytes
        // ("bytes://...") is the path of a `FileDescriptorSet` to read.
        "DecodeProtoV2" | "EncodeProto" => {
            let source = string_attr("descriptor_source")?;
            let in_process = matches!(source.as_str(), "" | "local://") || source.starts_with("bytes://");
            (!in_process).then_some(Access::FilesRead)
        }
        // Reads its unigram counts from `vocab_file` when one is named, else takes them from `unigrams`.
        "FixedUnigramCandidateSampler" => {
            let vocab_file = string_attr("vocab_file")?;
            (!vocab_file.is_empty()).then_some(Access::FilesRead)
        }
        _ => None,
    }
}

/// Ops that read files or list folders (the path an input or attribute names, through TensorFlow's
/// file systems, `gs://` and the other remote schemes included).
const FILES_READ: &[&str] = &[
    // A file an input names, or the files a pattern matches.
    "ReadFile",
    "MatchingFiles",
    // Checkpoint reads: a restore a signature reaches reads variables from the prefix it is handed (the
    // loader's own restore runs before any request and is not reached from a signature).
    "Restore",
    "RestoreSlice",
    "RestoreV2",
    "DTensorRestoreV2",
    // Tables and remapped matrices initialised from vocabulary files or checkpoints.
    "InitializeTableFromTextFile",
    "InitializeTableFromTextFileV2",
    "GenerateVocabRemapping",
    "LoadAndRemapMatrix",
    // A constant mapped from the region `memory_region_name` names in a memmapped file.
    "ImmutableConst",
    // Queue-based readers (TF1 input pipelines): `ReaderRead*` reads the files a queue holds through them.
    "FixedLengthRecordReader",
    "FixedLengthRecordReaderV2",
    "LMDBReader",
    "TextLineReader",
    "TextLineReaderV2",
    "TFRecordReader",
    "TFRecordReaderV2",
    "WholeFileReader",
    "WholeFileReaderV2",
    // Record readers of their own: `RecordInput` reads the files `file_pattern` matches, `Skipgram` its
    // `filename` corpus.
    "RecordInput",
    "Skipgram",
    // Datasets of the files their `filenames` (or patterns) input names.
    "CSVDataset",
    "CSVDatasetV2",
    "ExperimentalCSVDataset",
    "ExperimentalLMDBDataset",
    "ExperimentalMatchingFilesDataset",
    "FixedLengthRecordDataset",
    "FixedLengthRecordDatasetV2",
    "LMDBDataset",
    "MatchingFilesDataset",
    "TFRecordDataset",
    "TFRecordDatasetV2",
    "TextLineDataset",
    // Saved datasets and tf.data snapshots read back.
    "LoadDataset",
    "ListSnapshotChunksDataset",
    "SnapshotChunkDataset",
    "SnapshotDatasetReader",
];

/// Ops that write, create or delete files, or change how the process reaches them.
const FILES_WRITE: &[&str] = &[
    // A file an input names.
    "WriteFile",
    // Checkpoint writes (`MergeV2Checkpoints` also deletes the shards it merges).
    "MergeV2Checkpoints",
    "Save",
    "SaveSlices",
    "SaveV2",
    // Summary writers: event files under a log folder (`CreateSummaryDbWriter`: a SQLite file), and every op
    // that writes, flushes or closes through one (a stats aggregator given a writer writes its statistics).
    "CreateSummaryDbWriter",
    "CreateSummaryFileWriter",
    "CloseSummaryWriter",
    "FlushSummaryWriter",
    "ImportEvent",
    "StatsAggregatorSetSummaryWriter",
    "WriteAudioSummary",
    "WriteGraphSummary",
    "WriteHistogramSummary",
    "WriteImageSummary",
    "WriteRawProtoSummary",
    "WriteScalarSummary",
    "WriteSummary",
    // Datasets written out: TFRecord files, saved datasets, snapshots (written, then read back), and file caches
    // (a cache whose `filename` input is empty stays in memory, but that input is a tensor the table cannot see).
    "CacheDataset",
    "CacheDatasetV2",
    "DatasetToTFRecord",
    "ExperimentalDatasetToTFRecord",
    "SaveDataset",
    "SaveDatasetV2",
    "SnapshotDataset",
    "SnapshotDatasetV2",
    // SQLite datasets open `data_source_name` read-write, create it when it is missing, and run whatever
    // statement `query` holds.
    "ExperimentalSqlDataset",
    "SqlDataset",
    // Quantization tooling: calibration statistics to `output_file_path`, tensors dumped under `log_dir_path`.
    "CalibrationStatisticsSaver",
    "DumpTensor",
    // Sets an option (endpoint, credentials, ...) of the file system for a scheme, for the whole process.
    "FileSystemSetConfiguration",
];

/// Ops that talk to other processes or hosts.
const NETWORK: &[&str] = &[
    // tf.data service: the dispatcher at the `address` input and its workers.
    "DataServiceDataset",
    "DataServiceDatasetV2",
    "DataServiceDatasetV3",
    "DataServiceDatasetV4",
    "DistributedSave",
    "RegisterDataset",
    "RegisterDatasetV2",
    // The RPC ops: a gRPC server the graph starts, or a client of one at `server_address`, and its calls.
    "RpcCall",
    "RpcCheckStatus",
    "RpcClient",
    "RpcGetValue",
    "RpcServer",
    "RpcServerRegister",
    "RpcServerStart",
    // Collectives: a group's members can be devices of other tasks of a cluster (in tfserve's one-process
    // session they can only be local devices, but the graph asks for the cluster).
    "CollectiveAllToAllV2",
    "CollectiveAllToAllV3",
    "CollectiveBcastRecv",
    "CollectiveBcastRecvV2",
    "CollectiveBcastSend",
    "CollectiveBcastSendV2",
    "CollectiveGather",
    "CollectiveGatherV2",
    "CollectiveInitializeCommunicator",
    "CollectivePermute",
    "CollectiveReduce",
    "CollectiveReduceScatterV2",
    "CollectiveReduceV2",
    "CollectiveReduceV3",
    // A function run on the `target` device, and tensors sent to or received from `send_device`/`recv_device`:
    // either can belong to another task. TensorFlow adds the send/recv pairs itself when it partitions a graph
    // across devices, after the graph this table is read against, so a SavedModel has them only by hand.
    "RemoteCall",
    "Recv",
    "Send",
    "_HostRecv",
    "_HostSend",
    "_Recv",
    "_Send",
    // Collectives across XLA replicas and DTensor meshes, and copies between meshes (DTensor lowers them to
    // collectives and send/recv): replicas and meshes can span hosts. None has a kernel outside XLA or DTensor.
    "AllToAll",
    "CopyToMesh",
    "CopyToMeshGrad",
    "CrossReplicaSum",
    "DTensorAllGather",
    "DTensorAllReduce",
    "DTensorAllToAll",
    "DTensorReduceScatter",
    "Relayout",
    "RelayoutLike",
    "XlaAllReduce",
    "XlaReduceScatter",
    // TPU embedding host software connected across hosts (`network_configs`).
    "ConnectTPUEmbeddingHosts",
];

/// Ops whose class a string attribute decides (see `by_attribute`).
const BY_ATTRIBUTE: &[&str] = &[
    "PrintV2",
    "DebugIdentity",
    "DebugIdentityV2",
    "DebugIdentityV3",
    "DebugNanCount",
    "DebugNumericSummary",
    "DecodeProtoV2",
    "EncodeProto",
    "FixedUnigramCandidateSampler",
];

// The reviewed candidates that reach nothing outside, read by the script and the tests.
mod reviewed;
#[cfg(test)]
use reviewed::REVIEWED_LOCAL;

#[cfg(test)]
mod tests;
