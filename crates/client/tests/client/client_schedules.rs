//! The client's schedule methods against a real in-process server over the
//! reference model: what each endpoint answers (status, defaults filled
//! in, revision, pause and resume, trigger, preview), fires arriving as
//! messages on the wall clock, and the tz database gauge in /metrics.

use crate::common;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use delayd_client::wire::{
    CatchupMode, OverlapMode, PreviewBody, ScheduleMessageBody, SchedulePutBody,
};
use delayd_client::{Client, LeaseOptions};
use delayd_core::testkit::ModelBroker;
use delayd_server::ServerOptions;

async fn server() -> Client {
    let url = common::serve(Arc::new(ModelBroker::new()), ServerOptions::default()).await;
    Client::new(&url).expect("client")
}

fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    u64::try_from(since.as_millis()).expect("ms fit u64")
}

fn hourly() -> SchedulePutBody {
    SchedulePutBody::cron("0 * * * *", ScheduleMessageBody::new("tick"))
}

#[tokio::test]
async fn put_creates_fills_defaults_and_replaces() {
    let client = server().await;
    let before = now_ms();
    let put = client.put_schedule("q", "s", &hourly()).await.expect("put");
    assert!(put.created);
    let s = put.schedule;
    assert_eq!((s.id.as_str(), s.queue.as_str()), ("s", "q"));
    assert_eq!(
        (s.cron.as_deref(), s.tz.as_deref()),
        (Some("0 * * * *"), Some("UTC"))
    );
    assert_eq!(s.every_ms, None);
    assert!(s.start_at >= before && s.start_at <= now_ms(), "{s:?}");
    assert_eq!((s.end_at, s.max_fires), (None, None));
    assert_eq!((s.message.priority, s.message.max_attempts), (1024, None));
    assert_eq!(
        (s.catchup.as_str(), s.overlap.as_str()),
        ("latest", "allow")
    );
    assert_eq!((s.catchup_window_ms, s.jitter_ms), (3_600_000, 0));
    assert!(!s.paused);
    assert_eq!((s.revision, s.fires, s.last_fire_at), (1, 0, None));
    assert_eq!(s.next_fires.len(), 5);
    assert_eq!(s.next_fire_at, Some(s.next_fires[0]));
    assert!(s.next_fires.windows(2).all(|w| w[1] - w[0] == 3_600_000));
    assert_eq!(s.next_fires[0] % 3_600_000, 0);

    // The same definition again: 200, nothing changes.
    let again = client.put_schedule("q", "s", &hourly()).await.expect("put");
    assert!(!again.created);
    assert_eq!(again.schedule.revision, 1);
    // A priority spelled as the default is the same definition.
    let mut spelled = hourly();
    spelled.message = spelled.message.priority(1024);
    let same = client.put_schedule("q", "s", &spelled).await.expect("put");
    assert_eq!(same.schedule.revision, 1);

    // A change without start_at keeps the current start_at.
    let changed = hourly()
        .catchup(CatchupMode::All)
        .overlap(OverlapMode::Skip)
        .jitter_ms(500);
    let replaced = client.put_schedule("q", "s", &changed).await.expect("put");
    assert!(!replaced.created);
    let r = replaced.schedule;
    assert_eq!((r.revision, r.start_at), (2, s.start_at));
    assert_eq!(
        (r.catchup.as_str(), r.overlap.as_str(), r.jitter_ms),
        ("all", "skip", 500)
    );
    assert!(r.updated_at >= s.updated_at);
}

#[tokio::test]
async fn get_list_delete_and_not_found() {
    let client = server().await;
    for id in ["b", "a", "c"] {
        client.put_schedule("q", id, &hourly()).await.expect("put");
    }
    let ids: Vec<String> = client
        .list_schedules("q")
        .await
        .expect("list")
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert_eq!(client.get_schedule("q", "b").await.expect("get").id, "b");
    client.delete_schedule("q", "b").await.expect("delete");
    let err = client.get_schedule("q", "b").await.unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(404), Some("schedule_not_found"))
    );
    let err = client.delete_schedule("q", "b").await.unwrap_err();
    assert_eq!(err.code(), Some("schedule_not_found"));
    let err = client.list_schedules("nope").await.unwrap_err();
    assert_eq!(err.code(), Some("queue_not_found"));
    let err = client
        .put_schedule("q", "a:b", &hourly())
        .await
        .unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(400), Some("invalid_argument"))
    );
}

