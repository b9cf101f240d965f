//! The conformance suite (the HTTP-visible rules) run through the whole
//! stack: `HttpBroker` -> client -> HTTP -> server -> broker, once over the
//! reference model and once over LocalBroker; the schedule, flow
//! control, retention, replace and history cases over both, on a virtual
//! clock;
//! the cases of time settled at the call over LocalBroker with its driver
//! held, on a virtual clock.

use crate::common;

use std::sync::Arc;

use delayd_client::{Client, HttpBroker};
use delayd_core::Broker;
use delayd_server::ServerOptions;

/// `backend` behind a fresh server, seen through [`HttpBroker`]. Its
/// `shutdown` shuts `backend` down (as stopping the server would); `guard`
/// (a temporary directory) lives as long as the broker.
async fn over_http(backend: Arc<dyn Broker>, guard: impl Send + Sync + 'static) -> Arc<dyn Broker> {
    let url = common::serve(backend.clone(), ServerOptions::default()).await;
    let client = Client::new(&url).expect("client");
    // Opens the pooled connection now, so a case's first call does not pay
    // for it (cases that give a waiting call a fixed head start rely on it).
    client.healthz().await.expect("server up");
    let broker = HttpBroker::new(client).on_shutdown(Arc::new(move || {
        let _guard = &guard;
        let backend = backend.clone();
        Box::pin(async move { backend.shutdown().await })
    }));
    Arc::new(broker)
}

mod model {
    use std::sync::Arc;

    use delayd_core::testkit::ModelBroker;

    delayd_core::conformance_tests!(super::over_http(Arc::new(ModelBroker::new()), ()));

    /// Recurring schedules through the whole stack, on the model's virtual
    /// clock (the wall-clock cases set the time; the server and the client
    /// talk over a real socket on the paused tokio clock).
    mod schedules {
        use std::sync::Arc;

        use delayd_core::testkit::ModelBroker;

        delayd_core::conformance_tests_schedules!(
            virtual_time
                | clock
                | super::super::over_http(Arc::new(ModelBroker::with_clock(clock)), ())
        );
    }

    /// Flow control through the whole stack, on the model's virtual clock.
    mod flow {
        use std::sync::Arc;

        use delayd_core::testkit::ModelBroker;

        delayd_core::conformance_tests_flow!(
            virtual_time
                | clock
                | super::super::over_http(Arc::new(ModelBroker::with_clock(clock)), ())
        );
    }

    /// Retention (`retain_ms`, retained `acked`/`cancelled` messages)
    /// through the whole stack, on the model's virtual clock.
    mod retention {
        use std::sync::Arc;

        use delayd_core::testkit::ModelBroker;

        delayd_core::conformance_tests_retention!(
            virtual_time
                | clock
                | super::super::over_http(Arc::new(ModelBroker::with_clock(clock)), ())
        );
    }

    /// Replace and debounce (`on_conflict`, successors of leased
    /// messages) through the whole stack, on the model's virtual clock.
    mod replace {
        use std::sync::Arc;

        use delayd_core::testkit::ModelBroker;

        delayd_core::conformance_tests_replace!(
            virtual_time
                | clock
                | super::super::over_http(Arc::new(ModelBroker::with_clock(clock)), ())
        );
    }

    /// Message history (`GET .../events`) through the whole stack, on the
    /// model's virtual clock.
    mod history {
        use std::sync::Arc;

        use delayd_core::testkit::ModelBroker;

        delayd_core::conformance_tests_history!(
            virtual_time
                | clock
                | super::super::over_http(Arc::new(ModelBroker::with_clock(clock)), ())
        );
    }
}

mod local {
    use std::sync::Arc;

    use delayd_core::Broker;
    use delayd_local::{LocalBroker, LocalConfig};

    async fn fresh() -> Arc<dyn Broker> {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = LocalBroker::open(LocalConfig::new(dir.path()))
            .await
            .expect("open LocalBroker");
        super::over_http(Arc::new(broker), dir).await
    }

    delayd_core::conformance_tests!(fresh());

    /// The schedule cases over LocalBroker on the virtual clock (its
    /// directory lives as long as the broker, through the shutdown hook).
    mod schedules {
        use std::sync::Arc;

        use delayd_core::testkit::support::VirtualClock;
        use delayd_core::Broker;
        use delayd_local::{Durability, LocalBroker, LocalConfig};

        async fn fresh(clock: Arc<VirtualClock>) -> Arc<dyn Broker> {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut config = LocalConfig::new(dir.path());
            config.clock = clock;
            config.durability = Durability::Never;
            let broker = LocalBroker::open(config).await.expect("open LocalBroker");
            super::super::over_http(Arc::new(broker), dir).await
        }

        delayd_core::conformance_tests_schedules!(virtual_time | clock | fresh(clock));

        // Flow control over LocalBroker, on the same virtual clock.
        mod flow {
            delayd_core::conformance_tests_flow!(virtual_time | clock | super::fresh(clock));
        }

        // Retention over LocalBroker, on the same virtual clock.
        mod retention {
            delayd_core::conformance_tests_retention!(virtual_time | clock | super::fresh(clock));
        }

        // Replace and debounce over LocalBroker, on the same virtual clock.
        mod replace {
            delayd_core::conformance_tests_replace!(virtual_time | clock | super::fresh(clock));
        }

        // Message history over LocalBroker, on the same virtual clock.
        mod history {
            delayd_core::conformance_tests_history!(virtual_time | clock | super::fresh(clock));
        }
    }

    /// Time settled at the call, over LocalBroker with its driver held
    /// for the whole case, on the virtual clock.
    mod time_at_call {
        use std::sync::Arc;

        use delayd_core::testkit::support::VirtualClock;
        use delayd_core::Broker;
        use delayd_local::{Durability, LocalBroker, LocalConfig};

        async fn held(clock: Arc<VirtualClock>) -> Arc<dyn Broker> {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut config = LocalConfig::new(dir.path());
            config.clock = clock;
            config.durability = Durability::Never;
            let broker = LocalBroker::open(config).await.expect("open LocalBroker");
            broker.hold_driver(true);
            super::super::over_http(Arc::new(broker), dir).await
        }

        delayd_core::conformance_tests_time_at_call!(virtual_time | clock | held(clock));
    }
}
