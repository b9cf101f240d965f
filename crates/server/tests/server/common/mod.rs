//! Test support: a real server on 127.0.0.1:0 over a fresh broker, and a
//! small JSON client.

#![allow(dead_code, reason = "idle_flood.rs, a binary of its own, uses a part")]

pub mod raw;

use std::sync::Arc;

use delayd_core::testkit::ModelBroker;
use delayd_core::Broker;
use delayd_server::{serve_until, HttpListener, ServerError, ServerOptions};
use reqwest::Method;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// `mod $broker { ... }` with one `#[tokio::test]` per case: each case runs
/// against a fresh server with `$options` over a fresh `common::$broker()`
/// (`model_broker` or `local_broker`), stopped after it.
#[macro_export]
macro_rules! server_cases {
    ($options:expr; $broker:ident: $($case:ident),* $(,)?) => {
        mod $broker {
            $(
                #[tokio::test]
                async fn $case() {
                    let (broker, _guard) = $crate::common::$broker().await;
                    let s = $crate::common::start(broker, $options).await;
                    super::$case(&s).await;
                    s.stop().await.unwrap();
                }
            )*
        }
    };
}

pub struct Server {
    pub base: String,
    pub client: reqwest::Client,
    pub broker: Arc<dyn Broker>,
    pub addr: std::net::SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    pub task: Option<JoinHandle<Result<(), ServerError>>>,
}

pub fn model() -> Arc<dyn Broker> {
    Arc::new(ModelBroker::new())
}

/// A fresh LocalBroker on a temporary directory (kept alive by the guard).
pub async fn local_broker() -> (Arc<dyn Broker>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = delayd_local::LocalConfig::new(dir.path());
    let broker = delayd_local::LocalBroker::open(config).await.unwrap();
    (Arc::new(broker), dir)
}

/// A fresh ModelBroker (the guard is for parity with on-disk brokers).
pub async fn model_broker() -> (Arc<dyn Broker>, ()) {
    (model(), ())
}

pub async fn start(broker: Arc<dyn Broker>, options: ServerOptions) -> Server {
    start_on(bind().await, broker, options)
}

pub async fn bind() -> HttpListener {
    HttpListener::from(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap())
}

/// A server on `listener` (with its limits and TLS, if any).
pub fn start_on(listener: HttpListener, broker: Arc<dyn Broker>, options: ServerOptions) -> Server {
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let signal = async move {
        let _ = stopped.await;
    };
    let task = tokio::spawn(serve_until(listener, broker.clone(), options, signal));
    Server {
        base: format!("http://{addr}"),
        client: reqwest::Client::new(),
        broker,
        addr,
        stop: Some(stop),
        task: Some(task),
    }
}

pub async fn start_default() -> Server {
    start(model(), ServerOptions::default()).await
}

pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub headers: reqwest::header::HeaderMap,
}

impl Reply {
    /// The error code of an error body (panics with context otherwise).
    pub fn code(&self) -> &str {
        self.body["error"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("no error code in {} {}", self.status, self.body))
    }
}

impl Server {
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Reply {
        let bytes = body
            .map(|b| serde_json::to_vec(&b).unwrap())
            .unwrap_or_default();
        self.raw(method, path, bytes, &[]).await
    }

    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        body: Vec<u8>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self
            .client
            .request(method, format!("{}{}", self.base, path))
            .body(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Reply {
            status,
            body,
            headers,
        }
    }

    /// Triggers shutdown and waits for the server to return.
    pub async fn stop(mut self) -> Result<(), ServerError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.unwrap(),
            None => Ok(()),
        }
    }

    pub fn trigger_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Sends a raw HTTP/1.1 request line (for paths an URL library would
/// normalise, like `/v1/queues/./messages`) and returns the status and body.
pub async fn raw_http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    token: Option<&str>,
) -> (u16, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: test\r\ncontent-length: {}\r\nconnection: close\r\n{}\r\n{body}",
        body.len(),
        token.map(|t| format!("authorization: Bearer {t}\r\n")).unwrap_or_default(),
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status: u16 = response[9..12].parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}
