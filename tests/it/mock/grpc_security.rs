//! TF Serving's gRPC API behind the server's security settings: Basic auth
//! on every call but health, and TLS and mutual TLS from the REST settings.

use crate::common;

use tfserve::proto::tensorflow::serving::prediction_service_client::PredictionServiceClient;
use tonic::transport::Channel;

use common::grpc::{block_on, half_plus_three, prediction};
use common::{repo_path, spawn_with_grpc};

#[test]
fn auth_applies_to_grpc_calls_but_not_health() {
    let mut settings = common::local_settings();
    settings.models.models_dir = repo_path("models");
    settings.security.enable_auth = true;
    settings.security.auth_username = Some("ann".into());
    settings.security.auth_password = Some(tfserve::settings::Secret("s3cret".into()));
    let (_, grpc) = spawn_with_grpc(settings);
    let call = |authorization: Option<&str>| {
        block_on(async {
            let mut request = tonic::Request::new(half_plus_three(&[1.0]));
            if let Some(value) = authorization {
                request.metadata_mut().insert("authorization", value.parse().unwrap());
            }
            prediction(grpc)
                .await
                .predict(request)
                .await
                .map(|_| ())
                .map_err(|s| s.code())
        })
    };
    use base64::Engine;
    let good = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("ann:s3cret")
    );
    let bad = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("ann:wrong")
    );
    assert_eq!(call(None), Err(tonic::Code::Unauthenticated));
    assert_eq!(call(Some(&bad)), Err(tonic::Code::Unauthenticated));
    assert_eq!(call(Some(&good)), Ok(()));
    let health = block_on(async {
        let channel = Channel::from_shared(format!("http://{grpc}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        tonic_health::pb::health_client::HealthClient::new(channel)
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
            .map(|_| ())
    });
    assert!(health.is_ok(), "{health:?}");
}

#[test]
fn tls_and_mutual_tls_come_from_the_rest_settings() {
    let dir = common::temp_dir("grpc-tls");
    let ca = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.join("cert.pem"), ca.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), ca.key_pair.serialize_pem()).unwrap();
    let mut settings = common::local_settings();
    settings.models.models_dir = repo_path("models");
    settings.security.enable_ssl = true;
    settings.security.secret_pem = Some(dir.join("cert.pem"));
    settings.security.secret_key = Some(dir.join("key.pem"));
    // The client presents the server's own self-signed pair: the CA file is that certificate.
    settings.security.ssl_client_ca = Some(dir.join("cert.pem"));
    let (_, grpc) = spawn_with_grpc(settings);
    let call = |with_identity: bool| {
        block_on(async {
            let mut tls = tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(ca.cert.pem()))
                .domain_name("localhost");
            if with_identity {
                tls = tls.identity(tonic::transport::Identity::from_pem(
                    ca.cert.pem(),
                    ca.key_pair.serialize_pem(),
                ));
            }
            let channel = Channel::from_shared(format!("https://localhost:{}", grpc.port()))
                .unwrap()
                .tls_config(tls)
                .unwrap()
                .connect()
                .await
                .map_err(|e| e.to_string())?;
            PredictionServiceClient::new(channel)
                .predict(half_plus_three(&[1.0]))
                .await
                .map(|r| r.into_inner().outputs["y"].float_val.clone())
                .map_err(|s| s.to_string())
        })
    };
    assert_eq!(call(true), Ok(vec![3.5]));
    assert!(call(false).is_err(), "a client without a certificate is refused");
    let plain = block_on(async {
        match Channel::from_shared(format!("http://{grpc}")).unwrap().connect().await {
            Ok(channel) => PredictionServiceClient::new(channel)
                .predict(half_plus_three(&[1.0]))
                .await
                .map(|_| ())
                .map_err(|s| s.to_string()),
            Err(error) => Err(error.to_string()),
        }
    });
    assert!(plain.is_err(), "plain HTTP/2 to the TLS port fails");
}
