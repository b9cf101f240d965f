//! Scoped tokens over a real server (api.md "Scoped tokens"): each role's
//! token may do what its scopes say and gets 403 `forbidden`, naming the
//! verb and the queue, for the rest; the queue list shows what it may
//! read; `/metrics` needs `read:*`; a replaced file takes effect at the
//! next request; the wrong header form is 401.

use delayd_server::{token_digest, ScopedTokens, ServerOptions, TokenFile};
use serde_json::{json, Value};

use crate::common::{self, Reply, Server};

const ADMIN: &str = "full-access-secret";
const PRODUCER: &str = "producer-secret";
const WORKER: &str = "worker-secret";
const OPERATOR: &str = "operator-secret";
const VIEWER: &str = "viewer-secret";

fn entry(name: &str, secret: &str, scopes: &[&str]) -> String {
    let scopes: Vec<String> = scopes.iter().map(|s| format!("{s:?}")).collect();
    format!(
        "[[token]]\nname = {name:?}\nsha256 = \"{}\"\nscopes = [{}]\n",
        hex(&token_digest(secret.as_bytes())),
        scopes.join(", ")
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn roles() -> TokenFile {
    let text = [
        entry("producer", PRODUCER, &["publish:orders"]),
        entry("worker", WORKER, &["consume:orders", "read:orders"]),
        entry("operator", OPERATOR, &["manage:*", "read:*"]),
        entry("viewer", VIEWER, &["read:orders*"]),
    ]
    .join("\n");
    TokenFile::parse(&text).expect("a valid token file")
}

async fn start(scoped: ScopedTokens) -> Server {
    let options = ServerOptions {
        tokens: vec![ADMIN.into()],
        scoped_tokens: Some(scoped),
        ..ServerOptions::default()
    };
    common::start(common::model(), options).await
}

async fn as_token(s: &Server, token: &str, method: &str, path: &str, body: Option<Value>) -> Reply {
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let auth = format!("Bearer {token}");
    s.raw(method, path, bytes, &[("authorization", &auth)])
        .await
}

fn assert_forbidden(reply: &Reply, verb: &str, queue: &str) {
    assert_eq!(reply.status, 403, "{}", reply.body);
    assert_eq!(reply.code(), "forbidden");
    let message = reply.body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(verb) && message.contains(&format!("{queue:?}")),
        "{message} names neither {verb} nor {queue}"
    );
}

#[tokio::test]
async fn each_role_may_do_what_its_scopes_say_and_no_more() {
    let s = start(ScopedTokens::new(roles())).await;
    for queue in ["orders", "billing"] {
        let r = as_token(
            &s,
            ADMIN,
            "PUT",
            &format!("/v1/queues/{queue}"),
            Some(json!({})),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let enqueue = json!({"id": "m1", "payload": "p"});
    let r = as_token(
        &s,
        PRODUCER,
        "POST",
        "/v1/queues/orders/messages",
        Some(enqueue.clone()),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = as_token(
        &s,
        PRODUCER,
        "POST",
        "/v1/queues/billing/messages",
        Some(enqueue.clone()),
    )
    .await;
    assert_forbidden(&r, "publish", "billing");
    let r = as_token(&s, PRODUCER, "GET", "/v1/queues/orders/messages/m1", None).await;
    assert_forbidden(&r, "read", "orders");
    let r = as_token(&s, PRODUCER, "DELETE", "/v1/queues/orders", None).await;
    assert_forbidden(&r, "admin", "orders");

    let r = as_token(
        &s,
        WORKER,
        "POST",
        "/v1/queues/orders/leases",
        Some(json!({"max": 1})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let lease_id = r.body["messages"][0]["lease_id"]
        .as_str()
        .expect("leased")
        .to_owned();
    let r = as_token(&s, WORKER, "GET", "/v1/queues/orders/messages/m1", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = as_token(
        &s,
        WORKER,
        "POST",
        "/v1/queues/orders/messages",
        Some(enqueue),
    )
    .await;
    assert_forbidden(&r, "publish", "orders");
    let r = as_token(&s, WORKER, "DELETE", "/v1/queues/orders/messages/m1", None).await;
    assert_forbidden(&r, "manage", "orders");
    let ack = json!({"lease_id": lease_id});
    let r = as_token(
        &s,
        WORKER,
        "POST",
        "/v1/queues/orders/messages/m1/ack",
        Some(ack),
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.body);

    let r = as_token(&s, OPERATOR, "POST", "/v1/queues/billing/pause", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = as_token(
        &s,
        OPERATOR,
        "PUT",
        "/v1/queues/billing",
        Some(json!({"lease_ms": 1000})),
    )
    .await;
    assert_forbidden(&r, "admin", "billing");

    let r = as_token(&s, VIEWER, "GET", "/v1/queues/orders/dead", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = as_token(
        &s,
        VIEWER,
        "POST",
        "/v1/queues/orders/dead/redrive",
        Some(json!({})),
    )
    .await;
    assert_forbidden(&r, "manage", "orders");
    // A refused request changed nothing: billing is paused, its config kept.
    let r = as_token(&s, ADMIN, "GET", "/v1/queues/billing", None).await;
    assert_eq!(
        (
            r.body["paused"].clone(),
            r.body["config"]["lease_ms"].clone()
        ),
        (json!(true), json!(30000))
    );
    s.stop().await.unwrap();
}

#[tokio::test]
async fn the_queue_list_shows_only_what_the_token_may_read() {
    let s = start(ScopedTokens::new(roles())).await;
    for queue in ["orders", "orders-eu", "billing"] {
        as_token(
            &s,
            ADMIN,
            "PUT",
            &format!("/v1/queues/{queue}"),
            Some(json!({})),
        )
        .await;
    }
    let names = |reply: &Reply| -> Vec<String> {
        reply.body["queues"]
            .as_array()
            .expect("a list")
            .iter()
            .map(|q| q["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let r = as_token(&s, VIEWER, "GET", "/v1/queues", None).await;
    assert_eq!(names(&r), ["orders", "orders-eu"]);
    let r = as_token(&s, PRODUCER, "GET", "/v1/queues", None).await;
    assert_eq!(r.status, 200);
    assert!(names(&r).is_empty(), "publish is not read: {:?}", names(&r));
    let r = as_token(&s, ADMIN, "GET", "/v1/queues", None).await;
    assert_eq!(names(&r).len(), 3);
    s.stop().await.unwrap();
}

#[tokio::test]
async fn metrics_need_read_on_every_queue() {
    let s = start(ScopedTokens::new(roles())).await;
    let r = as_token(&s, VIEWER, "GET", "/metrics", None).await;
    assert_eq!(r.status, 403, "read:orders* is not read:*");
    assert_eq!(r.code(), "forbidden");
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("read:*"));
    assert_eq!(
        as_token(&s, OPERATOR, "GET", "/metrics", None).await.status,
        200
    );
    assert_eq!(s.call("GET", "/metrics", None).await.status, 401);
    assert_eq!(s.call("GET", "/healthz", None).await.status, 200);
    s.stop().await.unwrap();
}

#[tokio::test]
async fn whoami_names_the_token_and_its_scopes() {
    let s = start(ScopedTokens::new(roles())).await;
    let r = as_token(&s, WORKER, "GET", "/v1/whoami", None).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body,
        json!({"name": "worker", "scopes": ["consume:orders", "read:orders"], "auth": true})
    );
    let r = as_token(&s, ADMIN, "GET", "/v1/whoami", None).await;
    assert_eq!(
        r.body,
        json!({"name": null, "scopes": ["*:*"], "auth": true})
    );
    assert_eq!(s.call("GET", "/v1/whoami", None).await.status, 401);
    s.stop().await.unwrap();
    let open = common::start_default().await;
    let r = open.call("GET", "/v1/whoami", None).await;
    assert_eq!(
        r.body,
        json!({"name": null, "scopes": ["*:*"], "auth": false})
    );
    open.stop().await.unwrap();
}

#[tokio::test]
async fn a_replaced_token_file_takes_effect_at_the_next_request() {
    let handle = ScopedTokens::new(roles());
    let s = start(handle.clone()).await;
    assert_eq!(
        as_token(&s, VIEWER, "GET", "/v1/queues", None).await.status,
        200
    );
    // Rotation: the new viewer token is added, then the old one removed.
    let rotated = [
        entry("viewer", VIEWER, &["read:orders*"]),
        entry("viewer-2", "viewer-secret-2", &["read:orders*"]),
    ]
    .join("\n");
    handle.replace(TokenFile::parse(&rotated).expect("valid"));
    assert_eq!(
        as_token(&s, VIEWER, "GET", "/v1/queues", None).await.status,
        200
    );
    assert_eq!(
        as_token(&s, "viewer-secret-2", "GET", "/v1/queues", None)
            .await
            .status,
        200
    );
    assert_eq!(
        as_token(&s, PRODUCER, "GET", "/v1/queues", None)
            .await
            .status,
        401
    );
    let text = entry("viewer-2", "viewer-secret-2", &["read:orders*"]);
    handle.replace(TokenFile::parse(&text).expect("valid"));
    let r = as_token(&s, VIEWER, "GET", "/v1/queues", None).await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"));
    assert_eq!(
        as_token(&s, ADMIN, "GET", "/v1/queues", None).await.status,
        200,
        "--token stays"
    );
    s.stop().await.unwrap();
}

#[tokio::test]
async fn a_token_in_the_wrong_header_form_is_401() {
    let s = start(ScopedTokens::new(roles())).await;
    let forms: [(&str, String); 5] = [
        ("authorization", format!("Token {VIEWER}")),
        ("authorization", VIEWER.to_owned()),
        ("authorization", "Bearer".to_owned()),
        ("authorization", format!("Basic {VIEWER}")),
        ("x-api-key", VIEWER.to_owned()),
    ];
    for (name, value) in &forms {
        let r = s
            .raw("GET", "/v1/queues", Vec::new(), &[(name, value.as_str())])
            .await;
        assert_eq!(
            (r.status, r.code()),
            (401, "unauthorized"),
            "{name}: {value}"
        );
    }
    let r = s
        .call("GET", &format!("/v1/queues?token={VIEWER}"), None)
        .await;
    assert_eq!(r.status, 401);
    // The secret's digest is not the secret.
    let digest = hex(&token_digest(VIEWER.as_bytes()));
    assert_eq!(
        as_token(&s, &digest, "GET", "/v1/queues", None)
            .await
            .status,
        401
    );
    s.stop().await.unwrap();
}

/// The document says which routes can answer 403 and what they need.
#[tokio::test]
async fn the_openapi_document_describes_the_403() {
    let s = common::start_default().await;
    let document = s.call("GET", "/openapi.json", None).await.body;
    let answer = |path: &str, method: &str| {
        document["paths"][path][method]["responses"]["403"]["description"].clone()
    };
    let publish = answer("/v1/queues/{queue}/messages", "post");
    assert!(
        publish
            .as_str()
            .unwrap_or_default()
            .contains("publish:GLOB"),
        "{publish}"
    );
    assert!(answer("/metrics", "get")
        .as_str()
        .unwrap_or_default()
        .contains("read:*"));
    assert_eq!(answer("/v1/whoami", "get"), Value::Null);
    assert!(document["paths"]["/v1/whoami"]["get"].is_object());
    s.stop().await.unwrap();
}
