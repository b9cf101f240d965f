//! Test harness: a real HTTP receiver on 127.0.0.1:0 whose answers the test
//! scripts, a broker, and a dispatcher with short intervals.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use delayd_core::testkit::ModelBroker;
use delayd_core::{
    Broker, Clock, EnqueueOptions, EnqueueRequest, FlowConfig, FlowKey, MessageId, PushConfig,
    QueueConfigPatch, QueueName, RetryPolicy, Schedule, SystemClock,
};
use delayd_push::{PushDispatcher, PushOptions, PushPolicy};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How the receiver answers one request.
#[derive(Clone, Debug)]
pub enum Reply {
    Status(u16),
    /// Status with extra response headers.
    With(u16, Vec<(&'static str, String)>),
    /// Waits, then answers the status.
    After(Duration, u16),
    /// The status with this body.
    Body(u16, String),
    /// Never answers.
    Hang,
}

/// One request as the receiver saw it.
#[derive(Clone, Debug)]
pub struct Received {
    /// Receiver's wall clock, epoch ms.
    pub at_ms: u64,
    pub at: Instant,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    pub fn attempt(&self) -> u32 {
        self.header("delayd-attempt").parse().unwrap()
    }
}

type Script = Arc<dyn Fn(usize, &Received) -> Reply + Send + Sync>;

struct ReceiverState {
    script: Mutex<Script>,
    count: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    seen: mpsc::UnboundedSender<Received>,
}

pub struct Receiver {
    pub addr: SocketAddr,
    state: Arc<ReceiverState>,
    pub requests: mpsc::UnboundedReceiver<Received>,
}

impl Receiver {
    /// Starts a receiver that answers with `script(n, request)` (n from 0).
    pub async fn start(script: impl Fn(usize, &Received) -> Reply + Send + Sync + 'static) -> Self {
        let (seen, requests) = mpsc::unbounded_channel();
        let state = Arc::new(ReceiverState {
            script: Mutex::new(Arc::new(script)),
            count: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            seen,
        });
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            addr,
            state,
            requests,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// Replaces the script (the request counter keeps counting).
    pub fn set_script(&self, script: impl Fn(usize, &Received) -> Reply + Send + Sync + 'static) {
        *self.state.script.lock().unwrap() = Arc::new(script);
    }

    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }

    /// The next request, failing the test after `within`.
    pub async fn next(&mut self, within: Duration) -> Received {
        tokio::time::timeout(within, self.requests.recv())
            .await
            .expect("no request arrived in time")
            .expect("receiver stopped")
    }
}

async fn handle(
    State(state): State<Arc<ReceiverState>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let received = Received {
        at_ms: SystemClock.now_ms(),
        at: Instant::now(),
        path: uri.path().to_owned(),
        headers,
        body,
    };
    let n = state.count.fetch_add(1, Ordering::SeqCst);
    let reply = {
        let script = state.script.lock().unwrap().clone();
        script(n, &received)
    };
    let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    state.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let _ = state.seen.send(received);
    let response = match reply {
        Reply::Status(code) => status(code).into_response(),
        Reply::With(code, headers) => {
            let mut response = status(code).into_response();
            for (name, value) in headers {
                response.headers_mut().insert(name, value.parse().unwrap());
            }
            response
        }
        Reply::After(wait, code) => {
            tokio::time::sleep(wait).await;
            status(code).into_response()
        }
        Reply::Body(code, body) => (status(code), body).into_response(),
        Reply::Hang => std::future::pending().await,
    };
    state.in_flight.fetch_sub(1, Ordering::SeqCst);
    response
}

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap()
}

pub fn policy(entries: &[&str]) -> Arc<PushPolicy> {
    let entries: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
    Arc::new(PushPolicy::new(&entries).unwrap())
}

pub fn fast_options() -> PushOptions {
    PushOptions {
        discovery_interval: Duration::from_millis(50),
        lease_margin: Duration::from_millis(300),
        lease_wait: Duration::from_millis(200),
        shutdown_grace: Duration::from_millis(500),
        ..PushOptions::default()
    }
}

/// A broker and a running dispatcher; stop it with [`Harness::stop`].
pub struct Harness {
    pub broker: Arc<dyn Broker>,
    pub shutdown: CancellationToken,
    dispatcher: Option<PushDispatcher>,
    /// The LocalBroker's store, removed when the harness is dropped.
    dir: Option<tempfile::TempDir>,
}

/// A LocalBroker on a fresh temporary directory.
pub async fn local_broker() -> (Arc<dyn Broker>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = delayd_local::LocalConfig::new(dir.path());
    let broker = delayd_local::LocalBroker::open(config).await.unwrap();
    (Arc::new(broker), dir)
}

impl Harness {
    /// A dispatcher with short intervals on a fresh LocalBroker.
    pub async fn start(policy: Arc<PushPolicy>) -> Self {
        let (broker, dir) = local_broker().await;
        let mut harness = Self::on_broker(broker, policy, fast_options());
        harness.dir = Some(dir);
        harness
    }

