//! The configuration reference cannot drift from the flags: every flag
//! `tfserve --help` (and its subcommands' help) prints has its row in
//! docs/configuration.md, and the page has no row for a flag that does not exist.

mod common;

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
