//! Model config files in every accepted form, and version policies.

use super::*;
use crate::runtime::precision::MixedPrecision;

#[test]
fn tf_serving_text_format() {
    let text = r#"
        model_config_list {
          config {
            name: 'adder'
            base_path: '/models/adder'
            model_platform: 'tensorflow'
            model_version_policy { specific { versions: 1 versions: 2 } }
            version_labels { key: 'stable' value: 1 }
            version_labels { key: 'canary' value: 2 }
          }
          config { name: 'half' base_path: '/models/half' }
        }"#;
    let sources = parse(text).unwrap();
    assert_eq!(sources[0].policy, VersionPolicy::Specific(vec![1, 2]));
    assert_eq!(sources[0].labels["canary"], 2);
    assert_eq!(sources[1].policy, VersionPolicy::Latest(1));
}

#[test]
fn json_forms() {
    let tfs = r#"{"model_config_list": {"config": [{"name": "a", "base_path": "/a", "model_version_policy": {"all": {}}, "version_labels": {"stable": "3"}}]}}"#;
    let sources = parse(tfs).unwrap();
    assert_eq!(sources[0].policy, VersionPolicy::All);
    assert_eq!(sources[0].labels["stable"], 3);
    let stfs = r#"{"model_config_list": [{"name": "b", "base_path": "./b", "platform": "tensorflow",
                    "session_config": {"intra_op_parallelism_threads": 1, "allow_growth": true}}]}"#;
    let source = &parse(stfs).unwrap()[0];
    assert_eq!(source.policy, VersionPolicy::All);
    let session = source.session.apply(&SessionConfig {
        intra_op_parallelism: 4,
        inter_op_parallelism: -1,
        ..Default::default()
    });
    assert_eq!(
        (
            session.intra_op_parallelism,
            session.inter_op_parallelism,
            session.gpu_allow_growth
        ),
        (1, -1, true)
    );
    let typo = r#"{"model_config_list": [{"name": "b", "base_path": "./b", "session_config": {"intra_op": 1}}]}"#;
    assert!(parse(typo).unwrap_err().contains("intra_op"));
}

#[test]
fn a_model_can_name_the_gpus_its_replicas_run_on() {
    let config = r#"{"model_config_list": [{"name": "r", "base_path": "/r", "session_config": {"gpu_ids": [0, 2]}},
                                           {"name": "s", "base_path": "/s"}]}"#;
    let sources = parse(config).unwrap();
    let server_wide = SessionConfig {
        gpu_ids: vec![1],
        ..Default::default()
    };
    assert_eq!(sources[0].session.apply(&server_wide).gpu_ids, vec![0, 2]);
    assert_eq!(sources[1].session.apply(&server_wide).gpu_ids, vec![1]);
    let bad = r#"{"model_config_list": [{"name": "r", "base_path": "/r", "session_config": {"gpu_ids": "0,1"}}]}"#;
    let error = parse(bad).unwrap_err();
    assert!(
        error.contains("session_config.gpu_ids") && error.contains("\"0,1\""),
        "{error}"
    );
}

#[test]
fn errors_name_the_model_and_field() {
    assert!(parse("model_config_list { config { name: 'a' } }")
        .unwrap_err()
        .contains("'a' has no base_path"));
    let onnx = r#"{"model_config_list": [{"name": "m", "base_path": "/m", "platform": "onnx"}]}"#;
    assert!(parse(onnx).unwrap_err().contains("model_platform 'onnx'"));
    let twice = "model_config_list { config { name: 'a' base_path: '/a' } config { name: 'a' base_path: '/b' } }";
    assert!(parse(twice).unwrap_err().contains("twice"));
}

#[test]
fn policies_select_versions() {
    let available = [(1, ()), (2, ()), (5, ())];
    let versions = |p: VersionPolicy| p.select(&available).into_iter().map(|v| v.0).collect::<Vec<_>>();
    assert_eq!(versions(VersionPolicy::Latest(2)), vec![2, 5]);
    assert_eq!(versions(VersionPolicy::All), vec![1, 2, 5]);
    assert_eq!(versions(VersionPolicy::Specific(vec![2, 7])), vec![2]);
}

