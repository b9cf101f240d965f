//! The client against a real in-process server: every endpoint once, error
//! bodies parsed into `ClientError::Api`, and an unreachable server.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use delayd_client::{
    Client, ClientError, LeaseOptions, NewMessage, OnConflict, Payload, QueuePut, Reschedule, Retry,
};
use delayd_core::testkit::ModelBroker;
use delayd_server::ServerOptions;

async fn server(options: ServerOptions) -> Client {
    let url = common::serve(Arc::new(ModelBroker::new()), options).await;
    Client::new(&url).expect("client")
}

fn one() -> LeaseOptions {
    LeaseOptions {
        max: 1,
        wait_ms: 0,
        lease_ms: None,
    }
}

#[tokio::test]
async fn unreachable_server_is_unreachable() {
    // A port that was free a moment ago and has no listener now.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let client = Client::new(&format!("http://{addr}")).unwrap();
    let err = client.list_queues().await.unwrap_err();
    assert!(err.is_unreachable(), "{err:?}");
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
}

#[tokio::test]
async fn bad_base_url_is_rejected() {
    assert!(matches!(
        Client::new("not a url"),
        Err(ClientError::InvalidUrl(_))
    ));
    assert!(matches!(
        Client::new("ftp://x"),
        Err(ClientError::InvalidUrl(_))
    ));
}

#[tokio::test]
async fn api_errors_carry_status_and_code() {
    let client = server(ServerOptions::default()).await;
    let err = client.get_queue("nope").await.unwrap_err();
    assert_eq!(err.status(), Some(404));
    assert_eq!(err.code(), Some("queue_not_found"));
    let both = NewMessage::new("x").delay_ms(1).deliver_at(1);
    let err = client.enqueue("q", &both).await.unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(400), Some("invalid_argument"))
    );
    let err = client.get_message("q", "missing").await.unwrap_err();
    assert_eq!(err.code(), Some("message_not_found"));
}

#[tokio::test]
async fn queue_lifecycle() {
    let client = server(ServerOptions::default()).await;
    let put = QueuePut {
        lease_ms: Some(5_000),
        retry: Some(Retry {
            initial_ms: 10,
            max_ms: 100,
            multiplier: 1.5,
        }),
        ..QueuePut::default()
    };
    let created = client.put_queue("jobs", &put).await.unwrap();
    assert!(created.created);
    assert_eq!(created.queue.config.lease_ms, 5_000);
    let patch = QueuePut {
        max_attempts: Some(3),
        ..QueuePut::default()
    };
    let updated = client.put_queue("jobs", &patch).await.unwrap();
    assert!(!updated.created);
    assert_eq!(
        (
            updated.queue.config.lease_ms,
            updated.queue.config.max_attempts
        ),
        (5_000, 3)
    );
    assert!(client.pause("jobs").await.unwrap().paused);
    assert!(!client.resume("jobs").await.unwrap().paused);
    let names: Vec<String> = client
        .list_queues()
        .await
        .unwrap()
        .into_iter()
        .map(|q| q.name)
        .collect();
    assert_eq!(names, ["jobs"]);
    client.delete_queue("jobs").await.unwrap();
    assert_eq!(
        client.get_queue("jobs").await.unwrap_err().code(),
        Some("queue_not_found")
    );
}

#[tokio::test]
async fn enqueue_lease_extend_ack() {
    let client = server(ServerOptions::default()).await;
    let message = NewMessage::new(vec![0xff, 0x00, 0x01])
        .id("m1")
        .priority(7)
        .header("k", "v");
    let done = client.enqueue("q", &message).await.unwrap();
    assert!(done.created);
    assert!(
        !client.enqueue("q", &message).await.unwrap().created,
        "idempotent"
    );
    let view = client.get_message("q", "m1").await.unwrap();
    assert_eq!((view.state.as_str(), view.priority), ("ready", 7));
    assert_eq!(view.payload, Payload::Binary(vec![0xff, 0, 1]));
    assert_eq!(view.headers.get("k").map(String::as_str), Some("v"));

    let leased = client.lease("q", one()).await.unwrap();
    assert_eq!(leased.len(), 1);
    let m = &leased[0];
    assert_eq!((m.id.as_str(), m.attempt), ("m1", 1));
    let until = client
        .extend("q", "m1", &m.lease_id, Some(60_000))
        .await
        .unwrap();
    assert!(until >= m.lease_until);
    let wrong = client.ack("q", "m1", "not-the-lease").await.unwrap_err();
    assert_eq!(
        (wrong.status(), wrong.code()),
        (Some(409), Some("lease_mismatch"))
    );
    client.ack("q", "m1", &m.lease_id).await.unwrap();
    let gone = client.ack("q", "m1", &m.lease_id).await.unwrap_err();
    assert_eq!(gone.code(), Some("message_not_found"));
}

