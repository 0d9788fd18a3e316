//! deploy/: every Kubernetes and KServe manifest validates offline against
//! its schema, and the command lines they give the container are served by
//! this build with the probes, metric and drain the manifests count on
//! (scripts/validate_manifests.py, in the client environment).

use crate::common;

#[test]
fn manifests_validate_and_their_command_lines_serve_probe_and_drain() {
    let output = std::process::Command::new(common::client_python())
        .arg(common::repo_path("scripts/validate_manifests.py"))
        .arg("--tfserve")
        .arg(env!("CARGO_BIN_EXE_tfserve"))
        .arg("--models")
        .arg(common::repo_path("models"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for manifest in [
        "deploy/kserve/cluster-serving-runtime.yaml",
        "deploy/kserve/inference-service.yaml",
        "deploy/kserve/multi-model-serving-runtime.yaml",
        "deploy/kubernetes/keda-scaledobject.yaml",
        "deploy/kubernetes/deployment.yaml",
        "deploy/kubernetes/autoscaling.yaml",
        "deploy/kubernetes/service.yaml",
    ] {
        assert!(
            stdout.contains(&format!("valid: {manifest}")),
            "{manifest} not checked:\n{stdout}"
        );
    }
    assert_eq!(stdout.matches("drained and exited 0").count(), 4, "{stdout}");
}
