//! Recurring schedules (api.md, "Schedules" and "Precise rules >
//! Schedules"), through the `Broker` trait only. These cases run on real
//! time and on virtual time; those that move the wall clock are in
//! `schedules_wall`.

use std::sync::Arc;

use super::schedule_support::{
    assert_schedule_not_found, check_fired, collect_count, collect_until, cron, every,
    get_schedule, lease_fired, lease_fired_max, put_schedule, sid, tick_until, times_of,
    written_ahead, Fired, HOUR_MS,
};
use crate::broker::{Broker, Upsert};
use crate::message::{EnqueueOptions, MessageState, Nack};
use crate::recurring::{jitter, Overlap, HEADER_SCHEDULE, HEADER_SCHEDULED_FOR};
use crate::testkit::support::{self as s, SLACK_MS};

/// `every_ms` fires at `start_at + k * every_ms`, each message on time
/// (within [`SLACK_MS`]) and never before; the record counts the fires.
pub async fn schedule_every_fires_on_time(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_every_fires_on_time", "q");
    let id = sid("tick");
    let start_at = s::now_ms() + 500;
    let (upsert, record) = put_schedule(&b, &q, &id, every(1_000, start_at)).await;
    assert_eq!(upsert, Upsert::Created);
    assert_eq!((record.fires, record.next_fire_at), (0, Some(start_at)));
    let fired = collect_count(&b, &q, 3, 3_000 + 3 * SLACK_MS).await;
    let times = times_of(&fired, &id);
    assert_eq!(times, [start_at, start_at + 1_000, start_at + 2_000]);
    for f in &fired {
        assert_eq!(f.delivery.deliver_at, f.t, "no jitter: deliver_at is t");
        assert!(
            f.leased_at <= f.t + SLACK_MS,
            "fire {} leased {} ms late",
            f.t,
            f.leased_at - f.t
        );
    }
    let record = get_schedule(&b, &q, &id).await;
    assert!(record.fires >= 3, "fires counts enqueued fires: {record:?}");
    let last = record.last_fire_at.expect("last_fire_at after fires");
    assert_eq!(last, start_at + (record.fires - 1) * 1_000, "{record:?}");
    assert_eq!(record.next_fire_at, Some(last + 1_000), "{record:?}");
}

/// A 6-field cron fires on whole seconds in UTC, on time; a 5-field one's
/// cursor is a whole minute.
pub async fn schedule_cron_fires(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_cron_fires", "q");
    let id = sid("secs");
    let now = s::now_ms();
    put_schedule(&b, &q, &id, cron("* * * * * *", "UTC", now)).await;
    let fired = collect_count(&b, &q, 2, 2_000 + 2 * SLACK_MS).await;
    let times = times_of(&fired, &id);
    assert!(times[0] >= now, "fired {} before creation {now}", times[0]);
    assert_eq!(times[0] % 1_000, 0, "cron times are whole seconds");
    assert_eq!(times[1], times[0] + 1_000, "consecutive seconds");
    for f in &fired {
        assert!(f.leased_at <= f.t + SLACK_MS, "fire {} late", f.t);
    }
    let minutes = sid("minutes");
    let (_, record) = put_schedule(&b, &q, &minutes, cron("*/5 * * * *", "UTC", now)).await;
    let next = record.next_fire_at.expect("a cursor");
    assert!(next >= now && next < now + 300_000 && next % 300_000 == 0);
}