#[tokio::test]
async fn pause_resume_and_trigger() {
    let client = server().await;
    let body = hourly().max_fires(3);
    client.put_schedule("q", "s", &body).await.expect("put");
    let paused = client.pause_schedule("q", "s").await.expect("pause");
    assert!(paused.paused);
    assert_eq!((paused.revision, paused.next_fire_at), (2, None));
    assert!(paused.next_fires.is_empty());
    let still = client.pause_schedule("q", "s").await.expect("pause");
    assert_eq!(
        still.revision, 2,
        "pausing a paused schedule changes nothing"
    );
    let resumed = client.resume_schedule("q", "s").await.expect("resume");
    assert!(!resumed.paused);
    assert_eq!(resumed.revision, 3);
    assert!(resumed.next_fire_at.is_some());
    assert_eq!(resumed.next_fires.len(), 3, "bounded by max_fires");

    let before = now_ms();
    let done = client.trigger_schedule("q", "s").await.expect("trigger");
    assert!(done.created);
    let at: u64 = done
        .id
        .strip_prefix("s:manual:")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("manual id: {}", done.id));
    assert!(at >= before && at <= now_ms());
    let message = client.get_message("q", &done.id).await.expect("message");
    assert_eq!(message.payload.as_bytes(), b"tick");
    assert_eq!(
        message.headers.get("delayd-schedule").map(String::as_str),
        Some("s")
    );
    let after = client.get_schedule("q", "s").await.expect("get");
    assert_eq!(after.fires, 0, "a trigger is not a fire");
}

#[tokio::test]
async fn every_ms_fires_arrive_as_messages() {
    let client = server().await;
    let start_at = now_ms() + 200;
    let body = SchedulePutBody::every_ms(1000, ScheduleMessageBody::new("beat").header("k", "v"))
        .start_at(start_at)
        .max_fires(1);
    client.put_schedule("q", "beat", &body).await.expect("put");
    let options = LeaseOptions {
        max: 1,
        wait_ms: 5_000,
        lease_ms: None,
    };
    let leased = client.lease("q", options).await.expect("lease");
    assert_eq!(leased.len(), 1, "the first fire within 5 s");
    let fired = &leased[0];
    assert_eq!(fired.id, format!("beat:{start_at}"));
    assert_eq!(fired.deliver_at, start_at);
    let scheduled_for = start_at.to_string();
    assert_eq!(
        fired.headers.get("delayd-scheduled-for"),
        Some(&scheduled_for)
    );
    assert_eq!(fired.headers.get("k").map(String::as_str), Some("v"));
    let s = client.get_schedule("q", "beat").await.expect("get");
    assert_eq!(
        (s.fires, s.last_fire_at, s.next_fire_at),
        (1, Some(start_at), None)
    );
}

#[tokio::test]
async fn preview_computes_fire_times() {
    let client = server().await;
    let every = PreviewBody {
        every_ms: Some(1000),
        start_at: Some(5_000),
        count: Some(3),
        ..PreviewBody::default()
    };
    assert_eq!(
        client.preview_schedule(&every).await.expect("preview"),
        [5_000, 6_000, 7_000]
    );
    // 09:00 in Paris is 08:00 UTC in January (CET) and 07:00 in July (CEST).
    let paris = |start_at| PreviewBody {
        cron: Some("0 9 * * *".into()),
        tz: Some("Europe/Paris".into()),
        start_at: Some(start_at),
        count: Some(1),
        ..PreviewBody::default()
    };
    let jan_1_2026 = 1_767_225_600_000;
    let jul_1_2026 = 1_782_864_000_000;
    let hour = 3_600_000;
    let winter = client
        .preview_schedule(&paris(jan_1_2026))
        .await
        .expect("preview");
    assert_eq!(winter, [jan_1_2026 + 8 * hour]);
    let summer = client
        .preview_schedule(&paris(jul_1_2026))
        .await
        .expect("preview");
    assert_eq!(summer, [jul_1_2026 + 7 * hour]);
    // docs/api.md's example.
    let new_york = PreviewBody {
        cron: Some("0 9 * * MON-FRI".into()),
        tz: Some("America/New_York".into()),
        start_at: Some(jan_1_2026),
        count: Some(3),
        ..PreviewBody::default()
    };
    assert_eq!(
        client.preview_schedule(&new_york).await.expect("preview"),
        [1_767_276_000_000, 1_767_362_400_000, 1_767_621_600_000]
    );
    let default_count = PreviewBody {
        cron: Some("@hourly".into()),
        ..PreviewBody::default()
    };
    let fires = client
        .preview_schedule(&default_count)
        .await
        .expect("preview");
    assert_eq!(fires.len(), 10);
    assert!(fires[0] >= now_ms() - 1000 && fires[0] <= now_ms() + hour);
    let too_many = PreviewBody {
        count: Some(101),
        ..default_count
    };
    let err = client.preview_schedule(&too_many).await.unwrap_err();
    assert_eq!(err.code(), Some("invalid_argument"));
}

#[tokio::test]
async fn metrics_report_the_tz_database() {
    let client = server().await;
    let text = client.metrics().await.expect("metrics");
    let line = format!(
        "delayd_tzdb_info{{version=\"{}\"}} 1",
        delayd_core::TZDB_VERSION
    );
    assert!(text.contains(&line), "{line} missing from:\n{text}");
}
