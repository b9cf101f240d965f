//! An in-process delayd server on 127.0.0.1:0 for the client's tests.

use std::sync::Arc;

use delayd_core::Broker;
use delayd_server::ServerOptions;

/// Serves `broker` on a fresh port in the current runtime (the server lives
/// as long as the runtime) and returns its base URL.
pub async fn serve(broker: Arc<dyn Broker>, options: ServerOptions) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local_addr");
    let app = delayd_server::app(broker, options);
    tokio::spawn(delayd_server::serve_http(
        listener,
        app,
        std::future::pending(),
    ));
    format!("http://{addr}")
}