    /// A dispatcher on the reference ModelBroker.
    pub fn start_on_model(policy: Arc<PushPolicy>) -> Self {
        Self::on_broker(Arc::new(ModelBroker::new()), policy, fast_options())
    }

    pub fn on_broker(
        broker: Arc<dyn Broker>,
        policy: Arc<PushPolicy>,
        options: PushOptions,
    ) -> Self {
        let shutdown = CancellationToken::new();
        let dispatcher =
            PushDispatcher::start(Arc::clone(&broker), policy, options, shutdown.clone());
        Self {
            broker,
            shutdown,
            dispatcher: Some(dispatcher),
            dir: None,
        }
    }

    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(dispatcher) = self.dispatcher.take() {
            tokio::time::timeout(Duration::from_secs(5), dispatcher.join())
                .await
                .expect("dispatcher did not stop in time");
        }
    }

    /// Creates `queue` pushing to `url`.
    pub async fn push_queue(
        &self,
        queue: &str,
        push: PushConfig,
        max_attempts: u32,
        retry: RetryPolicy,
    ) {
        let patch = QueueConfigPatch {
            max_attempts: Some(max_attempts),
            retry: Some(retry),
            push: Some(Some(push)),
            ..Default::default()
        };
        self.broker.put_queue(&q(queue), patch).await.unwrap();
    }

    /// Creates `queue` pushing to `url` with flow control `flow`.
    pub async fn flow_queue(
        &self,
        queue: &str,
        push: PushConfig,
        retry: RetryPolicy,
        flow: FlowConfig,
    ) {
        let patch = QueueConfigPatch {
            max_attempts: Some(10),
            retry: Some(retry),
            push: Some(Some(push)),
            flow: Some(Some(flow)),
            ..Default::default()
        };
        self.broker.put_queue(&q(queue), patch).await.unwrap();
    }

    /// Enqueues ready messages `(id, key)` in one call.
    pub async fn enqueue_keyed(&self, queue: &str, messages: &[(String, Option<&str>)]) {
        let requests = messages
            .iter()
            .map(|(id_, key)| EnqueueRequest {
                id: Some(id(id_)),
                key: key.map(|k| FlowKey::new(k).unwrap()),
                payload: id_.as_bytes().to_vec(),
                ..Default::default()
            })
            .collect();
        let results = self
            .broker
            .enqueue(&q(queue), requests, EnqueueOptions::default())
            .await
            .unwrap();
        for result in results {
            result.unwrap();
        }
    }

    pub async fn enqueue(
        &self,
        queue: &str,
        id: &str,
        schedule: Schedule,
        payload: &[u8],
        headers: &[(&str, &str)],
    ) -> u64 {
        let request = EnqueueRequest {
            id: Some(MessageId::new(id).unwrap()),
            schedule,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
            payload: payload.to_vec(),
            ..Default::default()
        };
        let mut results = self
            .broker
            .enqueue(&q(queue), vec![request], EnqueueOptions::default())
            .await
            .unwrap();
        results.remove(0).unwrap().deliver_at
    }
}

pub fn q(name: &str) -> QueueName {
    QueueName::new(name).unwrap()
}

pub fn id(name: &str) -> MessageId {
    MessageId::new(name).unwrap()
}

pub fn push(url: String, timeout_ms: u64, concurrency: u32, secret: Option<&str>) -> PushConfig {
    PushConfig {
        url,
        timeout_ms,
        concurrency,
        secret: secret.map(str::to_owned),
        headers: Default::default(),
    }
}

pub fn retry(initial_ms: u64, multiplier: f64) -> RetryPolicy {
    RetryPolicy {
        initial_ms,
        max_ms: 60_000,
        multiplier,
    }
}

/// Polls a condition until it holds, failing after a time limit in ms: for
/// broker state, which has no event to await.
pub use delayd_core::testkit::support::eventually;
