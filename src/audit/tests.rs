//! The audit on real SavedModels: the models of `tests/access` (each
//! reaching one class), and every model the project ships or tests with,
//! which must load under the default policy.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::*;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn serve() -> Vec<String> {
    vec!["serve".to_string()]
}

fn access_model(name: &str) -> ModelAudit {
    let dir = repo().join("tests/access/models").join(name).join("1");
    audit(&dir, &serve(), &[]).unwrap().unwrap()
}

fn nothing() -> BTreeSet<Access> {
    BTreeSet::new()
}

#[test]
fn each_evil_signature_is_refused_naming_its_op_node_and_class() {
    let cases = [
        ("read_file", "ReadFile", Access::FilesRead),
        ("list_files", "MatchingFiles", Access::FilesRead),
        ("read_lines", "TextLineDataset", Access::FilesRead),
        ("write_file", "WriteFile", Access::FilesWrite),
        ("summary_writer", "CreateSummaryFileWriter", Access::FilesWrite),
        ("print_to_file", "PrintV2", Access::FilesWrite),
    ];
    for (model, op, class) in cases {
        let audit = access_model(model);
        let reaches = &audit
            .signatures
            .iter()
            .find(|s| s.signature == "serving_default")
            .unwrap()
            .reaches;
        let reach = reaches
            .iter()
            .find(|r| r.op == op)
            .unwrap_or_else(|| panic!("{model}: no {op} among {reaches:?}"));
        assert_eq!(reach.class, class, "{model}");
        let refusal = audit
            .refusal(&nothing())
            .unwrap_or_else(|| panic!("{model} was not refused"));
        let first = &reaches[0];
        let expected = format!(
            "model is refused: signature 'serving_default' reaches {} (node '{}', class {})",
            first.op, first.node, first.class
        );
        assert!(refusal.starts_with(&expected), "{model}: {refusal}");
        assert!(
            refusal.contains("--allow_model_access=") && refusal.contains("allow_access: \""),
            "{refusal}"
        );
        assert!(
            first.node.ends_with(&first.op) || first.node.contains('/'),
            "{model}: {first:?}"
        );
        // Allowed, the same model loads.
        assert_eq!(audit.refusal(&audit.classes()), None, "{model}");
        assert!(audit.summary().contains(class.name()), "{}", audit.summary());
    }
}

#[test]
fn a_model_allowed_one_class_is_still_refused_for_another() {
    let audit = access_model("write_file");
    let reads_only = BTreeSet::from([Access::FilesRead]);
    let refusal = audit.refusal(&reads_only).unwrap();
    assert!(refusal.contains("class files_write"), "{refusal}");
    assert!(refusal.contains("--allow_model_access=files_write "), "{refusal}");
}

#[test]
fn printing_to_stderr_and_asset_tables_reach_nothing() {
    let audit = access_model("benign");
    assert_eq!(audit.refusal(&nothing()), None, "{}", audit.summary());
    assert_eq!(audit.summary(), "serving_default: nothing outside the request");
}

#[test]
fn ops_of_a_custom_library_are_their_own_class() {
    let dir = repo().join("tests/access/models/read_file/1");
    let audit = audit(&dir, &serve(), &["ReadFile".to_string()]).unwrap().unwrap();
    let refusal = audit.refusal(&nothing()).unwrap();
    assert!(refusal.contains("class custom_ops"), "{refusal}");
}

#[test]
fn what_cannot_be_audited_is_refused_unless_everything_is_allowed() {
    let dir = std::env::temp_dir().join(format!("tfserve-audit-pbtxt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("saved_model.pbtxt"), "meta_graphs {}").unwrap();
    let audit = audit(&dir, &serve(), &[]).unwrap().unwrap();
    let refusal = audit.refusal(&BTreeSet::from([Access::FilesRead])).unwrap();
    assert!(
        refusal.contains("saved_model.pbtxt") && refusal.contains("=all"),
        "{refusal}"
    );
    assert_eq!(audit.refusal(&Access::ALL.into_iter().collect()), None);
    // Nothing TensorFlow could load: its own load says why.
    std::fs::remove_file(dir.join("saved_model.pbtxt")).unwrap();
    assert_eq!(super::audit(&dir, &serve(), &[]).unwrap(), None);
    std::fs::write(dir.join("saved_model.pb"), b"\xff\xff").unwrap();
    assert!(super::audit(&dir, &serve(), &[]).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn classes_parse_with_all_and_name_the_known_ones() {
    assert_eq!(parse_classes("").unwrap(), nothing());
    assert_eq!(
        parse_classes(" files_read , network").unwrap(),
        BTreeSet::from([Access::FilesRead, Access::Network])
    );
    assert_eq!(parse_classes("all").unwrap().len(), 4);
    let error = parse_classes("files").unwrap_err();
    assert!(
        error.contains("'files'") && error.contains("files_read, files_write, network, custom_ops"),
        "{error}"
    );
}

/// Every version folder (a folder holding `saved_model.pb`) under `root`.
fn saved_models(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.join("saved_model.pb").is_file() {
            found.push(path);
        } else if path.is_dir() {
            found.extend(saved_models(&path));
        }
    }
    found
}

#[test]
fn every_model_shipped_or_tested_with_loads_under_the_default_policy() {
    let mut roots = vec![
        repo().join("models"),
        repo().join("tests/compat/models"),
        repo().join("tests/upstream/testdata"),
        // Print to stderr and an asset table; a jax2tf export (`XlaCallModule`).
        repo().join("tests/access/models/benign"),
        repo().join("tests/access/models/jax_export"),
    ];
    // TF Serving's own test models, where the shared folder is beside the repository.
    roots.push(repo().join("../shared/models"));
    let mut audited = 0;
    for dir in roots.iter().flat_map(|root| saved_models(root)) {
        let bytes = std::fs::read(dir.join("saved_model.pb")).unwrap();
        let model = SavedModel::decode(bytes.as_slice()).unwrap();
        for tags in model
            .meta_graphs
            .iter()
            .map(|m| m.meta_info_def.clone().unwrap_or_default().tags)
        {
            let audit = audit(&dir, &tags, &[]).unwrap().unwrap();
            assert_eq!(
                audit.refusal(&nothing()),
                None,
                "{} ({tags:?}): {}",
                dir.display(),
                audit.summary()
            );
            audited += 1;
        }
    }
    assert!(audited >= 30, "only {audited} SavedModels found");
}