/// PUT creates (`Created`, revision 1) and creates the queue; the same
/// definition again is `Updated` with the record unchanged; a changed one
/// is a new revision that takes effect from the PUT while `fires` keeps
/// counting.
pub async fn schedule_put_creates_and_replaces(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_put_creates_and_replaces", "q");
    let id = sid("s");
    let start_at = s::now_ms() + 200;
    let (upsert, created) = put_schedule(&b, &q, &id, every(1_000, start_at)).await;
    assert_eq!(
        (upsert, created.revision, created.fires),
        (Upsert::Created, 1, 0)
    );
    assert_eq!(
        (created.queue.clone(), created.id.clone()),
        (q.clone(), id.clone())
    );
    s::must(b.get_queue(&q).await, "put_schedule creates the queue");
    let fired = collect_count(&b, &q, 2, 2_000 + 2 * SLACK_MS).await;
    assert_eq!(times_of(&fired, &id), [start_at, start_at + 1_000]);

    let (upsert, same) = put_schedule(&b, &q, &id, every(1_000, start_at)).await;
    assert_eq!(upsert, Upsert::Updated);
    assert_eq!(same.revision, 1, "the same definition keeps the revision");
    assert_eq!(get_schedule(&b, &q, &id).await.revision, 1);

    let replaced_at = s::now_ms();
    let (upsert, changed) = put_schedule(&b, &q, &id, every(1_500, start_at)).await;
    let after_put = s::now_ms();
    assert_eq!((upsert, changed.revision), (Upsert::Updated, 2));
    assert!(changed.fires >= 2, "fires keeps counting: {changed:?}");
    let next = changed.next_fire_at.expect("a cursor");
    assert!(next >= replaced_at, "a change takes effect from the PUT");
    assert_eq!((next - start_at) % 1_500, 0, "the new period, same anchor");
    let fires_before = changed.fires;
    let fired = collect_count(&b, &q, 1, 1_500 + 2 * SLACK_MS).await;
    let t = fired[0].t;
    assert!(
        t >= replaced_at && (t - start_at).is_multiple_of(1_500),
        "fire {t}"
    );
    assert!(
        t <= after_put + 1_500,
        "fire {t}: not the first after the PUT"
    );
    let record = get_schedule(&b, &q, &id).await;
    assert!(record.fires > fires_before, "{record:?}");
    let listed = s::must(b.list_schedules(&q).await, "list_schedules");
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].id.clone(), listed[0].revision), (id, 2));
}

/// Unknown queue: every schedule call is `QueueNotFound` (and creates
/// nothing); unknown schedule in a known queue: `ScheduleNotFound`.
pub async fn schedule_unknown_errors(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_unknown_errors", "q");
    let id = sid("nope");
    s::assert_queue_not_found(b.get_schedule(&q, &id).await, "get_schedule");
    s::assert_queue_not_found(b.list_schedules(&q).await, "list_schedules");
    s::assert_queue_not_found(b.delete_schedule(&q, &id).await, "delete_schedule");
    let paused = b.set_schedule_paused(&q, &id, true).await;
    s::assert_queue_not_found(paused, "set_schedule_paused");
    s::assert_queue_not_found(b.trigger_schedule(&q, &id).await, "trigger_schedule");
    s::assert_queue_not_found(b.get_queue(&q).await, "the queue was created");

    s::make_queue(&b, &q, 10).await;
    assert_schedule_not_found(b.get_schedule(&q, &id).await, "get_schedule");
    assert_schedule_not_found(b.delete_schedule(&q, &id).await, "delete_schedule");
    for paused in [true, false] {
        let r = b.set_schedule_paused(&q, &id, paused).await;
        assert_schedule_not_found(r, "set_schedule_paused");
    }
    assert_schedule_not_found(b.trigger_schedule(&q, &id).await, "trigger_schedule");
    let listed = s::must(b.list_schedules(&q).await, "list_schedules");
    assert!(listed.is_empty(), "no schedules: {listed:?}");
}

