//! The test kit (feature `testkit`): a reference broker and the conformance
//! suite every `Broker` must pass.
//!
//! # Layout
//! - [`model`]: [`ModelBroker`], the simple in-memory reference broker.
//! - `state`: the model's state and its synchronous transitions;
//!   `firing`: how it fires schedules on time without timers; `flow`: its
//!   flow control, every count derived from the messages.
//! - [`cases`]: the conformance cases, one `pub async fn` per rule.
//! - [`hooked`]: [`hooked::Hooked`], a broker that runs a test's hook
//!   before each call of an inner one (hold, announce, panic).
//! - [`support`]: helpers the cases share (unique queue names, terse
//!   calls, time bounds, the per-case runtime).
//! - the macros [`conformance_tests!`](crate::conformance_tests),
//!   [`conformance_tests_extended!`](crate::conformance_tests_extended),
//!   [`conformance_tests_schedules!`](crate::conformance_tests_schedules)
//!   [`conformance_tests_schedules_extended!`](crate::conformance_tests_schedules_extended)
//!   [`conformance_tests_flow!`](crate::conformance_tests_flow)
//!   and [`conformance_tests_time_at_call!`](crate::conformance_tests_time_at_call),
//!   which expand to one `#[test]` per case.
//!
//! ```text
//! delayd_core::conformance_tests!(async { std::sync::Arc::new(MyBroker::new()) });
//! delayd_core::conformance_tests!(virtual_time |clock| async move {
//!     std::sync::Arc::new(MyBroker::with_clock(clock))
//! });
//! ```
//!
//! The factory expression is evaluated (and awaited) once per test, inside
//! that test's own tokio runtime, and must give a fresh broker (anything
//! coercible to `Arc<dyn Broker>`). Cases never assume the broker is empty,
//! so a factory may hand out brokers over one shared store.
//!
//! The first form runs on real time (a 2-worker runtime; for brokers
//! reached over the network). The `virtual_time` form is for in-process
//! brokers: the factory gets an `Arc<VirtualClock>` to read wall time from,
//! tokio's clock is paused, and the cases' waits advance it instead of
//! sleeping ([`support::run_case_virtual`]): the suite takes no real time
//! waiting and no timing bound depends on the machine's load.

pub mod cases;
mod firing;
mod flow;
pub mod hooked;
pub mod model;
pub mod net;
pub mod relay;
mod state;
pub mod support;

pub use model::ModelBroker;

/// Expands `$name` cases into `#[test]` functions running them against
/// `$factory`. Internal to the two public macros.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    (virtual_time_within $timeout:path, |$clock:ident| $factory:expr; $($name:ident),+ $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::testkit::support::run_case_virtual_within($timeout, |$clock| async move {
                    let broker: ::std::sync::Arc<dyn $crate::Broker> = $factory.await;
                    $crate::testkit::cases::$name(broker).await;
                });
            }
        )+
    };
    (virtual_time |$clock:ident| $factory:expr; $($name:ident),+ $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::testkit::support::run_case_virtual(|$clock| async move {
                    let broker: ::std::sync::Arc<dyn $crate::Broker> = $factory.await;
                    $crate::testkit::cases::$name(broker).await;
                });
            }
        )+
    };
    ($factory:expr; $($name:ident),+ $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::testkit::support::run_case(async {
                    let broker: ::std::sync::Arc<dyn $crate::Broker> = $factory.await;
                    $crate::testkit::cases::$name(broker).await;
                });
            }
        )+
    };
}

/// One test per rule of the HTTP-visible contract (api.md), run against
/// the broker `$factory` (a future of a fresh `Arc<dyn Broker>`) gives.
#[macro_export]
macro_rules! conformance_tests {
    (@cases ($($how:tt)+)) => {
        $crate::__conformance_cases!($($how)+;
            never_early_with_delay,
            never_early_with_deliver_at,
            past_deliver_at_is_now_and_kept,
            lease_wait_wakes_on_enqueue,
            lease_wait_times_out_empty,
            lease_unknown_queue_is_empty,
            ready_order_and_lease_max,
            idempotent_enqueue_in_every_state,
            id_free_after_ack_and_cancel,
            generated_ids_unique_and_seq_increasing,
            batch_results_in_order,
            lease_expiry_is_failed_attempt,
            ack_many_items_independent,
            pipeline_runs_in_order_and_stops_after_short_lease,
            nack_with_explicit_delay,
            nack_with_backoff,
            nack_error_is_last_error,
            extend_keeps_lease,
            unknown_queue_errors,
            max_attempts_dead_via_nack,
            max_attempts_dead_via_expiry,
            dead_list_order_and_paging,
            redrive_ids_and_all,
            pause_stops_leasing_and_resume_delivers,
            cancel_in_every_state,
            reschedule_scheduled_and_ready,
            reschedule_returns_the_changed_message,
            reschedule_priority_and_invalid_states,
            stats_through_lifecycle,
            shutdown_wakes_waiting_lease,
            queue_put_merges,
            queue_invalid_config_changes_nothing,
            queue_delete_removes_messages,
        );
    };
    (virtual_time |$clock:ident| $factory:expr) => {
        $crate::conformance_tests!(@cases (virtual_time |$clock| $factory));
    };
    ($factory:expr) => {
        $crate::conformance_tests!(@cases ($factory));
    };
}