#[tokio::test]
async fn batch_reschedule_cancel() {
    let client = server(ServerOptions::default()).await;
    let batch = [
        NewMessage::new("a").id("a").delay_ms(60_000),
        NewMessage::new("b").id("bad id with spaces"),
        NewMessage::new("c").id("c"),
    ];
    let results = client.enqueue_batch("q", &batch).await.unwrap();
    assert_eq!(results.len(), 3);
    assert_eq!(results[0].as_ref().map(|r| r.id.as_str()), Ok("a"));
    assert_eq!(
        results[1].as_ref().map_err(|e| e.code.as_str()),
        Err("invalid_argument")
    );
    assert!(results[2].is_ok());
    let moved = client
        .reschedule(
            "q",
            "a",
            &Reschedule {
                delay_ms: Some(0),
                ..Reschedule::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(moved.state, "ready");
    client.cancel("q", "c").await.unwrap();
    assert_eq!(
        client.cancel("q", "c").await.unwrap_err().status(),
        Some(404)
    );
}

#[tokio::test]
async fn nack_to_dead_and_redrive() {
    let client = server(ServerOptions::default()).await;
    let put = QueuePut {
        max_attempts: Some(1),
        ..QueuePut::default()
    };
    client.put_queue("q", &put).await.unwrap();
    for id in ["d1", "d2"] {
        client
            .enqueue("q", &NewMessage::new(id).id(id))
            .await
            .unwrap();
        let m = client.lease("q", one()).await.unwrap().remove(0);
        client.nack("q", &m.id, &m.lease_id, None).await.unwrap();
    }
    let dead = client.dead("q", Some(1), None).await.unwrap();
    assert_eq!(
        dead.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        ["d1"]
    );
    let next = client.dead("q", Some(10), Some("d1")).await.unwrap();
    assert_eq!(
        next.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        ["d2"]
    );
    assert_eq!(
        client.redrive("q", Some(&["d2".to_owned()])).await.unwrap(),
        1
    );
    assert_eq!(client.redrive("q", None).await.unwrap(), 1);
    assert_eq!(client.get_queue("q").await.unwrap().stats.ready, 2);
}

#[tokio::test]
async fn lease_wait_outlasts_the_request_timeout() {
    let client = server(ServerOptions::default()).await;
    let client = client.with_timeout(Duration::from_millis(300));
    let wait = LeaseOptions {
        max: 1,
        wait_ms: 800,
        lease_ms: None,
    };
    let started = std::time::Instant::now();
    let got = client.lease("empty", wait).await.unwrap();
    assert!(got.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(800));
}

#[tokio::test]
async fn token_auth_and_operations() {
    let options = ServerOptions {
        tokens: vec!["s3cret".into()],
        ..ServerOptions::default()
    };
    let client = server(options).await;
    let err = client.list_queues().await.unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(401), Some("unauthorized"))
    );
    client.healthz().await.unwrap();
    client.readyz().await.unwrap();
    let client = client.with_token("s3cret");
    assert!(client.list_queues().await.unwrap().is_empty());
    client.metrics().await.unwrap();
}

#[tokio::test]
async fn a_scoped_token_without_the_scope_is_forbidden() {
    let digest: String = delayd_server::token_digest(b"producer")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let text = format!(
        "[[token]]\nname = \"producer\"\nsha256 = \"{digest}\"\nscopes = [\"publish:orders\"]\n"
    );
    let file = delayd_server::TokenFile::parse(&text).unwrap();
    let options = ServerOptions {
        scoped_tokens: Some(delayd_server::ScopedTokens::new(file)),
        ..ServerOptions::default()
    };
    let client = server(options).await.with_token("producer");
    client
        .enqueue("orders", &NewMessage::new("x"))
        .await
        .unwrap();
    let err = client
        .enqueue("billing", &NewMessage::new("x"))
        .await
        .unwrap_err();
    assert!(err.is_forbidden(), "{err}");
    assert_eq!(err.status(), Some(403));
    let shown = err.to_string();
    assert!(
        shown.contains("publish") && shown.contains("\"billing\""),
        "{shown}"
    );
    let me = client.whoami().await.unwrap();
    assert_eq!(me.name.as_deref(), Some("producer"));
    assert_eq!(me.scopes, ["publish:orders"]);
}

