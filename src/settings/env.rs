//! Settings that come from other servers' environment variables: the
//! SageMaker container's `SAGEMAKER_*`, Simple TensorFlow Serving's `STFS_*`,
//! Vertex AI's `AIP_*`, and the `TFSERVE_*` names of tfserve's own settings.

use std::collections::HashMap;

use super::SettingsError;

type SettingsMap = serde_json::Map<String, serde_json::Value>;

/// A boolean variable: true/1/yes/on or false/0/no/off (any case; empty is false).
fn boolean(name: &'static str, value: String) -> Result<bool, SettingsError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" | "" => Ok(false),
        _ => Err(SettingsError::Invalid {
            name,
            value,
            reason: "must be true or false",
        }),
    }
}

/// The SageMaker container's defaults, from its environment variables; a
/// settings file, `TFSERVE_*` variables and flags still override them.
pub(super) fn sagemaker_defaults(env: &dyn Fn(&str) -> Option<String>) -> Result<SettingsMap, SettingsError> {
    use serde_json::json;
    let number = |name: &'static str| -> Result<Option<i64>, SettingsError> {
        env(name)
            .map(|v| {
                v.trim().parse::<i64>().map_err(|_| SettingsError::Invalid {
                    name,
                    value: v,
                    reason: "must be an integer",
                })
            })
            .transpose()
    };
    let multi_model = match env("SAGEMAKER_MULTI_MODEL") {
        None => false,
        Some(v) => boolean("SAGEMAKER_MULTI_MODEL", v)?,
    };
    let mut map = serde_json::Map::new();
    map.insert(
        "rest_api_port".into(),
        json!(number("SAGEMAKER_BIND_TO_PORT")?.unwrap_or(8080)),
    );
    map.insert(
        "models_dir".into(),
        json!(if multi_model { "/opt/ml/models" } else { "/opt/ml/model" }),
    );
    map.insert(
        "model_roots".into(),
        json!([if multi_model { "/opt/ml/models" } else { "/opt/ml/model" }]),
    );
    map.insert("multi_model".into(), json!(multi_model));
    // The container's generated model config lists every version it finds.
    map.insert("model_version_policy".into(), json!("all"));
    if let Some(workers) = number("SAGEMAKER_GUNICORN_WORKERS")?.filter(|n| *n > 0) {
        map.insert("python_workers".into(), json!(workers));
    }
    let timeout = number("SAGEMAKER_NGINX_PROXY_READ_TIMEOUT_SECONDS")?.unwrap_or(60);
    map.insert("rest_api_timeout_in_ms".into(), json!(timeout.max(1) * 1000));
    for (var, key) in [
        ("SAGEMAKER_TFS_INTRA_OP_PARALLELISM", "tensorflow_intra_op_parallelism"),
        ("SAGEMAKER_TFS_INTER_OP_PARALLELISM", "tensorflow_inter_op_parallelism"),
    ] {
        if let Some(threads) = number(var)?.filter(|n| *n != 0) {
            map.insert(key.into(), json!(threads));
        }
    }
    Ok(map)
}

/// Simple TensorFlow Serving's `STFS_*` variables, as settings. They rank
/// below a settings file, `TFSERVE_*` variables and flags.
pub(super) fn stfs_env(env: &dyn Fn(&str) -> Option<String>) -> Result<SettingsMap, SettingsError> {
    use serde_json::json;
    let mut map = serde_json::Map::new();
    for (var, key) in [
        ("STFS_HOST", "host"),
        ("STFS_MODEL_NAME", "model_name"),
        ("STFS_MODEL_BASE_PATH", "model_base_path"),
        ("STFS_MODEL_CONFIG_FILE", "model_config_file"),
        ("STFS_CUSTOM_OP_PATHS", "custom_op_paths"),
        ("STFS_SESSION_CONFIG", "session_config"),
        ("STFS_AUTH_USERNAME", "auth_username"),
        ("STFS_AUTH_PASSWORD", "auth_password"),
        ("STFS_SECRET_PEM", "secret_pem"),
        ("STFS_SECRET_KEY", "secret_key"),
    ] {
        if let Some(value) = env(var).filter(|v| !v.is_empty()) {
            map.insert(key.into(), json!(value));
        }
    }
    // STFS loads every version directory it finds.
    if map.contains_key("model_base_path") {
        map.insert("model_version_policy".into(), json!("all"));
    }
    stfs_switches(env, &mut map)?;
    if let Some(platform) = env("STFS_MODEL_PLATFORM").filter(|p| !p.eq_ignore_ascii_case("tensorflow")) {
        return Err(SettingsError::Invalid {
            name: "STFS_MODEL_PLATFORM",
            value: platform,
            reason: "only tensorflow models are served",
        });
    }
    Ok(map)
}