/// `trigger` enqueues one message now, id `<sid>:manual:<now>`, with the
/// template and `delayd-schedule` but no fire time; it is not a fire.
pub async fn schedule_trigger_is_not_a_fire(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_trigger_is_not_a_fire", "q");
    let id = sid("trig");
    let start_at = s::now_ms() + 2_000;
    let mut def = every(1_000, start_at);
    def.max_fires = Some(1);
    put_schedule(&b, &q, &id, def).await;
    let before = s::now_ms();
    let out = s::must(b.trigger_schedule(&q, &id).await, "trigger_schedule");
    let after = s::now_ms();
    assert!(out.created, "{out:?}");
    let at: u64 = out
        .id
        .as_str()
        .strip_prefix("trig:manual:")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("trigger id {} is not <sid>:manual:<now>", out.id));
    assert!((before..=after).contains(&at), "trigger time {at} not now");
    assert_eq!(out.deliver_at, at, "a trigger delivers now");
    let mut got = lease_fired_max(&b, &q, 1, 0).await;
    assert_eq!(got.len(), 1, "the triggered message is ready: {got:?}");
    let d = got.remove(0);
    assert_eq!(d.id, out.id);
    s::must(b.ack(&q, &d.id, &d.lease_id).await, "ack");
    assert_eq!(
        d.headers.get(HEADER_SCHEDULE).map(String::as_str),
        Some("trig")
    );
    assert!(!d.headers.contains_key(HEADER_SCHEDULED_FOR), "{d:?}");
    assert_eq!(d.payload, b"tick", "the template's payload");
    assert_eq!(d.headers.get("kind").map(String::as_str), Some("test"));
    let record = get_schedule(&b, &q, &id).await;
    assert_eq!((record.fires, record.last_fire_at), (0, None), "not a fire");
    // Nor does it count against max_fires 1: the one fire still comes.
    let fired = collect_count(&b, &q, 1, 2_000 + SLACK_MS).await;
    assert_eq!(fired[0].t, start_at);
    let record = get_schedule(&b, &q, &id).await;
    assert_eq!((record.fires, record.next_fire_at), (1, None), "{record:?}");
}

/// Deleting a schedule keeps the messages it enqueued and stops it; a
/// second delete is `ScheduleNotFound`.
pub async fn schedule_delete_keeps_messages(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_delete_keeps_messages", "q");
    let id = sid("gone");
    let start_at = s::now_ms() + 200;
    put_schedule(&b, &q, &id, every(1_000, start_at)).await;
    let mut got = lease_fired_max(&b, &q, 1, 1_000 + SLACK_MS).await;
    assert_eq!(got.len(), 1, "the first fire: {got:?}");
    let first = check_fired(got.remove(0));
    assert_eq!(first.t, start_at);
    s::must(b.delete_schedule(&q, &id).await, "delete_schedule");
    assert_schedule_not_found(b.get_schedule(&q, &id).await, "get after delete");
    assert_schedule_not_found(b.delete_schedule(&q, &id).await, "second delete");
    assert!(s::must(b.list_schedules(&q).await, "list").is_empty());
    let kept = s::get(&b, &q, &first.delivery.id).await;
    assert_eq!(kept.deliver_at, start_at, "the enqueued message stays");
    let later = collect_until(&b, &q, s::now_ms() + 2_500).await;
    assert!(later.is_empty(), "a deleted schedule fired: {later:?}");
    s::must(
        b.ack(&q, &first.delivery.id, &first.delivery.lease_id)
            .await,
        "ack",
    );
}

/// Deleting the queue deletes its schedules: after re-creating the queue
/// there are none, and nothing fires into it.
pub async fn schedule_delete_queue_deletes_schedules(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_delete_queue_deletes_schedules", "q");
    let id = sid("s");
    put_schedule(&b, &q, &id, every(1_000, s::now_ms() + 500)).await;
    s::must(b.delete_queue(&q).await, "delete_queue");
    s::assert_queue_not_found(b.get_schedule(&q, &id).await, "get_schedule");
    s::assert_queue_not_found(b.list_schedules(&q).await, "list_schedules");
    s::make_queue(&b, &q, 10).await;
    assert_schedule_not_found(b.get_schedule(&q, &id).await, "schedule came back");
    assert!(s::must(b.list_schedules(&q).await, "list").is_empty());
    let fired = collect_until(&b, &q, s::now_ms() + 2_000).await;
    assert!(
        fired.is_empty(),
        "a deleted queue's schedule fired: {fired:?}"
    );
}

