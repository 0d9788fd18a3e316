//! The dashboard's page driven in headless Chromium (tests/browser/dashboard.mjs)
//! against models TensorFlow runs, with a screenshot saved under
//! target/test-artifacts/. Its page and state over HTTP: `mock/dashboard.rs`.

use crate::common;

/// The page in headless Chromium. With the full run: `scripts/test.sh`
/// installs playwright-core after the TF-free stage, and the test refuses to
/// pass without it.
mod browser {
    use std::path::Path;
    use std::process::Command;

    use super::common::*;

    /// What the browser test needs, or why it cannot run here.
    fn browser_setup() -> Result<(String, std::path::PathBuf), String> {
        let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        if !Path::new(&chromium).exists() {
            return Err(format!(
                "no Chromium at {chromium} (apt-get install chromium, or set CHROMIUM)"
            ));
        }
        let script_dir = repo_path("tests/browser");
        if !script_dir.join("node_modules/playwright-core").exists() {
            return Err("playwright-core is not installed (npm ci --prefix tests/browser)".into());
        }
        Ok((chromium, script_dir))
    }

    #[test]
    fn dashboard_works_in_headless_chromium() {
        let (chromium, script_dir) = match browser_setup() {
            Ok(setup) => setup,
            // CI sets TFSERVE_REQUIRE_BROWSER, so there a missing browser fails the test.
            Err(reason) if std::env::var_os("TFSERVE_REQUIRE_BROWSER").is_none() => {
                eprintln!("skipping the browser test: {reason}");
                return;
            }
            Err(reason) => panic!("the browser test cannot run: {reason}"),
        };
        let artifacts = repo_path("target/test-artifacts");
        std::fs::create_dir_all(&artifacts).unwrap();
        let screenshot = artifacts.join("dashboard.png");
        let _ = std::fs::remove_file(&screenshot);
        let output = Command::new("node")
            .arg(script_dir.join("dashboard.mjs"))
            .arg(base_url())
            .arg(&screenshot)
            .arg(repo_path("tests/data/gradient.png"))
            .env("CHROMIUM", chromium)
            .output()
            .expect("node runs");
        assert!(
            output.status.success(),
            "browser test failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let png = std::fs::read(&screenshot).expect("screenshot written");
        assert!(png.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
    }
}
