//! The arguments of `tfserve transform` and `tfserve inspect`, parsed with
//! the server's own flags (the subcommands run the server's request path).

use std::path::PathBuf;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SplitType {
    /// A whole file is one record.
    #[default]
    None,
    /// Every non-empty line is a record; outputs are joined with newlines.
    Line,
}

#[derive(clap::Args, Clone, Debug, PartialEq)]
pub struct TransformArgs {
    /// A file, or a directory whose files (recursively) are all transformed.
    #[arg(long)]
    pub input: PathBuf,
    /// Where `<input name>.out` files are written (same relative layout).
    #[arg(long)]
    pub output: PathBuf,
    /// Content type of every record, as for /invocations.
    #[arg(long = "content_type", alias = "content-type", default_value = "application/json")]
    pub content_type: String,
    /// Accept type (the output is JSON either way).
    #[arg(long, default_value = "application/json")]
    pub accept: String,
    #[arg(long = "split_type", alias = "split-type", value_enum, default_value_t = SplitType::None)]
    pub split_type: SplitType,
    /// Records in flight at once; with --enable_batching they share batches.
    #[arg(
        long = "max_concurrent_transforms",
        alias = "max-concurrent-transforms",
        default_value_t = 16
    )]
    pub max_concurrent_transforms: usize,
    /// A record larger than this fails (that record only).
    #[arg(long = "max_payload_in_mb", alias = "max-payload-in-mb", default_value_t = 6.0)]
    pub max_payload_in_mb: f64,
    /// X-Amzn-SageMaker-Custom-Attributes for every record, e.g. `tfs-model-name=m`.
    #[arg(long = "custom_attributes", alias = "custom-attributes")]
    pub custom_attributes: Option<String>,
}

#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct InspectArgs {
    /// A SavedModel directory, or a model base path (its highest version is inspected).
    pub dir: PathBuf,
    /// A TF Serving REST request body to run through the model, e.g. '{"instances": [1.0]}'.
    #[arg(long)]
    pub run: Option<String>,
    /// The REST method for --run: predict, classify or regress. Default: classify
    /// for a body with "examples", predict otherwise.
    #[arg(long)]
    pub method: Option<String>,
}