/// Pausing stops firing (the record has no cursor, a new revision; pausing
/// again changes nothing); resuming does not fire the paused-over times.
pub async fn schedule_pause_and_resume(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_pause_and_resume", "q");
    let id = sid("p");
    let start_at = s::now_ms() + 300;
    put_schedule(&b, &q, &id, every(1_000, start_at)).await;
    let paused = s::must(b.set_schedule_paused(&q, &id, true).await, "pause");
    assert!(paused.definition.paused, "{paused:?}");
    assert_eq!((paused.revision, paused.next_fire_at), (2, None));
    let again = s::must(b.set_schedule_paused(&q, &id, true).await, "pause again");
    assert_eq!(again.revision, 2, "already paused: unchanged");
    let fired = collect_until(&b, &q, start_at + 2_500).await;
    assert!(fired.is_empty(), "fired while paused: {fired:?}");
    assert_eq!(get_schedule(&b, &q, &id).await.fires, 0);
    let resumed_at = s::now_ms();
    let resumed = s::must(b.set_schedule_paused(&q, &id, false).await, "resume");
    assert!(!resumed.definition.paused);
    assert_eq!(resumed.revision, 3);
    let next = resumed.next_fire_at.expect("a cursor after resume");
    assert!(next >= resumed_at, "resume fires no paused-over time");
    let fired = collect_count(&b, &q, 1, 1_000 + 2 * SLACK_MS).await;
    assert!(
        fired[0].t >= resumed_at,
        "fired {} from before the resume",
        fired[0].t
    );
    assert_eq!((fired[0].t - start_at) % 1_000, 0, "a fire time");
}

/// `put_schedule` with `auto_create: false` on an unknown queue is
/// `QueueNotFound` and creates nothing. (Over HTTP this is a server option,
/// so it runs in `conformance_tests_schedules_extended!`.)
pub async fn schedule_put_without_auto_create(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_put_without_auto_create", "q");
    let id = sid("s");
    let options = EnqueueOptions { auto_create: false };
    let def = every(1_000, s::now_ms());
    let r = b.put_schedule(&q, &id, def.clone(), options).await;
    s::assert_queue_not_found(r, "put_schedule on an unknown queue");
    s::assert_queue_not_found(b.get_queue(&q).await, "the queue was created");
    s::make_queue(&b, &q, 10).await;
    let (upsert, _) = s::must(b.put_schedule(&q, &id, def, options).await, "put");
    assert_eq!(upsert, Upsert::Created, "an existing queue works");
}

/// `end_at`: no fire at or after it; `max_fires`: no more than that many.
/// Either way the schedule finishes (`next_fire_at` none).
pub async fn schedule_end_at_and_max_fires(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_end_at_and_max_fires", "q");
    let (ending, capped) = (sid("ending"), sid("capped"));
    let start_at = s::now_ms() + 300;
    let mut def = every(1_000, start_at);
    def.end_at = Some(start_at + 2_000);
    put_schedule(&b, &q, &ending, def).await;
    let mut def = every(1_000, start_at);
    def.max_fires = Some(2);
    put_schedule(&b, &q, &capped, def).await;
    let fired = collect_until(&b, &q, start_at + 3_500 + SLACK_MS).await;
    let two = [start_at, start_at + 1_000];
    assert_eq!(times_of(&fired, &ending), two, "none at end_at or later");
    assert_eq!(times_of(&fired, &capped), two, "max_fires 2");
    for (id, fires) in [(&ending, 2), (&capped, 2)] {
        let record = get_schedule(&b, &q, id).await;
        assert_eq!(record.fires, fires, "{record:?}");
        assert_eq!(record.next_fire_at, None, "finished: {record:?}");
        assert!(record.next_fires().is_empty(), "{record:?}");
    }
}

