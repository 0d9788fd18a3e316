//! Handler discovery and the `rest_uri` handlers are given.

use super::*;

fn set(handler_path: Option<PathBuf>, shared: Option<PathBuf>) -> HandlerSet {
    HandlerSet::new(HandlerSettings {
        handler_path,
        shared_code_dir: shared,
        deps_dir: std::env::temp_dir(),
        workers: WorkerSettings {
            python: "python3".into(),
            workers: 1,
            queue: 1,
            max_rss_bytes: 0,
            max_calls: 0,
        },
    })
}

#[test]
fn handler_files_are_found_where_the_container_looks() {
    let root = std::env::temp_dir().join(format!("tfserve-handler-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for dir in ["own/code", "own/1", "other/1", "code"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::fs::write(root.join("own/code/inference.py"), "").unwrap();
    std::fs::write(root.join("code/inference.py"), "").unwrap();
    let handlers = set(None, Some(root.join("code")));
    assert_eq!(
        handlers.handler_file(&root.join("own")),
        Some(root.join("own/code/inference.py"))
    );
    // A model of the archive without its own code/ takes the shared one...
    assert_eq!(
        handlers.handler_file(&root.join("other")),
        Some(root.join("code/inference.py"))
    );
    // ...but a model from elsewhere does not.
    assert_eq!(handlers.handler_file(&std::env::temp_dir().join("elsewhere")), None);
    assert_eq!(set(None, None).handler_file(&root.join("other")), None);
    let forced = set(Some("/srv/inference.py".into()), None);
    assert_eq!(forced.handler_file(&root.join("own")), Some("/srv/inference.py".into()));
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn rest_uris_are_reachable_urls() {
    let handlers = set(None, None);
    handlers.set_rest_address("0.0.0.0:8080".parse().unwrap(), None);
    assert_eq!(
        handlers.rest_uri("half_plus_three", None, "predict"),
        "http://127.0.0.1:8080/v1/models/half_plus_three:predict"
    );
    handlers.set_rest_address("[::]:9000".parse().unwrap(), Some(("ann", "p@ss word")));
    assert_eq!(
        handlers.rest_uri("my model", Some("2"), "regress"),
        "http://ann:p%40ss%20word@[::1]:9000/v1/models/my%20model/versions/2:regress"
    );
    handlers.set_rest_address("[::1]:9001".parse().unwrap(), None);
    assert!(handlers
        .rest_uri("m", None, "predict")
        .starts_with("http://[::1]:9001/"));
    assert!(handlers.is_empty());
    assert!(handlers.get("m").is_none());
}