/// STFS's port, booleans and reload switch.
fn stfs_switches(env: &dyn Fn(&str) -> Option<String>, map: &mut SettingsMap) -> Result<(), SettingsError> {
    use serde_json::json;
    if let Some(port) = env("STFS_PORT") {
        let port: u16 = port.trim().parse().map_err(|_| SettingsError::Invalid {
            name: "STFS_PORT",
            value: port,
            reason: "must be a port number",
        })?;
        // Simple TensorFlow Serving's port is its HTTP port.
        map.insert("rest_api_port".into(), json!(port));
    }
    for (var, key) in [
        ("STFS_ENABLE_AUTH", "enable_auth"),
        ("STFS_ENABLE_SSL", "enable_ssl"),
        ("STFS_ENABLE_CORS", "enable_cors"),
    ] {
        if let Some(value) = env(var) {
            map.insert(key.into(), json!(boolean(var, value)?));
        }
    }
    // STFS re-scans model directories every 10 s when asked to reload.
    if let Some(value) = env("STFS_RELOAD_MODELS") {
        let seconds = if boolean("STFS_RELOAD_MODELS", value)? { 10 } else { 0 };
        map.insert("file_system_poll_wait_seconds".into(), json!(seconds));
    }
    Ok(())
}

/// The SageMaker container's variables read in every mode: the default
/// model (`SAGEMAKER_TFS_DEFAULT_MODEL_NAME`, as a SageMaker-style archive may
/// be served without `serve`) and its batching (`SAGEMAKER_TFS_ENABLE_BATCHING`
/// with the container's defaults: 8 rows, 1000 µs, one batch and one thread per core).
pub(super) fn sagemaker_anywhere(env: &dyn Fn(&str) -> Option<String>) -> Result<SettingsMap, SettingsError> {
    use serde_json::json;
    let mut map = serde_json::Map::new();
    if let Some(name) = env("SAGEMAKER_TFS_DEFAULT_MODEL_NAME").filter(|n| !n.is_empty() && n != "None") {
        map.insert("default_model_name".into(), json!(name));
    }
    let enabled = match env("SAGEMAKER_TFS_ENABLE_BATCHING") {
        None => false,
        Some(v) => boolean("SAGEMAKER_TFS_ENABLE_BATCHING", v)?,
    };
    if !enabled {
        return Ok(map);
    }
    map.insert("enable_batching".into(), json!(true));
    let cores = super::cores();
    for (var, key, default) in [
        ("SAGEMAKER_TFS_MAX_BATCH_SIZE", "max_batch_size", 8),
        ("SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS", "batch_timeout_micros", 1000),
        ("SAGEMAKER_TFS_MAX_ENQUEUED_BATCHES", "max_enqueued_batches", cores),
        ("SAGEMAKER_TFS_NUM_BATCH_THREADS", "num_batch_threads", cores),
    ] {
        let value = match env(var) {
            None => default,
            Some(v) => v.trim().parse::<usize>().map_err(|_| SettingsError::Invalid {
                name: var,
                value: v,
                reason: "must be a non-negative integer",
            })?,
        };
        map.insert(key.into(), json!(value));
    }
    Ok(map)
}

/// Vertex AI's custom-container variables: the REST port, the health and
/// predict routes, and where the model is (a `gs://` folder, or any base
/// path). They rank below a settings file, `TFSERVE_*` variables and flags.
pub(super) fn vertex_env(env: &dyn Fn(&str) -> Option<String>) -> Result<SettingsMap, SettingsError> {
    use serde_json::json;
    let mut map = serde_json::Map::new();
    if let Some(port) = env("AIP_HTTP_PORT") {
        let port: u16 = port.trim().parse().map_err(|_| SettingsError::Invalid {
            name: "AIP_HTTP_PORT",
            value: port,
            reason: "must be a port number",
        })?;
        map.insert("rest_api_port".into(), json!(port));
    }
    for (var, key) in [
        ("AIP_HEALTH_ROUTE", "vertex_health_route"),
        ("AIP_PREDICT_ROUTE", "vertex_predict_route"),
        ("AIP_STORAGE_URI", "model_base_path"),
    ] {
        if let Some(value) = env(var).filter(|v| !v.is_empty()) {
            map.insert(key.into(), json!(value));
        }
    }
    Ok(map)
}

