//! Faults on disk while serving: a version still being copied in, a corrupt
//! `saved_model.pb`, truncated variables, a version directory deleted, a load
//! that never finishes, the config file replaced by garbage. The
//! model keeps answering from the version it had, the status API says what
//! failed, and a fixed version loads without a restart.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{copy_dir, repo_path, spawn_server, temp_dir, wait_for};
use serde_json::{json, Value};

fn predict(url: &str) -> (u16, Value) {
    let response = common::client()
        .post(format!("{url}/v1/models/adder:predict"))
        .body(r#"{"instances": [1.0]}"#)
        .send()
        .expect("request is answered");
    (response.status().as_u16(), response.json().unwrap_or(Value::Null))
}

/// Each version's state and error, by version.
fn statuses(url: &str) -> Vec<(String, String, String)> {
    let status = common::get_json(&format!("{url}/v1/models/adder"));
    status["model_version_status"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|s| {
            (
                s["version"].as_str().unwrap_or_default().to_string(),
                s["state"].as_str().unwrap_or_default().to_string(),
                s["status"]["error_message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The adder's `version` answers x + version; served from `root`/adder, polled every second.
fn server(root: &Path) -> String {
    let mut settings = common::local_settings();
    settings.models.models_dir = root.to_path_buf();
    settings.models.file_system_poll_wait_seconds = 1;
    format!("http://{}", spawn_server(settings))
}

/// Answers `[x + version]` for x = 1 (the adder at `version` adds the version).
fn answers(url: &str, version: f64) -> bool {
    predict(url) == (200, json!({"predictions": [1.0 + version]}))
}

#[test]
fn a_version_still_being_copied_waits_and_then_serves() {
    let root = temp_dir("faults-partial");
    let base = root.join("adder");
    copy_dir(&repo_path("models/adder/1"), &base.join("1"));
    let url = server(&root);
    assert!(answers(&url, 1.0));
    // Version 2 arrives without its saved_model.pb yet: not a version.
    copy_dir(&repo_path("models/adder/2/variables"), &base.join("2/variables"));
    std::thread::sleep(Duration::from_millis(2500));
    assert!(answers(&url, 1.0));
    assert!(statuses(&url).iter().all(|(v, _, _)| v != "2"), "{:?}", statuses(&url));
    // The copy completes: it loads and replaces version 1.
    copy_dir(&repo_path("models/adder/2"), &base.join("2"));
    wait_for("version 2", || answers(&url, 2.0));
}

#[test]
fn a_corrupt_version_fails_alone_and_loads_once_fixed() {
    let root = temp_dir("faults-corrupt");
    let base = root.join("adder");
    copy_dir(&repo_path("models/adder/1"), &base.join("1"));
    let url = server(&root);
    assert!(answers(&url, 1.0));
    // saved_model.pb holds garbage: the load fails, version 1 keeps serving.
    copy_dir(&repo_path("models/adder/2"), &base.join("2"));
    std::fs::write(base.join("2/saved_model.pb"), b"\x08\x96\x01 this is not a SavedModel").unwrap();
    wait_for("version 2 to fail", || {
        statuses(&url)
            .iter()
            .any(|(v, state, error)| v == "2" && state == "END" && !error.is_empty())
    });
    for _ in 0..20 {
        assert!(answers(&url, 1.0), "{:?}", predict(&url));
    }
    // The file is replaced by a good one: the version loads without a restart.
    std::fs::copy(
        repo_path("models/adder/2/saved_model.pb"),
        base.join("2/saved_model.pb"),
    )
    .unwrap();
    wait_for("version 2 after the fix", || answers(&url, 2.0));
}

#[test]
fn deleting_the_serving_version_falls_back_to_the_one_below() {
    let root = temp_dir("faults-deleted");
    let base = root.join("adder");
    copy_dir(&repo_path("models/adder/1"), &base.join("1"));
    copy_dir(&repo_path("models/adder/2"), &base.join("2"));
    let url = server(&root);
    assert!(answers(&url, 2.0));
    std::fs::remove_dir_all(base.join("2")).unwrap();
    // Version 1 loads before version 2 unloads (availability preserving):
    // every request in between is answered by one or the other.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = predict(&url);
        assert_eq!(answer.0, 200, "{answer:?}");
        if answers(&url, 1.0) {
            break;
        }
        assert!(Instant::now() < deadline, "version 1 never took over");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Version 1 serves as soon as 2 starts unloading; 2 leaves the status
    // once its unload finishes, a moment later.
    wait_for("version 2 to leave the model's status", || {
        statuses(&url).iter().all(|(v, _, _)| v != "2")
    });
    assert_eq!(predict(&url).0, 200);
}

#[test]
fn a_load_that_never_finishes_fails_after_the_load_timeout() {
    let root = temp_dir("faults-hang");
    let base = root.join("adder");
    copy_dir(&repo_path("models/adder/1"), &base.join("1"));
    let mut settings = common::local_settings();
    settings.models.models_dir = root.clone();
    settings.models.file_system_poll_wait_seconds = 1;
    settings.models.model_load_timeout_seconds = 2;
    let url = format!("http://{}", spawn_server(settings));
    assert!(answers(&url, 1.0));
    // Version 2's saved_model.pb is a FIFO nobody writes: reading it blocks
    // forever, as a stalled network mount would.
    copy_dir(&repo_path("models/adder/2/variables"), &base.join("2/variables"));
    let fifo = base.join("2/saved_model.pb");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    // The FIFO is no regular file, so it is not a version yet; a marker file makes it one.
    std::fs::write(base.join("2/saved_model.pbtxt"), b"").unwrap();
    wait_for("version 2 to time out", || {
        statuses(&url)
            .iter()
            .any(|(v, state, error)| v == "2" && state == "END" && error.contains("model_load_timeout_seconds"))
    });
    assert!(answers(&url, 1.0), "{:?}", predict(&url));
    // The registry is not stuck behind the hung load: version 3 loads.
    copy_dir(&repo_path("models/adder/2"), &base.join("3"));
    wait_for("version 3", || predict(&url) == (200, json!({"predictions": [3.0]})));
    // Let the hung reader go, if it is still there. Opened without blocking,
    // the FIFO fails at once when nobody reads it any more, and the reader may
    // close it in the middle of the write: neither is this test's concern.
    use std::os::unix::fs::OpenOptionsExt;
    let writer = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo);
    if let Ok(mut writer) = writer {
        let _ = std::io::Write::write_all(&mut writer, b"not a SavedModel");
    }
}

#[test]
fn a_config_file_replaced_by_garbage_keeps_the_models_serving() {
    let root = temp_dir("faults-config");
    copy_dir(&repo_path("models/adder/1"), &root.join("adder/1"));
    copy_dir(&repo_path("models/half_plus_two"), &root.join("half_plus_two"));
    let config = root.join("models.config");
    let entry = |name: &str| {
        format!(
            "config {{ name: \"{name}\" base_path: \"{}\" }}\n",
            root.join(name).display()
        )
    };
    std::fs::write(&config, format!("model_config_list {{ {} }}", entry("adder"))).unwrap();
    let mut settings = common::local_settings();
    settings.models.model_config_file = Some(config.clone());
    settings.models.model_config_file_poll_wait_seconds = 1;
    let url = format!("http://{}", spawn_server(settings));
    assert!(answers(&url, 1.0));
    let reloads =
        |outcome: &str| common::metric(&url, &format!("tfserve_config_reloads_total{{outcome=\"{outcome}\"}}"));
    for garbage in [
        &b"model_config_list { config { name: "[..],
        &b"\x00\xff\xfe binary junk"[..],
        &b""[..],
    ] {
        let failed = reloads("failed");
        std::fs::write(&config, garbage).unwrap();
        wait_for("a failed reload", || reloads("failed") > failed);
        for _ in 0..10 {
            assert!(answers(&url, 1.0), "{:?}", predict(&url));
        }
    }
    // A good file again, with a second model: the reload takes it.
    std::fs::write(
        &config,
        format!("model_config_list {{ {} {} }}", entry("adder"), entry("half_plus_two")),
    )
    .unwrap();
    wait_for("half_plus_two", || {
        common::client()
            .post(format!("{url}/v1/models/half_plus_two:predict"))
            .body(r#"{"instances": [2.0]}"#)
            .send()
            .is_ok_and(|r| r.status().as_u16() == 200)
    });
    assert!(answers(&url, 1.0));
}