/// One test per rule of the trait operations HTTP does not expose
/// (`get_by_seq`, `lease_message`, `bury`, multi-queue leases, timed
/// pauses, listing by state, counters, `ready_urgent`, calls after
/// shutdown, delete waking waiters, push config, and `auto_create: false`,
/// which over HTTP is a server option rather than a per-call one). For brokers in-process: Local, Redis, the model.
#[macro_export]
macro_rules! conformance_tests_extended {
    (@cases ($($how:tt)+)) => {
        $crate::__conformance_cases!($($how)+;
            get_by_seq_across_queues,
            lease_message_in_each_state,
            bury_moves_to_dead,
            multi_queue_lease_order,
            timed_pause_expires,
            list_order_by_state,
            counters_track_events,
            ready_urgent_counts,
            calls_after_shutdown_unavailable,
            delete_queue_wakes_waiting_lease,
            queue_push_replaced_whole,
            enqueue_without_auto_create,
            argument_rules_are_the_same_everywhere,
        );
    };
    (virtual_time |$clock:ident| $factory:expr) => {
        $crate::conformance_tests_extended!(@cases (virtual_time |$clock| $factory));
    };
    ($factory:expr) => {
        $crate::conformance_tests_extended!(@cases ($factory));
    };
}

/// One test per rule of recurring schedules (api.md, "Schedules"), run
/// against `$factory` like [`conformance_tests!`](crate::conformance_tests).
/// The `virtual_time` form also runs the cases that move the wall clock
/// (DST transitions in 2027, catch-up after a forward jump), which only
/// virtual time can do ([`support::set_wall_time`]).
#[macro_export]
macro_rules! conformance_tests_schedules {
    (@cases ($($how:tt)+)) => {
        $crate::__conformance_cases!($($how)+;
            schedule_every_fires_on_time,
            schedule_cron_fires,
            schedule_put_creates_and_replaces,
            schedule_unknown_errors,
            schedule_trigger_is_not_a_fire,
            schedule_delete_keeps_messages,
            schedule_delete_queue_deletes_schedules,
            schedule_pause_and_resume,
            schedule_end_at_and_max_fires,
            schedule_overlap_skip,
            schedule_jitter,
            schedule_start_in_the_past,
            schedule_fires_into_paused_queue,
            schedule_fire_written_ahead,
            schedule_written_ahead_cancelled_by_change,
            schedule_written_ahead_moved_by_a_client,
        );
    };
    (@wall ($($how:tt)+)) => {
        $crate::__conformance_cases!($($how)+;
            schedule_dst_europe_berlin,
            schedule_dst_america_new_york,
            schedule_dst_australia_lord_howe,
            schedule_tz_asia_kathmandu,
            schedule_cron_l_w_hash,
            schedule_catchup_all,
            schedule_catchup_latest,
            schedule_written_ahead_survives_a_jump,
        );
    };
    (virtual_time |$clock:ident| $factory:expr) => {
        $crate::conformance_tests_schedules!(@cases (virtual_time |$clock| $factory));
        $crate::conformance_tests_schedules!(@wall (
            virtual_time_within $crate::testkit::support::WALL_CASE_TIMEOUT, |$clock| $factory
        ));
    };
    ($factory:expr) => {
        $crate::conformance_tests_schedules!(@cases ($factory));
    };
}

/// The schedule rules of trait options HTTP does not expose per call
/// (`auto_create: false`, a server option over HTTP). For brokers
/// in-process: Local, Redis, the model.
#[macro_export]
macro_rules! conformance_tests_schedules_extended {
    (@cases ($($how:tt)+)) => {
        $crate::__conformance_cases!($($how)+;
            schedule_put_without_auto_create,
        );
    };
    (virtual_time |$clock:ident| $factory:expr) => {
        $crate::conformance_tests_schedules_extended!(@cases (virtual_time |$clock| $factory));
    };
    ($factory:expr) => {
        $crate::conformance_tests_schedules_extended!(@cases ($factory));
    };
}