#[test]
fn tf_serving_logging_config() {
    let text = r#"
        model_config_list {
          config {
            name: 'half' base_path: '/m'
            logging_config {
              log_collector_config { type: '' filename_prefix: '/logs/half' }
              sampling_config { sampling_rate: 0.25 }
            }
          }
          config { name: 'other' base_path: '/o' }
        }"#;
    let sources = parse(text).unwrap();
    let logging = sources[0].logging.as_deref().unwrap();
    assert_eq!(logging.filename_prefix, "/logs/half");
    assert_eq!(logging.sampling_rate, 0.25);
    assert!(sources[1].logging.is_none());
    let json = r#"{"model_config_list": {"config": [{"name": "a", "base_path": "/a",
        "loggingConfig": {"logCollectorConfig": {"filenamePrefix": "/l/a"}, "samplingConfig": {"samplingRate": 1}}}]}}"#;
    assert_eq!(parse(json).unwrap()[0].logging.as_deref().unwrap().sampling_rate, 1.0);
    let bad = text.replace("0.25", "2");
    assert!(parse(&bad)
        .unwrap_err()
        .contains("sampling_rate must be between 0 and 1, got 2"));
    let no_prefix = "model_config_list { config { name: 'h' base_path: '/m' logging_config { sampling_config { sampling_rate: 1 } } } }";
    assert!(parse(no_prefix)
        .unwrap_err()
        .contains("needs log_collector_config.filename_prefix"));
}

#[test]
fn models_sharing_a_log_prefix_are_accepted_and_named() {
    // TF Serving accepts them with a warning; their logs share the files.
    let config = |name: &str, prefix: &str| {
        format!("config {{ name: '{name}' base_path: '/{name}' logging_config {{ log_collector_config {{ filename_prefix: '{prefix}' }} sampling_config {{ sampling_rate: 1 }} }} }}")
    };
    let text = format!(
        "model_config_list {{ {} {} {} {} }}",
        config("a", "/logs/ab"),
        config("b", "/logs/ab"),
        config("c", "/logs/c"),
        config("d", "/logs/ab")
    );
    let sources = parse(&text).unwrap();
    assert_eq!(shared_log_prefixes(&sources), ["/logs/ab"]);
}

#[test]
fn a_model_sets_its_own_precision_and_may_not_size_the_shared_pools() {
    let config = r#"{"model_config_list": [
        {"name": "a", "base_path": "/a", "session_config": {"mixed_precision": "float32"}},
        {"name": "b", "base_path": "/b", "session_config": {"mixed_precision": "bfloat16", "intra_op_parallelism_threads": 2}},
        {"name": "c", "base_path": "/c"}]}"#;
    let sources = parse(config).unwrap();
    let server_wide = SessionConfig {
        intra_op_parallelism: 2,
        mixed_precision: Some(MixedPrecision::Float16),
        ..Default::default()
    };
    let modes: Vec<_> = sources
        .iter()
        .map(|source| source.session.apply(&server_wide).mixed_precision)
        .collect();
    assert_eq!(
        modes,
        [None, Some(MixedPrecision::Bfloat16), Some(MixedPrecision::Float16)]
    );
    assert_eq!(sources[1].session.check_shared_pools(&server_wide), Ok(()));
    let other = SessionConfig {
        intra_op_parallelism: 4,
        ..Default::default()
    };
    let refused = sources[1].session.check_shared_pools(&other).unwrap_err();
    assert!(
        refused.contains("intra_op_parallelism_threads 2 differs from the server's 4"),
        "{refused}"
    );
    let bad =
        r#"{"model_config_list": [{"name": "a", "base_path": "/a", "session_config": {"mixed_precision": "int8"}}]}"#;
    let error = parse(bad).unwrap_err();
    assert!(
        error.contains("session_config.mixed_precision must be bfloat16, float16, auto or float32, got \"int8\""),
        "{error}"
    );
}

#[test]
fn auto_leaves_the_mode_to_the_trial_within_the_models_tolerance() {
    let config = r#"{"model_config_list": [
        {"name": "a", "base_path": "/a", "session_config": {"mixed_precision": "auto", "mode_max_relative_error": 0.2}},
        {"name": "b", "base_path": "/b", "session_config": {"mixed_precision": "bfloat16"}},
        {"name": "c", "base_path": "/c", "session_config": {"mode_min_top1_agreement": 0.9}}]}"#;
    let sources = parse(config).unwrap();
    let server_wide = SessionConfig {
        choose_mode: true,
        ..Default::default()
    };
    let sessions: Vec<SessionConfig> = sources.iter().map(|s| s.session.apply(&server_wide)).collect();
    assert!(sessions[0].choose_mode && sessions[0].mixed_precision.is_none());
    assert_eq!(sessions[0].mode_tolerance.max_relative_error, 0.2);
    assert_eq!(sessions[0].mode_tolerance.min_top1_agreement, 0.99);
    assert!(!sessions[1].choose_mode);
    assert!(sessions[2].choose_mode);
    assert_eq!(sessions[2].mode_tolerance.min_top1_agreement, 0.9);
    let bad = r#"{"model_config_list": [{"name": "a", "base_path": "/a", "session_config": {"mode_min_top1_agreement": 2}}]}"#;
    let error = parse(bad).unwrap_err();
    assert!(
        error.contains("session_config.mode_min_top1_agreement must be a number from 0 to 1, got 2"),
        "{error}"
    );
}
