//! The docs cannot drift from the code: every flag `tfserve --help` (and
//! its subcommands' help) prints has its row in docs/configuration.md, the
//! page has no row for a flag that does not exist, every snake_case flag a
//! page names exists, and every repository path and relative link exists.

use crate::common;

use std::collections::BTreeSet;

use clap::CommandFactory;
use tfserve::settings::Cli;

fn flags(command: &clap::Command, found: &mut BTreeSet<String>) {
    for arg in command.get_arguments() {
        if let Some(long) = arg.get_long() {
            found.insert(format!("--{long}"));
        }
    }
    for sub in command.get_subcommands() {
        flags(sub, found);
    }
}

/// The flag opening each table row (`| `--flag` | ...`).
fn rows() -> BTreeSet<String> {
    let page =
        std::fs::read_to_string(common::repo_path("docs/configuration.md")).expect("docs/configuration.md exists");
    page.lines()
        .filter_map(|line| line.strip_prefix("| `--"))
        .map(|rest| {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            format!("--{name}")
        })
        .collect()
}

#[test]
fn every_flag_has_its_row_in_the_configuration_page() {
    let mut all = BTreeSet::new();
    flags(&Cli::command(), &mut all);
    assert!(all.len() > 40, "only {} flags found", all.len());
    let rows = rows();
    let missing: Vec<&String> = all.difference(&rows).collect();
    assert!(
        missing.is_empty(),
        "flags without a row in docs/configuration.md: {missing:?}"
    );
}

#[test]
fn the_configuration_page_has_rows_only_for_real_flags() {
    let mut all = BTreeSet::new();
    flags(&Cli::command(), &mut all);
    all.extend(["--help".to_string(), "--version".to_string()]);
    let unknown: Vec<String> = rows().difference(&all).cloned().collect();
    assert!(unknown.is_empty(), "rows for flags tfserve does not have: {unknown:?}");
}

/// Every Markdown page a newcomer reads: README.md and docs/.
fn pages() -> Vec<(String, String)> {
    let mut pages = vec![("README.md".to_string(), read("README.md"))];
    let mut names: Vec<String> = std::fs::read_dir(common::repo_path("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .collect();
    names.sort();
    pages.extend(
        names
            .into_iter()
            .map(|n| (format!("docs/{n}"), read(&format!("docs/{n}")))),
    );
    pages
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(common::repo_path(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// The words of `text` made of `allowed` characters, each with what follows it.
fn words<'a>(text: &'a str, start: &'a str, allowed: fn(char) -> bool) -> impl Iterator<Item = &'a str> + 'a {
    text.match_indices(start).filter_map(move |(at, _)| {
        let before = text[..at].chars().next_back();
        // Inside a word, a path, or another program's variable (`XLA_FLAGS=--xla_...`).
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || "_-/.=".contains(c)) {
            return None;
        }
        let rest = &text[at..];
        let end = rest
            .char_indices()
            .find(|(_, c)| !allowed(*c))
            .map_or(rest.len(), |(i, _)| i);
        Some(&rest[..end])
    })
}

#[test]
fn every_snake_case_flag_the_docs_name_exists() {
    let mut all = BTreeSet::new();
    let mut command = Cli::command();
    command.build();
    flags(&command, &mut all);
    fn aliases(command: &clap::Command, found: &mut BTreeSet<String>) {
        for arg in command.get_arguments() {
            for alias in arg.get_all_aliases().unwrap_or_default() {
                found.insert(format!("--{alias}"));
            }
        }
        command.get_subcommands().for_each(|sub| aliases(sub, found));
    }
    aliases(&command, &mut all);
    let mut unknown = Vec::new();
    for (page, text) in pages() {
        // tfserve's flags are TF Serving's snake_case; other tools' (cargo, gcloud, docker) use hyphens.
        for flag in words(&text, "--", |c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            if flag.contains('_') && !all.contains(flag) {
                unknown.push(format!("{page}: {flag}"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "flags the docs name that tfserve does not have: {unknown:#?}"
    );
}

#[test]
fn every_repository_path_the_docs_name_exists() {
    let roots = [
        "src/",
        "tests/",
        "benches/",
        "scripts/",
        "deploy/",
        "docs/",
        "models/",
        "examples/",
        "fuzz/",
        ".ci/",
    ];
    let path_char = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    let mut missing = Vec::new();
    for (page, text) in pages() {
        for root in roots {
            for path in words(&text, root, path_char) {
                let path = path.trim_end_matches(['.', ',']);
                if !common::repo_path(path).exists() {
                    missing.push(format!("{page}: {path}"));
                }
            }
        }
        // Relative links: `[text](other.md#anchor)`, from the page's folder.
        let folder = std::path::Path::new(&page).parent().unwrap_or(std::path::Path::new(""));
        for link in text.split("](").skip(1) {
            let target = link.split([')', '#', ' ']).next().unwrap_or_default();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            if !common::repo_path(&folder.join(target).to_string_lossy()).exists() {
                missing.push(format!("{page}: link {target}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "paths the docs name that do not exist: {missing:#?}"
    );
}
