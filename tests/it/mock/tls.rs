//! HTTPS with `--enable_ssl --secret_pem --secret_key`, using a self-signed
//! certificate made for the test.

use crate::common;

use std::path::PathBuf;

use common::{repo_path, spawn_server};
use serde_json::{json, Value};
use tfserve::settings::Settings;

/// A fresh directory holding `cert.pem` and `key.pem` for `localhost`.
fn certificate(tag: &str) -> (PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("tfserve-tls-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let pem = generated.cert.pem();
    std::fs::write(dir.join("cert.pem"), &pem).unwrap();
    std::fs::write(dir.join("key.pem"), generated.key_pair.serialize_pem()).unwrap();
    (dir, pem)
}

fn tls_settings(dir: &std::path::Path) -> Settings {
    {
        let mut settings = common::model_settings("half", repo_path("models/half_plus_three"));
        settings.security.enable_ssl = true;
        settings.security.secret_pem = Some(dir.join("cert.pem"));
        settings.security.secret_key = Some(dir.join("key.pem"));
        settings
    }
}

#[test]
fn https_serves_and_plain_http_is_refused() {
    let (dir, pem) = certificate("ok");
    let addr = spawn_server(tls_settings(&dir));
    let client = reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let url = format!("https://localhost:{}", addr.port());
    let response = client
        .post(format!("{url}/v1/models/half:predict"))
        .json(&json!({"instances": [1.0, 2.0]}))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().unwrap();
    assert_eq!(body, json!({"predictions": [3.5, 4.0]}));
    let response = client
        .post(format!("{url}/"))
        .json(&json!({"model_name": "half", "data": {"x": [5.0]}}))
        .send()
        .unwrap();
    assert_eq!(response.json::<Value>().unwrap(), json!({"y": [5.5]}));

    // Without the certificate trusted the handshake fails; plain HTTP on the
    // TLS port gets no HTTP answer.
    assert!(reqwest::blocking::get(format!("{url}/v1/models/half")).is_err());
    let plain = reqwest::blocking::get(format!("http://127.0.0.1:{}/v1/models/half", addr.port()));
    assert!(
        plain.is_err(),
        "plain HTTP was answered: {:?}",
        plain.map(|r| r.status())
    );
}

#[test]
fn bad_certificates_stop_start_up_by_name() {
    let (dir, _) = certificate("bad");
    std::fs::write(dir.join("broken.pem"), "not a key").unwrap();
    let mut settings = tls_settings(&dir);
    settings.security.secret_key = Some(dir.join("broken.pem"));
    let error = actix_web::rt::System::new()
        .block_on(async move { common::start_server_result(&settings).err().expect("start-up fails") })
        .to_string();
    assert!(
        error.starts_with("secret_key ") && error.contains("broken.pem"),
        "{error}"
    );

    let mut settings = tls_settings(&dir);
    settings.security.secret_pem = Some(dir.join("key.pem"));
    let error = actix_web::rt::System::new()
        .block_on(async move { common::start_server_result(&settings).err().expect("start-up fails") })
        .to_string();
    assert!(error.contains("secret_pem") && error.contains("key.pem"), "{error}");
}

/// Python's ssl module (OpenSSL) as a client that offers what an old or
/// careless client would: every offer below must fail the handshake.
const WEAK_OFFERS: &str = r#"
import socket, ssl, sys
port = int(sys.argv[1])
def handshake(configure):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        configure(context)
    except (ssl.SSLError, ValueError) as error:
        return "client cannot offer it: %s" % error
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with context.wrap_socket(raw) as tls:
                return "accepted %s %s" % (tls.version(), tls.cipher()[0])
    except (ssl.SSLError, OSError) as error:
        return "refused"
def old(version):
    def configure(context):
        context.minimum_version = version
        context.maximum_version = version
    return configure
def ciphers(names):
    def configure(context):
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers(names)
    return configure
print("tls1.0", handshake(old(ssl.TLSVersion.TLSv1)))
print("tls1.1", handshake(old(ssl.TLSVersion.TLSv1_1)))
print("cbc", handshake(ciphers("AES128-SHA:AES256-SHA:ECDHE-RSA-AES128-SHA:ECDHE-ECDSA-AES128-SHA")))
print("rsa-kx", handshake(ciphers("AES128-GCM-SHA256:AES256-GCM-SHA384")))
print("3des-rc4", handshake(ciphers("DES-CBC3-SHA:RC4-SHA")))
print("modern", handshake(lambda context: None))
"#;

#[test]
fn only_modern_protocols_and_ciphers_are_accepted() {
    let (dir, _) = certificate("ciphers");
    let addr = spawn_server(tls_settings(&dir));
    let output = std::process::Command::new("python3")
        .args(["-c", WEAK_OFFERS, &addr.port().to_string()])
        .output()
        .expect("python3 runs");
    let report = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for line in report.lines() {
        let (offer, outcome) = line.split_once(' ').unwrap_or((line, ""));
        if offer == "modern" {
            assert!(outcome.starts_with("accepted TLSv1.3"), "{line}");
        } else {
            assert!(!outcome.starts_with("accepted"), "a weak offer was accepted: {line}");
        }
    }
    assert_eq!(report.lines().count(), 6, "{report}");
    eprintln!("{report}");
}
