//! Command lines (NUL-separated arguments) and the environment (`SAGEMAKER_*`,
//! `STFS_*`, `TFSERVE_*`) through the settings layers: settings or an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tfserve::settings::{Cli, Settings};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (args, env) = text.split_once('\n').unwrap_or((text, ""));
    let args = std::iter::once("tfserve").chain(args.split('\0').filter(|a| !a.is_empty()));
    let Ok(cli) = Cli::try_from_args(args) else {
        return;
    };
    // A settings file is read from disk; the fuzzer only drives flags and variables.
    if cli.config.is_some() {
        return;
    }
    let vars: Vec<(String, String)> = env
        .split('\0')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if let Ok(settings) = Settings::load_with(&cli, &vars) {
        // A parameters file is read from disk too (and could be /dev/zero).
        if settings.batching.batching_parameters_file.is_none() {
            let _ = settings.batch_plan();
        }
        let _ = settings.session(1, false);
        let _ = settings.session(1, true);
    }
});
