//! SIGTERM on `delayd serve`: a waiting long-poll lease returns an empty
//! list at once, enqueues that were answered are durable, and the process
//! exits 0 within 10 s. Also the README's "run it with no configuration".

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{bound_addr, wait_healthy, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_ends_waiting_leases_keeps_answered_enqueues_and_exits_0() {
    let data = tempfile::tempdir().unwrap();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let mut server = Server::start(data.path());
    wait_healthy(&http, &server).await;

    let waiting = {
        let (http, url) = (http.clone(), server.url("/v1/queues/waiting/leases"));
        tokio::spawn(async move {
            let response = http
                .post(url)
                .json(&json!({"max": 10, "wait_ms": 30_000}))
                .send()
                .await
                .expect("lease call");
            let status = response.status();
            let body: Value = response.json().await.expect("lease answer");
            (status, body, Instant::now())
        })
    };

    let answered = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut burst = Vec::new();
    for task in 0..8 {
        let (http, base, answered) = (http.clone(), server.url(""), answered.clone());
        burst.push(tokio::spawn(async move {
            for i in 0..1000 {
                let mut body = json!({"payload": format!("task {task} message {i}")});
                if i % 2 == 1 {
                    body["delay_ms"] = json!(3_600_000);
                }
                if i % 3 == 0 {
                    body["id"] = json!(format!("t{task}-{i}"));
                }
                let Ok(response) = http
                    .post(format!("{base}/v1/queues/t/messages"))
                    .json(&body)
                    .send()
                    .await
                else {
                    return;
                };
                if response.status() == reqwest::StatusCode::CREATED {
                    let Ok(answer) = response.json::<Value>().await else {
                        return;
                    };
                    answered
                        .lock()
                        .unwrap()
                        .push(answer["id"].as_str().unwrap().to_owned());
                }
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while answered.lock().unwrap().len() < 200 {
        assert!(Instant::now() < deadline, "enqueues made no progress");
        // Polls: a real server process's progress has no event this test can await.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        !waiting.is_finished(),
        "the lease call should still be waiting"
    );

    let signalled = Instant::now();
    let status = tokio::task::block_in_place(|| server.sigterm_and_wait(Duration::from_secs(10)));
    let status =
        status.unwrap_or_else(|| panic!("no exit within 10 s of SIGTERM; log:\n{}", server.log()));
    assert_eq!(
        status.code(),
        Some(0),
        "exit status; log:\n{}",
        server.log()
    );
    eprintln!("exited {:?} after SIGTERM", signalled.elapsed());

    let (lease_status, lease_body, returned) =
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the waiting lease call should have returned")
            .unwrap();
    assert_eq!(lease_status, 200, "{lease_body}");
    assert_eq!(lease_body, json!({"messages": []}));
    let took = returned.saturating_duration_since(signalled);
    assert!(
        took < Duration::from_secs(5),
        "lease call returned {took:?} after SIGTERM"
    );
    eprintln!("waiting lease call returned {took:?} after SIGTERM");

    for task in burst {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("enqueue tasks end after the exit")
            .unwrap();
    }
    let answered = answered.lock().unwrap().clone();
    assert!(
        answered.len() < 8000,
        "SIGTERM should have cut the burst short"
    );
    eprintln!("{} enqueues answered before the exit", answered.len());

    let server = Server::start(data.path());
    wait_healthy(&http, &server).await;
    let mut missing = Vec::new();
    for id in &answered {
        let response = http
            .get(server.url(&format!("/v1/queues/t/messages/{id}")))
            .send()
            .await
            .unwrap();
        if response.status() != 200 {
            missing.push(id.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {} answered enqueues lost, e.g. {:?}",
        missing.len(),
        answered.len(),
        &missing[..missing.len().min(10)]
    );
}

/// The README's `delayd serve` with no configuration: listens, answers,
/// and keeps its store in `./delayd-data`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_run_command_works_with_no_configuration() {
    let cwd = tempfile::tempdir().unwrap();
    // The README's defaults are 127.0.0.1:7070 (HTTP) and 127.0.0.1:11300
    // (beanstalkd). On a shared machine another server may hold one of
    // them, which would make the test fail for reasons that have nothing to
    // do with delayd; only then is that one port moved, with the environment
    // variable the README's configuration section documents, to a free port
    // (`:0`). Everything else stays unconfigured.
    let mut env = Vec::new();
    if std::net::TcpListener::bind("127.0.0.1:7070").is_err() {
        env.push(("DELAYD_HTTP", "127.0.0.1:0".to_owned()));
    }
    if std::net::TcpListener::bind("127.0.0.1:11300").is_err() {
        env.push(("DELAYD_BEANSTALK", "127.0.0.1:0".to_owned()));
    }
    let mut server = match Server::try_start_with(&[], Some(cwd.path()), &env) {
        Ok(server) => server,
        // Another process took a default port between the check and the
        // start: move both ports.
        Err(log) if log.contains("cannot listen") => {
            env = vec![
                ("DELAYD_HTTP", "127.0.0.1:0".to_owned()),
                ("DELAYD_BEANSTALK", "127.0.0.1:0".to_owned()),
            ];
            Server::start_with(&[], Some(cwd.path()), &env)
        }
        Err(log) => panic!("delayd serve did not start; log:\n{log}"),
    };
    if env.iter().all(|(k, _)| *k != "DELAYD_HTTP") {
        assert_eq!(server.addr, "127.0.0.1:7070".parse().unwrap());
    }
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    wait_healthy(&http, &server).await;

    let response = http
        .post(server.url("/v1/queues/orders/messages"))
        .json(&json!({"payload": "{\"order\": 42}", "delay_ms": 5000}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["created"], true, "{answer}");

    // The beanstalkd listener is on too.
    let line = server
        .log
        .lock()
        .unwrap()
        .iter()
        .find(|l| l.contains("beanstalkd protocol listening"))
        .cloned()
        .unwrap_or_else(|| panic!("no beanstalkd listener; log:\n{}", server.log()));
    let beanstalk = bound_addr(&line).expect("beanstalkd bound address");
    if env.iter().all(|(k, _)| *k != "DELAYD_BEANSTALK") {
        assert_eq!(beanstalk, "127.0.0.1:11300".parse().unwrap());
    }
    std::net::TcpStream::connect(beanstalk).expect("connect to the beanstalkd listener");

    let store = cwd.path().join("delayd-data");
    assert!(store.is_dir(), "{} was not created", store.display());
    assert!(
        std::fs::read_dir(&store).unwrap().next().is_some(),
        "the store directory is empty"
    );
    let status = tokio::task::block_in_place(|| server.sigterm_and_wait(Duration::from_secs(10)));
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "log:\n{}",
        server.log()
    );
}
