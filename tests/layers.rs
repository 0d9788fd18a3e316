//! The module graph's layering, checked over the sources: transports over
//! dialects over the request glue over the server core over the service over
//! the models and the runtime. Each module may import only from layers below
//! it (or from the shared modules beside them), and no dialect imports another.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Layers, top first. A module may import from any layer after its own.
const LAYERS: &[&[&str]] = &[
    &["serve", "inspect", "transform", "main", "bin"],
    &["http", "grpc"],
    &["dialects"],
    &["call"],
    &["server"],
    &["service"],
    &["capture"],
    &["registry"],
    &["warmup", "python_handlers"],
    &["batcher"],
    &["runtime"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// `(module, submodule)` of every `crate::a::b` a file names outside comments.
fn imports(text: &str) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let mut parts = rest.split("::").map(|p| {
                p.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect::<String>()
            });
            let module = parts.next().unwrap_or_default();
            let sub = parts.next().unwrap_or_default();
            found.insert((module, sub));
        }
    }
    found
}

#[test]
fn no_module_imports_from_a_layer_above_it_and_no_dialect_from_another() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut violations = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&root).unwrap();
        let mut components = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned());
        let module = components.next().unwrap().trim_end_matches(".rs").to_string();
        let dialect = components.next().map(|d| d.trim_end_matches(".rs").to_string());
        let Some(own) = layer_of(&module) else {
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for (imported, sub) in imports(&text) {
            let upward = layer_of(&imported).is_some_and(|theirs| theirs < own);
            let across = module != imported && layer_of(&imported) == Some(own);
            let other_dialect = module == "dialects" && imported == "dialects" && dialect.as_deref() != Some(&sub);
            if upward || across || other_dialect {
                violations.push(format!("{}: crate::{imported}::{sub}", relative.display()));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "imports against the layering:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_check_sees_imports_and_skips_comments() {
    let found = imports("use crate::http::AppState; // crate::grpc::x\nlet a = crate::dialects::tfs::route;");
    let expected: BTreeSet<(String, String)> = [("http", "AppState"), ("dialects", "tfs")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(found, expected);
}

/// Every layer uses the code table, so it may use nothing of theirs; and the
/// request error wraps the layers' errors but no dialect's or transport's
/// (dialects bring their own through `RequestError`).
#[test]
fn the_status_table_stands_alone_and_the_error_type_names_no_dialect() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let status = std::fs::read_to_string(root.join("status.rs")).unwrap();
    assert_eq!(imports(&status), BTreeSet::new(), "status.rs imports from the crate");
    let error = std::fs::read_to_string(root.join("error.rs")).unwrap();
    let named: Vec<String> = imports(&error)
        .into_iter()
        .map(|(module, _)| module)
        .filter(|module| ["dialects", "http", "grpc", "call", "server", "serve"].contains(&module.as_str()))
        .collect();
    assert!(named.is_empty(), "error.rs names {named:?}");
}
