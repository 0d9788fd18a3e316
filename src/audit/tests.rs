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

/// An audit of one signature running one module per entry of `platforms`
/// (`"-"`: its platform check disabled).
fn with_modules(platforms: &[&[&str]]) -> ModelAudit {
    let modules = platforms
        .iter()
        .enumerate()
        .map(|(n, listed)| JaxModule {
            node: format!("f{n}/XlaCallModule"),
            version: 10,
            platforms: listed.iter().filter(|p| **p != "-").map(|p| p.to_string()).collect(),
            platform_checked: !listed.contains(&"-"),
        })
        .collect();
    ModelAudit {
        signatures: vec![SignatureAudit {
            signature: "serving_default".into(),
            reaches: Vec::new(),
            modules,
        }],
        unreadable: None,
    }
}

#[test]
fn jax_modules_run_where_the_linked_tensorflow_can_run_them_or_are_refused_saying_why() {
    let devices = |list: &[&str]| list.iter().map(|d| d.to_string()).collect::<Vec<_>>();
    let (cpu, gpu, none) = (devices(&["CPU"]), devices(&["CPU", "GPU"]), Vec::new());
    let placed = |audit: &ModelAudit, on_gpu: bool, kernels: Option<&Vec<String>>| {
        audit.module_placement(on_gpu, kernels.map(Vec::as_slice))
    };
    let refused = |result: Result<ModulePlacement, String>, says: &[&str]| {
        let message = result.expect_err("refused");
        assert!(
            message.starts_with("model is refused: signature 'serving_default'"),
            "{message}"
        );
        for said in says {
            assert!(message.contains(said), "{said:?} in {message}");
        }
    };
    let moved = |result: Result<ModulePlacement, String>, says: &str| match result {
        Ok(ModulePlacement::Cpu(why)) => assert!(why.contains(says), "{why}"),
        other => panic!("{other:?}"),
    };
    let as_configured = Ok(ModulePlacement::AsConfigured);

    let no_modules = with_modules(&[]);
    assert_eq!(
        placed(&no_modules, true, Some(&none)),
        as_configured,
        "no module, nothing to check"
    );
    let cpu_export = with_modules(&[&["CPU"]]);
    refused(
        placed(&cpu_export, false, Some(&none)),
        &["no XlaCallModule kernel", "built without XLA"],
    );
    assert_eq!(placed(&cpu_export, false, Some(&cpu)), as_configured);
    assert_eq!(
        placed(&cpu_export, false, None),
        as_configured,
        "a runtime that cannot say is trusted"
    );
    moved(placed(&cpu_export, true, Some(&gpu)), "exported for CPU only");

    let cuda_export = with_modules(&[&["CUDA"]]);
    assert_eq!(placed(&cuda_export, true, Some(&gpu)), as_configured);
    refused(
        placed(&cuda_export, false, Some(&gpu)),
        &[
            "exported for CUDA only",
            "this server runs it on the CPU",
            "platforms=['cpu', 'cuda']",
        ],
    );
    refused(
        placed(&cuda_export, true, Some(&cpu)),
        &["exported for CUDA only", "no GPU kernel for XlaCallModule"],
    );

    let both = with_modules(&[&["CPU", "CUDA"]]);
    moved(placed(&both, true, Some(&cpu)), "no GPU kernel for XlaCallModule");
    assert_eq!(placed(&both, false, Some(&cpu)), as_configured);
    let unchecked = with_modules(&[&["CUDA", "-"]]);
    assert_eq!(
        placed(&unchecked, false, Some(&cpu)),
        as_configured,
        "its platform check is off"
    );

    // One module only the CPU runs and one only a GPU runs: nowhere runs both.
    let split = with_modules(&[&["CPU"], &["CUDA"]]);
    refused(
        placed(&split, true, Some(&gpu)),
        &["exported for CUDA only", "exported for CPU only"],
    );
}
