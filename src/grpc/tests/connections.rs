//! gRPC connections as a whole, through the listener's connection code and
//! tonic's clients over an in-memory pipe: calls to unknown services and
//! methods, a connection past its age, and the drain.

use std::sync::Arc;

use tonic::transport::Channel;
use tonic::Code;

use super::{channel_over, connect, predict};
use crate::grpc::channel_args::ChannelArguments;
use crate::proto::tensorflow::serving::prediction_service_client::PredictionServiceClient;
use crate::proto::tensorflow::serving::PredictRequest;
use crate::server::testing::mock_state;
use crate::server::ServerState;

/// The listener's connection code on one in-memory connection, with the
/// options given, the client's channel and the task serving the connection.
async fn serve_one(
    state: Arc<ServerState>,
    options: crate::grpc::connection::ConnectionOptions,
) -> (Channel, tokio::sync::watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    let health = crate::grpc::health::HealthService::new();
    let services = crate::grpc::services(&state, &health, 4 << 20, &ChannelArguments::default()).unwrap();
    let (client, server) = tokio::io::duplex(1 << 20);
    let (shutdown, watching) = tokio::sync::watch::channel(false);
    let served = tokio::spawn(crate::grpc::connection::serve(
        server,
        services,
        None,
        Arc::new(options),
        watching,
        None,
    ));
    let channel = channel_over(client).await;
    (channel, shutdown, served)
}

#[tokio::test]
async fn an_unknown_service_or_method_is_unimplemented() {
    let (state, root) = mock_state("grpc-unknown");
    let channel = connect(state).await;
    let mut client = tonic::client::Grpc::new(channel);
    for path in [
        "/no.such.Service/Predict",
        "/tensorflow.serving.PredictionService/NoSuchMethod",
        "/",
    ] {
        client.ready().await.unwrap();
        let error = client
            .unary::<PredictRequest, crate::proto::tensorflow::serving::PredictResponse, _>(
                tonic::Request::new(PredictRequest::default()),
                tonic::codegen::http::uri::PathAndQuery::from_static(path),
                tonic_prost::ProstCodec::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(error.code(), Code::Unimplemented, "{path}: {error:?}");
    }
    std::fs::remove_dir_all(root).ok();
}

#[tokio::test]
async fn a_connection_past_its_age_is_sent_away_and_closes() {
    let (state, root) = mock_state("grpc-age");
    let mut options = crate::grpc::connection::ConnectionOptions::new(None, None, None);
    options.max_age = Some(std::time::Duration::from_millis(300));
    options.grace = Some(std::time::Duration::from_secs(60));
    let (channel, _shutdown, served) = serve_one(state, options).await;
    let mut prediction = PredictionServiceClient::new(channel);
    prediction.predict(predict("m", None, vec![1.0])).await.unwrap();
    // GOAWAY at the age, and with no call in flight the connection closes
    // then, long before the grace period would force it.
    tokio::time::timeout(std::time::Duration::from_secs(30), served)
        .await
        .expect("the connection outlived its age")
        .unwrap();
    std::fs::remove_dir_all(root).ok();
}

#[tokio::test]
async fn the_drain_sends_connections_away_and_they_close() {
    let (state, root) = mock_state("grpc-drain");
    let options = crate::grpc::connection::ConnectionOptions::new(None, None, None);
    let (channel, shutdown, served) = serve_one(state, options).await;
    let mut prediction = PredictionServiceClient::new(channel);
    prediction.predict(predict("m", None, vec![1.0])).await.unwrap();
    assert!(!served.is_finished());
    shutdown.send(true).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(30), served)
        .await
        .expect("the connection stayed open after the drain")
        .unwrap();
    let error = prediction.predict(predict("m", None, vec![1.0])).await.unwrap_err();
    assert_eq!(error.code(), Code::Unavailable, "{error:?}");
    std::fs::remove_dir_all(root).ok();
}