/// `TFSERVE_<SETTING>` variables that name a setting (`TFSERVE_CACHE_DIR`
/// included); others with the prefix are left alone.
pub(super) fn tfserve_vars(vars: &[(String, String)]) -> Result<HashMap<String, String>, SettingsError> {
    let known = super::known_keys()?;
    Ok(vars
        .iter()
        .filter(|(name, _)| {
            name.strip_prefix("TFSERVE_")
                .is_some_and(|key| known.contains(&key.to_ascii_lowercase()))
        })
        .cloned()
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{Cli, Command};
    use std::path::PathBuf;

    #[test]
    fn vertex_variables_become_settings() {
        let vars = [
            ("AIP_HTTP_PORT", "8080"),
            ("AIP_HEALTH_ROUTE", "/v1/endpoints/1/deployedModels/2"),
            ("AIP_PREDICT_ROUTE", "/v1/endpoints/1/deployedModels/2:predict"),
            ("AIP_STORAGE_URI", "gs://bucket/model"),
        ];
        let env = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
        let map = vertex_env(&env).unwrap();
        assert_eq!(map["rest_api_port"], 8080);
        assert_eq!(map["vertex_predict_route"], "/v1/endpoints/1/deployedModels/2:predict");
        assert_eq!(map["model_base_path"], "gs://bucket/model");
        let bad = |name: &str| (name == "AIP_HTTP_PORT").then(|| "http".to_string());
        assert!(vertex_env(&bad).unwrap_err().to_string().contains("AIP_HTTP_PORT"));
    }

    #[test]
    fn stfs_variables_become_settings() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        let map = stfs_env(&env(&[
            ("STFS_PORT", "8500"),
            ("STFS_ENABLE_AUTH", "True"),
            ("STFS_AUTH_USERNAME", "admin"),
            ("STFS_MODEL_BASE_PATH", "./model"),
            ("STFS_RELOAD_MODELS", "true"),
            ("STFS_MODEL_PLATFORM", "tensorflow"),
        ]))
        .unwrap();
        assert_eq!(map["rest_api_port"], 8500);
        assert_eq!(map["enable_auth"], true);
        assert_eq!(map["auth_username"], "admin");
        assert_eq!(map["model_base_path"], "./model");
        assert_eq!(map["model_version_policy"], "all");
        assert_eq!(map["file_system_poll_wait_seconds"], 10);
        let error = stfs_env(&env(&[("STFS_ENABLE_SSL", "maybe")])).unwrap_err().to_string();
        assert!(error.contains("STFS_ENABLE_SSL=maybe"), "{error}");
        assert!(stfs_env(&env(&[("STFS_MODEL_PLATFORM", "onnx")])).is_err());
        assert!(stfs_env(&env(&[("STFS_PORT", "http")])).is_err());
    }

    #[test]
    fn serve_takes_the_sagemaker_defaults() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        let map = sagemaker_defaults(&env(&[
            ("SAGEMAKER_BIND_TO_PORT", "9090"),
            ("SAGEMAKER_MULTI_MODEL", "true"),
        ]))
        .unwrap();
        assert_eq!(map["rest_api_port"], 9090);
        assert_eq!(map["models_dir"], "/opt/ml/models");
        assert_eq!(map["multi_model"], true);
        assert_eq!(map["rest_api_timeout_in_ms"], 60_000);
        let map = sagemaker_defaults(&env(&[])).unwrap();
        assert_eq!(
            (map["rest_api_port"].as_i64(), map["models_dir"].as_str()),
            (Some(8080), Some("/opt/ml/model"))
        );
        assert!(sagemaker_defaults(&env(&[("SAGEMAKER_BIND_TO_PORT", "x")])).is_err());
        let cli = Cli::try_from_args(["tfserve", "serve", "--models_dir", "models"]).unwrap();
        assert_eq!(cli.command, Some(Command::Serve));
        assert_eq!(
            crate::settings::Settings::load_with(&cli, &[])
                .unwrap()
                .models
                .models_dir,
            PathBuf::from("models")
        );
    }
}
