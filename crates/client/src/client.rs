//! [`Client`]: one method per endpoint of api.md.

use std::time::Duration;

use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use url::Url;

use delayd_api::{
    AckBody, AckResults, AcksBody, BatchBody, BatchItemResult, BatchResults, ExtendBody, History,
    KeyInfo, LeasedList, MessageList, NackBody, QueueList, RedriveBody, Redriven, Whoami,
};

use crate::error::ClientError;
use crate::wire::{
    AckItem, Enqueued, ErrorDetail, Extended, LeaseOptions, Leased, MessageView, NewMessage, Queue,
    QueuePut, Reschedule,
};

/// Result of [`Client::put_queue`]: whether the `PUT` created the queue
/// (201) or updated it (200), and the queue as it now is.
#[derive(Clone, Debug, PartialEq)]
pub struct PutQueue {
    pub created: bool,
    pub queue: Queue,
}

/// The HTTP version a [`Client`] speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 only: one request at a time per connection, so concurrent
    /// requests open (and pool) as many connections as are in flight. With
    /// `https://` only `http/1.1` is offered by ALPN.
    #[default]
    Http1,
    /// HTTP/2 only, many concurrent requests (streams) on one connection.
    /// Over `http://` with prior knowledge (h2c: the connection starts with
    /// the HTTP/2 preface, no upgrade round trip), which delayd's HTTP port
    /// accepts; over `https://` by ALPN offering only `h2`. A server that
    /// speaks only HTTP/1.1 fails every request. Worth it when one process
    /// sends many concurrent requests, above all to a server with
    /// `--durability always`: an HTTP/1.1 connection waits out one commit
    /// (fsync) per request, while the streams of one HTTP/2 connection share
    /// commit groups (docs/api.md, "HTTP/2").
    Http2,
}

/// An async client of one delayd server. Cheap to clone (the connection
/// pool is shared), so clone it into tasks rather than wrapping it in `Arc`.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    token: Option<String>,
    timeout: Duration,
    protocol: Protocol,
}

impl Client {
    /// Default time allowed for one request (a lease adds its `wait_ms`).
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

    /// A client of the server at `base_url` (e.g. `http://127.0.0.1:7070`),
    /// speaking HTTP/1.1.
    pub fn new(base_url: &str) -> Result<Self, ClientError> {
        Self::with_protocol(base_url, Protocol::Http1)
    }