/// One test per rule of flow control (api.md, "Flow control"), run against
/// `$factory` like [`conformance_tests!`](crate::conformance_tests). Every
/// case goes through the trait's HTTP-visible calls, so the HTTP runs use
/// it too.
#[macro_export]
macro_rules! conformance_tests_flow {
    (@cases ($($how:tt)+)) => {
        $crate::__conformance_cases!($($how)+;
            flow_rate_bound,
            flow_concurrency_per_queue_and_key,
            flow_ordered_holds_behind_nack,
            flow_ordered_holds_behind_expired_lease,
            flow_defer_by_nack,
            flow_max_deferrals_dead,
            flow_limits_changed_while_waiting,
            flow_key_state_forgotten,
            flow_schedule_template_key,
        );
    };
    (virtual_time |$clock:ident| $factory:expr) => {
        $crate::conformance_tests_flow!(@cases (virtual_time |$clock| $factory));
    };
    ($factory:expr) => {
        $crate::conformance_tests_flow!(@cases ($factory));
    };
}

/// The rules of time settled at the call (issue 31): every call applies
/// what is due at its own `now` before it acts. Run against a broker whose
/// background timers are held back for the whole case (the model has
/// none; `LocalBroker::hold_driver(true)`, `RedisBroker::hold_timers(true)`,
/// a server over such a broker), so only the calls themselves can apply
/// time. HTTP-visible: for every broker.
#[macro_export]
macro_rules! conformance_tests_time_at_call {
    (@cases ($($how:tt)+)) => {
        $crate::__conformance_cases!($($how)+;
            ack_after_expiry_is_lease_mismatch,
            backoff_counts_from_expiry,
            due_cursor_fires_at_put_and_pause,
            lease_deadline_after_due_returns_it,
            written_ahead_fire_whose_lease_ran_out_is_cancelled_by_a_pause,
        );
    };
    (virtual_time |$clock:ident| $factory:expr) => {
        $crate::conformance_tests_time_at_call!(@cases (virtual_time |$clock| $factory));
    };
    ($factory:expr) => {
        $crate::conformance_tests_time_at_call!(@cases ($factory));
    };
}

/// The rules of retention (api.md, "Retention, replace and debounce"):
/// ended messages kept for the queue's `retain_ms`. HTTP-visible: for
/// every broker.
#[macro_export]
macro_rules! conformance_tests_retention {
    (@cases ($($how:tt)+)) => {
        $crate::__conformance_cases!($($how)+;
            retention_keeps_ended_messages,
            retention_frees_the_id_at_its_time,
            retention_dead_config_and_delete,
        );
    };
    (virtual_time |$clock:ident| $factory:expr) => {
        $crate::conformance_tests_retention!(@cases (virtual_time |$clock| $factory));
    };
    ($factory:expr) => {
        $crate::conformance_tests_retention!(@cases ($factory));
    };
}

/// The rules of replace and debounce by id (api.md, "Retention, replace
/// and debounce"): `on_conflict` on waiting, leased (successors), dead and
/// retained messages, debounce's cap, bad input. HTTP-visible: for every
/// broker. Needs `flow` (a deferral): on Redis Cluster, one shard per
/// queue.
#[macro_export]
macro_rules! conformance_tests_replace {
    (@cases ($($how:tt)+)) => {
        $crate::__conformance_cases!($($how)+;
            replace_waiting_messages,
            debounce_caps_at_max,
            successor_after_ack,
            successor_after_nack_and_expiry,
            successor_after_deferral,
            successor_after_death_and_cancel,
            replace_dead_retained_and_bad_input,
            replace_moves_a_holder_onto_a_held_key,
        );
    };
    (virtual_time |$clock:ident| $factory:expr) => {
        $crate::conformance_tests_replace!(@cases (virtual_time |$clock| $factory));
    };
    ($factory:expr) => {
        $crate::conformance_tests_replace!(@cases ($factory));
    };
}

/// The events of message history only the trait reaches (a lease's
/// frontend, a failed push, a bury), for brokers in-process. Needs `flow`
/// (a push 429 deferral): on Redis Cluster, one shard per queue.
#[macro_export]
macro_rules! conformance_tests_history_extended {
    (@cases ($($how:tt)+)) => {
        $crate::__conformance_cases!($($how)+;
            history_frontends_push_and_bury,
        );
    };
    (virtual_time |$clock:ident| $factory:expr) => {
        $crate::conformance_tests_history_extended!(@cases (virtual_time |$clock| $factory));
    };
    ($factory:expr) => {
        $crate::conformance_tests_history_extended!(@cases ($factory));
    };
}

/// The rules of message history (api.md, "Message history"): the events
/// of each transition, the 32-event cap, the history ending with the
/// message or its retention. HTTP-visible: for every broker (the events
/// only the trait reaches are in `conformance_tests_history_extended!`).
#[macro_export]
macro_rules! conformance_tests_history {
    (@cases ($($how:tt)+)) => {
        $crate::__conformance_cases!($($how)+;
            history_of_a_life,
            history_expiry_deferral_cancel,
            history_keeps_the_last_32,
        );
    };
    (virtual_time |$clock:ident| $factory:expr) => {
        $crate::conformance_tests_history!(@cases (virtual_time |$clock| $factory));
    };
    ($factory:expr) => {
        $crate::conformance_tests_history!(@cases ($factory));
    };
}
