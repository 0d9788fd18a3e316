//! Layering, validation and the derived values of the settings.

use super::*;
use std::path::PathBuf;

fn cli(args: &[&str]) -> Cli {
    Cli::try_from_args(std::iter::once("tfserve").chain(args.iter().copied())).unwrap()
}

fn load(args: &[&str]) -> Result<Settings, SettingsError> {
    Settings::load_with(&cli(args), &[])
}

fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn settings_file(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("tfserve-{name}-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn defaults_are_the_flags_defaults() {
    let defaults = Settings::default();
    assert_eq!(defaults, load(&[]).unwrap());
    assert_eq!(defaults.http.host, "0.0.0.0");
    assert_eq!(defaults.http.rest_api_timeout_in_ms, 30_000);
    assert_eq!(defaults.http.max_request_bytes, 256 << 20);
    assert_eq!(defaults.models.model_name, "default");
    assert_eq!(defaults.models.models_dir, PathBuf::from("models"));
    assert_eq!(defaults.models.file_system_poll_wait_seconds, 1);
    assert_eq!(defaults.batching.max_queued_runs, 1024);
    assert_eq!(defaults.handlers.python_workers, cores());
    assert!(!defaults.security.enable_auth && !defaults.batching.enable_batching);
    assert_eq!(defaults.tags(), vec!["serve".to_string()]);
}

#[test]
fn flags_accept_both_spellings_and_forms() {
    let settings = load(&["--rest_api_port=9000", "--model-name", "m", "--model_base_path", "/x"]).unwrap();
    assert_eq!(settings.http_port(), 9000);
    assert_eq!(settings.models.model_name, "m");
    assert_eq!(settings.models.model_base_path, Some(PathBuf::from("/x")));
    // Global: a flag after the subcommand counts too.
    let after = Cli::try_from_args([
        "tfserve",
        "serve",
        "--models_dir",
        "/y",
        "--swap_policy=resource_preserving",
    ])
    .unwrap();
    let settings = Settings::load_with(&after, &[]).unwrap();
    assert_eq!(settings.models.models_dir, PathBuf::from("/y"));
    assert_eq!(
        settings.models.swap_policy,
        crate::registry::SwapPolicy::ResourcePreserving
    );
    assert!(Cli::try_from_args(["tfserve", "--swap_policy=sometimes"]).is_err());
}

#[test]
fn port_is_grpc_and_rest_api_port_is_http() {
    let lone = load(&["--port", "9000"]).unwrap();
    assert_eq!((lone.grpc_port(), lone.http_port()), (9000, 8501));
    let kserve = load(&["--port=9000", "--rest_api_port=8080"]).unwrap();
    assert_eq!((kserve.grpc_port(), kserve.http_port()), (9000, 8080));
    let defaults = Settings::default();
    assert_eq!((defaults.grpc_port(), defaults.http_port()), (8500, 8501));
    let ephemeral = load(&["--rest_api_port", "0"]).unwrap();
    assert_eq!(ephemeral.grpc_port(), 0);
}

#[test]
fn layers_rank_file_then_variables_then_flags() {
    let path = settings_file(
        "layers",
        "model_name = \"from_file\"\nrest_api_port = 7000\nmax_queued_runs = 7\nhost = \"127.0.0.1\"\n",
    );
    let path_text = path.to_str().unwrap();
    let env = vars(&[("TFSERVE_MAX_QUEUED_RUNS", "9"), ("TFSERVE_UNRELATED", "x")]);
    let settings = Settings::load_with(&cli(&["--config", path_text, "--rest_api_port", "7001"]), &env).unwrap();
    // A flag's default does not hide the file: only flags given count.
    let defaults_only = Settings::load_with(&cli(&["--config", path_text]), &[]).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(settings.models.model_name, "from_file");
    assert_eq!(settings.http_port(), 7001);
    assert_eq!(settings.batching.max_queued_runs, 9);
    assert_eq!(defaults_only.http.host, "127.0.0.1");
    assert_eq!(defaults_only.batching.max_queued_runs, 7);
}

#[test]
fn unknown_keys_in_the_file_are_refused() {
    let path = settings_file("unknown", "rest_api_prot = 7000\n");
    let error = load(&["--config", path.to_str().unwrap()]).unwrap_err().to_string();
    std::fs::remove_file(&path).unwrap();
    assert!(error.contains("rest_api_prot"), "{error}");
}

#[test]
fn per_model_batching_in_the_settings_file() {
    let path = settings_file(
        "batching",
        "enable_batching = true\n[model_batching.resnet]\nmax_batch_size = 16\n",
    );
    let settings = load(&["--config", path.to_str().unwrap()]).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(settings.batching.enable_batching);
    assert_eq!(settings.batching.model_batching["resnet"].max_batch_size, Some(16));
    let (_, params, _) = settings.batch_plan().unwrap();
    assert_eq!(
        settings.batching.model_batching["resnet"].apply(&params).max_batch_size,
        16
    );
}

#[test]
fn batching_knobs_as_flags() {
    let settings = load(&["--enable_batching", "--max_batch_size=64", "--batch_timeout_micros=500"]).unwrap();
    let (on, params, _) = settings.batch_plan().unwrap();
    assert!(on);
    assert_eq!((params.max_batch_size, params.batch_timeout_micros), (64, 500));
    assert_eq!(
        params.max_enqueued_batches,
        crate::batcher::BatchParams::default().max_enqueued_batches
    );
}

#[test]
fn sagemaker_batching_variables() {
    let with = |pairs: &[(&str, &str)]| Settings::load_with(&cli(&[]), &vars(pairs));
    let (on, params, threads) = with(&[("SAGEMAKER_TFS_ENABLE_BATCHING", "true")])
        .unwrap()
        .batch_plan()
        .unwrap();
    assert!(on);
    assert_eq!((params.max_batch_size, params.batch_timeout_micros), (8, 1000));
    assert_eq!((params.max_enqueued_batches, threads), (cores(), cores()));
    let error = with(&[
        ("SAGEMAKER_TFS_ENABLE_BATCHING", "true"),
        ("SAGEMAKER_TFS_MAX_BATCH_SIZE", "x"),
    ])
    .unwrap_err()
    .to_string();
    assert!(error.contains("SAGEMAKER_TFS_MAX_BATCH_SIZE"), "{error}");
    let (on, _, _) = with(&[]).unwrap().batch_plan().unwrap();
    assert!(!on);
    // A flag still wins over the container's variables.
    let flagged = Settings::load_with(
        &cli(&["--max_batch_size=4"]),
        &vars(&[("SAGEMAKER_TFS_ENABLE_BATCHING", "true")]),
    )
    .unwrap();
    assert_eq!(flagged.batch_plan().unwrap().1.max_batch_size, 4);
    let named = with(&[("SAGEMAKER_TFS_DEFAULT_MODEL_NAME", "m")]).unwrap();
    assert_eq!(named.models.default_model_name.as_deref(), Some("m"));
}

#[test]
fn batching_file_needs_batching_and_valid_overrides() {
    let mut settings = Settings::default();
    settings.batching.batching_parameters_file = Some("/x".into());
    assert!(settings
        .batch_plan()
        .unwrap_err()
        .to_string()
        .contains("enable_batching"));
    let mut settings = Settings::default();
    settings.batching.enable_batching = true;
    settings.batching.model_batching.insert(
        "m".into(),
        ParamsOverride {
            allowed_batch_sizes: Some(vec![2, 4]),
            max_batch_size: Some(8),
            ..Default::default()
        },
    );
    let err = settings.batch_plan().unwrap_err().to_string();
    assert!(err.contains("allowed_batch_sizes for model m"), "{err}");
}

#[test]
fn session_config_flag() {
    let settings = load(&[
        "--session_config",
        r#"{"intra_op_parallelism_threads": 3, "allow_growth": true}"#,
    ])
    .unwrap();
    let session = settings.session(1, false).unwrap();
    assert_eq!(
        (
            session.intra_op_parallelism,
            session.inter_op_parallelism,
            session.gpu_allow_growth
        ),
        (3, -1, true)
    );
    assert!(load(&["--session_config", r#"{"threads": 3}"#])
        .unwrap()
        .session(1, false)
        .unwrap_err()
        .to_string()
        .contains("session_config"));
}

#[test]
fn booleans_and_auth() {
    for (flag, on) in [
        ("--enable_auth=True", true),
        ("--enable_auth=0", false),
        ("--enable_auth", true),
    ] {
        let settings = load(&[flag, "--auth_username", "u", "--auth_password", "p"]).unwrap();
        assert_eq!(settings.security.enable_auth, on, "{flag}");
    }
    assert!(Cli::try_from_args(["tfserve", "--enable_batching=maybe"]).is_err());
    let error = load(&["--enable_auth", "TRUE", "--auth_username", "u"]).unwrap_err();
    assert!(error.to_string().contains("auth_password"));
    let settings = load(&["--enable_auth=yes", "--auth_username=u", "--auth_password=hunter2"]).unwrap();
    assert!(!format!("{settings:?}").contains("hunter2"));
}

#[test]
fn invalid_values_name_the_setting() {
    let err = load(&["--num_batch_threads", "0"]).unwrap_err().to_string();
    assert!(err.contains("num_batch_threads"), "{err}");
    let err = Settings::load_with(&cli(&[]), &vars(&[("TFSERVE_REST_API_NUM_THREADS", "0")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("rest_api_num_threads"), "{err}");
}

#[test]
fn the_cache_directory_is_a_setting() {
    let settings = Settings::load_with(&cli(&[]), &vars(&[("TFSERVE_CACHE_DIR", "/cache")])).unwrap();
    assert_eq!(settings.handlers.cache_dir, Some(PathBuf::from("/cache")));
    assert_eq!(
        settings.handler_settings().deps_dir,
        PathBuf::from("/cache/handler-deps")
    );
}

#[test]
fn sessions_grow_gpu_memory_by_default_and_cpu_only_hides_gpus() {
    let session = load(&[]).unwrap().session(1, false).unwrap();
    assert!(session.gpu_allow_growth && !session.cpu_only);
    let session = load(&["--cpu_only"]).unwrap().session(1, false).unwrap();
    assert!(session.cpu_only);
    let session = load(&["--session_config", r#"{"allow_growth": false}"#])
        .unwrap()
        .session(1, false)
        .unwrap();
    assert!(!session.gpu_allow_growth);
}

#[test]
fn a_gpu_host_runs_ops_on_tensorflows_pool_unless_told_otherwise() {
    let inter_op = |args: &[&str], gpu: bool| load(args).unwrap().session(2, gpu).unwrap().inter_op_parallelism;
    assert_eq!(inter_op(&[], false), -1, "the CPU: ops on the batch thread");
    assert_eq!(inter_op(&[], true), 0, "a GPU: TensorFlow's pool");
    assert_eq!(inter_op(&["--tensorflow_inter_op_parallelism", "-1"], true), -1);
    let json = r#"{"inter_op_parallelism_threads": 4}"#;
    assert_eq!(inter_op(&["--session_config", json], true), 4);
}

#[test]
fn a_latency_objective_is_a_batching_setting() {
    let (_, params, _) = load(&["--enable_batching", "--batching_target_latency_ms", "7.5"])
        .unwrap()
        .batch_plan()
        .unwrap();
    assert_eq!(params.target_latency_micros, 7_500);
    assert_eq!(params.objective().unwrap().percentile, 99.0);
    let error = load(&["--enable_batching", "--batching_target_latency_ms=-1"])
        .unwrap()
        .batch_plan()
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("batching_target_latency_ms") && error.contains("-1"),
        "{error}"
    );
    let error = load(&[
        "--enable_batching",
        "--batching_target_latency_ms=5",
        "--batching_target_percentile=0",
    ])
    .unwrap()
    .batch_plan()
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("target_percentile") && error.contains("got 0"),
        "{error}"
    );
    assert!(load(&[]).unwrap().batch_plan().unwrap().1.objective().is_none());
}

#[test]
fn model_access_names_known_classes_and_confinement_is_on_by_default() {
    let settings = load(&["--allow_model_access=files_read, network"]).unwrap();
    let allowed = settings.security.allowed_access();
    assert_eq!(allowed.len(), 2, "{allowed:?}");
    assert!(load(&[]).unwrap().security.allowed_access().is_empty());
    let error = load(&["--allow_model_access=files"]).unwrap_err().to_string();
    assert!(
        error.contains("allow_model_access=files")
            && error.contains("files_read, files_write, network, custom_ops or all"),
        "{error}"
    );
    assert!(Settings::default().security.confine);
    assert!(!load(&["--confine=false"]).unwrap().security.confine);
}

#[test]
fn list_settings_take_comma_separated_variables() {
    let env = vars(&[("TFSERVE_MODEL_ROOTS", "/a,/b")]);
    let settings = Settings::load_with(&cli(&[]), &env).unwrap();
    assert_eq!(
        settings.models.model_roots,
        vec![PathBuf::from("/a"), PathBuf::from("/b")]
    );
    let one = Settings::load_with(&cli(&[]), &vars(&[("TFSERVE_MODEL_ROOTS", "/only")])).unwrap();
    assert_eq!(one.models.model_roots, vec![PathBuf::from("/only")]);
}
