//! Handlers in multi-model mode: each model loaded over `/models` brings its
//! own `code/inference.py` (or none), unloading drops it, and a model whose
//! requirements cannot be installed fails to load, naming them.

use crate::common;

use common::handlers::{archive, invoke};
use common::{spawn_server, temp_dir};
use serde_json::{json, Value};

#[test]
fn multi_model_endpoints_load_each_models_handlers() {
    let root = temp_dir("handlers-mme");
    let pair = archive(&root, "pair", "half_plus_three", Some("pair"));
    let plain = archive(&root, "plain", "half_plus_three", None);
    let mut settings = common::local_settings();
    settings.models.multi_model = true;
    settings.models.models_dir = root.clone();
    settings.models.model_roots = vec![root.clone()];
    settings.handlers.python_workers = 1;
    let base = format!("http://{}", spawn_server(settings));
    let client = reqwest::blocking::Client::new();
    for (name, path) in [("m1", &pair), ("m2", &plain)] {
        let response = client
            .post(format!("{base}/models"))
            .json(&json!({"model_name": name, "url": path}))
            .send()
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{}", response.text().unwrap());
    }
    // m1's handler reads CSV as one row of floats; m2 takes the container's
    // conversion, where each line is an instance.
    let answer = invoke(&base, "/models/m1/invoke", "", "text/csv", None, b"1.0,2.0".to_vec());
    assert_eq!(
        (answer.status, answer.json()),
        (200, json!({"predictions": [3.5, 4.0]}))
    );
    let answer = invoke(&base, "/models/m1/invoke", "", "text/csv", None, b"1.0\n2.0".to_vec());
    assert_eq!(answer.status, 500, "{}", answer.body);
    let answer = invoke(&base, "/models/m2/invoke", "", "text/csv", None, b"1.0\n2.0".to_vec());
    assert_eq!(
        (answer.status, answer.json()),
        (200, json!({"predictions": [3.5, 4.0]}))
    );
    let answer = invoke(&base, "/models/m1/invoke", "", "text/plain", None, b"x".to_vec());
    assert_eq!(answer.status, 500);
    let response = client.delete(format!("{base}/models/m1")).send().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    // requirements.txt that pip cannot install: the load fails, naming it, and nothing is added.
    let broken = archive(&root, "broken", "half_plus_three", Some("withlib"));
    std::fs::remove_dir_all(broken.join("code").join("lib")).unwrap();
    let response = client
        .post(format!("{base}/models"))
        .json(&json!({"model_name": "m3", "url": broken}))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 500);
    let message = response.json::<Value>().unwrap()["error"].as_str().unwrap().to_string();
    assert!(
        message.starts_with("model m3: cannot load ") && message.contains("pip install -r"),
        "{message}"
    );
    let response = client.get(format!("{base}/models/m3")).send().unwrap();
    assert_eq!(response.status().as_u16(), 404);
}
