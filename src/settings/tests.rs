//! Layering, validation and the derived values of the settings.

use super::*;
use clap::Parser;

#[test]
fn flags_accept_both_spellings_and_forms() {
    let cli = Cli::try_parse_from([
        "tfserve",
        "--rest_api_port=9000",
        "--model-name",
        "m",
        "--model_base_path",
        "/x",
    ])
    .unwrap();
    let settings = Settings::load(&cli).unwrap();
    assert_eq!(settings.http_port(), 9000);
    assert_eq!(settings.model_name, "m");
    assert_eq!(settings.model_base_path, Some(PathBuf::from("/x")));
}

#[test]
fn lone_port_sets_http_port() {
    let cli = Cli::try_parse_from(["tfserve", "--port", "8500"]).unwrap();
    assert_eq!(Settings::load(&cli).unwrap().http_port(), 8500);
    let both = Cli::try_parse_from(["tfserve", "--port", "8500", "--rest_api_port", "8502"]).unwrap();
    assert_eq!(Settings::load(&both).unwrap().http_port(), 8502);
    assert_eq!(Settings::default().http_port(), 8501);
}

#[test]
fn file_is_overridden_by_flags() {
    let path = std::env::temp_dir().join(format!("tfserve-settings-{}.toml", std::process::id()));
    std::fs::write(&path, "model_name = \"from_file\"\nrest_api_port = 7000\n").unwrap();
    let cli = Cli::try_parse_from(["tfserve", "--config", path.to_str().unwrap(), "--rest_api_port", "7001"]).unwrap();
    let settings = Settings::load(&cli).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(settings.model_name, "from_file");
    assert_eq!(settings.http_port(), 7001);
}

#[test]
fn per_model_batching_in_the_settings_file() {
    let path = std::env::temp_dir().join(format!("tfserve-batching-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        "enable_batching = true\n[model_batching.resnet]\nmax_batch_size = 16\n",
    )
    .unwrap();
    let cli = Cli::try_parse_from(["tfserve", "--config", path.to_str().unwrap()]).unwrap();
    let settings = Settings::load(&cli).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(settings.enable_batching);
    assert_eq!(settings.model_batching["resnet"].max_batch_size, Some(16));
    let (_, params, _) = settings.batching(&|_| None).unwrap();
    assert_eq!(settings.model_batching["resnet"].apply(&params).max_batch_size, 16);
}

#[test]
fn sagemaker_batching_variables() {
    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    };
    let settings = Settings::default();
    let (on, params, threads) = settings
        .batching(&vars(&[("SAGEMAKER_TFS_ENABLE_BATCHING", "true")]))
        .unwrap();
    assert!(on);
    assert_eq!((params.max_batch_size, params.batch_timeout_micros), (8, 1000));
    assert_eq!((params.max_enqueued_batches, threads), (cores(), cores()));
    let env = vars(&[
        ("SAGEMAKER_TFS_ENABLE_BATCHING", "true"),
        ("SAGEMAKER_TFS_MAX_BATCH_SIZE", "x"),
    ]);
    assert!(settings
        .batching(&env)
        .unwrap_err()
        .to_string()
        .contains("SAGEMAKER_TFS_MAX_BATCH_SIZE"));
    let (on, _, _) = settings.batching(&vars(&[])).unwrap();
    assert!(!on);
}

#[test]
fn batching_file_needs_batching_and_valid_overrides() {
    let settings = Settings {
        batching_parameters_file: Some("/x".into()),
        ..Settings::default()
    };
    assert!(settings
        .batching(&|_| None)
        .unwrap_err()
        .to_string()
        .contains("enable_batching"));
    let mut settings = Settings {
        enable_batching: true,
        ..Settings::default()
    };
    settings.model_batching.insert(
        "m".into(),
        ParamsOverride {
            allowed_batch_sizes: Some(vec![2, 4]),
            max_batch_size: Some(8),
            ..Default::default()
        },
    );
    let err = settings.batching(&|_| None).unwrap_err().to_string();
    assert!(err.contains("allowed_batch_sizes for model m"), "{err}");
}

#[test]
fn session_config_flag() {
    let cli = Cli::try_parse_from([
        "tfserve",
        "--session_config",
        r#"{"intra_op_parallelism_threads": 3, "allow_growth": true}"#,
    ])
    .unwrap();
    let session = Settings::load(&cli).unwrap().session(1).unwrap();
    assert_eq!(
        (
            session.intra_op_parallelism,
            session.inter_op_parallelism,
            session.gpu_allow_growth
        ),
        (3, -1, true)
    );
    let cli = Cli::try_parse_from(["tfserve", "--session_config", r#"{"threads": 3}"#]).unwrap();
    assert!(Settings::load(&cli)
        .unwrap()
        .session(1)
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
        let cli = Cli::try_parse_from(["tfserve", flag, "--auth_username", "u", "--auth_password", "p"]).unwrap();
        assert_eq!(Settings::load(&cli).unwrap().enable_auth, on, "{flag}");
    }
    assert!(Cli::try_parse_from(["tfserve", "--enable_batching=maybe"]).is_err());
    let cli = Cli::try_parse_from(["tfserve", "--enable_auth", "TRUE", "--auth_username", "u"]).unwrap();
    assert!(Settings::load(&cli).unwrap_err().to_string().contains("auth_password"));
    let cli = Cli::try_parse_from([
        "tfserve",
        "--enable_auth=yes",
        "--auth_username=u",
        "--auth_password=hunter2",
    ])
    .unwrap();
    assert!(!format!("{:?}", Settings::load(&cli).unwrap()).contains("hunter2"));
}

#[test]
fn invalid_values_name_the_setting() {
    let cli = Cli::try_parse_from(["tfserve", "--num_batch_threads", "0"]).unwrap();
    let err = Settings::load(&cli).unwrap_err().to_string();
    assert!(err.contains("num_batch_threads"), "{err}");
}
