//! The module graph's layering, checked over the sources: transports over
//! dialects over the request glue over the server core over the service over
//! the models and the runtime. Each module may import only from layers below
//! it (or from the shared modules beside them), and no dialect imports another.
//! Also the sources' sizes: every file reads in one sitting, and a long
//! production function says why it is kept whole.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use tfserve::{LAYERS, SHARED};

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

fn identifier(text: &str) -> String {
    text.trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// `(module, submodule)` of a path after `crate::`: `a::b...`, or each item
/// of a group `{a::b, c}` (nested groups name their first segment).
fn paths_after(rest: &str, found: &mut BTreeSet<(String, String)>) {
    let Some(group) = rest.strip_prefix('{') else {
        let mut parts = rest.split("::").map(identifier);
        let module = parts.next().unwrap_or_default();
        found.insert((module, parts.next().unwrap_or_default()));
        return;
    };
    let mut depth = 0;
    let mut item = String::new();
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                paths_after(item.trim(), found);
                item.clear();
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    if !item.trim().is_empty() {
        paths_after(item.trim(), found);
    }
}

/// `(module, submodule)` of every `crate::a::b` and `crate::{a::b, c}` a file
/// names outside comments.
fn imports(text: &str) -> BTreeSet<(String, String)> {
    let code: String = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        paths_after(rest, &mut found);
    }
    found
}

/// The modules `lib.rs` declares.
fn declared_modules(root: &Path) -> Vec<String> {
    std::fs::read_to_string(root.join("lib.rs"))
        .unwrap()
        .lines()
        .filter_map(|line| line.strip_prefix("pub mod ").or_else(|| line.strip_prefix("mod ")))
        .map(|rest| rest.trim_end_matches(';').trim().to_string())
        .collect()
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
        let text = std::fs::read_to_string(file).unwrap();
        let Some(own) = layer_of(&module) else {
            // A shared module may use other shared modules only.
            for (imported, sub) in imports(&text) {
                if layer_of(&imported).is_some() {
                    violations.push(format!("{} (shared): crate::{imported}::{sub}", relative.display()));
                }
            }
            continue;
        };
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
fn the_check_sees_plain_and_grouped_imports_and_skips_comments() {
    let found = imports(
        "use crate::http::AppState; // crate::grpc::x\nlet a = crate::dialects::tfs::route;\n\
         use crate::{\n    model_config,\n    server::{models, ServerState},\n    tls::Config, // crate::serve\n};",
    );
    let expected: BTreeSet<(String, String)> = [
        ("http", "AppState"),
        ("dialects", "tfs"),
        ("model_config", ""),
        ("server", ""),
        ("tls", "Config"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(found, expected);
}

#[test]
fn every_module_is_in_a_layer_or_shared_and_only_once() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = declared_modules(&root);
    assert!(modules.len() > 20, "{modules:?}");
    for module in &modules {
        let layers = LAYERS.iter().filter(|layer| layer.contains(&module.as_str())).count();
        let shared = SHARED.contains(&module.as_str()) as usize;
        assert_eq!(
            layers + shared,
            1,
            "{module} is in {layers} layers and shared {shared} times"
        );
    }
    for listed in LAYERS.iter().flat_map(|layer| layer.iter()).chain(SHARED) {
        assert!(
            modules.contains(&listed.to_string()) || ["main", "bin"].contains(listed),
            "{listed} is listed but lib.rs declares no such module"
        );
    }
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

/// Files longer than this are split by topic.
const MAX_FILE_LINES: usize = 400;
/// Production functions longer than this say why (`// Kept whole: ...`).
const MAX_FUNCTION_LINES: usize = 60;

fn rust_files(dirs: &[&str]) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in dirs {
        sources(&root.join(dir), &mut files);
    }
    files
}

#[test]
fn every_source_file_reads_in_one_sitting() {
    let long: Vec<String> = rust_files(&["src", "tests", "benches", "examples"])
        .iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(path).unwrap().lines().count();
            (lines > MAX_FILE_LINES).then(|| format!("{} ({lines} lines)", path.display()))
        })
        .collect();
    assert!(long.is_empty(), "over {MAX_FILE_LINES} lines: {long:?}");
}

/// `(name, lines, whether a `Kept whole:` comment sits above it)` of each
/// function in `text` before its tests: from its `fn` line to the brace
/// closing at the same indent.
fn functions(text: &str) -> Vec<(String, usize, bool)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| w[0].trim() == "#[cfg(test)]" && w[1].trim_start().starts_with("mod "))
        .unwrap_or(lines.len());
    let mut found = Vec::new();
    let mut i = 0;
    while i < end {
        let line = lines[i];
        let indent = line.len() - line.trim_start().len();
        let words: Vec<&str> = line.split_whitespace().take_while(|w| *w != "fn").collect();
        let is_fn = line.contains("fn ")
            && words.len() < line.split_whitespace().count()
            && words
                .iter()
                .all(|w| ["pub", "async", "const", "unsafe"].contains(w) || w.starts_with("pub("));
        let opens = (i..end).find(|&j| lines[j].trim_end().ends_with('{') || lines[j].trim_end().ends_with(';'));
        match opens {
            Some(open) if is_fn && lines[open].trim_end().ends_with('{') => {
                let closing = format!("{}}}", " ".repeat(indent));
                let close = (open + 1..end).find(|&j| lines[j] == closing).unwrap_or(end);
                let name = identifier(line.split("fn ").nth(1).unwrap_or_default());
                // The comment block and attributes right above the `fn` line.
                let above = lines[..i]
                    .iter()
                    .rev()
                    .take_while(|l| l.trim_start().starts_with("//") || l.trim_start().starts_with("#["));
                let reason = above.into_iter().any(|l| l.contains("Kept whole:"));
                found.push((name, close - i + 1, reason));
                i = close + 1;
            }
            _ => i += 1,
        }
    }
    found
}

#[test]
fn a_long_production_function_says_why_it_is_kept_whole() {
    let (mut unexplained, mut stale) = (Vec::new(), Vec::new());
    for path in rust_files(&["src"]) {
        let text = std::fs::read_to_string(&path).unwrap();
        let is_tests =
            path.file_name().is_some_and(|n| n == "tests.rs") || path.components().any(|c| c.as_os_str() == "tests");
        if is_tests {
            continue;
        }
        for (name, lines, reason) in functions(&text) {
            if lines > MAX_FUNCTION_LINES && !reason {
                unexplained.push(format!("{}: {name} ({lines} lines)", path.display()));
            }
            if lines <= MAX_FUNCTION_LINES && reason {
                stale.push(format!("{}: {name} ({lines} lines)", path.display()));
            }
        }
    }
    assert!(
        unexplained.is_empty(),
        "over {MAX_FUNCTION_LINES} lines with no `// Kept whole: why` above: {unexplained:?}"
    );
    assert!(
        stale.is_empty(),
        "`// Kept whole:` above a function of {MAX_FUNCTION_LINES} lines or fewer: {stale:?}"
    );
}

#[test]
fn the_function_check_measures_from_fn_to_its_closing_brace() {
    let text = "fn short() {\n    1;\n}\n\n// Kept whole: a reason.\npub async fn long() {\n    a;\n    b;\n}\n";
    assert_eq!(
        functions(text),
        [("short".to_string(), 3, false), ("long".to_string(), 4, true)]
    );
}
