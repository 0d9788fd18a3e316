//! `tfserve transform` end to end: a directory of generated JPEGs through the
//! image model, outputs as the endpoint answers them, and a resumed run after
//! the first is killed midway, and a disk that fills up midway.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{assert_close, base_url, floats, repo_path, temp_dir};
use serde_json::Value;

/// `count` distinct 28×28 JPEGs.
fn write_jpegs(dir: &Path, count: usize) {
    for i in 0..count {
        let image = image::RgbImage::from_fn(28, 28, |x, y| {
            let v = ((x * 7 + y * 3 + i as u32 * 11) % 256) as u8;
            image::Rgb([v, v.wrapping_mul(3), 255 - v])
        });
        image.save(dir.join(format!("img{i:04}.jpg"))).unwrap();
    }
}

fn transform(input: &Path, output: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tfserve"));
    command
        .args([
            "transform",
            "--input",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
        ])
        .args([
            "--content_type",
            "application/x-image",
            "--custom_attributes",
            "tfs-model-name=image_classifier",
        ])
        .args(["--models_dir", repo_path("models").to_str().unwrap()])
        .args(extra)
        .env("RUST_LOG", "warn")
        .env("TF_CPP_MIN_LOG_LEVEL", "2");
    command
}

#[test]
fn every_image_gets_the_endpoints_answer() {
    let (input, output) = (temp_dir("transform-in"), temp_dir("transform-out"));
    write_jpegs(&input, 24);
    let run = transform(
        &input,
        &output,
        &["--enable_batching", "--max_concurrent_transforms", "8"],
    )
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}{}", String::from_utf8_lossy(&run.stderr));
    assert!(
        stdout.contains("24 records ok, 0 failed; 24 files written, 0 skipped"),
        "{stdout}"
    );
    let client = reqwest::blocking::Client::new();
    for i in 0..24 {
        let name = format!("img{i:04}.jpg");
        let written: Value =
            serde_json::from_slice(&std::fs::read(output.join(format!("{name}.out"))).unwrap()).unwrap();
        let endpoint: Value = client
            .post(format!("{}/invocations", base_url()))
            .header("Content-Type", "application/x-image")
            .header("X-Amzn-SageMaker-Custom-Attributes", "tfs-model-name=image_classifier")
            .body(std::fs::read(input.join(&name)).unwrap())
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(
            written["predictions"][0]["classes"], endpoint["predictions"][0]["classes"],
            "{name}"
        );
        assert_close(
            &written["predictions"][0]["probabilities"],
            &floats(&endpoint["predictions"][0]["probabilities"]),
            1e-5,
        );
    }
}

#[test]
fn a_killed_run_resumes_with_only_the_missing_outputs() {
    let (input, output) = (temp_dir("transform-resume-in"), temp_dir("transform-resume-out"));
    let total = 1500;
    write_jpegs(&input, total);
    let mut first = transform(&input, &output, &["--max_concurrent_transforms", "1"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let outputs = || {
        std::fs::read_dir(&output)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "out"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while outputs() < 50 {
        assert!(Instant::now() < deadline, "the first run wrote nothing");
        assert!(
            first.try_wait().unwrap().is_none(),
            "the first run finished before it could be killed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let done_before = outputs();
    assert!(done_before < total, "killed too late");

    let second = transform(&input, &output, &["--max_concurrent_transforms", "4"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&second.stdout);
    assert!(second.status.success(), "{stdout}");
    let expected = format!(
        "{} records ok, 0 failed; {} files written, {done_before} skipped",
        total - done_before,
        total - done_before
    );
    assert!(stdout.contains(&expected), "{stdout} (expected {expected})");
    assert_eq!(outputs(), total);
    let leftovers: Vec<_> = std::fs::read_dir(&output)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left behind");
    for entry in std::fs::read_dir(&output).unwrap() {
        let body: Value = serde_json::from_slice(&std::fs::read(entry.unwrap().path()).unwrap()).unwrap();
        assert!(body["predictions"][0]["classes"].is_i64());
    }
}

#[test]
fn a_full_disk_stops_the_run_with_nothing_half_written_and_a_rerun_completes() {
    let (input, output) = (temp_dir("transform-enospc-in"), temp_dir("transform-enospc-out"));
    write_jpegs(&input, 6);
    // img0003's output lands on /dev/full: its write fails with ENOSPC, as on a full disk.
    std::os::unix::fs::symlink("/dev/full", output.join("img0003.jpg.out.tmp")).unwrap();
    let run = transform(&input, &output, &[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert!(
        stderr.contains("img0003.jpg.out.tmp") && stderr.contains("No space left on device"),
        "{stderr}"
    );
    let names = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let after_failure = names(&output);
    assert!(!after_failure.iter().any(|n| n.ends_with(".tmp")), "{after_failure:?}");
    assert!(
        !after_failure.contains(&"img0003.jpg.out".to_string()),
        "{after_failure:?}"
    );
    // Every output present is whole: the endpoint's JSON answer.
    for name in &after_failure {
        let answer: Value = serde_json::from_slice(&std::fs::read(output.join(name)).unwrap()).unwrap();
        assert!(answer["predictions"].is_array(), "{name}: {answer}");
    }
    // Space is back: the re-run writes the rest and skips what was done.
    let rerun = transform(&input, &output, &[]).output().unwrap();
    let stdout = String::from_utf8_lossy(&rerun.stdout);
    assert!(
        rerun.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    assert!(stdout.contains(&format!("{} skipped", after_failure.len())), "{stdout}");
    let expected: Vec<String> = (0..6).map(|i| format!("img{i:04}.jpg.out")).collect();
    assert_eq!(names(&output), expected);
}
