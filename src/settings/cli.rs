//! The command line: subcommands, `--config`, and every setting as a flag.
//! Only the flags actually given join the settings' top layer, so a flag's
//! default never hides a settings file or a variable.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser};

use super::{Settings, SettingsError};

/// Command-line flags. Every flag is also accepted with dashes
/// (`--rest-api-port`), as `--flag=value` or `--flag value`.
#[derive(Parser, Debug, Default)]
#[command(
    name = "tfserve",
    version,
    about = "Serves TensorFlow SavedModels over the TF Serving REST, SageMaker and Simple TensorFlow Serving HTTP APIs"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Settings file (TOML, YAML or JSON); keys are the flag names.
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,

    #[command(flatten)]
    pub settings: Settings,

    /// The settings given on the command line (clap's argument ids, which
    /// are the settings' field names).
    #[arg(skip)]
    given: BTreeSet<String>,
}

impl Cli {
    pub fn try_from_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let matches = command().try_get_matches_from(args)?;
        let mut cli = Cli::from_arg_matches(&matches)?;
        cli.given = matches
            .ids()
            .filter(|id| matches.value_source(id.as_str()) == Some(ValueSource::CommandLine))
            .map(|id| id.to_string())
            .collect();
        Ok(cli)
    }

    /// The settings given as flags, keyed as in the settings file.
    pub(super) fn given_settings(&self) -> Result<serde_json::Map<String, serde_json::Value>, SettingsError> {
        let all = serde_json::to_value(&self.settings).map_err(|e| config::ConfigError::Foreign(Box::new(e)))?;
        let serde_json::Value::Object(mut map) = all else {
            return Ok(serde_json::Map::new());
        };
        map.retain(|key, _| self.given.contains(key));
        Ok(map)
    }
}

/// The parser. `inspect` takes the server's flags, as its `--run` answers
/// through the server's own request path, but its `--help` shows only its
/// own: a user inspecting a SavedModel looks for those, not for 150
/// server settings.
fn command() -> clap::Command {
    let mut command = Cli::command();
    command.build();
    if let Some(inspect) = command.find_subcommand_mut("inspect") {
        *inspect = std::mem::take(inspect).mut_args(|arg| match arg.is_global_set() {
            true => arg.hide(true),
            false => arg,
        });
    }
    command
}

#[derive(clap::Subcommand, Debug, Clone, PartialEq)]
pub enum Command {
    /// Run as the SageMaker TensorFlow Serving container does (`docker run IMAGE serve`):
    /// port $SAGEMAKER_BIND_TO_PORT (8080), models from /opt/ml/model, or loaded
    /// into /opt/ml/models over HTTP with SAGEMAKER_MULTI_MODEL=true.
    Serve,
    /// Batch transform, offline: run every record of the input files through
    /// the /invocations path in process and write `<name>.out` files.
    Transform(super::TransformArgs),
    /// Show a SavedModel's tag-sets and signatures (dtypes, declared shapes,
    /// method names), warn where a declared shape is inexact, and with --run
    /// answer one TF Serving REST body through the server's own request path.
    Inspect(super::InspectArgs),
}
