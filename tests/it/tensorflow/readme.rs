//! Runs the README's curl examples against a live server and checks that they
//! print exactly what the README shows.

use crate::common;

use std::process::Command;

use serde_json::Value;

/// `(command, expected output)` pairs from the README's `console` blocks.
fn examples(readme: &str) -> Vec<(String, String)> {
    let mut examples: Vec<(String, String)> = Vec::new();
    let mut in_console = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_console = line == "```console";
            continue;
        }
        if !in_console {
            continue;
        }
        match line.strip_prefix("$ ") {
            Some(command) => examples.push((command.to_string(), String::new())),
            None => {
                if let Some((_, output)) = examples.last_mut() {
                    output.push_str(line);
                    output.push('\n');
                }
            }
        }
    }
    examples
}

#[test]
fn readme_curl_examples_print_what_the_readme_shows() {
    let readme = std::fs::read_to_string(common::repo_path("README.md")).unwrap();
    let examples = examples(&readme);
    assert!(examples.len() >= 8, "the README lost its examples");
    let addr = common::base_url().trim_start_matches("http://").to_string();
    for (command, expected) in examples {
        let command = command.replace("localhost:8501", &addr);
        let output = Command::new("sh")
            .arg("-c")
            .arg(&command)
            .current_dir(common::repo_path(""))
            .output()
            .expect("sh runs (curl must be installed)");
        assert!(
            output.status.success(),
            "{command}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let printed = String::from_utf8_lossy(&output.stdout);
        match (
            serde_json::from_str::<Value>(&printed),
            serde_json::from_str::<Value>(&expected),
        ) {
            // Kernels differ across CPUs in the last float digits; everything else must match.
            (Ok(got), Ok(want)) => assert!(same_json(&got, &want), "{command}\n got: {printed}\nwant: {expected}"),
            _ => assert_eq!(printed.trim(), expected.trim(), "{command}"),
        }
        assert_eq!(
            printed.lines().count(),
            expected.trim().lines().count(),
            "{command}: layout differs"
        );
    }
}

fn same_json(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::Number(a), Value::Number(b)) => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => (x - y).abs() <= 1e-5 * y.abs().max(1.0) && a.is_f64() == b.is_f64(),
            _ => a == b,
        },
        (Value::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_json(x, y)),
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => got == want,
    }
}