/// `overlap: skip`: while the previous fire's message is leased, fire
/// times enqueue nothing (and do not count); once it is dead, they do.
pub async fn schedule_overlap_skip(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_overlap_skip", "q");
    s::make_queue(&b, &q, 1).await;
    let id = sid("skip");
    let start_at = s::now_ms() + 300;
    let mut def = every(1_000, start_at);
    def.overlap = Overlap::Skip;
    put_schedule(&b, &q, &id, def).await;
    let mut got = lease_fired_max(&b, &q, 1, 1_000 + SLACK_MS).await;
    assert_eq!(got.len(), 1, "the first fire: {got:?}");
    let first = check_fired(got.remove(0));
    assert_eq!(first.t, start_at);
    // Held leased across two fire times, checked well after the first.
    tick_until(start_at + 2_500).await;
    let skipped = id.fire_message_id(start_at + 1_000);
    s::assert_not_found(b.get(&q, &skipped).await, "a skipped fire");
    assert!(lease_fired(&b, &q, 0).await.is_empty(), "a skipped fire");
    assert_eq!(
        get_schedule(&b, &q, &id).await.fires,
        1,
        "skips do not count"
    );
    // Out of attempts (queue max_attempts 1): dead, which does not block.
    let nack = Nack {
        delay_ms: Some(0),
        ..Nack::default()
    };
    let d = &first.delivery;
    s::must(b.nack(&q, &d.id, &d.lease_id, nack).await, "nack");
    let dead_at = s::now_ms();
    assert_eq!(s::get(&b, &q, &d.id).await.state, MessageState::Dead);
    let next = collect_count(&b, &q, 1, 1_000 + 2 * SLACK_MS).await;
    let t = next[0].t;
    assert!(t >= start_at + 2_000, "fire {t} was skipped earlier");
    assert!(t <= dead_at + 1_000, "fire {t}: a dead message blocked");
    assert_eq!(get_schedule(&b, &q, &id).await.fires, 2);
}

/// Jitter: each fire's `deliver_at` is `t` plus `[0, jitter_ms)`, the same
/// for the same schedule id and `t` (in two queues), and the message is
/// not leased before it.
pub async fn schedule_jitter(b: Arc<dyn Broker>) {
    let (q1, q2) = (
        s::queue("schedule_jitter", "one"),
        s::queue("schedule_jitter", "two"),
    );
    let id = sid("jittery");
    let start_at = s::now_ms() + 300;
    let mut def = every(1_000, start_at);
    def.jitter_ms = 800;
    put_schedule(&b, &q1, &id, def.clone()).await;
    put_schedule(&b, &q2, &id, def).await;
    let within = 3_800 + 3 * SLACK_MS;
    let (one, two) = tokio::join!(
        collect_count(&b, &q1, 3, within),
        collect_count(&b, &q2, 3, within)
    );
    let at = |fired: &[Fired]| -> Vec<(u64, u64)> {
        let mut v: Vec<_> = fired.iter().map(|f| (f.t, f.delivery.deliver_at)).collect();
        v.sort_unstable();
        v
    };
    let (one, two) = (at(&one), at(&two));
    assert_eq!(one, two, "jitter depends on the schedule id and t only");
    let times: Vec<u64> = one.iter().map(|(t, _)| *t).collect();
    assert_eq!(times, [start_at, start_at + 1_000, start_at + 2_000]);
    for (t, deliver_at) in one {
        assert!(deliver_at - t < 800, "jitter {} of {t}", deliver_at - t);
        assert_eq!(deliver_at, t + jitter(&id, t, 800), "the documented jitter");
    }
}

/// Fire times before the schedule's creation are never enqueued, even
/// with `start_at` in the past and `catchup: all`.
pub async fn schedule_start_in_the_past(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_start_in_the_past", "q");
    let id = sid("late");
    let created_at = s::now_ms();
    let start_at = created_at - 5_500;
    let mut def = every(1_000, start_at);
    def.catchup = crate::recurring::Catchup::All;
    let (_, record) = put_schedule(&b, &q, &id, def).await;
    let next = record.next_fire_at.expect("a cursor");
    assert!(
        next >= created_at,
        "cursor {next} before creation {created_at}"
    );
    assert_eq!(
        (next - start_at) % 1_000,
        0,
        "cursor {next} not a fire time"
    );
    let fired = collect_count(&b, &q, 2, 2_000 + 2 * SLACK_MS).await;
    let times = times_of(&fired, &id);
    assert!(
        times[0] >= created_at,
        "fired {times:?} from before creation"
    );
    assert_eq!(times[1], times[0] + 1_000, "{times:?}");
}

