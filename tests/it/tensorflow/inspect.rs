//! `tfserve inspect`: a SavedModel's tag-sets and signatures without Python,
//! warnings for declared shapes the graph does not enforce, and `--run`.

use crate::common;

use std::process::{Command, Output};

use common::repo_path;

fn inspect(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tfserve"))
        .arg("inspect")
        .args(args)
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .output()
        .expect("tfserve runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn shows_every_tag_set_and_warns_on_inexact_shapes() {
    let dir = repo_path("tests/compat/models/multi_tag/1");
    let output = inspect(&[dir.to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = stdout(&output);
    assert!(text.contains("MetaGraphDef with tag-set: 'train'"), "{text}");
    assert!(text.contains("MetaGraphDef with tag-set: 'serve'"), "{text}");
    assert!(text.contains("signature_def['train_only']:"), "{text}");
    assert!(text.contains("Method name is: tensorflow/serving/predict"), "{text}");

    let estimator_like = repo_path("tests/compat/models/tf1_wrong_shape");
    let text = stdout(&inspect(&[estimator_like.to_str().unwrap()]));
    assert!(text.contains("version 1 (the highest)"), "{text}");
    assert!(text.contains("shape: (-1, 1)"), "{text}");
    assert!(
        text.contains("warning: input 'x' declares (-1, 1) (a different rank) but its placeholder takes (-1)"),
        "{text}"
    );
    let old_export = repo_path("tests/compat/models/tf1_shapeless");
    let text = stdout(&inspect(&[old_export.to_str().unwrap()]));
    assert!(
        text.contains("shape: ()") && text.contains("placeholder takes unknown_rank"),
        "{text}"
    );
}

#[test]
fn run_answers_through_the_server_path() {
    let model = repo_path("models/half_plus_two");
    let output = inspect(&[model.to_str().unwrap(), "--run", r#"{"instances": [1.0, 2.0, 5.0]}"#]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = stdout(&output);
    assert_eq!(text.lines().last(), Some(r#"{"predictions":[2.5,3.0,4.5]}"#), "{text}");

    let classify = r#"{"signature_name": "classify_x_to_y", "examples": [{"x": 1.0}]}"#;
    let text = stdout(&inspect(&[model.to_str().unwrap(), "--run", classify]));
    assert_eq!(text.lines().last(), Some(r#"{"results":[[["",2.5]]]}"#), "{text}");

    let scalar = repo_path("tests/compat/models/tf1_shapeless/1");
    let args = [
        scalar.to_str().unwrap(),
        "--run",
        r#"{"inputs": 3.5}"#,
        "--enable_batching",
    ];
    let text = stdout(&inspect(&args));
    assert_eq!(text.lines().last(), Some(r#"{"outputs":4.75}"#), "{text}");

    let output = inspect(&[model.to_str().unwrap(), "--run", r#"{"instances": [[1, 2], [3]]}"#]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("HTTP 400: {\"error\":") && last.contains("ragged"),
        "{text}"
    );
}

#[test]
fn a_directory_without_a_model_is_refused() {
    let output = inspect(&[repo_path("src").to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("neither a SavedModel"), "{stderr}");
}

#[test]
fn its_help_lists_its_own_flags_not_the_servers() {
    let output = inspect(&["--help"]);
    assert!(output.status.success());
    let help = stdout(&output);
    assert!(help.contains("--run") && help.contains("--method"), "{help}");
    assert!(
        !help.contains("--rest_api_port") && !help.contains("--enable_batching"),
        "{help}"
    );
}