    /// A client of the server at `base_url` speaking `protocol`; see
    /// [`Protocol::Http2`] for when HTTP/2 pays.
    ///
    /// ```no_run
    /// use delayd_client::{Client, Protocol};
    /// # fn demo() -> Result<(), delayd_client::ClientError> {
    /// // One connection; every concurrent request of the process is a stream on it.
    /// let client = Client::with_protocol("http://127.0.0.1:7070", Protocol::Http2)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_protocol(base_url: &str, protocol: Protocol) -> Result<Self, ClientError> {
        let mut base = Url::parse(base_url)
            .map_err(|err| ClientError::InvalidUrl(format!("{base_url}: {err}")))?;
        if base.cannot_be_a_base() || !matches!(base.scheme(), "http" | "https") {
            return Err(ClientError::InvalidUrl(format!(
                "{base_url}: expected an http:// or https:// URL"
            )));
        }
        // Paths are appended segment by segment; a trailing slash would add
        // an empty segment.
        if base.path().ends_with('/') {
            let trimmed = base.path().trim_end_matches('/').to_owned();
            base.set_path(&trimmed);
        }
        let builder = reqwest::Client::builder();
        // Explicit in both cases: with reqwest's `http2` feature on, its
        // default would offer h2 by ALPN over TLS and change what
        // `Protocol::Http1` means.
        let builder = match protocol {
            Protocol::Http1 => builder.http1_only(),
            Protocol::Http2 => builder.http2_prior_knowledge(),
        };
        let http = builder
            .build()
            .map_err(|err| ClientError::InvalidUrl(format!("HTTP client setup: {err}")))?;
        Ok(Self {
            http,
            base,
            token: None,
            timeout: Self::DEFAULT_TIMEOUT,
            protocol,
        })
    }

    /// The HTTP version this client speaks.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// Sends `Authorization: Bearer <token>` with every request.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Time allowed for one request, connection included. Lease calls get
    /// their `wait_ms` on top, so a long poll never times out by itself.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn base_url(&self) -> &Url {
        &self.base
    }

    // ----- queues -----

    pub async fn put_queue(&self, queue: &str, body: &QueuePut) -> Result<PutQueue, ClientError> {
        let url = self.url(&["v1", "queues", queue])?;
        let response = self
            .send(self.request(Method::PUT, &url).json(body))
            .await?;
        let created = response.status() == StatusCode::CREATED;
        let queue = decode(response).await?;
        Ok(PutQueue { created, queue })
    }

    pub async fn get_queue(&self, queue: &str) -> Result<Queue, ClientError> {
        self.call(Method::GET, &["v1", "queues", queue], None::<&()>)
            .await
    }

    pub async fn list_queues(&self) -> Result<Vec<Queue>, ClientError> {
        let list: QueueList = self
            .call(Method::GET, &["v1", "queues"], None::<&()>)
            .await?;
        Ok(list.queues)
    }

    pub async fn delete_queue(&self, queue: &str) -> Result<(), ClientError> {
        self.call_empty(Method::DELETE, &["v1", "queues", queue], None::<&()>)
            .await
    }

    pub async fn pause(&self, queue: &str) -> Result<Queue, ClientError> {
        self.call(Method::POST, &["v1", "queues", queue, "pause"], None::<&()>)
            .await
    }

    pub async fn resume(&self, queue: &str) -> Result<Queue, ClientError> {
        self.call(
            Method::POST,
            &["v1", "queues", queue, "resume"],
            None::<&()>,
        )
        .await
    }

    // ----- messages -----

    /// Enqueues one message. `created: false` in the answer means a live
    /// message with that id already existed: nothing changed, unless the
    /// message asked for [`OnConflict::Replace`](crate::OnConflict) or
    /// `Debounce` (then `replaced: true`, and `after_lease: true` when the
    /// live message was leased and the request became its successor).
    pub async fn enqueue(
        &self,
        queue: &str,
        message: &NewMessage,
    ) -> Result<Enqueued, ClientError> {
        self.call(
            Method::POST,
            &["v1", "queues", queue, "messages"],
            Some(message),
        )
        .await
    }

    /// Enqueues up to 1000 messages in one request; each item succeeds or
    /// fails on its own, results in input order.
    pub async fn enqueue_batch(
        &self,
        queue: &str,
        messages: &[NewMessage],
    ) -> Result<Vec<Result<Enqueued, ErrorDetail>>, ClientError> {
        // References: a batch is sent as it is, not copied.
        let body = BatchBody {
            messages: messages.iter().collect(),
        };
        let results: BatchResults = self
            .call(Method::POST, &["v1", "queues", queue, "batch"], Some(&body))
            .await?;
        Ok(results
            .results
            .into_iter()
            .map(|item| match item {
                BatchItemResult::Enqueued(done) => Ok(done),
                BatchItemResult::Failed(err) => Err(err.error),
            })
            .collect())
    }

    pub async fn get_message(&self, queue: &str, id: &str) -> Result<MessageView, ClientError> {
        let path = ["v1", "queues", queue, "messages", id];
        self.call(Method::GET, &path, None::<&()>).await
    }

    /// `GET .../messages/{id}/events`: the history of a live or retained
    /// message, oldest first (its last 32 events; `dropped` counts the
    /// older ones). An event type this client does not know reads as
    /// [`EventKind::Other`](crate::wire::EventKind::Other).
    pub async fn events(&self, queue: &str, id: &str) -> Result<History, ClientError> {
        let path = ["v1", "queues", queue, "messages", id, "events"];
        self.call(Method::GET, &path, None::<&()>).await
    }

    /// Removes a message in any state (a leased message's lease becomes
    /// invalid).
    pub async fn cancel(&self, queue: &str, id: &str) -> Result<(), ClientError> {
        let path = ["v1", "queues", queue, "messages", id];
        self.call_empty(Method::DELETE, &path, None::<&()>).await
    }

    pub async fn reschedule(
        &self,
        queue: &str,
        id: &str,
        change: &Reschedule,
    ) -> Result<MessageView, ClientError> {
        let path = ["v1", "queues", queue, "messages", id];
        self.call(Method::PATCH, &path, Some(change)).await
    }

    // ----- consuming -----

    /// Leases up to `options.max` ready messages, waiting up to
    /// `options.wait_ms` for the first; an empty list when none came.
    pub async fn lease(
        &self,
        queue: &str,
        options: LeaseOptions,
    ) -> Result<Vec<Leased>, ClientError> {
        let url = self.url(&["v1", "queues", queue, "leases"])?;
        // The server may legitimately hold the request for `wait_ms`; the
        // client's own timeout only starts counting after that.
        let timeout = self.timeout + Duration::from_millis(options.wait_ms);
        let request = self
            .request(Method::POST, &url)
            .timeout(timeout)
            .json(&options);
        let list: LeasedList = decode(self.send(request).await?).await?;
        Ok(list.messages)
    }

    pub async fn ack(&self, queue: &str, id: &str, lease_id: &str) -> Result<(), ClientError> {
        let path = ["v1", "queues", queue, "messages", id, "ack"];
        let body = AckBody {
            lease_id: lease_id.to_owned(),
        };
        self.call_empty(Method::POST, &path, Some(&body)).await
    }

    /// Acks up to 1000 deliveries of one queue in one request
    /// (`POST .../acks`): one result per item, in order; a failed item
    /// (`lease_mismatch`, `message_not_found`) does not fail the others.
    pub async fn ack_many(
        &self,
        queue: &str,
        acks: &[AckItem],
    ) -> Result<Vec<Result<(), ErrorDetail>>, ClientError> {
        let body = AcksBody {
            acks: acks.to_vec(),
        };
        let results: AckResults = self
            .call(Method::POST, &["v1", "queues", queue, "acks"], Some(&body))
            .await?;
        Ok(results
            .results
            .into_iter()
            .map(|item| match item.error {
                None if item.acked => Ok(()),
                None => Err(ErrorDetail {
                    code: "invalid_response".into(),
                    message: format!("ack of {} neither acked nor failed", item.id),
                }),
                Some(error) => Err(error),
            })
            .collect())
    }

    /// Fails a delivery; without `delay_ms` the queue's backoff applies.
    pub async fn nack(
        &self,
        queue: &str,
        id: &str,
        lease_id: &str,
        delay_ms: Option<u64>,
    ) -> Result<(), ClientError> {
        let options = NackOptions {
            delay_ms,
            ..NackOptions::default()
        };
        self.nack_with(queue, id, lease_id, &options).await
    }

    /// Defers a delivery (nack with `defer: true`, queues with `flow`
    /// only): the consumer was told to slow down, so the attempt is given
    /// back and the message's key cools down until it is due again, after
    /// `delay_ms` or else the queue's backoff for its nth deferral in a
    /// row.
    pub async fn defer(
        &self,
        queue: &str,
        id: &str,
        lease_id: &str,
        delay_ms: Option<u64>,
    ) -> Result<(), ClientError> {
        let options = NackOptions {
            delay_ms,
            defer: true,
            ..NackOptions::default()
        };
        self.nack_with(queue, id, lease_id, &options).await
    }

    /// `POST .../nack` with every option (the call behind
    /// [`nack`](Self::nack) and [`defer`](Self::defer)): `error` says why
    /// the delivery failed and becomes the message's `last_error`.
    pub async fn nack_with(
        &self,
        queue: &str,
        id: &str,
        lease_id: &str,
        options: &NackOptions,
    ) -> Result<(), ClientError> {
        let path = ["v1", "queues", queue, "messages", id, "nack"];
        let body = NackBody {
            lease_id: lease_id.to_owned(),
            delay_ms: options.delay_ms,
            defer: options.defer,
            error: options.error.clone(),
        };
        self.call_empty(Method::POST, &path, Some(&body)).await
    }

    /// Sets `lease_until = now + lease_ms` (the queue's `lease_ms` when
    /// `None`) and returns the new `lease_until`.
    pub async fn extend(
        &self,
        queue: &str,
        id: &str,
        lease_id: &str,
        lease_ms: Option<u64>,
    ) -> Result<u64, ClientError> {
        let path = ["v1", "queues", queue, "messages", id, "extend"];
        let body = ExtendBody {
            lease_id: lease_id.to_owned(),
            lease_ms,
        };
        let extended: Extended = self.call(Method::POST, &path, Some(&body)).await?;
        Ok(extended.lease_until)
    }

    // ----- flow control -----

    /// `GET /v1/queues/{queue}/keys/{key}`: a flow key's live messages by
    /// state and its cooldown (zeros for a key with no live message). The
    /// key is sent as one percent-encoded path segment.
    pub async fn key_info(&self, queue: &str, key: &str) -> Result<KeyInfo, ClientError> {
        self.call(
            Method::GET,
            &["v1", "queues", queue, "keys", key],
            None::<&()>,
        )
        .await
    }

    // ----- dead letters -----

    /// Dead messages, oldest death first; `after` is the last id of the
    /// previous page.
    pub async fn dead(
        &self,
        queue: &str,
        limit: Option<u32>,
        after: Option<&str>,
    ) -> Result<Vec<MessageView>, ClientError> {
        let mut url = self.url(&["v1", "queues", queue, "dead"])?;
        {
            let mut query = url.query_pairs_mut();
            if let Some(limit) = limit {
                query.append_pair("limit", &limit.to_string());
            }
            if let Some(after) = after {
                query.append_pair("after", after);
            }
        }
        let list: MessageList = decode(self.send(self.request(Method::GET, &url)).await?).await?;
        Ok(list.messages)
    }

    /// Messages of one state (`scheduled`, `ready`, `leased` or `dead`) in
    /// that state's order, `limit` per page (the dashboard's listing,
    /// `GET /v1/queues/{queue}/messages?state=`); `after` is the last id of
    /// the previous page.
    pub async fn list_messages(
        &self,
        queue: &str,
        state: &str,
        limit: Option<u32>,
        after: Option<&str>,
    ) -> Result<Vec<MessageView>, ClientError> {
        let mut url = self.url(&["v1", "queues", queue, "messages"])?;
        {
            let mut query = url.query_pairs_mut();
            query.append_pair("state", state);
            if let Some(limit) = limit {
                query.append_pair("limit", &limit.to_string());
            }
            if let Some(after) = after {
                query.append_pair("after", after);
            }
        }
        let list: MessageList = decode(self.send(self.request(Method::GET, &url)).await?).await?;
        Ok(list.messages)
    }

    /// Moves dead messages back to `ready` (all of them when `ids` is
    /// `None`); returns how many moved.
    pub async fn redrive(&self, queue: &str, ids: Option<&[String]>) -> Result<u64, ClientError> {
        let path = ["v1", "queues", queue, "dead", "redrive"];
        let done: Redriven = self
            .call(
                Method::POST,
                &path,
                Some(&RedriveBody {
                    ids: ids.map(<[String]>::to_vec),
                }),
            )
            .await?;
        Ok(done.redriven)
    }

    // ----- operations -----

    /// `GET /v1/whoami`: this client's token, its name and scopes
    /// (`VERB:QUEUE_GLOB`; `*:*` for a full-access token or a server
    /// without tokens). A call its token lacks the scope for fails with
    /// [`ClientError::Api`] of code `forbidden` (403), naming the verb and
    /// the queue.
    pub async fn whoami(&self) -> Result<Whoami, ClientError> {
        self.call(Method::GET, &["v1", "whoami"], None::<&()>).await
    }

    /// `GET /healthz`: Ok when the process is up.
    pub async fn healthz(&self) -> Result<(), ClientError> {
        self.call_empty(Method::GET, &["healthz"], None::<&()>)
            .await
    }

    /// `GET /readyz`: Ok when the store is reachable and takes writes.
    pub async fn readyz(&self) -> Result<(), ClientError> {
        self.call_empty(Method::GET, &["readyz"], None::<&()>).await
    }

    /// `GET /metrics`: the Prometheus text exposition.
    pub async fn metrics(&self) -> Result<String, ClientError> {
        let url = self.url(&["metrics"])?;
        let response = self.send(self.request(Method::GET, &url)).await?;
        let status = response.status().as_u16();
        response.text().await.map_err(|err| ClientError::Decode {
            url: url.to_string(),
            status,
            reason: err.to_string(),
        })
    }

    // ----- plumbing -----

    /// The base URL plus `segments`, each percent-encoded as one segment (so
    /// a malformed id can never address another route).
    pub(crate) fn url(&self, segments: &[&str]) -> Result<Url, ClientError> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| ClientError::InvalidUrl(self.base.to_string()))?
            .extend(segments);
        Ok(url)
    }

    pub(crate) fn request(&self, method: Method, url: &Url) -> RequestBuilder {
        let request = self.http.request(method, url.clone()).timeout(self.timeout);
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends and turns error statuses into [`ClientError::Api`].
    pub(crate) async fn send(&self, request: RequestBuilder) -> Result<Response, ClientError> {
        let response = request
            .send()
            .await
            .map_err(|err| ClientError::from_reqwest(self.base.as_str(), err))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let url = response.url().to_string();
        let body = response
            .bytes()
            .await
            .map_err(|err| ClientError::from_reqwest(&url, err))?;
        Err(ClientError::from_error_body(status.as_u16(), &body))
    }

    pub(crate) async fn call<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &[&str],
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        decode(self.call_raw(method, path, body).await?).await
    }

    /// For endpoints that answer 204 (or whose body carries nothing useful).
    pub(crate) async fn call_empty<B: Serialize + ?Sized>(
        &self,
        method: Method,
        path: &[&str],
        body: Option<&B>,
    ) -> Result<(), ClientError> {
        self.call_raw(method, path, body).await.map(drop)
    }

    pub(crate) async fn call_raw<B: Serialize + ?Sized>(
        &self,
        method: Method,
        path: &[&str],
        body: Option<&B>,
    ) -> Result<Response, ClientError> {
        let url = self.url(path)?;
        let mut request = self.request(method, &url);
        if let Some(body) = body {
            request = request.json(body);
        }
        self.send(request).await
    }
}

pub(crate) async fn decode<T: DeserializeOwned>(response: Response) -> Result<T, ClientError> {
    let status = response.status().as_u16();
    let url = response.url().to_string();
    let body = response
        .bytes()
        .await
        .map_err(|err| ClientError::from_reqwest(&url, err))?;
    serde_json::from_slice(&body).map_err(|err| ClientError::Decode {
        url,
        status,
        reason: err.to_string(),
    })
}

/// The options of [`Client::nack_with`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NackOptions {
    /// Deliver again after this long; without it the queue's backoff.
    pub delay_ms: Option<u64>,
    /// Not a failed attempt (queues with `flow`): see [`Client::defer`].
    pub defer: bool,
    /// Why the delivery failed (at most 1024 bytes of UTF-8): the
    /// message's `last_error`.
    pub error: Option<String>,
}