/// Pausing the queue does not pause its schedules: fired messages wait in
/// the paused queue and are leased after it resumes.
pub async fn schedule_fires_into_paused_queue(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_fires_into_paused_queue", "q");
    s::make_queue(&b, &q, 10).await;
    s::must(b.pause(&q, None).await, "pause");
    let id = sid("s");
    let start_at = s::now_ms() + 200;
    put_schedule(&b, &q, &id, every(1_000, start_at)).await;
    tick_until(start_at + 1_000 + SLACK_MS).await;
    assert!(
        lease_fired(&b, &q, 0).await.is_empty(),
        "a paused queue leased"
    );
    let info = s::must(b.get_queue(&q).await, "get_queue");
    assert!(info.stats.ready >= 2, "fires wait in the queue: {info:?}");
    let record = get_schedule(&b, &q, &id).await;
    assert!(!record.definition.paused && record.fires >= 2, "{record:?}");
    s::must(b.resume(&q).await, "resume");
    let fired = collect_count(&b, &q, 2, SLACK_MS).await;
    assert_eq!(times_of(&fired, &id), [start_at, start_at + 1_000]);
}

/// A fire of an `overlap: allow` schedule is written ahead of its time
/// (`WRITE_AHEAD_MS`): its message exists, scheduled for the fire time,
/// while the schedule still shows the fire as not yet handled (`fires`,
/// `last_fire_at`, `next_fire_at` as before). At the fire time it is
/// leasable at once and counts as a fire; acked, it is never written
/// again.
pub async fn schedule_fire_written_ahead(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_fire_written_ahead", "q");
    let id = sid("ahead");
    let start_at = s::now_ms() + 2_000;
    put_schedule(&b, &q, &id, every(HOUR_MS, start_at)).await;
    let m = written_ahead(&b, &q, &id, start_at).await;
    assert_eq!((m.state, m.deliver_at), (MessageState::Scheduled, start_at));
    let record = get_schedule(&b, &q, &id).await;
    assert_eq!(
        (record.fires, record.last_fire_at, record.next_fire_at),
        (0, None, Some(start_at)),
        "written ahead, not yet fired: {record:?}"
    );
    let fired = collect_count(&b, &q, 1, 10_000).await;
    assert_eq!(fired[0].t, start_at);
    assert!(
        fired[0].leased_at < start_at + SLACK_MS,
        "leased {} ms after its fire time",
        fired[0].leased_at - start_at
    );
    let record = get_schedule(&b, &q, &id).await;
    assert_eq!(
        (record.fires, record.last_fire_at, record.next_fire_at),
        (1, Some(start_at), Some(start_at + HOUR_MS)),
        "fired at its time: {record:?}"
    );
    let listed = s::must(b.list_schedules(&q).await, "list_schedules");
    assert_eq!(listed, vec![record], "list shows what get shows");
    let again = collect_until(&b, &q, s::now_ms() + 1_000).await;
    assert!(again.is_empty(), "a fire written twice: {again:?}");
    let fire = id.fire_message_id(start_at);
    s::assert_not_found(b.get(&q, &fire).await, "the acked fire");
}

