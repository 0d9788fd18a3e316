//! Replicas of a model on several GPUs and the GPU settings, on any host:
//! libtensorflow places each replica on the GPU named for it where there is
//! one, and on the CPU (soft placement) where there is not, so the loading,
//! the dispatch to the least busy replica and the per-replica metrics run
//! here as they do on a GPU host.

use crate::common;

use common::process::start;
use common::{metric, repo_path, temp_dir};
use serde_json::{json, Value};

fn predict(url: &str, model: &str, x: f64) -> Value {
    let answer = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/models/{model}:predict"))
        .json(&json!({"instances": [x]}))
        .send()
        .expect("request is answered");
    assert_eq!(answer.status().as_u16(), 200);
    answer.json().expect("JSON answer")
}

fn replica_runs(url: &str, model: &str, gpu: u32) -> f64 {
    metric(
        url,
        &format!("tfserve_replica_runs_total{{device=\"/device:GPU:{gpu}\",model=\"{model}\",version=\"1\"}}"),
    )
}

#[test]
fn replicas_on_the_gpus_a_model_or_the_server_names_share_its_queue() {
    let dir = temp_dir("gpu-placement");
    let half = repo_path("models/half_plus_three");
    // One model names its GPUs; the other takes the server's --gpu_ids.
    let config = json!({"model_config_list": [
        {"name": "pair", "base_path": half, "session_config": {"gpu_ids": [0, 1]}},
        {"name": "trio", "base_path": half},
    ]});
    let config_path = dir.join("models.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let cache = dir.join("cuda-cache");
    let server = start(&[
        "--rest_api_port=0",
        "--host=127.0.0.1",
        "--model_config_file",
        config_path.to_str().unwrap(),
        "--gpu_ids=0,1,2",
        "--enable_batching",
        "--gpu_compile_cache_dir",
        cache.to_str().unwrap(),
    ]);
    for i in 0..12 {
        let x = f64::from(i);
        for model in ["pair", "trio"] {
            assert_eq!(predict(&server.url, model, x), json!({"predictions": [x * 0.5 + 3.0]}));
        }
    }
    // Idle replicas take turns: every one has run, and no run is uncounted.
    let pair: Vec<f64> = (0..2).map(|gpu| replica_runs(&server.url, "pair", gpu)).collect();
    let trio: Vec<f64> = (0..3).map(|gpu| replica_runs(&server.url, "trio", gpu)).collect();
    assert!(pair.iter().all(|&runs| runs >= 1.0), "{pair:?}");
    assert!(trio.iter().all(|&runs| runs >= 1.0), "{trio:?}");
    assert_eq!(pair.iter().sum::<f64>(), 12.0, "{pair:?}");
    assert_eq!(trio.iter().sum::<f64>(), 12.0, "{trio:?}");
    assert_eq!(replica_runs(&server.url, "pair", 2), 0.0);
    // The kernel cache directory exists and is what CUDA was told.
    assert!(cache.is_dir());
    let log = server.log.lock().unwrap().join("\n");
    assert!(
        log.contains(&format!("CUDA keeps the kernels it compiles in {}", cache.display())),
        "{log}"
    );
    assert!(
        log.contains("model pair version 1: 2 replicas (/device:GPU:0, /device:GPU:1)"),
        "{log}"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gpu_settings_that_cannot_work_are_refused_at_start() {
    let run = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_tfserve"))
            .args(args)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?} started");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let error = run(&["--gpu_ids=0,1", "--cpu_only"]);
    assert!(
        error.contains("gpu_ids") && error.contains("contradicts cpu_only"),
        "{error}"
    );
    let error = run(&["--virtual_gpu_memory_mb=2048,0.5"]);
    assert!(
        error.contains("virtual_gpu_memory_mb") && error.contains("0.5"),
        "{error}"
    );
    let error = run(&["--gpu_ids=zero"]);
    assert!(error.contains("gpu_ids"), "{error}");
    let file = temp_dir("gpu-cache-file").join("a-file");
    std::fs::write(&file, b"").unwrap();
    let error = run(&["--gpu_compile_cache_dir", file.to_str().unwrap()]);
    assert!(
        error.contains("gpu_compile_cache_dir") && error.contains("not a directory"),
        "{error}"
    );
}

#[test]
fn a_model_compiled_by_xla_answers_as_without_it_and_its_clusters_are_kept() {
    let dir = temp_dir("xla-jit");
    let mnist = repo_path("models/mnist_cnn");
    let config = json!({"model_config_list": [
        {"name": "plain", "base_path": mnist},
        {"name": "fused", "base_path": mnist, "session_config": {"xla_jit": true}},
    ]});
    let config_path = dir.join("models.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let cache = dir.join("compile-cache");
    let server = common::process::start_with_env(
        &[
            "--rest_api_port=0",
            "--host=127.0.0.1",
            "--model_config_file",
            config_path.to_str().unwrap(),
            "--gpu_compile_cache_dir",
            cache.to_str().unwrap(),
        ],
        &[("TF_CPP_MIN_LOG_LEVEL", "0")],
    );
    let image: Vec<Vec<Vec<f64>>> = (0..28)
        .map(|row| {
            (0..28)
                .map(|col| vec![f64::from((row * 28 + col) % 17) / 16.0])
                .collect()
        })
        .collect();
    let answer = |model: &str| -> Vec<f64> {
        let answer = reqwest::blocking::Client::new()
            .post(format!("{}/v1/models/{model}:predict", server.url))
            .json(&json!({"instances": [image, image]}))
            .send()
            .expect("request is answered");
        assert_eq!(answer.status().as_u16(), 200);
        let body: Value = answer.json().expect("JSON answer");
        common::floats(&body["predictions"])
    };
    let (plain, fused) = (answer("plain"), answer("fused"));
    assert_eq!(plain.len(), 20);
    for (a, b) in plain.iter().zip(&fused) {
        assert!((a - b).abs() < 1e-4, "{plain:?} against {fused:?}");
    }
    server.wait_for_line("Compiled cluster using XLA");
    // The compiled clusters were written to the cache for the next start.
    let kept = std::fs::read_dir(cache.join("xla")).map_or(0, |files| files.count());
    assert!(kept > 0, "nothing in {}", cache.join("xla").display());
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bundle_points_xla_at_the_ptxas_and_libdevice_it_carries() {
    let bundle = temp_dir("xla-bundle");
    let libdevice = bundle.join("cuda/nvvm/libdevice");
    std::fs::create_dir_all(&libdevice).unwrap();
    std::fs::create_dir_all(bundle.join("bin")).unwrap();
    std::fs::write(libdevice.join("libdevice.10.bc"), b"").unwrap();
    let binary = bundle.join("bin/tfserve");
    std::fs::copy(env!("CARGO_BIN_EXE_tfserve"), &binary).unwrap();
    let half = repo_path("models/half_plus_three");
    let log_of = |env: &[(&str, &str)]| -> String {
        let mut child = std::process::Command::new(&binary)
            .args(["--rest_api_port=0", "--host=127.0.0.1", "--model_name=half"])
            .arg(format!("--model_base_path={}", half.display()))
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        let mut lines = Vec::new();
        while let Ok(line) = receiver.recv_timeout(std::time::Duration::from_secs(60)) {
            let ready = line.contains(" on http://");
            lines.push(line);
            if ready {
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        lines.join("\n")
    };
    let log = log_of(&[]);
    let expected = format!(
        "XLA compiles GPU kernels with the ptxas and libdevice in {}",
        bundle.join("cuda").display()
    );
    assert!(log.contains(&expected) && log.contains(" on http://"), "{log}");
    // A CUDA directory the operator names is left alone.
    let log = log_of(&[("XLA_FLAGS", "--xla_gpu_cuda_data_dir=/opt/cuda")]);
    assert!(!log.contains("XLA compiles") && log.contains(" on http://"), "{log}");
    let _ = std::fs::remove_dir_all(&bundle);
}