/// Retention through the typed client: `retain_ms` set and shown, an
/// acked and a cancelled message read back as `acked` / `cancelled` with
/// `ended_at` and no payload, and the list refusing the ended states.
#[tokio::test]
async fn retained_messages_through_the_client() {
    let client = server(ServerOptions::default()).await;
    let put = QueuePut {
        retain_ms: Some(86_400_000),
        ..QueuePut::default()
    };
    let created = client.put_queue("kept", &put).await.unwrap();
    assert_eq!(created.queue.config.retain_ms, 86_400_000);
    let other = QueuePut {
        max_attempts: Some(2),
        ..QueuePut::default()
    };
    let updated = client.put_queue("kept", &other).await.unwrap();
    assert_eq!(updated.queue.config.retain_ms, 86_400_000, "kept");

    client
        .enqueue("kept", &NewMessage::new("secret").id("a"))
        .await
        .unwrap();
    let m = client.lease("kept", one()).await.unwrap().remove(0);
    client.ack("kept", &m.id, &m.lease_id).await.unwrap();
    let acked = client.get_message("kept", "a").await.unwrap();
    assert_eq!(acked.state, "acked");
    assert!(acked.ended_at.is_some());
    assert_eq!(acked.payload, Payload::Text(String::new()));

    client
        .enqueue("kept", &NewMessage::new("x").id("c").delay_ms(60_000))
        .await
        .unwrap();
    client.cancel("kept", "c").await.unwrap();
    let cancelled = client.get_message("kept", "c").await.unwrap();
    assert_eq!(cancelled.state, "cancelled");
    assert!(cancelled.ended_at.is_some());

    let again = client
        .enqueue("kept", &NewMessage::new("new").id("a"))
        .await
        .unwrap();
    assert!(!again.created, "a retained id is a duplicate");
    let err = client
        .list_messages("kept", "acked", None, None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("invalid_argument"));
    let err = client.cancel("kept", "a").await.unwrap_err();
    assert_eq!(err.code(), Some("message_not_found"));
}

/// Replace and debounce through the typed client: `on_conflict` and
/// `debounce_max_ms` sent, `replaced` and `after_lease` read back (false
/// when the server leaves them out), the refusals as API errors naming
/// the field, a dead message's 409.
#[tokio::test]
async fn replace_and_debounce_through_the_client() {
    let client = server(ServerOptions::default()).await;
    let first = client
        .enqueue("r", &NewMessage::new("v1").id("m").delay_ms(60_000))
        .await
        .unwrap();
    assert!(first.created && !first.replaced && !first.after_lease);
    let keep = client
        .enqueue("r", &NewMessage::new("kept?").id("m"))
        .await
        .unwrap();
    assert!(!keep.created && !keep.replaced, "{keep:?}");

    let replace = NewMessage::new("v2")
        .id("m")
        .delay_ms(120_000)
        .on_conflict(OnConflict::Replace);
    let replaced = client.enqueue("r", &replace).await.unwrap();
    assert_eq!(
        (replaced.created, replaced.replaced, replaced.after_lease),
        (false, true, false)
    );
    assert_eq!(replaced.seq, first.seq, "the message's seq stays");
    let view = client.get_message("r", "m").await.unwrap();
    assert_eq!(view.payload, Payload::Text("v2".into()));
    assert_eq!(view.deliver_at, replaced.deliver_at);

    // Debounce capped at enqueued_at + 0: due at once.
    let debounce = NewMessage::new("v3")
        .id("m")
        .delay_ms(120_000)
        .on_conflict(OnConflict::Debounce)
        .debounce_max_ms(0);
    let debounced = client.enqueue("r", &debounce).await.unwrap();
    assert_eq!(debounced.deliver_at, view.enqueued_at, "{debounced:?}");

    // Leased: the request becomes its successor.
    let leased = client.lease("r", one()).await.unwrap().remove(0);
    assert_eq!(leased.payload, Payload::Text("v3".into()));
    let successor = client
        .enqueue(
            "r",
            &NewMessage::new("v4")
                .id("m")
                .on_conflict(OnConflict::Replace),
        )
        .await
        .unwrap();
    assert!(successor.replaced && successor.after_lease, "{successor:?}");
    client.ack("r", &leased.id, &leased.lease_id).await.unwrap();
    let next = client.get_message("r", "m").await.unwrap();
    assert_eq!(next.payload, Payload::Text("v4".into()));
    assert!(next.seq > first.seq, "a new message after the ack");

    // A batch answers each item, the refusals in their own slots.
    let results = client
        .enqueue_batch(
            "r",
            &[
                NewMessage::new("v5")
                    .id("m")
                    .on_conflict(OnConflict::Replace),
                NewMessage::new("x").on_conflict(OnConflict::Replace),
                NewMessage::new("x").id("y").debounce_max_ms(5),
            ],
        )
        .await
        .unwrap();
    assert!(results[0].as_ref().is_ok_and(|done| done.replaced));
    for (slot, field) in [(1, "on_conflict"), (2, "debounce_max_ms")] {
        let err = results[slot].as_ref().unwrap_err();
        assert_eq!(err.code, "invalid_argument");
        assert!(err.message.contains(field), "{field}: {}", err.message);
    }

    // A dead message is not replaced.
    let put = QueuePut {
        max_attempts: Some(1),
        ..QueuePut::default()
    };
    client.put_queue("dead", &put).await.unwrap();
    client
        .enqueue("dead", &NewMessage::new("d").id("d"))
        .await
        .unwrap();
    let d = client.lease("dead", one()).await.unwrap().remove(0);
    client.nack("dead", &d.id, &d.lease_id, None).await.unwrap();
    assert_eq!(client.get_message("dead", "d").await.unwrap().state, "dead");
    let err = client
        .enqueue(
            "dead",
            &NewMessage::new("e")
                .id("d")
                .on_conflict(OnConflict::Debounce),
        )
        .await
        .unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(409), Some("invalid_state"))
    );
}