/// A change before the fire time cancels the fire written ahead: pause and
/// delete remove its message in the same step (nothing is delivered for a
/// time after them), a replace writes it again from the new definition.
/// `overlap: skip` is judged at the fire time, so it is not written ahead.
pub async fn schedule_written_ahead_cancelled_by_change(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_written_ahead_cancelled_by_change", "q");
    let start_at = s::now_ms() + 2_000;
    let (paused, deleted, replaced, skip) = (sid("p"), sid("d"), sid("r"), sid("s"));
    for id in [&paused, &deleted, &replaced] {
        put_schedule(&b, &q, id, every(HOUR_MS, start_at)).await;
    }
    let mut skipping = every(HOUR_MS, start_at);
    skipping.overlap = Overlap::Skip;
    put_schedule(&b, &q, &skip, skipping).await;
    for id in [&paused, &deleted, &replaced] {
        written_ahead(&b, &q, id, start_at).await;
    }
    let skip_fire = skip.fire_message_id(start_at);
    s::assert_not_found(b.get(&q, &skip_fire).await, "overlap: skip written ahead");

    let record = s::must(b.set_schedule_paused(&q, &paused, true).await, "pause");
    assert_eq!((record.fires, record.next_fire_at), (0, None));
    s::must(b.delete_schedule(&q, &deleted).await, "delete_schedule");
    for id in [&paused, &deleted] {
        let fire = id.fire_message_id(start_at);
        s::assert_not_found(b.get(&q, &fire).await, &format!("{fire} after the change"));
    }
    let mut changed = every(HOUR_MS, start_at);
    changed.message.headers.insert("rev".into(), "2".into());
    put_schedule(&b, &q, &replaced, changed).await;
    let m = written_ahead(&b, &q, &replaced, start_at).await;
    let headers = (m.headers.get("rev").map(String::as_str), m.state);
    assert_eq!(headers, (Some("2"), MessageState::Scheduled), "{m:?}");

    let fired = collect_until(&b, &q, start_at + 1_500).await;
    let mut ids: Vec<&str> = fired.iter().map(|f| f.delivery.id.as_str()).collect();
    ids.sort_unstable();
    let want = [format!("r:{start_at}"), format!("s:{start_at}")];
    assert_eq!(ids, want.iter().map(String::as_str).collect::<Vec<_>>());
    for f in &fired {
        assert_eq!(f.t, start_at);
        if f.schedule == "r" {
            assert_eq!(f.delivery.headers.get("rev").map(String::as_str), Some("2"));
        }
    }
    let record = s::must(b.set_schedule_paused(&q, &paused, false).await, "resume");
    assert_eq!(
        (record.fires, record.next_fire_at),
        (0, Some(start_at + HOUR_MS)),
        "a fire time that passed while paused is not fired: {record:?}"
    );
}

/// A fire written ahead is an ordinary message, so a client may act on it
/// by id before its time: a message moved forward (reschedule) and leased
/// is not taken back by a pause (the pause deletes only one nobody holds),
/// and a message cancelled by id still counts as its schedule's fire at
/// its time (as a fire whose id was taken always did), with nothing
/// delivered for it.
pub async fn schedule_written_ahead_moved_by_a_client(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_written_ahead_moved_by_a_client", "q");
    let start_at = s::now_ms() + 2_000;
    let (moved, cancelled) = (sid("m"), sid("c"));
    for id in [&moved, &cancelled] {
        put_schedule(&b, &q, id, every(HOUR_MS, start_at)).await;
        written_ahead(&b, &q, id, start_at).await;
    }
    let moved_fire = moved.fire_message_id(start_at);
    let change = crate::message::Reschedule {
        schedule: Some(crate::message::Schedule::Now),
        priority: None,
    };
    s::must(b.reschedule(&q, &moved_fire, change).await, "reschedule");
    let held = s::lease_one(&b, &q, Some(60_000)).await;
    assert_eq!(held.id, moved_fire, "the moved fire is ready now");
    s::must(b.set_schedule_paused(&q, &moved, true).await, "pause");
    let m = s::get(&b, &q, &moved_fire).await;
    assert_eq!(
        m.state,
        MessageState::Leased,
        "a pause leaves a held message"
    );
    s::must(
        b.ack(&q, &held.id, &held.lease_id).await,
        "ack the moved fire",
    );

    let cancelled_fire = cancelled.fire_message_id(start_at);
    s::must(b.cancel(&q, &cancelled_fire).await, "cancel by id");
    let fired = collect_until(&b, &q, start_at + 1_500).await;
    assert!(fired.is_empty(), "nothing left to deliver: {fired:?}");
    let record = get_schedule(&b, &q, &cancelled).await;
    assert_eq!(
        (record.fires, record.last_fire_at, record.next_fire_at),
        (1, Some(start_at), Some(start_at + HOUR_MS)),
        "the cancelled fire counts at its time: {record:?}"
    );
    s::assert_not_found(b.get(&q, &cancelled_fire).await, "the cancelled fire");
}
